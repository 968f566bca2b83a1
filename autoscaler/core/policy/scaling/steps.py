"""The named steps of one worker group's decision, in order, and the fold that chains them.

Each step returns a ``Step`` (the replicas it arrives at, its reason, its message) as
``behavior.normalize``'s steps do.  ``guards`` and ``signal_freshness`` end the ladder with a hold
when they give a reason.  ``recommend`` proposes; the adjustments after it (quota headroom, then
behaviour normalisation, the down-after-up rule and the time windows) each take the step so far and
are folded by ``fold``: the reason of the last step that changed the value is the decision's reason,
and each such step's message is appended to the explanation (``time_window`` also names the windows
in force when they changed nothing).  ``decide_group`` hands the result to the write plan.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

from autoscaler.core import reasons as R
from autoscaler.core.policy.behavior import ScalingRules, normalize
from autoscaler.core.policy.packing import shape_text
from autoscaler.core.policy.scaling.case import GroupCase, Workers, observe
from autoscaler.core.policy.scaling.decision import GroupDecision, Step
from autoscaler.core.policy.scaling.history import GroupHistory
from autoscaler.core.policy.scaling.idle import utilization_floor, utilization_source
from autoscaler.core.policy.scaling.write_plan import write_max, write_replicas
from autoscaler.core.snapshot import frozen_map

# an adjustment of the recommendation: the step so far in, the step it makes out
Adjust = Callable[[GroupCase, Workers, GroupHistory, Step], Step]


# 1. guards ---------------------------------------------------------------------------------------
def guards(case: GroupCase) -> Step:
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
def signal_freshness(case: GroupCase) -> Step:
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
def recommend(case: GroupCase, ws: Workers) -> Step:
    """The HPA "calculate" step: replicas for the pending demand, or without the idle workers."""
    current = case.current
    if ws.add_workers > 0:
        step = Step(current + math.ceil(ws.add_workers / case.hosts), R.PENDING_DEMAND,
                    f"{case.pending_bundles} pending Ray bundle(s) ({case.pending_gpus} GPUs) need {ws.need} "
                    f"worker(s) of {shape_text(ws.cap)}; {ws.starting} starting")
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
    return Step(raw, R.WITHIN_TARGET, msg + (f"; {ws.held_back}" if ws.held_back else ""))


def _idle_step(case: GroupCase, ws: Workers) -> Step:
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
        floor, detail = utilization_floor(case.group, policy, current - ws.unmade, gpu_source)
        if floor > raw:
            raw = min(current - ws.unmade, floor)
            reason = R.KEPT_FOR_UTILIZATION_TARGET
            msg += f"; keeping {raw} for the utilization target ({detail})"
    return Step(raw, reason, msg)


def _replace_text(case: GroupCase, ws: Workers) -> str:
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
def quota_headroom(case: GroupCase, ws: Workers, h: GroupHistory, step: Step) -> Step:
    """Kueue elastic clusters: never ask for more than the ClusterQueue can admit."""
    raw = step.value
    if raw > case.current:
        room, why = case.ctx.headroom(case.cluster, case.group)
        if room is not None and raw > case.current + room:
            return Step(case.current + room, R.QUOTA_HEADROOM_LIMIT, why)
    return Step(raw, "", "")


def unmet(case: GroupCase, ws: Workers, h: GroupHistory, wanted: Step) -> tuple[str, ...]:
    """What stays unmet, for ``GroupDecision.infeasible``: the infeasible demand, replicas beyond the
    quota headroom, replicas beyond maxReplicas."""
    allowed = quota_headroom(case, ws, h, wanted)
    out = list(case.infeasible_demand)
    if allowed.reason:
        out.append(f"{wanted.value - allowed.value} replica(s) wanted beyond quota headroom ({allowed.message})")
    hi = case.group.max_replicas
    if allowed.value > hi and ws.add_workers > 0:
        out.append(f"{allowed.value - max(case.current, hi)} more replica(s) wanted, group at maxReplicas {hi}")
    b = case.window
    if b is not None:
        w_lo, w_hi = case.window_limits(h)
        kept = max(w_hi or 0, case.current - ws.unmade)
        if w_hi is not None and b.max_by is not None and ws.add_workers > 0 and allowed.value > kept:
            out.append(f"{allowed.value - kept} more replica(s) wanted, time window \"{b.max_by.window.label}\" "
                       f"allows at most {w_hi}")
        if w_lo is not None and b.min_by is not None and w_lo > case.current:
            room, why = case.ctx.headroom(case.cluster, case.group)
            if room is not None and w_lo > case.current + room:
                out.append(f"{w_lo - case.current - room} replica(s) time window \"{b.min_by.window.label}\" "
                           f"wants beyond quota headroom ({why})")
    return tuple(out)


# 5. behaviour normalisation ----------------------------------------------------------------------
_IDLE_REMOVAL = frozenset({R.IDLE_WORKERS, R.IDLE_WORKERS_QUEUE_PRESSURE, R.IDLE_ACTORS_RECLAIMED,
                           R.KEPT_FOR_UTILIZATION_TARGET})


def behaviour(case: GroupCase, ws: Workers, h: GroupHistory, step: Step) -> Step:
    """``behavior.normalize``: stabilization, step limits, [min, max].  The scale-down stabilization
    window smooths recommendations; it does not hold back the removal of workers idle for their
    window (``step.reason`` is an idle-removal reason), which their own window already debounces.  While
    others wait, the scale-down window is at most the pressured idle window (else the 300 s default
    would outlast it)."""
    policy, raw = case.policy, step.value
    down: ScalingRules = policy.scale_down
    if step.reason in _IDLE_REMOVAL and raw < case.current:
        down = replace(down, stabilization_window_seconds=0)
    elif case.pressure and down.stabilization_window_seconds > policy.pressured_idle_window_seconds:
        down = replace(down, stabilization_window_seconds=int(policy.pressured_idle_window_seconds))
    g = case.group
    norm = normalize(raw, case.current, g.min_replicas, g.max_replicas, h.recommendations, h.scale_events,
                     policy.scale_up, down, case.now)
    return Step(norm.replicas, norm.reason, norm.message)


def down_after_up(case: GroupCase, ws: Workers, h: GroupHistory, step: Step) -> Step:
    """No scale-down within down-after-up of a launch in this group (a scale-up or a replacement we
    wrote): the new workers get the time to start and take work before anything goes."""
    final = step.value
    if final < case.current and ws.hold_left > 0:
        policy = case.policy
        return Step(case.current, R.RECENT_SCALE_UP,
                    f"workers were launched {policy.down_after_up_seconds - ws.hold_left:.0f}s ago: no scale-down "
                    f"for {policy.down_after_up_seconds:g}s after a launch (next in {ws.hold_left:.0f}s)")
    return Step(final, "", "")


# 6. time windows ---------------------------------------------------------------------------------
def time_window(case: GroupCase, ws: Workers, h: GroupHistory, step: Step) -> Step:
    """The time windows in force (``queuepilot.io/schedule``, the ClusterQueue's schedule) bound the
    group, combined with the demand that decided so far:

    - ``max``: no scale-up past it, and replicas whose pods were never made above it are dropped
      (``ScheduledMaxReplicas``).  A window never removes a worker that is not idle: the workers above
      its max go through the idle path as they become empty (the Event says how many are left above);
    - ``min``: at least that many at once, as the HPA raises replicas to minReplicas, within maxReplicas
      and, on elastic Kueue clusters, the quota headroom (``ScheduledMinReplicas``).  Leaving the window
      removes nothing by itself: the workers above the group's own bounds go when they are idle for the
      idle window, through the behaviour rules, like any idle worker.

    The windows in force are named in the message whether or not they moved the value."""
    b = case.window
    if b is None:
        return Step(step.value, "", "")
    lo, hi = case.window_limits(h)
    value, current = step.value, case.current
    existing = current - ws.unmade  # the workers that exist (in-tree autoscaler: every replica)
    reason, notes = "", []
    if lo is not None and value < lo:
        target, note = lo, ""
        if lo > current:
            room, why = case.ctx.headroom(case.cluster, case.group)
            if room is not None and lo > current + room:
                target, note = max(value, current + room), f" (quota headroom: {why})"
        if target > value:
            value, reason = target, R.SCHEDULED_MIN_REPLICAS
        notes.append(f"at least {lo} worker(s){note}")
    if hi is not None:
        capped = max(hi, min(value, existing))  # never below the workers that exist: the idle path removes
        if capped < value:
            value, reason = capped, R.SCHEDULED_MAX_REPLICAS
        if reason == R.SCHEDULED_MAX_REPLICAS or existing > hi:
            notes.append(f"at most {hi} worker(s)" + (f"; the {existing - hi} worker(s) above it go as they "
                                                       "become idle" if existing > hi else ""))
    text = b.describe() + (": " + "; ".join(notes) if notes else " in force")
    return Step(value, reason or step.reason, text)


# the fold -----------------------------------------------------------------------------------------
def fold(first: Step, adjustments: Sequence[Adjust], case: GroupCase, ws: Workers, h: GroupHistory) -> Step:
    """``first`` through each adjustment in turn: the value is the last one's; a step with a reason
    makes it the reason and appends its message."""
    value, reason, message = first
    for adjust in adjustments:
        step = adjust(case, ws, h, Step(value, reason, message))
        value = step.value
        if step.reason:
            reason, message = step.reason, f"{message}; {step.message}"
    return Step(value, reason, message)


def decide_group(case: GroupCase, h: GroupHistory) -> tuple[GroupDecision, GroupHistory]:
    """guards -> signal freshness -> recommendation -> quota headroom -> behaviour normalisation,
    down-after-up and time windows -> write plan; returns the decision and the group's history for the
    next pass."""
    h = h.pruned(case.policy, case.now)
    if case.in_tree:
        h = h.seeing_max(case.group.max_replicas).seeing_min(case.group.min_replicas)
    guard = guards(case)
    if guard.reason:
        return case.hold(guard), h
    fresh = signal_freshness(case)
    if fresh.reason:
        return case.hold(fresh, may_clear=True), replace(h, idle_since=frozen_map())
    ws = observe(case, h)
    wanted = recommend(case, ws)
    infeasible = unmet(case, ws, h, wanted)
    recommendation = fold(wanted, (quota_headroom,), case, ws, h)
    final = fold(recommendation, (behaviour, down_after_up, time_window), case, ws, h)
    h = replace(h, idle_since=ws.idle_since, recommendations=(*h.recommendations, (case.now, recommendation.value)))
    write = write_max if case.in_tree else write_replicas
    return write(case, ws, h, final, infeasible)
