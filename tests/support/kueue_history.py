"""Workloads as Kueue leaves them at a given moment of a known history (research-kueue.md, "What Kueue does
for each state" and "Conditions"), for the tests of the pending-age gauges and their alert.

``retried(t, ...)``: a Workload created at ``created`` whose admission check answers ``Retry`` on every
try.  Each cycle of ``every`` seconds starting at ``created + k * every``: quota reserved 30 s in (check
Pending, ``Admitted=False`` reason UnsatisfiedAdmissionChecks, as Kueue writes it explicitly), the check
answers Retry 60 s in, Kueue evicts it (``Evicted=True`` reason AdmissionCheck, quota released,
``Requeued=False`` reason AdmissionCheck, ``schedulingStats.evictions`` counted) and requeues it when the
back-off ends at the next cycle (``Requeued=True`` reason BackoffFinished).  It is never admitted.

``evicted_after_admission(t, ...)``: a Workload admitted at ``admitted``, preempted at ``evicted``
(``Admitted=False``, ``accumulatedPastExecutionTimeSeconds`` = the time it ran) and then retried as above.
"""

from __future__ import annotations

from typing import Any

from tests.support import objects as o

RESERVE_AFTER = 30.0  # seconds from (re)queue to quota reservation
RETRY_AFTER = 60.0  # seconds from (re)queue to the check's Retry
CHECK = "gpu-capacity"


def _cycle(t: float, start: float, every: float) -> tuple[int, float]:
    """(completed cycles, start of the current one) at ``t`` of cycles of ``every`` from ``start``."""
    k = int((t - start) // every)
    return k, start + k * every


def _retry_status(t: float, start: float, every: float, cq: str, earlier_evictions: int = 0,
                  extra: dict[str, Any] | None = None, conditions: list[dict] | None = None,
                  requeued_at_start: str | None = None) -> dict[str, Any]:
    """``status`` at ``t`` of a workload (re)queued at ``start`` and Retried in every cycle since;
    ``requeued_at_start``: the reason of the ``Requeued=True`` (and ``Evicted=True``) Kueue wrote at ``start``."""
    k, c0 = _cycle(t, start, every)
    requeued = k > 0 or requeued_at_start is not None
    conds = list(conditions or [])
    evictions = earlier_evictions and [{"reason": "Preempted", "underlyingCause": "", "count": earlier_evictions}]
    status: dict[str, Any] = dict(extra or {})
    retries = k + (1 if t >= c0 + RETRY_AFTER else 0)
    if retries:
        status["schedulingStats"] = {"evictions": [*(evictions or []), {"reason": "AdmissionCheck",
                                                                        "underlyingCause": "", "count": retries}]}
    elif evictions:
        status["schedulingStats"] = {"evictions": evictions}
    if requeued:  # requeued at the start of this cycle (when the back-off ended, or by the eviction)
        conds.append(o.condition("Requeued", True, c0, "BackoffFinished" if k > 0 else requeued_at_start))
        if k == 0 and t < c0 + RESERVE_AFTER:
            conds.append(o.condition("Evicted", True, c0, requeued_at_start))
    if t >= c0 + RETRY_AFTER:  # retried in this cycle: evicted, quota released, waiting for the back-off
        conds = [c for c in conds if c["type"] != "Requeued"]
        conds += [o.condition("Evicted", True, c0 + RETRY_AFTER, "AdmissionCheck"),
                  o.condition("QuotaReserved", False, c0 + RETRY_AFTER, "Pending"),
                  o.condition("Requeued", False, c0 + RETRY_AFTER, "AdmissionCheck")]
        status["admissionChecks"] = [o.check_state(CHECK, "Pending", "Reset to Pending after eviction. Previously: Retry",
                                                   c0 + RETRY_AFTER)]
    elif t >= c0 + RESERVE_AFTER:  # quota reserved, the check not answered yet
        if requeued:
            conds.append(o.condition("Evicted", False, c0 + RESERVE_AFTER, "QuotaReserved"))
        conds.append(o.condition("QuotaReserved", True, c0 + RESERVE_AFTER))
        status["admission"] = o.admission(cq, [("main", "a100", 1)])
        status["admissionChecks"] = [o.check_state(CHECK, "Pending", "", c0 + RESERVE_AFTER)]
    if not any(c["type"] == "Admitted" for c in conds) and (k > 0 or t >= c0 + RESERVE_AFTER):
        conds.append(o.condition("Admitted", False, start + RESERVE_AFTER, "UnsatisfiedAdmissionChecks"))
    if conds:
        status["conditions"] = conds
    return status


def retried(t: float, created: float, every: float = 600.0, name: str = "starving", namespace: str = "team-a",
            queue: str = "lq-a", cq: str = "cq-a") -> dict[str, Any]:
    """The Workload at ``t`` (see the module docstring)."""
    obj = o.workload(name, namespace, queue, created=created)
    status = _retry_status(t, created, every, cq)
    if status:
        obj["status"] = status
    return obj


def evicted_after_admission(t: float, created: float, admitted: float, evicted: float, every: float = 600.0,
                            name: str = "preempted", namespace: str = "team-a", queue: str = "lq-a",
                            cq: str = "cq-a") -> dict[str, Any]:
    """The Workload at ``t >= evicted``: admitted at ``admitted``, preempted at ``evicted``, retried since."""
    assert created < admitted < evicted <= t
    obj = o.workload(name, namespace, queue, created=created)
    lost = [o.condition("Admitted", False, evicted, "NoReservation")]
    obj["status"] = _retry_status(t, evicted, every, cq, earlier_evictions=1,
                                  extra={"accumulatedPastExecutionTimeSeconds": int(evicted - admitted)},
                                  conditions=lost, requeued_at_start="Preempted")
    return obj
