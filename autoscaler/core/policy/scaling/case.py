"""One worker group's inputs for one pass (``GroupCase``) and what its workers say (``Workers``:
idleness, starting and never-made replicas, what pending demand needs, what may be reclaimed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.packing import workers_needed
from autoscaler.core.policy.scaling.decision import Direction, GroupDecision, Step, WriteMode
from autoscaler.core.policy.scaling.demand import DemandRun, capacity, demand_fits_group
from autoscaler.core.policy.scaling.headroom import ScalingContext
from autoscaler.core.policy.scaling.history import GroupHistory
from autoscaler.core.policy.scaling.idle import idle_workers, old_enough
from autoscaler.core.policy.schedule import WindowBounds
from autoscaler.core.snapshot import RayClusterState, RayWorker, WorkerGroupState, frozen_map


@dataclass(frozen=True, slots=True)
class GroupCase:
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
    index: int = 0  # the group's position in spec.workerGroupSpecs
    window: WindowBounds | None = None  # the time windows in force for this group (None: none)

    @classmethod
    def of(cls, ctx: ScalingContext, cluster: RayClusterState, group: WorkerGroupState, policy: ScalingDefaults,
           demand: Sequence[DemandRun], infeasible_demand: tuple[str, ...], pressure: str,
           reclaim_budget: int = 0, index: int = 0, window: WindowBounds | None = None) -> GroupCase:
        stale_list = bool(group.workers_to_delete) and not (set(group.workers_to_delete)
                                                             & {w.pod for w in group.workers})
        return cls(ctx, cluster, group, policy, tuple(demand), infeasible_demand, pressure,
                   pending_gpus=int(sum(b.get("GPU", 0.0) * n for b, _, n in demand)),
                   pending_bundles=sum(n for _, _, n in demand),
                   stale_list=stale_list, reclaim_budget=reclaim_budget, index=index, window=window)

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

    def window_limits(self, h: GroupHistory) -> tuple[int | None, int | None]:
        """The time windows' (min, max) for this group within its own bounds (None where no window in
        force bounds that side): a min above maxReplicas is maxReplicas, a max under minReplicas is
        minReplicas (KubeRay keeps replicas within them; in the in-tree autoscaler case the user's
        values, not the ones queuepilot wrote).  Where a window's min is above another's max, the max
        won already (``WindowBounds``)."""
        b = self.window
        if b is None:
            return None, None
        lo_spec, hi_spec = self.group.min_replicas, self.group.max_replicas
        if self.in_tree:
            lo_spec = h.user_min if h.user_min is not None else lo_spec
            hi_spec = h.user_max if h.user_max is not None else hi_spec
        hi = None if b.max_workers is None else max(b.max_workers, lo_spec)
        lo = None if b.min_workers is None else min(b.min_workers, hi_spec)
        if lo is not None and hi is not None:
            lo = min(lo, hi)
        return lo, hi

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
            resource_version=self.cluster.resource_version, reclaimed=reclaimed, group_index=self.index,
        )

    def hold(self, step: Step, *, may_clear: bool = False) -> GroupDecision:
        """No change, for ``step``'s reason.  The only write a hold may carry (``may_clear``) clears a
        workersToDelete whose pods are all gone."""
        clear = may_clear and self.clears_list
        return self.decision("hold", step.reason, step.message, self.current, clear_workers_to_delete=clear,
                             write="replicas" if clear else "none")


@dataclass(frozen=True, slots=True)
class Workers:
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


def observe(case: GroupCase, h: GroupHistory) -> Workers:
    group, policy, in_tree, now = case.group, case.policy, case.in_tree, case.now
    window = policy.pressured_idle_window_seconds if case.pressure else policy.idle_window_seconds
    # idle-actor reclaim (opt-in): only where queuepilot names the pods to delete (in-tree off).
    # While pending Ray demand of the cluster could run on this group's workers, none goes; with
    # reclaim-replace on such a worker is replaced (deleted by name, a fresh one launched for the queue).
    reclaim = policy.reclaim_idle_actors and case.gpu_group and not in_tree
    cap = capacity(group)
    queued = reclaim and demand_fits_group(case.cluster, group, cap)
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
                           and old_enough(w, policy.reclaim_grace_seconds, now)]
            replaceable.sort(key=lambda w: (w.gpu_utilization or 0.0, since[w.pod], w.pod))
        if replaceable and not policy.reclaim_replace:
            # reclaim-replace off (the default): they stay until the queue is served; a replacement would
            # move the GPU to wherever the scheduler puts a new pod (the emptiest node under LeastAllocated)
            held_back = (f"{len(replaceable)} idle worker(s) kept while Ray demand for the group queues "
                         "(reclaim-replace off)")
            replaceable = []
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
    return Workers(window=window, idle_since=idle_since, removable=tuple(removable), idle_gpus=idle_gpus,
                    cap=cap, need=need, starting=starting, unmade=unmade,
                    add_workers=max(0, need - starting - unmade), replaceable=tuple(replaceable),
                    hold_left=hold_left, held_back=held_back)
