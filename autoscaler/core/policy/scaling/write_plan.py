"""The write plan of a group's decision: ``replicas`` and ``workersToDelete`` naming the idlest pods
(in-tree autoscaler off), or ``maxReplicas`` (and, in a time window with a min, ``minReplicas``)
steering (in-tree autoscaler on); and what the write leaves in the group's history (scale events, the
launch, reclaims, the min/maxReplicas written)."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.core import reasons as R
from autoscaler.core.policy.scaling.case import GroupCase, Workers
from autoscaler.core.policy.scaling.decision import Direction, GroupDecision, Step, WriteMode
from autoscaler.core.policy.scaling.history import GroupHistory
from autoscaler.core.snapshot import RayWorker


def write_replicas(case: GroupCase, ws: Workers, h: GroupHistory, plan: Step,
                   infeasible: tuple[str, ...]) -> tuple[GroupDecision, GroupHistory]:
    """In-tree autoscaler off: write ``replicas`` and name the idlest removable pods in workersToDelete."""
    final, reason, msg = plan
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


def write_max(case: GroupCase, ws: Workers, h: GroupHistory, plan: Step,
              infeasible: tuple[str, ...]) -> tuple[GroupDecision, GroupHistory]:
    """In-tree autoscaler on: steer ``maxReplicas`` (lowered to shed idle workers, restored to the user's
    value afterwards, capped by quota headroom) and, while a time window sets a min, ``minReplicas``
    (raised to it within the headroom, restored to the user's value after the window); Ray's
    autoscaler owns ``replicas``.  A time window's max caps ``maxReplicas`` no lower than the workers
    that stay (Ray's autoscaler would remove busy workers to meet a lower one)."""
    final, reason, msg = plan
    current, lo, hi = case.current, case.group.min_replicas, case.group.max_replicas
    direction: Direction = "up" if final > current else "down" if final < current else "hold"
    target_max = h.user_max if h.user_max is not None else hi
    if final < current:
        target_max = final
    room, why = case.ctx.headroom(case.cluster, case.group)
    if room is not None:
        target_max = min(target_max, current + room)
    target_min = h.user_min if h.user_min is not None else lo
    w_lo, w_hi = case.window_limits(h)
    if w_hi is not None:
        target_max = min(target_max, max(w_hi, final))
    if w_lo is not None and w_lo > target_min:
        target_min = w_lo if room is None else max(target_min, min(w_lo, current + room))
    target_max = max(target_max, target_min)
    if target_max == hi and target_min == lo:
        return case.decision(direction if direction != "down" else "hold", reason,
                             f"maxReplicas stays {hi} (Ray's autoscaler owns replicas, currently {current}): {msg}",
                             current, idle_gpus=ws.idle_gpus, infeasible=infeasible), h
    h = replace(h, written_max=target_max, written_min=target_min)
    if final < current:
        h = h.scaled(case.now, final - current)
    changes = ([f"maxReplicas {hi} -> {target_max}"] if target_max != hi else []) + (
        [f"minReplicas {lo} -> {target_min}"] if target_min != lo else [])
    text = (f"{', '.join(changes)} (Ray's autoscaler owns replicas, currently {current}): {msg}"
            + (f"; {why}" if why and room is not None and target_max == current + room else ""))
    return case.decision("down" if target_max < current else direction, reason, text,
                         max(target_min, min(final, target_max)), write="min_max", new_min=target_min,
                         new_max=target_max, idle_gpus=ws.idle_gpus, infeasible=infeasible), h
