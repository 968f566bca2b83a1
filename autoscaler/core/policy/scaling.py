"""The RayCluster worker-group scaling policy: desired workers per group, and how to write them.

``decide_scaling(snapshot, cluster, defaults, history, now)`` is pure; for an opted-in RayCluster
(``queuepilot.io/autoscale: "true"``) it returns one ``GroupDecision`` per worker group.  What all
clusters of one snapshot share (who waits, the Workloads each RayCluster owns, the cohorts' quota)
is one ``ScalingContext``, built once per pass.  Each group's decision is an ordered list of named
steps (``_decide_group``), each returning (value, reason, message) as ``behavior.normalize``'s
steps do; the reason of the last step that changed the value is the decision's reason:

1. **Guards: can we touch it?**  Suspended -> ``ClusterSuspended``; Kueue-managed (queue-name label)
   and not elastic -> ``NotScalableUnderKueue``; pods named in ``workersToDelete`` still exist ->
   ``WaitingForWorkerDeletion``; no write in any case.
2. **Signal freshness.**  Ray demand signal stale/missing -> ``RaySignalStale``; GPU signal
   stale (GPU groups) -> ``GpuSignalStale``; hold (desired = current, no write, idle timers reset).
3. **Recommendation** (HPA "calculate" step):
   - *pending demand*: Ray's unscheduled bundles (not INFEASIBLE) are assigned to the group that can
     hold them (the ``group`` Ray named, else the smallest worker that fits, CPU-only groups first
     for bundles without GPUs) and packed first-fit-decreasing into new workers of the group's shape
     (STRICT_SPREAD bundles one per worker; runs of identical bundles are packed at once); workers
     still starting, and replicas whose pods were never created, absorb that many -> ``current +
     ceil(workers / numOfHosts)``, reason ``PendingDemand``.  Bundles no worker can hold, and those
     Ray marks INFEASIBLE, go to ``infeasible``, never to a scale-up;
   - *empty workers*: a Running, ready worker is empty when its GPU utilization (CPU utilization
     for CPU-only groups) is under the idle threshold **and** Ray reports no work on it
     (``ray_busy`` is False; unknown counts as busy); it goes once empty for the idle window (90 s
     by default) — the shorter pressured window while another ClusterQueue has a GPU workload
     waiting longer than ``queue_pressure_wait`` -> ``existing pods - removable``, reason
     ``IdleWorkers`` / ``IdleWorkersQueuePressure``.  With ``keep_spare_for_target`` (off by
     default) and without queue pressure the HPA utilization rule (``ceil(ready * mean / target)``
     outside the tolerance) is a floor, so the remaining workers stay under the target
     (``KeptForUtilizationTarget``).  Multi-host groups
     (numOfHosts > 1) are not scaled down by idleness.
   - *reclaim* (``reclaim_idle_actors``, opt-in; in-tree autoscaler off; GPU groups): a worker
     only idle actors hold (Ray reports resources in use but no task or actor method running on it,
     ``ray_running_tasks == 0``) also counts once its GPU stayed under the threshold for the reclaim
     window and it is older than the grace period -> ``IdleActorsReclaimed`` (its actors are
     killed).  A worker running a task is never reclaimed, however idle its GPU; unknown counts as
     running.
     While pending Ray demand of the cluster fits the group, such workers (idle actor or empty)
     are replaced instead: named in ``workersToDelete`` with replicas kept (plus what the queue
     needs), so KubeRay launches fresh ones -> ``IdleWorkersReplaced``.  At most
     ``reclaim_budget_per_hour`` workers per RayCluster in any hour (``GroupHistory.reclaims``).
     Messages name the GPU utilization series when the GPU signal says which one it used
     (``utilization_source``); decisions never depend on it.
4. **Headroom** (Kueue-managed elastic clusters): never more new GPUs than the ClusterQueue can
   still admit on the group's flavor, cohort borrowing included (``policy.quota``) ->
   ``QuotaHeadroomLimit`` and an ``infeasible`` entry.
5. **Behaviour normalisation** (``behavior.normalize``): stabilization windows, Pods/Percent step
   limits per period, ``[min, max]``.  The scale-down stabilization window smooths
   recommendations; it does not hold back removing workers idle for their own window.  Then the
   down-after-up rule: no scale-down within ``down_after_up_seconds`` of a launch this group's
   history records (a scale-up or a replacement we wrote) -> ``RecentScaleUp``.
6. **Write plan**: in-tree autoscaler off -> ``write="replicas"`` with ``workers_to_delete`` naming the
   idlest removable pods (lowest utilization, longest idle); in-tree autoscaler on -> ``write=
   "min_max"``: ``maxReplicas`` is lowered to shed idle workers (Ray's autoscaler then removes
   the extra workers) and restored to the user's value afterwards, capped by quota headroom on
   elastic Kueue clusters; ``minReplicas`` is never raised (Ray scales up for demand itself, and a
   raised min would keep workers Ray considers idle).  A ``workersToDelete`` list whose pods are
   all gone is cleared (``clear_workers_to_delete``); while some still exist the group holds
   (``WaitingForWorkerDeletion``).  After a failed write the caller rolls the history back with
   ``GroupHistory.rollback``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal, NamedTuple

from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import policy_from_annotations
from autoscaler.core.policy.behavior import ScalingRules, normalize
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.pressure import (
    PressureIndex,
    Waiting,
    WaitingIndex,
    pending_gpu_workloads,
    pressure_of,
    queue_pressure,
    waiting_candidates,
)
from autoscaler.core.policy.quota import CohortTotals, admittable_gpus, cohort_totals
from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    ClusterSnapshot,
    PodKey,
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
    "PressureIndex",
    "ScalingContext",
    "ScalingDefaults",
    "ScalingResult",
    "Step",
    "WaitingIndex",
    "assign_demand",
    "decide_scaling",
    "idle_workers",
    "pending_gpu_workloads",
    "queue_pressure",
    "ray_cluster_workloads",
    "utilization_source",
    "waiting_candidates",
    "workers_needed",
]

Direction = Literal["up", "down", "hold"]
WriteMode = Literal["replicas", "min_max", "none"]
Bundle = Mapping[str, float]
DemandRun = tuple[Bundle, bool, int]  # (bundle shape, STRICT_SPREAD, how many)
OwnedWorkloads = Mapping[tuple[str, str], Sequence[WorkloadState]]  # (namespace, RayCluster) -> Workloads

_CHECKED = ("GPU", "CPU", "memory")
RECLAIM_BUDGET_PERIOD = 3600.0  # the reclaim budget counts the workers reclaimed in this many seconds


class Step(NamedTuple):
    """What one step of a group decision says: the replicas it arrives at, and why ("" when it left
    the value alone)."""

    value: int
    reason: str
    message: str


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
    # the pods of ``workers_to_delete`` that hold Ray actors/tasks (their work is killed)
    reclaimed: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.cluster, self.group)


@dataclass(frozen=True, slots=True)
class GroupHistory:
    """What one group's past decisions leave behind (kept by the caller between passes)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (t, unstabilized replicas)
    scale_events: tuple[tuple[float, int], ...] = ()  # (t, signed replica change written)
    idle_since: Mapping[str, float] = field(default_factory=frozen_map)  # pod -> first seen idle
    user_max: int | None = None  # in-tree autoscaler case: the user's maxReplicas
    written_max: int | None = None  # the maxReplicas we last wrote
    last_launch: float | None = None  # when we last launched workers here (scale-up or replacement)
    reclaims: tuple[float, ...] = ()  # one entry per worker reclaimed, for the hourly budget

    def rollback(self, old: GroupHistory) -> GroupHistory:
        """This pass's history after its write failed: keep what was observed (recommendations, idle
        timers, the user's maxReplicas) and forget the change that did not happen (the scale event,
        the maxReplicas written, the launch and the reclaims), so that it does not count against the
        step limits, the down-after-up hold or the reclaim budget."""
        return replace(self, scale_events=old.scale_events, written_max=old.written_max,
                       last_launch=old.last_launch, reclaims=old.reclaims)

    def pruned(self, policy: ScalingDefaults, now: float) -> GroupHistory:
        """Without the recommendations, scale events and reclaims older than any window or period
        that still looks back."""
        keep_rec = max(policy.scale_up.stabilization_window_seconds, policy.scale_down.stabilization_window_seconds)
        keep_ev = max(policy.scale_up.longest_period, policy.scale_down.longest_period)
        return replace(self, recommendations=_recent(self.recommendations, now, keep_rec),
                       scale_events=_recent(self.scale_events, now, keep_ev),
                       reclaims=tuple(t for t in self.reclaims if now - t < RECLAIM_BUDGET_PERIOD))

    def reclaims_in_period(self, now: float) -> int:
        """Workers reclaimed in this group during the last hour (the budget's period)."""
        return sum(1 for t in self.reclaims if now - t < RECLAIM_BUDGET_PERIOD)

    def launch_hold(self, policy: ScalingDefaults, now: float) -> float:
        """Seconds left of the down-after-up hold (0 when no launch is that recent)."""
        if self.last_launch is None:
            return 0.0
        return max(0.0, policy.down_after_up_seconds - (now - self.last_launch))

    def seeing_max(self, max_replicas: int) -> GroupHistory:
        """In-tree autoscaler case: a maxReplicas that is not the one we wrote is the user's."""
        if self.written_max is None or max_replicas != self.written_max or self.user_max is None:
            return replace(self, user_max=max_replicas)
        return self

    def scaled(self, now: float, change: int) -> GroupHistory:
        return replace(self, scale_events=(*self.scale_events, (now, change)))


