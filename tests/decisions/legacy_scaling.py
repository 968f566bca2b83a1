"""FROZEN REFERENCE COPY of autoscaler/core/policy/scaling.py before the named-steps rewrite (issue 10).

TO BE DELETED together with tests/decisions/test_scaling_equivalence.py once the new code has run in
production for a release: it exists only so that the equivalence test can run the old and the new
scaler side by side.  Do not import it from anything but that test, and do not change it.
"""
# ruff: noqa
# fmt: off
# mypy: ignore-errors


from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import policy_from_annotations
from autoscaler.core.policy.behavior import normalize
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.quota import CohortTotals, admittable_gpus, cohort_totals
from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    ClusterSnapshot,
    RayClusterState,
    RayDemand,
    RayWorker,
    WorkerGroupState,
    WorkloadState,
    frozen_map,
)

__all__ = [
    "GroupDecision",
    "GroupHistory",
    "ScalingDefaults",
    "ScalingResult",
    "assign_demand",
    "decide_scaling",
    "idle_workers",
    "pending_gpu_workloads",
    "queue_pressure",
    "ray_cluster_workloads",
    "workers_needed",
]

Direction = Literal["up", "down", "hold"]
WriteMode = Literal["replicas", "min_max", "none"]
Bundle = Mapping[str, float]

_CHECKED = ("GPU", "CPU", "memory")


@dataclass(frozen=True, slots=True)
class GroupHistory:
    """What one group's past decisions leave behind (kept by the caller between passes)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (t, unstabilized replicas)
    scale_events: tuple[tuple[float, int], ...] = ()  # (t, signed replica change written)
    idle_since: Mapping[str, float] = field(default_factory=frozen_map)  # pod -> first seen idle
    user_max: int | None = None  # in-tree autoscaler case: the user's maxReplicas
    written_max: int | None = None  # the maxReplicas we last wrote


@dataclass(frozen=True, slots=True)
class GroupDecision:
    namespace: str
    cluster: str
    group: str
    direction: Direction
    reason: str
    message: str
    current: int
    desired: int
    min_replicas: int
    max_replicas: int
    workers_to_delete: tuple[str, ...] = ()
    write: WriteMode = "none"
    new_min: int | None = None
    new_max: int | None = None
    idle_gpus: int = 0
    pending_gpus: int = 0
    infeasible: tuple[str, ...] = ()
    clear_workers_to_delete: bool = False
    resource_version: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.cluster, self.group)


@dataclass(frozen=True, slots=True)
class ScalingResult:
    decisions: tuple[GroupDecision, ...]
    history: Mapping[str, GroupHistory]  # group name -> history
    warnings: tuple[str, ...]  # malformed annotations (-> Warning Events)


# ------------------------------------------------------------------------------------------ demand
def _capacity(g: WorkerGroupState) -> dict[str, float]:
    """One worker's Ray resources; CPU/memory left out when unknown (0) so they are not checked."""
    cap: dict[str, float] = {"GPU": float(g.gpus_per_worker)}
    if g.cpu_per_worker > 0:
        cap["CPU"] = g.cpu_per_worker
    if g.memory_per_worker > 0:
        cap["memory"] = g.memory_per_worker
    cap.update({k: float(v) for k, v in g.ray_resources.items()})
    return cap


def _fits(shape: Bundle, cap: Mapping[str, float]) -> bool:
    for k, v in shape.items():
        if v <= 0:
            continue
        if k == "GPU" or k in cap:
            if v > cap.get(k, 0.0) + 1e-9:
                return False
        elif k not in _CHECKED and not k.startswith(("node:", "accelerator_type:", "object_store")):
            return False  # a custom resource no worker of this group advertises
    return True


def _shape_text(shape: Bundle) -> str:
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(shape.items()) if v) + "}"


