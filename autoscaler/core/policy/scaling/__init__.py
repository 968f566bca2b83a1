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
     While pending Ray demand of the cluster fits the group none goes (the message says how many
     were kept); with ``reclaim_replace`` such workers (idle actor or empty) are replaced: named in
     ``workersToDelete`` with replicas kept (plus what the queue needs), so KubeRay launches fresh
     ones -> ``IdleWorkersReplaced``.  At most
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
   history records (a scale-up or a replacement we wrote) -> ``RecentScaleUp``.  Last, the time
   windows in force (the RayCluster's ``queuepilot.io/schedule`` and its ClusterQueue's
   ``scaling.cluster_queue_schedules``, ``policy.schedule``): at least their min (within maxReplicas
   and the quota headroom) -> ``ScheduledMinReplicas``, no scale-up past their max and no unmade
   replicas above it -> ``ScheduledMaxReplicas``; a window never removes a worker that is not idle,
   and leaving one removes nothing by itself (the idle path does).  The windows in force are named in
   the message.
6. **Write plan**: in-tree autoscaler off -> ``write="replicas"`` with ``workers_to_delete`` naming the
   idlest removable pods (lowest utilization, longest idle); in-tree autoscaler on -> ``write=
   "min_max"``: ``maxReplicas`` is lowered to shed idle workers (Ray's autoscaler then removes
   the extra workers) and restored to the user's value afterwards, capped by quota headroom on
   elastic Kueue clusters (and by a time window's max, never under the workers that stay);
   ``minReplicas`` is raised only to a time window's min and restored afterwards (Ray scales up for
   demand itself, and a raised min would keep workers Ray considers idle).  A ``workersToDelete`` list whose pods are
   all gone is cleared (``clear_workers_to_delete``); while some still exist the group holds
   (``WaitingForWorkerDeletion``).  After a failed write the caller rolls the history back with
   ``GroupHistory.rollback``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.packing import workers_needed
from autoscaler.core.policy.pressure import pending_gpu_workloads, queue_pressure, waiting_candidates
from autoscaler.core.policy.scaling.case import GroupCase
from autoscaler.core.policy.scaling.decision import Direction, GroupDecision, ScalingResult, Step, WriteMode
from autoscaler.core.policy.scaling.demand import assign_demand
from autoscaler.core.policy.scaling.headroom import ScalingContext, ray_cluster_workloads
from autoscaler.core.policy.scaling.history import RECLAIM_BUDGET_PERIOD, GroupHistory
from autoscaler.core.policy.scaling.idle import idle_workers, utilization_source
from autoscaler.core.policy.scaling.steps import decide_group
from autoscaler.core.policy.schedule import Schedule, WindowBounds, in_force
from autoscaler.core.snapshot import ClusterSnapshot, RayClusterState, RayDemand, frozen_map

__all__ = [
    "RECLAIM_BUDGET_PERIOD",
    "Direction",
    "GroupDecision",
    "GroupHistory",
    "ScalingContext",
    "ScalingDefaults",
    "ScalingResult",
    "Step",
    "WriteMode",
    "assign_demand",
    "decide_scaling",
    "demand_summary",
    "idle_workers",
    "pending_gpu_workloads",
    "queue_pressure",
    "ray_cluster_workloads",
    "utilization_source",
    "waiting_candidates",
    "workers_needed",
]


def decide_scaling(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    defaults: ScalingDefaults,
    history: Mapping[str, GroupHistory],
    now: float,
    *,
    context: ScalingContext | None = None,
) -> ScalingResult:
    """One decision per worker group of an opted-in RayCluster (none otherwise); pure, deterministic.

    ``history`` maps group name -> ``GroupHistory`` from the previous pass (empty at first); the
    returned history replaces it (groups no longer present are dropped).  ``context``: the pass's
    ``ScalingContext.build(snapshot, now)``, shared by all clusters of the pass (built here when None).
    """
    if not cluster.opted_in:
        return ScalingResult(decisions=(), history=frozen_map(), warnings=())
    if context is None:
        context = ScalingContext.build(snapshot, now)
    elif context.snapshot is not snapshot or context.now != now:
        raise ValueError("decide_scaling: the context was built for another snapshot or time")
    parsed = cluster.policy_annotations
    assert parsed is not None  # (RayClusterState parses its annotations when it is made)
    policy, warnings = parsed.apply(defaults)
    # the time windows in force: the RayCluster's own and its ClusterQueue's (both apply)
    schedules: list[tuple[str, Schedule]] = []
    if parsed.schedule is not None:
        schedules.append(("RayCluster annotation", parsed.schedule))
    cq_schedule = policy.cluster_queue_schedules.get(cluster.cluster_queue or "")
    if cq_schedule is not None:
        schedules.append((f"ClusterQueue {cluster.cluster_queue}", cq_schedule))
    windows = in_force(schedules, now) if schedules else ()
    pressure = context.pressure(cluster, policy.queue_pressure_wait_seconds)
    demand, infeasible = assign_demand(cluster)
    decisions = []
    new_hist: dict[str, GroupHistory] = {}
    # the reclaim budget is the cluster's: every group's reclaims of the last hour count
    budget = max(0, policy.reclaim_budget_per_hour - sum(h.reclaims_in_period(now) for h in history.values()))
    for index, group in enumerate(cluster.groups):
        # unscoped infeasible demand is reported once, on the first group
        mine = tuple(infeasible.get(group.name, ())) + (tuple(infeasible.get(None, ())) if group is cluster.groups[0]
                                                        else ())
        case = GroupCase.of(context, cluster, group, policy, demand.get(group.name, []), mine, pressure,
                            reclaim_budget=budget, index=index,
                            window=WindowBounds.of(windows, group.name) if windows else None)
        old = history.get(group.name, GroupHistory())
        d, h = decide_group(case, old)
        budget = max(0, budget - (h.reclaims_in_period(now) - old.reclaims_in_period(now)))
        decisions.append(d)
        new_hist[group.name] = h
    return ScalingResult(decisions=tuple(decisions), history=frozen_map(new_hist), warnings=warnings)


def demand_summary(demand: Sequence[RayDemand]) -> int:
    """Total GPUs in Ray's pending demand (for metrics)."""
    return int(sum(d.shape.get("GPU", 0.0) * d.count for d in demand if not d.infeasible))
