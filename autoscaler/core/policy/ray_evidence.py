"""What Ray says of a workload whose GPUs all sit idle: the evidence the stall detector weighs.

A GPU rule (every GPU under 5 % for 2 h) cannot tell a hung or abandoned job from one that is
paused: checkpointing, evaluating on the CPU, waiting for data or for another job.  Ray can, for a
workload that runs on a RayCluster (one the Workload owns, or the one its RayJob created, label
``ray.io/originated-from-cr-name``): what runs on the cluster's workers (``RayWorker.ray_running_tasks``,
from the dashboard's node summary), what waits to be scheduled (``RayClusterState.demand``), and,
for a RayJob, whether its Ray job has ended (``RayJobState.job_status``).

``ray_evidence(wl, cluster, rayjob, now)`` gives one ``Evidence``; its kinds, in the order they are
tested:

- ``serving``: a RayService's workload (or a cluster a RayService created): idle between requests is
  how a serving replica waits; a scale-down matter, never deactivated unless ``stall.deactivate_serving``;
- ``finished``: the RayJob's Ray job ended (``SUCCEEDED``, ``FAILED``, ``STOPPED``) while its pods still
  hold GPUs: nothing will use them;
- ``unknown``: a Ray workload whose Ray signal is missing or stale, whose busy workers do not say
  what runs on them, or whose pending work Ray's last answer gave only in part
  (``RayClusterState.demand_partial``): no verdict, so no deactivation;
- ``active``: tasks or actor methods run, or tasks wait to be scheduled: paused, not stalled;
- ``quiet``: nothing runs and nothing waits on any worker: abandoned, or hung outside Ray's view;
- ``none``: no RayCluster belongs to the workload: the GPU rule alone.

Pure: the snapshot's views and ``now``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from autoscaler.core.snapshot import ClusterSnapshot, RayClusterState, RayJobState, WorkloadState

RAY_ORIGIN_NAME_LABEL = "ray.io/originated-from-cr-name"
RAY_ORIGIN_KIND_LABEL = "ray.io/originated-from-crd"
SERVING_KIND = "RayService"

EvidenceKind = Literal["serving", "finished", "unknown", "active", "quiet", "none"]


@dataclass(frozen=True, slots=True)
class Evidence:
    kind: EvidenceKind
    text: str  # for the Event: what Ray said, in words


def clusters_by_workload(snapshot: ClusterSnapshot,
                         candidates: Iterable[WorkloadState]) -> dict[str, RayClusterState]:
    """Workload key -> the RayCluster it runs on: the one it owns, or the one its RayJob (or
    RayService) created (origin labels), among ``candidates``."""
    by_owner = {(w.namespace, w.owner_kind, w.owner_name): w.key for w in candidates if w.owner_name}
    out: dict[str, RayClusterState] = {}
    for rc in snapshot.ray_clusters.values():
        key = by_owner.get((rc.namespace, "RayCluster", rc.name))
        origin = rc.labels.get(RAY_ORIGIN_NAME_LABEL)
        if key is None and origin:
            key = by_owner.get((rc.namespace, rc.labels.get(RAY_ORIGIN_KIND_LABEL, "RayJob"), origin))
        if key is not None:
            out[key] = rc
    return out


def ray_evidence(wl: WorkloadState, cluster: RayClusterState | None, rayjob: RayJobState | None,
                 now: float) -> Evidence:
    """What Ray says of ``wl`` (see the module doc)."""
    if wl.owner_kind == SERVING_KIND or (cluster is not None
                                         and cluster.labels.get(RAY_ORIGIN_KIND_LABEL) == SERVING_KIND):
        return Evidence("serving", f"it serves ({SERVING_KIND}): idle replicas are a scale-down matter")
    if rayjob is not None and rayjob.finished:
        return Evidence("finished", f"its RayJob's Ray job ended ({rayjob.job_status}) and its pods still hold GPUs")
    if cluster is None:
        if wl.owner_kind == "RayJob":
            return Evidence("unknown", "its RayJob's RayCluster is not known (yet)")
        return Evidence("none", "not a Ray workload: GPU utilization alone")
    sig = cluster.demand_signal
    if sig is None or sig.is_stale(now):
        age = sig.age(now) if sig is not None else None
        what = "missing" if age is None else f"{age:.0f}s old"
        return Evidence("unknown", f"the Ray signal of RayCluster {cluster.name} is {what}")
    workers = [w for g in cluster.groups for w in g.workers if w.ready and not w.deleting and w.phase == "Running"]
    running = sum(w.ray_running_tasks or 0 for w in workers)
    untold = sum(1 for w in workers if w.ray_running_tasks is None and w.ray_busy is not False)
    pending = sum(max(0, d.count) for d in cluster.demand if not d.infeasible)
    blocked = sum(max(0, d.count) for d in cluster.demand if d.infeasible)
    where = f"RayCluster {cluster.name} ({len(workers)} worker(s))"
    if running or pending:
        return Evidence("active", f"Ray reports {running} task(s) running and {pending} waiting on {where}: "
                                  "paused (checkpoint, evaluation, data or a dependency), not hung")
    if untold:
        return Evidence("unknown", f"Ray does not say what runs on {untold} busy worker(s) of {where}")
    if cluster.demand_partial:  # a list of pending work failed or was cut short: "nothing waits" is not known
        return Evidence("unknown", f"Ray's answer for {where} misses part of its pending work")
    text = f"Ray reports no task running or waiting on {where}"
    if blocked:
        text += f" ({blocked} infeasible: they can never be scheduled)"
    return Evidence("quiet", text)


def evidence_of(snapshot: ClusterSnapshot, candidates: Iterable[WorkloadState],
                keys: Iterable[str], now: float) -> Mapping[str, Evidence]:
    """``ray_evidence`` for the workloads ``keys`` among ``candidates``."""
    by_key = {w.key: w for w in candidates}
    clusters = clusters_by_workload(snapshot, by_key.values())
    out: dict[str, Evidence] = {}
    for key in keys:
        wl = by_key[key]
        rayjob = snapshot.ray_jobs.get(f"{wl.namespace}/{wl.owner_name}") if wl.owner_kind == "RayJob" else None
        out[key] = ray_evidence(wl, clusters.get(key), rayjob, now)
    return out