def assign_demand(
    cluster: RayClusterState,
) -> tuple[dict[str, list[tuple[Bundle, bool, int]]], dict[str | None, list[str]]]:
    """Group name -> [(bundle, strict_spread, count)] for Ray's feasible pending demand; and the
    infeasible part, by the group Ray named (None: any group)."""
    per_group: dict[str, list[tuple[Bundle, bool, int]]] = {g.name: [] for g in cluster.groups}
    infeasible: dict[str | None, list[str]] = {}
    caps = {g.name: _capacity(g) for g in cluster.groups}
    for d in cluster.demand:
        n = max(0, d.count)
        if d.infeasible:
            infeasible.setdefault(d.group, []).append(f"{n} x {_shape_text(d.shape)} ({d.kind}) infeasible per Ray")
            continue
        cands = [g for g in cluster.groups if (d.group is None or g.name == d.group) and _fits(d.shape, caps[g.name])]
        if not cands:
            where = f"group {d.group}" if d.group else "any worker group"
            infeasible.setdefault(d.group, []).append(f"{n} x {_shape_text(d.shape)} ({d.kind}) fits no worker of {where}")
            continue
        cands.sort(key=lambda g: (caps[g.name].get("GPU", 0), caps[g.name].get("CPU", 0),
                                  caps[g.name].get("memory", 0), g.name))
        if n:
            per_group[cands[0].name].append((d.shape, d.strategy == "STRICT_SPREAD", n))
    return per_group, infeasible


def _demand_fits_group(cluster: RayClusterState, group: WorkerGroupState) -> bool:
    """Whether any feasible pending Ray demand of the cluster could run on a worker of ``group``."""
    cap = _capacity(group)
    return any(d.count > 0 and not d.infeasible and (d.group is None or d.group == group.name) and _fits(d.shape, cap)
               for d in cluster.demand)


def _fit_count(rem: tuple[float, ...], need: tuple[float, ...]) -> float:
    """How many bundles of ``need`` fit in ``rem`` (inf when the bundle asks for none of the keys)."""
    f = math.inf
    for r, x in zip(rem, need, strict=True):
        if x > 1e-12:
            f = min(f, math.floor((r + 1e-9) / x))
    return max(f, 0)


def _minus(rem: tuple[float, ...], need: tuple[float, ...], m: int) -> tuple[float, ...]:
    return tuple(r - x * m for r, x in zip(rem, need, strict=True))


