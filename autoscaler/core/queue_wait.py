"""Queue wait as Kueue measures it, plus admission-check time: observed when a workload is admitted.

Kueue's ``kueue_admission_wait_time_seconds`` is ``Admitted.lastTransitionTime - T0`` with
``T0 = Requeued.lastTransitionTime || creationTimestamp`` (Kueue's workload queue-time rule).  Ours is the same
interval (it includes the time admission checks held the workload); the histogram
``queuepilot_queue_wait_seconds`` has buckets past Kueue's 40 960 s top.

An admission is identified by (workload uid, ``Admitted.lastTransitionTime``): a re-admission after
eviction and requeue is a new observation, as in Kueue; seeing the same admission again (another
pass, a relist) is not.  After a restart nothing is known about earlier passes, so admissions older
than ``not_before`` (the process start) are not counted again.
"""

from __future__ import annotations

from autoscaler.core.snapshot import ClusterSnapshot


def new_admissions(
    previous: ClusterSnapshot | None, current: ClusterSnapshot, not_before: float | None = None
) -> list[tuple[str, float]]:
    """(cluster_queue, wait seconds) for each admission in ``current`` not already in ``previous``.

    With no ``previous`` (first pass after start), only admissions at or after ``not_before`` count;
    with ``not_before`` None, none do (the first snapshot is the baseline).
    """
    out: list[tuple[str, float]] = []
    for key, w in current.workloads.items():
        if not w.admitted or w.admitted_at is None:
            continue
        if previous is None:
            if not_before is None or w.admitted_at < not_before:
                continue
        else:
            before = previous.workloads.get(key)
            if (
                before is not None
                and before.uid == w.uid
                and before.admitted
                and before.admitted_at == w.admitted_at
            ):
                continue
            if before is None and not_before is not None and w.admitted_at < not_before:
                continue
        out.append((w.cluster_queue or "", max(0.0, w.admitted_at - w.queued_since)))
    return out