def _recent(entries: tuple[tuple[float, int], ...], now: float, keep: float) -> tuple[tuple[float, int], ...]:
    """The (t, value) entries younger than ``keep`` seconds."""
    return tuple(e for e in entries if now - e[0] < keep)


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
) -> tuple[dict[str, list[DemandRun]], dict[str | None, list[str]]]:
    """Group name -> [(bundle, strict_spread, count)] for Ray's feasible pending demand; and the
    infeasible part, by the group Ray named (None: any group)."""
    per_group: dict[str, list[DemandRun]] = {g.name: [] for g in cluster.groups}
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


def _demand_fits_group(cluster: RayClusterState, group: WorkerGroupState, cap: Mapping[str, float]) -> bool:
    """Whether any feasible pending Ray demand of the cluster could run on a worker of ``group`` (one
    worker's resources: ``cap``)."""
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
        n = b[2] if len(b) == 3 else 1
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
                fit = int(f)  # (the count as an int: n // fit, not a float)
                filled = min(count, n // fit)
                n -= filled * fit
                repl = [(_minus(rem, need, fit), filled)] if filled else []
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
            fit = int(f)  # (the count as an int: n // fit, not a float)
            if n // fit:
                bins.append((_minus(full, need, fit), n // fit))
            if n % fit:
                bins.append((_minus(full, need, n % fit), 1))
    return sum(c for _, c in bins)


# -------------------------------------------------------------------------------------------- idle
def _util(w: RayWorker, gpu_group: bool) -> float | None:
    return w.gpu_utilization if gpu_group else w.cpu_utilization


def _idle_now(w: RayWorker, gpu_group: bool, policy: ScalingDefaults, reclaim: bool = False) -> bool:
    """Under the idle threshold and no Ray work on it; with ``reclaim`` (GPU groups), idle actors
    that leave the GPU under the threshold do not count either (``ray_busy`` True with no task or
    actor method running: ``ray_running_tasks == 0``).  A running task never counts, whatever its GPU
    does (an evaluation, a checkpoint, an input stall inside the task); unknown stays busy."""
    if w.deleting or not w.ready or w.phase != "Running":
        return False
    if w.ray_busy is not False and not (reclaim and gpu_group and w.ray_busy is True and w.ray_running_tasks == 0):
        return False
    u = _util(w, gpu_group)
    threshold = policy.idle_gpu_utilization if gpu_group else policy.idle_cpu_utilization
    return u is not None and u < threshold


def _old_enough(w: RayWorker, grace: float | None, now: float) -> bool:
    """Past the reclaim grace period (a worker of unknown age counts from when it was first seen idle)."""
    return grace is None or w.created_at is None or now - w.created_at >= grace


def idle_workers(
    group: WorkerGroupState, policy: ScalingDefaults, idle_since: Mapping[str, float], window: float, now: float,
    *, reclaim: bool = False, actor_window: float | None = None, grace: float | None = None,
) -> tuple[dict[str, float], list[RayWorker]]:
    """(new idle_since map, workers idle for at least ``window``, idlest first).

    ``reclaim``: GPU workers Ray reports work on also count when their GPU stayed under the idle
    threshold; those need ``actor_window`` (default ``window``) of it to be removable, and to be at
    least ``grace`` seconds old.
    """
    gpu_group = group.gpus_per_worker > 0
    since: dict[str, float] = {}
    removable: list[RayWorker] = []
    for w in group.workers:
        if _idle_now(w, gpu_group, policy, reclaim):
            t = idle_since.get(w.pod, now)
            since[w.pod] = t
            empty = w.ray_busy is False or actor_window is None
            need = window if empty or actor_window is None else actor_window
            if now - t >= need and (empty or _old_enough(w, grace, now)):
                removable.append(w)
    removable.sort(key=lambda w: (_util(w, gpu_group) or 0.0, since[w.pod], w.pod))
    return since, removable


def _utilization_floor(
    group: WorkerGroupState, policy: ScalingDefaults, current: int, gpu_source: str = ""
) -> tuple[int, str]:
    """HPA core rule on the ready workers: ``ceil(ready * mean / target)``, current within tolerance.
    ``gpu_source`` names the GPU utilization signal in the explanation (see ``utilization_source``)."""
    gpu_group = group.gpus_per_worker > 0
    ready = [w for w in group.workers if w.ready and w.phase == "Running" and not w.deleting]
    floors: list[int] = []
    details: list[str] = []
    gpu_name = f"GPU {gpu_source}" if gpu_source else "GPU"
    metrics = [(gpu_name, [w.gpu_utilization for w in ready], policy.target_gpu_utilization)] if gpu_group else [
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




def utilization_source(snapshot: ClusterSnapshot, namespace: str, workers: Sequence[RayWorker]) -> str:
    """Which GPU utilization signal the workers' numbers come from (``GpuState.utilization_source`` of
    the GPUs attributed to their pods: "gr_engine_active", "sm_active" or "gpu_util"), several joined
    by "/"; "" when the GPU signal does not say.  Only explanations use it, never a decision."""
    found: set[str] = set()
    for w in workers:
        n = snapshot.nodes.get(w.node) if w.node else None
        if n is None:
            continue
        key = PodKey(namespace, w.pod)
        found.update(g.utilization_source for g in n.gpus if g.utilization_source and g.pod == key)
    return "/".join(sorted(found))


# ------------------------------------------------------------------------------------------ headroom
def ray_cluster_workloads(snapshot: ClusterSnapshot) -> Mapping[tuple[str, str], tuple[WorkloadState, ...]]:
    """(namespace, RayCluster name) -> the Workloads it owns, in snapshot order; build it once per
    snapshot and pass it to ``decide_scaling(..., owned=)`` when deciding many clusters."""
    out: dict[tuple[str, str], list[WorkloadState]] = {}
    for wl in snapshot.workloads.values():
        if wl.owner_kind == "RayCluster":
            out.setdefault((wl.namespace, wl.owner_name), []).append(wl)
    return frozen_map({k: tuple(v) for k, v in out.items()})


# ------------------------------------------------------------------------------------------- context
@dataclass(frozen=True)
class ScalingContext:
    """What the decisions for every RayCluster of one snapshot share; build it once per pass with
    ``ScalingContext.build`` and pass it to ``decide_scaling(..., context=)``.

    ``waiting``: the pending GPU workloads with their pressure index (queue pressure).  ``owned``
    (the Workloads each RayCluster owns) and ``cohorts`` (the cohorts' quota totals) serve the quota
    headroom of elastic Kueue clusters; they are computed on first use unless given.
    """

    snapshot: ClusterSnapshot
    now: float
    waiting: WaitingIndex
    given_owned: OwnedWorkloads | None = field(default=None, repr=False)
    given_cohorts: CohortTotals | None = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        snapshot: ClusterSnapshot,
        now: float,
        *,
        waiting: Sequence[Waiting] | None = None,
        owned: OwnedWorkloads | None = None,
        cohorts: CohortTotals | None = None,
    ) -> ScalingContext:
        """The context of ``snapshot`` at ``now``; ``waiting`` (``pending_gpu_workloads``), ``owned``
        (``ray_cluster_workloads``) and ``cohorts`` (``cohort_totals``) when already computed."""
        index = WaitingIndex.of(pending_gpu_workloads(snapshot, now) if waiting is None else waiting)
        return cls(snapshot, now, index, owned, cohorts)

    @cached_property
    def owned(self) -> OwnedWorkloads:
        return ray_cluster_workloads(self.snapshot) if self.given_owned is None else self.given_owned

    @cached_property
    def cohorts(self) -> CohortTotals:
        return cohort_totals(self.snapshot.cluster_queues) if self.given_cohorts is None else self.given_cohorts

    def pressure(self, cluster: RayClusterState, wait_seconds: float) -> str:
        """``queue_pressure`` for ``cluster`` from the shared index."""
        return pressure_of(self.waiting, cluster, wait_seconds)

    def headroom(self, cluster: RayClusterState, group: WorkerGroupState) -> tuple[int | None, str]:
        """Most replicas the ClusterQueue can still admit for this group (None: unlimited), and why:
        its own unused nominal quota plus what it may borrow from its cohort (``policy.quota``)."""
        if not cluster.kueue_managed or group.gpus_per_worker <= 0:
            return None, ""
        cq = self.snapshot.cluster_queues.get(cluster.cluster_queue or "")
        if cq is None:
            return 0, f"ClusterQueue of queue {cluster.queue_name!r} unknown"
        flavor = None
        for wl in self.owned.get((cluster.namespace, cluster.name), ()):
            flavor = wl.flavors.get(group.name.lower(), {}).get(GPU_RESOURCE) or flavor
        flavors = [flavor] if flavor else sorted(cq.nominal_gpus)
        headroom = borrowed = 0.0
        for f in flavors:
            h, b = admittable_gpus(cq, f, self.cohorts)
            headroom, borrowed = headroom + h, borrowed + b
        per_replica = group.gpus_per_worker * max(1, group.num_of_hosts)
        why = f"ClusterQueue {cq.name} can admit {headroom:g} more GPUs on {', '.join(flavors)}"
        if borrowed:
            why += f" ({borrowed:g} borrowed from cohort {cq.cohort})"
        return int(headroom // per_replica), why


# ---------------------------------------------------------------------------------------- one group
@dataclass(frozen=True, slots=True)
class _GroupCase:
    """One worker group's inputs for one pass: what every step reads."""

    ctx: ScalingContext
    cluster: RayClusterState
    group: WorkerGroupState
    policy: ScalingDefaults
    demand: tuple[DemandRun, ...]  # Ray's feasible pending demand assigned to this group
    infeasible_demand: tuple[str, ...]  # and the infeasible part reported on it
    pressure: str  # other queues waiting ("" when none)
    pending_gpus: int
    pending_bundles: int
    stale_list: bool  # workersToDelete is set and names only pods that are gone
    reclaim_budget: int = 0  # workers the cluster may still reclaim in this hour

    @classmethod
    def of(cls, ctx: ScalingContext, cluster: RayClusterState, group: WorkerGroupState, policy: ScalingDefaults,
           demand: Sequence[DemandRun], infeasible_demand: tuple[str, ...], pressure: str,
           reclaim_budget: int = 0) -> _GroupCase:
        stale_list = bool(group.workers_to_delete) and not (set(group.workers_to_delete)
                                                             & {w.pod for w in group.workers})
        return cls(ctx, cluster, group, policy, tuple(demand), infeasible_demand, pressure,
                   pending_gpus=int(sum(b.get("GPU", 0.0) * n for b, _, n in demand)),
                   pending_bundles=sum(n for _, _, n in demand),
                   stale_list=stale_list, reclaim_budget=reclaim_budget)

    @property
    def now(self) -> float:
        return self.ctx.now

    @property
    def current(self) -> int:
        return self.group.replicas

    @property
    def gpu_group(self) -> bool:
        return self.group.gpus_per_worker > 0

    @property
    def in_tree(self) -> bool:
        return self.cluster.in_tree_autoscaler

    @property
    def hosts(self) -> int:
        return max(1, self.group.num_of_hosts)

    @property
    def clears_list(self) -> bool:
        """A hold may still clear a workersToDelete whose pods are all gone (we own that list)."""
        return self.stale_list and not self.in_tree

    def decision(
        self, direction: Direction, reason: str, message: str, desired: int, *,
        workers_to_delete: tuple[str, ...] = (), write: WriteMode = "none", new_min: int | None = None,
        new_max: int | None = None, idle_gpus: int = 0, infeasible: tuple[str, ...] = (),
        clear_workers_to_delete: bool = False, reclaimed: tuple[str, ...] = (),
    ) -> GroupDecision:
        return GroupDecision(
            namespace=self.cluster.namespace, cluster=self.cluster.name, group=self.group.name, direction=direction,
            reason=reason, message=message[:1024], current=self.current, desired=desired,
            min_replicas=self.group.min_replicas, max_replicas=self.group.max_replicas,
            workers_to_delete=workers_to_delete, write=write, new_min=new_min, new_max=new_max, idle_gpus=idle_gpus,
            pending_gpus=self.pending_gpus, infeasible=infeasible, clear_workers_to_delete=clear_workers_to_delete,
            resource_version=self.cluster.resource_version, reclaimed=reclaimed,
        )

    def hold(self, step: Step, *, may_clear: bool = False) -> GroupDecision:
        """No change, for ``step``'s reason.  The only write a hold may carry (``may_clear``) clears a
        workersToDelete whose pods are all gone."""
        clear = may_clear and self.clears_list
        return self.decision("hold", step.reason, step.message, self.current, clear_workers_to_delete=clear,
                             write="replicas" if clear else "none")


@dataclass(frozen=True, slots=True)
class _Workers:
    """What the group's workers say this pass (idleness, starting and never-made replicas)."""

    window: float  # idle window in force (the pressured one while others wait)
    idle_since: Mapping[str, float]  # pod -> first seen idle, for the next pass
    removable: tuple[RayWorker, ...]  # idle for the window, idlest first
    idle_gpus: int
    cap: Mapping[str, float]  # one worker's Ray resources
    need: int  # new workers the pending demand needs
    starting: int  # workers asked for and not Running and ready yet
    unmade: int  # replicas asked for whose pods do not exist
    add_workers: int  # workers to add: need less those already on the way
    # reclaim-idle-actors while Ray demand for the group queues: workers to delete by name and launch
    # afresh (GPU under the threshold for the reclaim window, past the grace period, within budget)
    replaceable: tuple[RayWorker, ...] = ()
    hold_left: float = 0.0  # seconds left of the down-after-up hold
    held_back: str = ""  # why reclaimable workers were kept (budget, down-after-up hold)


# 1. guards ---------------------------------------------------------------------------------------
def _guards(case: _GroupCase) -> Step:
    """Can we touch the group at all?  A reason means: hold, write nothing."""
    cluster, group, current = case.cluster, case.group, case.current
    if cluster.suspended:
        return Step(current, R.CLUSTER_SUSPENDED, "the RayCluster is suspended; nothing to scale")
    if cluster.kueue_managed and not cluster.elastic:
        return Step(current, R.NOT_SCALABLE_UNDER_KUEUE,
                    f"managed by Kueue (queue {cluster.queue_name}) and not elastic: a replica change would make "
                    "Kueue suspend and requeue it; set kueue.x-k8s.io/elastic-job: \"true\" to allow scaling")
    if group.workers_to_delete and not case.stale_list and not case.in_tree:
        left = sorted(set(group.workers_to_delete) & {w.pod for w in group.workers})
        return Step(current, R.WAITING_FOR_WORKER_DELETION,
                    f"waiting for the operator to delete {len(left)} worker(s): {', '.join(left[:10])}")
    return Step(current, "", "")


# 2. signal freshness -----------------------------------------------------------------------------
def _signal_freshness(case: _GroupCase) -> Step:
    """Are the inputs fresh?  A reason means: hold (no scale-down on incomplete data), idle timers reset."""
    current, now = case.current, case.now
    sig = case.cluster.demand_signal
    if sig is None or sig.is_stale(now):
        age = sig.age(now) if sig else None
        return Step(current, R.RAY_SIGNAL_STALE,
                    "Ray demand signal " + ("missing" if age is None else f"{age:.0f}s old") + "; holding at "
                    f"{current} (no scale-down on incomplete data)")
    if case.gpu_group and case.ctx.snapshot.gpu_signal_stale():
        return Step(current, R.GPU_SIGNAL_STALE, f"GPU signal stale; holding at {current}")
    return Step(current, "", "")


# 3. recommendation -------------------------------------------------------------------------------
def _observe(case: _GroupCase, h: GroupHistory) -> _Workers:
    group, policy, in_tree, now = case.group, case.policy, case.in_tree, case.now
    window = policy.pressured_idle_window_seconds if case.pressure else policy.idle_window_seconds
    # idle-actor reclaim (opt-in): only where queuepilot names the pods to delete (in-tree off).
    # While pending Ray demand of the cluster could run on this group's workers, a reclaimed worker is
    # replaced (deleted by name, a fresh one launched for the queue); otherwise it simply goes.
    reclaim = policy.reclaim_idle_actors and case.gpu_group and not in_tree
    cap = _capacity(group)
    queued = reclaim and _demand_fits_group(case.cluster, group, cap)
    since, removable = idle_workers(group, policy, h.idle_since, window, now, reclaim=reclaim,
                                    actor_window=policy.reclaim_window_seconds, grace=policy.reclaim_grace_seconds)
    hold_left = h.launch_hold(policy, now)
    held_back = ""
    replaceable: list[RayWorker] = []
    # replicas already asked for whose pods do not exist yet (KubeRay could not create them: quota,
    # no free GPU) are in flight like starting ones: asking again would ratchet replicas up to
    # maxReplicas, and a scale-down computed from such a replicas value would still lie above the
    # pods that exist, so the operator would delete none of workersToDelete (one-host groups where
    # queuepilot writes replicas; with the in-tree autoscaler the gap is Ray's own scale-up)
    unmade = (max(0, case.current - sum(1 for w in group.workers if not w.deleting))
              if case.hosts == 1 and not in_tree else 0)
    if queued:
        # replace: any worker (idle actor or empty) whose GPU stayed under the threshold for the reclaim
        # window, past the grace period; not while replicas asked for have no pod (KubeRay could not
        # make the replacement either), not in multi-host groups
        removable = []
        if case.hosts == 1 and unmade == 0:
            replaceable = [w for w in group.workers if w.pod in since and now - since[w.pod] >= policy.reclaim_window_seconds
                           and _old_enough(w, policy.reclaim_grace_seconds, now)]
            replaceable.sort(key=lambda w: (w.gpu_utilization or 0.0, since[w.pod], w.pod))
    elif reclaim:
        # plain scale-down: the workers holding Ray work count against the budget
        held = [w for w in removable if w.ray_busy is True]
        if len(held) > case.reclaim_budget:
            drop = {w.pod for w in held[case.reclaim_budget:]}
            removable = [w for w in removable if w.pod not in drop]
            held_back = (f"{len(drop)} worker(s) with idle Ray actors kept: reclaim budget of "
                         f"{policy.reclaim_budget_per_hour}/h used")
    if len(replaceable) > case.reclaim_budget:
        held_back = (f"{len(replaceable) - case.reclaim_budget} idle worker(s) not replaced: reclaim budget of "
                     f"{policy.reclaim_budget_per_hour}/h used")
        replaceable = replaceable[: case.reclaim_budget]
    if replaceable and hold_left > 0:
        held_back = (f"{len(replaceable)} idle worker(s) not replaced yet: workers were launched "
                     f"{policy.down_after_up_seconds - hold_left:.0f}s ago (down-after-up "
                     f"{policy.down_after_up_seconds:g}s)")
        replaceable = []
    idle_gpus = sum(w.gpus or group.gpus_per_worker for w in (*removable, *replaceable)) if case.gpu_group else 0
    idle_since = frozen_map(since)
    need = workers_needed(case.demand, cap) if case.demand else 0
    starting = sum(1 for w in group.workers if not w.deleting and (w.phase != "Running" or not w.ready))
    return _Workers(window=window, idle_since=idle_since, removable=tuple(removable), idle_gpus=idle_gpus,
                    cap=cap, need=need, starting=starting, unmade=unmade,
                    add_workers=max(0, need - starting - unmade), replaceable=tuple(replaceable),
                    hold_left=hold_left, held_back=held_back)


def _recommend(case: _GroupCase, ws: _Workers) -> Step:
    """The HPA "calculate" step: replicas for the pending demand, or without the idle workers."""
    current = case.current
    if ws.add_workers > 0:
        step = Step(current + math.ceil(ws.add_workers / case.hosts), R.PENDING_DEMAND,
                    f"{case.pending_bundles} pending Ray bundle(s) ({case.pending_gpus} GPUs) need {ws.need} "
                    f"worker(s) of {_shape_text(ws.cap)}; {ws.starting} starting")
        if ws.replaceable:
            return Step(step.value, R.IDLE_WORKERS_REPLACED, f"{step.message}; {_replace_text(case, ws)}")
        return step if not ws.held_back else Step(step.value, step.reason, f"{step.message}; {ws.held_back}")
    if ws.replaceable:  # (only when every replica has its pod: ws.unmade == 0)
        return Step(current, R.IDLE_WORKERS_REPLACED,
                    f"{case.pending_bundles} pending Ray bundle(s) ({case.pending_gpus} GPUs) queued; "
                    + _replace_text(case, ws))
    if ws.removable and case.hosts == 1:
        return _idle_step(case, ws)
    # keep the unmade replicas pending demand still needs; drop the rest (they would start idle)
    raw = current - max(0, ws.unmade - max(0, ws.need - ws.starting))
    if case.infeasible_demand:
        return Step(raw, R.INFEASIBLE_DEMAND, "no feasible pending demand; " + "; ".join(case.infeasible_demand))
    msg = "no pending demand and no worker idle for the window"
    if raw < current:
        msg = (f"{current - raw} replica(s) never got a pod and no pending demand needs them; "
               f"replicas follow the {current - ws.unmade} worker(s) that exist")
    return Step(raw, R.WITHIN_TARGET, msg)


def _idle_step(case: _GroupCase, ws: _Workers) -> Step:
    """Without the removable idle workers; with ``keep_spare_for_target`` and without queue pressure
    the utilization target is a floor."""
    current, policy, pressure, removable = case.current, case.policy, case.pressure, ws.removable
    raw = current - ws.unmade - len(removable)
    reason = R.IDLE_WORKERS_QUEUE_PRESSURE if pressure else R.IDLE_WORKERS
    source = ""
    if case.gpu_group:
        source = utilization_source(case.ctx.snapshot, case.cluster.namespace, removable)
        use, threshold = (f"GPU {source}" if source else "GPU use"), policy.idle_gpu_utilization
    else:
        use, threshold = "CPU use", policy.idle_cpu_utilization
    msg = (f"{len(removable)} worker(s) idle ({use} under {threshold:.0%}, no Ray work) "
           f"for {ws.window / 60:g}m" + (f" while {pressure}" if pressure else ""))
    held = [w.pod for w in removable if w.ray_busy is True]
    if held:
        gpu = f"GPU {source}" if source else "the GPU"
        reason = R.IDLE_ACTORS_RECLAIMED
        msg += (f"; {len(held)} of them hold Ray actors/tasks with {gpu} under "
                f"{policy.idle_gpu_utilization:.0%} for {policy.reclaim_window_seconds / 60:g}m "
                f"(reclaim-idle-actors: their actors are killed): {', '.join(held[:10])}")
    if ws.held_back:
        msg += f"; {ws.held_back}"
    if not pressure and policy.keep_spare_for_target:
        gpu_source = utilization_source(case.ctx.snapshot, case.cluster.namespace,
                                        case.group.workers) if case.gpu_group else ""
        floor, detail = _utilization_floor(case.group, policy, current - ws.unmade, gpu_source)
        if floor > raw:
            raw = min(current - ws.unmade, floor)
            reason = R.KEPT_FOR_UTILIZATION_TARGET
            msg += f"; keeping {raw} for the utilization target ({detail})"
    return Step(raw, reason, msg)


def _replace_text(case: _GroupCase, ws: _Workers) -> str:
    policy = case.policy
    source = utilization_source(case.ctx.snapshot, case.cluster.namespace, ws.replaceable)
    gpu = f"GPU {source}" if source else "GPU"
    held = [w.pod for w in ws.replaceable if w.ray_busy is True]
    text = (f"replacing {len(ws.replaceable)} worker(s) whose {gpu} stayed under {policy.idle_gpu_utilization:.0%} "
            f"for {policy.reclaim_window_seconds / 60:g}m with fresh ones for the queued work "
            f"(reclaim-idle-actors): {', '.join(w.pod for w in ws.replaceable[:10])}")
    if held:
        text += f"; {len(held)} of them hold Ray actors/tasks, which are killed: {', '.join(held[:10])}"
    return text + (f"; {ws.held_back}" if ws.held_back else "")


# 4. headroom -------------------------------------------------------------------------------------
def _quota_headroom(case: _GroupCase, raw: int) -> Step:
    """Kueue elastic clusters: never ask for more than the ClusterQueue can admit."""
    if raw > case.current:
        room, why = case.ctx.headroom(case.cluster, case.group)
        if room is not None and raw > case.current + room:
            return Step(case.current + room, R.QUOTA_HEADROOM_LIMIT, why)
    return Step(raw, "", "")


def _unmet(case: _GroupCase, wanted: int, allowed: Step, ws: _Workers) -> tuple[str, ...]:
    """What stays unmet, for ``GroupDecision.infeasible``: the infeasible demand, replicas beyond the
    quota headroom, replicas beyond maxReplicas."""
    out = list(case.infeasible_demand)
    if allowed.reason:
        out.append(f"{wanted - allowed.value} replica(s) wanted beyond quota headroom ({allowed.message})")
    hi = case.group.max_replicas
    if allowed.value > hi and ws.add_workers > 0:
        out.append(f"{allowed.value - max(case.current, hi)} more replica(s) wanted, group at maxReplicas {hi}")
    return tuple(out)


# 5. behaviour normalisation ----------------------------------------------------------------------
_IDLE_REMOVAL = frozenset({R.IDLE_WORKERS, R.IDLE_WORKERS_QUEUE_PRESSURE, R.IDLE_ACTORS_RECLAIMED,
                           R.KEPT_FOR_UTILIZATION_TARGET})


def _behaviour(case: _GroupCase, h: GroupHistory, raw: int, reason: str) -> Step:
    """``behavior.normalize``: stabilization, step limits, [min, max].  The scale-down stabilization
    window smooths recommendations; it does not hold back the removal of workers idle for their
    window (``reason`` is an idle-removal reason), which their own window already debounces.  While
    others wait, the scale-down window is at most the pressured idle window (else the 300 s default
    would outlast it)."""
    policy = case.policy
    down: ScalingRules = policy.scale_down
    if reason in _IDLE_REMOVAL and raw < case.current:
        down = replace(down, stabilization_window_seconds=0)
    elif case.pressure and down.stabilization_window_seconds > policy.pressured_idle_window_seconds:
        down = replace(down, stabilization_window_seconds=int(policy.pressured_idle_window_seconds))
    g = case.group
    norm = normalize(raw, case.current, g.min_replicas, g.max_replicas, h.recommendations, h.scale_events,
                     policy.scale_up, down, case.now)
    return Step(norm.replicas, norm.reason, norm.message)


def _down_after_up(case: _GroupCase, ws: _Workers, final: int) -> Step:
    """No scale-down within down-after-up of a launch in this group (a scale-up or a replacement we
    wrote): the new workers get the time to start and take work before anything goes."""
    if final < case.current and ws.hold_left > 0:
        policy = case.policy
        return Step(case.current, R.RECENT_SCALE_UP,
                    f"workers were launched {policy.down_after_up_seconds - ws.hold_left:.0f}s ago: no scale-down "
                    f"for {policy.down_after_up_seconds:g}s after a launch (next in {ws.hold_left:.0f}s)")
    return Step(final, "", "")


# 6. write plan -----------------------------------------------------------------------------------
def _write_replicas(case: _GroupCase, ws: _Workers, h: GroupHistory, final: int, reason: str, msg: str,
                    infeasible: tuple[str, ...]) -> tuple[GroupDecision, GroupHistory]:
    """In-tree autoscaler off: write ``replicas`` and name the idlest removable pods in workersToDelete."""
    current = case.current
    direction: Direction = "up" if final > current else "down" if final < current else "hold"
    to_delete: tuple[str, ...] = ()
    removed: tuple[RayWorker, ...] = ()
    if final < current:
        removed = ws.removable[: current - ws.unmade - final]
    elif ws.replaceable:
        removed = ws.replaceable  # deleted by name; replicas kept, so KubeRay launches fresh ones
        reason = R.IDLE_WORKERS_REPLACED
    to_delete = tuple(w.pod for w in removed)
    reclaimed = tuple(w.pod for w in removed if w.ray_busy is True)
    changed = final != current
    if changed:
        h = h.scaled(case.now, final - current)
    if final > current or (to_delete and final >= current):
        h = replace(h, last_launch=case.now)
    if case.policy.reclaim_idle_actors and (reclaimed or (to_delete and final >= current)):
        # the budget counts every worker reclaimed: those holding Ray work, and every replacement
        n = len(to_delete) if final >= current else len(reclaimed)
        h = replace(h, reclaims=(*h.reclaims, *([case.now] * n)))
    if not changed and not to_delete and case.stale_list:
        reason, msg = R.WORKERS_DELETED, f"the pods in workersToDelete are gone; clearing it ({msg})"
    verb = {"up": "scale up", "down": "scale down", "hold": "replace" if to_delete else "hold"}[direction]
    text = f"{verb} {current} -> {final}: {msg}" + (f"; deleting {', '.join(to_delete)}" if to_delete else "")
    write: WriteMode = "replicas" if changed or case.stale_list or to_delete else "none"
    return case.decision(direction, reason, text, final, workers_to_delete=to_delete,
                         write=write, idle_gpus=ws.idle_gpus, infeasible=infeasible,
                         clear_workers_to_delete=case.stale_list and not to_delete, reclaimed=reclaimed), h


def _write_max(case: _GroupCase, ws: _Workers, h: GroupHistory, final: int, reason: str, msg: str,
               infeasible: tuple[str, ...]) -> tuple[GroupDecision, GroupHistory]:
    """In-tree autoscaler on: steer ``maxReplicas`` only (lowered to shed idle workers, restored to the
    user's value afterwards, capped by quota headroom); Ray's autoscaler owns ``replicas``."""
    current, lo, hi = case.current, case.group.min_replicas, case.group.max_replicas
    direction: Direction = "up" if final > current else "down" if final < current else "hold"
    target_max = h.user_max if h.user_max is not None else hi
    if final < current:
        target_max = final
    room, why = case.ctx.headroom(case.cluster, case.group)
    if room is not None:
        target_max = min(target_max, current + room)
    target_max = max(target_max, lo)
    if target_max == hi:
        return case.decision(direction if direction != "down" else "hold", reason,
                             f"maxReplicas stays {hi} (Ray's autoscaler owns replicas, currently {current}): {msg}",
                             current, idle_gpus=ws.idle_gpus, infeasible=infeasible), h
    h = replace(h, written_max=target_max)
    if final < current:
        h = h.scaled(case.now, final - current)
    text = (f"maxReplicas {hi} -> {target_max} (Ray's autoscaler owns replicas, currently {current}): {msg}"
            + (f"; {why}" if why and room is not None and target_max == current + room else ""))
    return case.decision("down" if target_max < current else direction, reason, text, min(final, target_max),
                         write="min_max", new_min=lo, new_max=target_max, idle_gpus=ws.idle_gpus,
                         infeasible=infeasible), h


def _decide_group(case: _GroupCase, h: GroupHistory) -> tuple[GroupDecision, GroupHistory]:
    """The named steps in order: guards -> signal freshness -> recommendation -> headroom ->
    behaviour normalisation -> write plan.  Each step's reason, when it has one, becomes the
    decision's reason and its message is appended to the explanation."""
    h = h.pruned(case.policy, case.now)
    if case.in_tree:
        h = h.seeing_max(case.group.max_replicas)
    guard = _guards(case)
    if guard.reason:
        return case.hold(guard), h
    fresh = _signal_freshness(case)
    if fresh.reason:
        return case.hold(fresh, may_clear=True), replace(h, idle_since=frozen_map())
    ws = _observe(case, h)
    raw, reason, msg = _recommend(case, ws)
    capped = _quota_headroom(case, raw)
    infeasible = _unmet(case, raw, capped, ws)
    if capped.reason:
        raw, reason, msg = capped.value, capped.reason, f"{msg}; {capped.message}"
    final, why, more = _behaviour(case, h, raw, reason)
    if why:
        reason, msg = why, f"{msg}; {more}"
    final, why, more = _down_after_up(case, ws, final)
    if why:
        reason, msg = why, f"{msg}; {more}"
    h = replace(h, idle_since=ws.idle_since, recommendations=(*h.recommendations, (case.now, raw)))
    write = _write_max if case.in_tree else _write_replicas
    return write(case, ws, h, final, reason, msg, infeasible)


_NO_HISTORY = GroupHistory()  # a group's history before its first pass (immutable, so one serves all)

def decide_scaling(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    defaults: ScalingDefaults,
    history: Mapping[str, GroupHistory],
    now: float,
    *,
    waiting: Sequence[Waiting] | None = None,
    owned: OwnedWorkloads | None = None,
    cohorts: CohortTotals | None = None,
    context: ScalingContext | None = None,
) -> ScalingResult:
    """One decision per worker group of an opted-in RayCluster (none otherwise); pure, deterministic.

    ``history`` maps group name -> ``GroupHistory`` from the previous pass (empty at first); the
    returned history replaces it (groups no longer present are dropped).  ``context``: the pass's
    ``ScalingContext.build(snapshot, now)``, shared by all clusters (built here when None, from
    ``waiting`` = ``pending_gpu_workloads(snapshot, now)``, ``owned`` = ``ray_cluster_workloads(snapshot)``
    and ``cohorts`` = ``cohort_totals(snapshot.cluster_queues)`` where given).
    """
    if not cluster.opted_in:
        return ScalingResult(decisions=(), history=frozen_map(), warnings=())
    if context is None:
        context = ScalingContext.build(snapshot, now, waiting=waiting, owned=owned, cohorts=cohorts)
    elif context.snapshot is not snapshot or context.now != now:
        raise ValueError("decide_scaling: the context was built for another snapshot or time")
    policy, warnings = policy_from_annotations(cluster.annotations, defaults)
    pressure = context.pressure(cluster, policy.queue_pressure_wait_seconds)
    demand, infeasible = assign_demand(cluster)
    decisions = []
    new_hist: dict[str, GroupHistory] = {}
    # the reclaim budget is the cluster's: every group's reclaims of the last hour count
    budget = max(0, policy.reclaim_budget_per_hour - sum(h.reclaims_in_period(now) for h in history.values()))
    for group in cluster.groups:
        # unscoped infeasible demand is reported once, on the first group
        mine = tuple(infeasible.get(group.name, ())) + (tuple(infeasible.get(None, ())) if group is cluster.groups[0]
                                                        else ())
        case = _GroupCase.of(context, cluster, group, policy, demand.get(group.name, []), mine, pressure,
                             reclaim_budget=budget)
        old = history.get(group.name, _NO_HISTORY)
        d, h = _decide_group(case, old)
        budget = max(0, budget - (h.reclaims_in_period(now) - old.reclaims_in_period(now)))
        decisions.append(d)
        new_hist[group.name] = h
    return ScalingResult(decisions=tuple(decisions), history=frozen_map(new_hist), warnings=warnings)


def demand_summary(demand: Sequence[RayDemand]) -> int:
    """Total GPUs in Ray's pending demand (for metrics)."""
    return int(sum(d.shape.get("GPU", 0.0) * d.count for d in demand if not d.infeasible))