def workers_needed(
    bundles: Sequence[tuple[Bundle, bool] | tuple[Bundle, bool, int]], cap: Mapping[str, float]
) -> int:
    """New workers of shape ``cap`` for ``bundles`` ((shape, strict_spread[, count]) entries): first-fit
    decreasing over the resources ``cap`` has, STRICT_SPREAD bundles one per new worker.

    Near-linear: identical bundles (same needs on those resources, same strategy) are placed as one
    run with a count, and identical workers are kept as one bin run with a count, so the cost is
    O(entries + shapes x bin runs), not O(bundles x workers).  Among shapes with equal needs the
    STRICT_SPREAD ones go first (their workers' leftover room then takes the others).
    """
    keys = [k for k in cap if cap[k] > 0]
    full = tuple(float(cap[k]) for k in keys)
    runs: dict[tuple[tuple[float, ...], bool], int] = {}
    for b in bundles:
        n = b[2] if len(b) > 2 else 1  # type: ignore[misc]
        if n <= 0:
            continue
        need = tuple(max(0.0, float(b[0].get(k, 0.0))) for k in keys)
        runs[(need, b[1])] = runs.get((need, b[1]), 0) + n
    bins: list[tuple[tuple[float, ...], int]] = []  # (remaining room, how many workers have it), in opening order
    for need, spread in sorted(runs, key=lambda r: (tuple(-x for x in r[0]), not r[1])):
        n = runs[(need, spread)]
        if not spread:
            i = 0
            while n > 0 and i < len(bins):
                rem, count = bins[i]
                f = _fit_count(rem, need)
                if f == 0:
                    i += 1
                    continue
                if f == math.inf:  # needs none of the checked resources: all go in the first worker
                    n = 0
                    break
                f = int(f)
                filled = min(count, n // f)
                n -= filled * f
                repl = [(_minus(rem, need, f), filled)] if filled else []
                left = count - filled
                if left and n > 0:  # the next worker of this run takes the rest (fewer than f)
                    repl.append((_minus(rem, need, n), 1))
                    n, left = 0, left - 1
                if left:
                    repl.append((rem, left))
                bins[i:i + 1] = repl
                i += len(repl)
        if n <= 0:
            continue
        f = 1 if spread else _fit_count(full, need)
        if f == math.inf:
            bins.append((full, 1))
        elif f == 0:  # larger than a worker (not assigned here by assign_demand): one worker each
            bins.append((_minus(full, need, 1), n))
        else:
            f = int(f)
            if n // f:
                bins.append((_minus(full, need, f), n // f))
            if n % f:
                bins.append((_minus(full, need, n % f), 1))
    return sum(c for _, c in bins)


# ---------------------------------------------------------------------------------------- pressure
class _Group:
    """The waiting workloads of one ClusterQueue (or namespace), in the global order."""

    __slots__ = ("cum_gpus", "neg_waits")

    def __init__(self) -> None:
        self.neg_waits: list[float] = []  # -wait, ascending
        self.cum_gpus: list[int] = [0]  # cum_gpus[i]: GPUs of the first i

    def add(self, wait: float, gpus: int) -> None:
        self.neg_waits.append(-wait)
        self.cum_gpus.append(self.cum_gpus[-1] + gpus)

    def longer_than(self, wait_seconds: float) -> tuple[int, int]:
        """(workloads, GPUs) of this group waiting longer than ``wait_seconds``."""
        n = bisect_left(self.neg_waits, -wait_seconds)
        return n, self.cum_gpus[n]


class _PressureIndex:
    """Answers ``queue_pressure`` for any cluster in O(log n): prefix sums over the waiting list
    (longest wait first), overall and per ClusterQueue and per namespace, and for each of the two
    groupings the first workload that is not in the first workload's group."""

    __slots__ = ("all", "by_cq", "by_ns", "first_other_cq", "first_other_ns")

    def __init__(self, waiting: Sequence[tuple[float, WorkloadState]]) -> None:
        self.all = _Group()
        self.by_cq: dict[str | None, _Group] = {}
        self.by_ns: dict[str, _Group] = {}
        self.first_other_cq: int | None = None
        self.first_other_ns: int | None = None
        first = waiting[0][1] if waiting else None
        for i, (wait, wl) in enumerate(waiting):
            gpus = wl.gpu_demand
            self.all.add(wait, gpus)
            self.by_cq.setdefault(wl.cluster_queue, _Group()).add(wait, gpus)
            self.by_ns.setdefault(wl.namespace, _Group()).add(wait, gpus)
            if self.first_other_cq is None and wl.cluster_queue != first.cluster_queue:  # type: ignore[union-attr]
                self.first_other_cq = i
            if self.first_other_ns is None and wl.namespace != first.namespace:  # type: ignore[union-attr]
                self.first_other_ns = i


class WaitingWorkloads(tuple):
    """What ``pending_gpu_workloads`` returns: a tuple of (wait, workload), longest wait first, that
    also carries an index (built on first use) so that ``queue_pressure`` for N clusters costs
    O(n + N log n) instead of O(N x n)."""

    @cached_property
    def pressure_index(self) -> _PressureIndex:
        return _PressureIndex(self)


def pending_gpu_workloads(snapshot: ClusterSnapshot, now: float) -> tuple[tuple[float, WorkloadState], ...]:
    """(wait, workload) of every pending GPU workload without quota, longest wait first; compute it
    once per snapshot and pass it to ``decide_scaling(..., waiting=)`` when deciding many clusters."""
    out = [(now - wl.queued_since, wl) for wl in snapshot.workloads.values()
           if wl.pending and not wl.quota_reserved and wl.gpu_demand > 0]
    out.sort(key=lambda x: (-x[0], x[1].key))
    return WaitingWorkloads(out)


def queue_pressure(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    wait_seconds: float,
    now: float,
    waiting: Sequence[tuple[float, WorkloadState]] | None = None,
) -> str:
    """A description of other teams waiting (GPU workloads of other ClusterQueues pending longer than
    ``wait_seconds``), or "" when nobody waits.  ``waiting`` must be sorted longest wait first (as
    ``pending_gpu_workloads`` returns it)."""
    if waiting is None:
        waiting = pending_gpu_workloads(snapshot, now)
    if not waiting:
        return ""
    index = waiting.pressure_index if isinstance(waiting, WaitingWorkloads) else _PressureIndex(waiting)
    # others = the waiting workloads past the threshold that are not in the cluster's own group:
    # its ClusterQueue, or (a cluster outside Kueue) its namespace
    if cluster.cluster_queue is not None:
        own, first_own = index.by_cq.get(cluster.cluster_queue), waiting[0][1].cluster_queue == cluster.cluster_queue
        first_other = index.first_other_cq
    else:
        own, first_own = index.by_ns.get(cluster.namespace), waiting[0][1].namespace == cluster.namespace
        first_other = index.first_other_ns
    count, gpus = index.all.longer_than(wait_seconds)
    if own is not None:
        own_count, own_gpus = own.longer_than(wait_seconds)
        count, gpus = count - own_count, gpus - own_gpus
    if count <= 0:
        return ""
    # the oldest other: the first in the list unless that one is the cluster's own (then the first
    # of another group, which lies inside the threshold because count > 0)
    age, oldest = waiting[first_other if first_own else 0]
    return (f"{count} workload(s) of other queues wait for {gpus} GPUs "
            f"(oldest {oldest.key} in {oldest.cluster_queue}, {age / 60:.0f}m)")


# -------------------------------------------------------------------------------------------- idle
def _util(w: RayWorker, gpu_group: bool) -> float | None:
    return w.gpu_utilization if gpu_group else w.cpu_utilization


def _idle_now(w: RayWorker, gpu_group: bool, policy: ScalingDefaults, reclaim: bool = False) -> bool:
    """Under the idle threshold and no Ray work on it; with ``reclaim`` (GPU groups), Ray work that
    leaves the GPU under the threshold does not count (``ray_busy`` True); unknown stays busy."""
    if w.deleting or not w.ready or w.phase != "Running":
        return False
    if w.ray_busy is not False and not (reclaim and gpu_group and w.ray_busy is True):
        return False
    u = _util(w, gpu_group)
    threshold = policy.idle_gpu_utilization if gpu_group else policy.idle_cpu_utilization
    return u is not None and u < threshold


def idle_workers(
    group: WorkerGroupState, policy: ScalingDefaults, idle_since: Mapping[str, float], window: float, now: float,
    *, reclaim: bool = False, actor_window: float | None = None,
) -> tuple[dict[str, float], list[RayWorker]]:
    """(new idle_since map, workers idle for at least ``window``, idlest first).

    ``reclaim``: GPU workers Ray reports work on also count when their GPU stayed under the idle
    threshold; those need ``actor_window`` (default ``window``) of it to be removable.
    """
    gpu_group = group.gpus_per_worker > 0
    since: dict[str, float] = {}
    removable: list[RayWorker] = []
    for w in group.workers:
        if _idle_now(w, gpu_group, policy, reclaim):
            t = idle_since.get(w.pod, now)
            since[w.pod] = t
            need = window if w.ray_busy is False or actor_window is None else actor_window
            if now - t >= need:
                removable.append(w)
    removable.sort(key=lambda w: (_util(w, gpu_group) or 0.0, since[w.pod], w.pod))
    return since, removable


def _utilization_floor(group: WorkerGroupState, policy: ScalingDefaults, current: int) -> tuple[int, str]:
    """HPA core rule on the ready workers: ``ceil(ready * mean / target)``, current within tolerance."""
    gpu_group = group.gpus_per_worker > 0
    ready = [w for w in group.workers if w.ready and w.phase == "Running" and not w.deleting]
    floors = []
    details = []
    metrics = [("GPU", [w.gpu_utilization for w in ready], policy.target_gpu_utilization)] if gpu_group else [
        ("CPU", [w.cpu_utilization for w in ready], policy.target_cpu_utilization),
        ("memory", [w.memory_utilization for w in ready], policy.target_memory_utilization),
    ]
    for name, values, target in metrics:
        known = [v for v in values if v is not None]
        if not known or len(known) < len(values):
            continue  # incomplete: this metric cannot argue for a scale-down
        mean = sum(known) / len(known)
        ratio = mean / target
        if abs(1.0 - ratio) <= policy.tolerance:
            floors.append(current)
        else:
            floors.append(math.ceil(len(known) * ratio - 1e-9))
        details.append(f"{name} {mean:.0%} of target {target:.0%}")
    if not floors:
        return 0, ""
    return max(floors), ", ".join(details)


# ------------------------------------------------------------------------------------------ headroom
def ray_cluster_workloads(snapshot: ClusterSnapshot) -> Mapping[tuple[str, str], tuple[WorkloadState, ...]]:
    """(namespace, RayCluster name) -> the Workloads it owns, in snapshot order; build it once per
    snapshot and pass it to ``decide_scaling(..., owned=)`` when deciding many clusters."""
    out: dict[tuple[str, str], list[WorkloadState]] = {}
    for wl in snapshot.workloads.values():
        if wl.owner_kind == "RayCluster":
            out.setdefault((wl.namespace, wl.owner_name), []).append(wl)
    return frozen_map({k: tuple(v) for k, v in out.items()})


def _headroom_replicas(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    group: WorkerGroupState,
    owned: Mapping[tuple[str, str], Sequence[WorkloadState]] | None = None,
    cohorts: CohortTotals | None = None,
) -> tuple[int | None, str]:
    """Most replicas the ClusterQueue can still admit for this group (None: unlimited), and why:
    its own unused nominal quota plus what it may borrow from its cohort (``policy.quota``)."""
    if not cluster.kueue_managed or group.gpus_per_worker <= 0:
        return None, ""
    cq = snapshot.cluster_queues.get(cluster.cluster_queue or "")
    if cq is None:
        return 0, f"ClusterQueue of queue {cluster.queue_name!r} unknown"
    flavor = None
    if owned is None:
        owned = ray_cluster_workloads(snapshot)
    for wl in owned.get((cluster.namespace, cluster.name), ()):
        flavor = wl.flavors.get(group.name.lower(), {}).get(GPU_RESOURCE) or flavor
    flavors = [flavor] if flavor else sorted(cq.nominal_gpus)
    if cohorts is None:
        cohorts = cohort_totals(snapshot.cluster_queues)
    headroom = borrowed = 0.0
    for f in flavors:
        h, b = admittable_gpus(cq, f, cohorts)
        headroom, borrowed = headroom + h, borrowed + b
    per_replica = group.gpus_per_worker * max(1, group.num_of_hosts)
    why = f"ClusterQueue {cq.name} can admit {headroom:g} more GPUs on {', '.join(flavors)}"
    if borrowed:
        why += f" ({borrowed:g} borrowed from cohort {cq.cohort})"
    return int(headroom // per_replica), why


# ------------------------------------------------------------------------------------------- decide
def _prune(h: GroupHistory, policy: ScalingDefaults, now: float) -> GroupHistory:
    keep_rec = max(policy.scale_up.stabilization_window_seconds, policy.scale_down.stabilization_window_seconds)
    keep_ev = max(policy.scale_up.longest_period, policy.scale_down.longest_period)
    return replace(
        h,
        recommendations=tuple((t, r) for t, r in h.recommendations if now - t < keep_rec),
        scale_events=tuple((t, d) for t, d in h.scale_events if now - t < keep_ev),
    )


def _decide_group(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    group: WorkerGroupState,
    policy: ScalingDefaults,
    h: GroupHistory,
    demand: list[tuple[Bundle, bool, int]],
    infeasible_demand: tuple[str, ...],
    pressure: str,
    now: float,
    owned: Mapping[tuple[str, str], Sequence[WorkloadState]] | None = None,
    cohorts: CohortTotals | None = None,
) -> tuple[GroupDecision, GroupHistory]:
    current, lo, hi = group.replicas, group.min_replicas, group.max_replicas
    gpu_group = group.gpus_per_worker > 0
    in_tree = cluster.in_tree_autoscaler
    pending_gpus = int(sum(b.get("GPU", 0.0) * n for b, _, n in demand))
    pending_bundles = sum(n for _, _, n in demand)
    h = _prune(h, policy, now)
    if in_tree:
        user_max = hi if (h.written_max is None or hi != h.written_max or h.user_max is None) else h.user_max
        h = replace(h, user_max=user_max)

    def out(direction: Direction, reason: str, message: str, desired: int, **kw) -> GroupDecision:
        return GroupDecision(
            namespace=cluster.namespace, cluster=cluster.name, group=group.name, direction=direction, reason=reason,
            message=message[:1024], current=current, desired=desired, min_replicas=lo, max_replicas=hi,
            pending_gpus=pending_gpus, resource_version=cluster.resource_version, **kw,
        )

    if cluster.suspended:
        return out("hold", R.CLUSTER_SUSPENDED, "the RayCluster is suspended; nothing to scale", current), h
    if cluster.kueue_managed and not cluster.elastic:
        return out("hold", R.NOT_SCALABLE_UNDER_KUEUE,
                   f"managed by Kueue (queue {cluster.queue_name}) and not elastic: a replica change would make "
                   "Kueue suspend and requeue it; set kueue.x-k8s.io/elastic-job: \"true\" to allow scaling",
                   current), h

    existing = {w.pod for w in group.workers}
    stale_list = bool(group.workers_to_delete) and not (set(group.workers_to_delete) & existing)
    if group.workers_to_delete and not stale_list and not in_tree:
        left = sorted(set(group.workers_to_delete) & existing)
        return out("hold", R.WAITING_FOR_WORKER_DELETION,
                   f"waiting for the operator to delete {len(left)} worker(s): {', '.join(left[:10])}", current), h

    sig = cluster.demand_signal
    if sig is None or sig.is_stale(now):
        age = sig.age(now) if sig else None
        h = replace(h, idle_since=frozen_map())
        return out("hold", R.RAY_SIGNAL_STALE,
                   "Ray demand signal " + ("missing" if age is None else f"{age:.0f}s old") + "; holding at "
                   f"{current} (no scale-down on incomplete data)", current,
                   clear_workers_to_delete=stale_list and not in_tree,
                   write="replicas" if stale_list and not in_tree else "none"), h
    if gpu_group and snapshot.gpu_signal_stale():
        h = replace(h, idle_since=frozen_map())
        return out("hold", R.GPU_SIGNAL_STALE, f"GPU signal stale; holding at {current}", current,
                   clear_workers_to_delete=stale_list and not in_tree,
                   write="replicas" if stale_list and not in_tree else "none"), h

    # ---- 3. recommendation
    window = policy.pressured_idle_window_seconds if pressure else policy.idle_window_seconds
    # idle-actor reclaim (opt-in): only where queuepilot names the pods to delete (in-tree off), and
    # only while no pending Ray demand of the cluster could run on this group's workers
    reclaim = policy.reclaim_idle_actors and gpu_group and not in_tree and not _demand_fits_group(cluster, group)
    since, removable = idle_workers(group, policy, h.idle_since, window, now, reclaim=reclaim,
                                    actor_window=policy.idle_window_seconds)
    h = replace(h, idle_since=frozen_map(since))
    idle_gpus = sum(w.gpus or group.gpus_per_worker for w in removable) if gpu_group else 0
    infeasible = list(infeasible_demand)
    cap = _capacity(group)
    need = workers_needed(demand, cap) if demand else 0
    starting = sum(1 for w in group.workers if not w.deleting and (w.phase != "Running" or not w.ready))
    hosts = max(1, group.num_of_hosts)
    # replicas already asked for whose pods do not exist yet (KubeRay could not create them: quota,
    # no free GPU) are in flight like starting ones: asking again would ratchet replicas up to
    # maxReplicas, and a scale-down computed from such a replicas value would still lie above the
    # pods that exist, so the operator would delete none of workersToDelete (one-host groups where
    # queuepilot writes replicas; with the in-tree autoscaler the gap is Ray's own scale-up)
    unmade = (max(0, current - sum(1 for w in group.workers if not w.deleting))
              if hosts == 1 and not in_tree else 0)
    add_workers = max(0, need - starting - unmade)
    if add_workers > 0:
        raw = current + math.ceil(add_workers / hosts)
        reason = R.PENDING_DEMAND
        msg = (f"{pending_bundles} pending Ray bundle(s) ({pending_gpus} GPUs) need {need} worker(s) of "
               f"{_shape_text(cap)}; {starting} starting")
    elif removable and hosts == 1:
        raw = current - unmade - len(removable)
        reason = R.IDLE_WORKERS_QUEUE_PRESSURE if pressure else R.IDLE_WORKERS
        what = "GPU" if gpu_group else "CPU"
        msg = (f"{len(removable)} worker(s) idle ({what} use under "
               f"{(policy.idle_gpu_utilization if gpu_group else policy.idle_cpu_utilization):.0%}, no Ray work) "
               f"for {window / 60:g}m" + (f" while {pressure}" if pressure else ""))
        held = [w.pod for w in removable if w.ray_busy is True]
        if held:
            reason = R.IDLE_ACTORS_RECLAIMED
            msg += (f"; {len(held)} of them hold Ray actors/tasks with the GPU under "
                    f"{policy.idle_gpu_utilization:.0%} for {policy.idle_window_seconds / 60:g}m "
                    f"(reclaim-idle-actors: their actors are killed): {', '.join(held[:10])}")
        if not pressure:
            floor, detail = _utilization_floor(group, policy, current - unmade)
            if floor > raw:
                raw = min(current - unmade, floor)
                reason = R.KEPT_FOR_UTILIZATION_TARGET
                msg += f"; keeping {raw} for the utilization target ({detail})"
    elif infeasible:
        raw = current - max(0, unmade - max(0, need - starting))
        reason = R.INFEASIBLE_DEMAND
        msg = "no feasible pending demand; " + "; ".join(infeasible)
    else:
        # keep the unmade replicas pending demand still needs; drop the rest (they would start idle)
        raw = current - max(0, unmade - max(0, need - starting))
        reason = R.WITHIN_TARGET
        msg = "no pending demand and no worker idle for the window"
        if raw < current:
            msg = (f"{current - raw} replica(s) never got a pod and no pending demand needs them; "
                   f"replicas follow the {current - unmade} worker(s) that exist")

    # quota headroom (Kueue elastic): never ask for more than the ClusterQueue can admit
    if raw > current:
        room, why = _headroom_replicas(snapshot, cluster, group, owned, cohorts)
        if room is not None and raw > current + room:
            infeasible.append(f"{raw - current - room} replica(s) wanted beyond quota headroom ({why})")
            raw = current + room
            reason, msg = R.QUOTA_HEADROOM_LIMIT, f"{msg}; {why}"
    if raw > hi and add_workers > 0:
        infeasible.append(f"{raw - max(current, hi)} more replica(s) wanted, group at maxReplicas {hi}")

    # ---- 4. behavior (while others wait, the scale-down window is at most the pressured idle window)
    down = policy.scale_down
    if pressure and down.stabilization_window_seconds > policy.pressured_idle_window_seconds:
        down = replace(down, stabilization_window_seconds=int(policy.pressured_idle_window_seconds))
    norm = normalize(raw, current, lo, hi, h.recommendations, h.scale_events, policy.scale_up, down, now)
    final = norm.replicas
    if norm.reason:
        reason, msg = norm.reason, f"{msg}; {norm.message}"
    h = replace(h, recommendations=(*h.recommendations, (now, raw)))
    direction: Direction = "up" if final > current else "down" if final < current else "hold"

    # ---- 5. write
    if not in_tree:
        to_delete: tuple[str, ...] = ()
        if final < current:
            to_delete = tuple(w.pod for w in removable[: current - unmade - final])
        changed = final != current
        if changed:
            h = replace(h, scale_events=(*h.scale_events, (now, final - current)))
        if not changed and stale_list:
            reason, msg = R.WORKERS_DELETED, f"the pods in workersToDelete are gone; clearing it ({msg})"
        write: WriteMode = "replicas" if changed or stale_list else "none"
        verb = {"up": "scale up", "down": "scale down", "hold": "hold"}[direction]
        text = f"{verb} {current} -> {final}: {msg}" + (f"; deleting {', '.join(to_delete)}" if to_delete else "")
        return out(direction, reason, text, final, workers_to_delete=to_delete, write=write, idle_gpus=idle_gpus,
                   infeasible=tuple(infeasible), clear_workers_to_delete=stale_list and not to_delete), h

    # in-tree autoscaler on: steer maxReplicas only
    target_max = h.user_max if h.user_max is not None else hi
    if final < current:
        target_max = final
    room, why = _headroom_replicas(snapshot, cluster, group, owned, cohorts)
    if room is not None:
        target_max = min(target_max, current + room)
    target_max = max(target_max, lo)
    if target_max != hi:
        h = replace(h, written_max=target_max)
        if final < current:
            h = replace(h, scale_events=(*h.scale_events, (now, final - current)))
        text = (f"maxReplicas {hi} -> {target_max} (Ray's autoscaler owns replicas, currently {current}): {msg}"
                + (f"; {why}" if why and room is not None and target_max == current + room else ""))
        return out("down" if target_max < current else direction, reason, text, min(final, target_max),
                   write="min_max", new_min=lo, new_max=target_max, idle_gpus=idle_gpus,
                   infeasible=tuple(infeasible)), h
    return out(direction if direction != "down" else "hold", reason,
               f"maxReplicas stays {hi} (Ray's autoscaler owns replicas, currently {current}): {msg}", current,
               idle_gpus=idle_gpus, infeasible=tuple(infeasible)), h


def decide_scaling(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    defaults: ScalingDefaults,
    history: Mapping[str, GroupHistory],
    now: float,
    *,
    waiting: Sequence[tuple[float, WorkloadState]] | None = None,
    owned: Mapping[tuple[str, str], Sequence[WorkloadState]] | None = None,
    cohorts: CohortTotals | None = None,
) -> ScalingResult:
    """One decision per worker group of an opted-in RayCluster (none otherwise); pure, deterministic.

    ``history`` maps group name -> ``GroupHistory`` from the previous pass (empty at first); the
    returned history replaces it (groups no longer present are dropped).  ``waiting``: the result
    of ``pending_gpu_workloads(snapshot, now)``, and ``owned``: the result of
    ``ray_cluster_workloads(snapshot)``, and ``cohorts``: ``cohort_totals(snapshot.cluster_queues)``,
    to share between clusters (computed when None).
    """
    if not cluster.opted_in:
        return ScalingResult(decisions=(), history=frozen_map(), warnings=())
    policy, warnings = policy_from_annotations(cluster.annotations, defaults)
    demand, infeasible = assign_demand(cluster)
    pressure = queue_pressure(snapshot, cluster, policy.queue_pressure_wait_seconds, now, waiting)
    decisions = []
    new_hist: dict[str, GroupHistory] = {}
    for group in cluster.groups:
        # unscoped infeasible demand is reported once, on the first group
        mine = tuple(infeasible.get(group.name, ())) + (tuple(infeasible.get(None, ())) if group is cluster.groups[0]
                                                        else ())
        d, h = _decide_group(snapshot, cluster, group, policy, history.get(group.name, GroupHistory()),
                             demand.get(group.name, []), mine, pressure, now, owned, cohorts)
        decisions.append(d)
        new_hist[group.name] = h
    return ScalingResult(decisions=tuple(decisions), history=frozen_map(new_hist), warnings=warnings)


def demand_summary(demand: Sequence[RayDemand]) -> int:
    """Total GPUs in Ray's pending demand (for metrics)."""
    return int(sum(d.shape.get("GPU", 0.0) * d.count for d in demand if not d.infeasible))
