"""Idle detection of a group's workers: which are empty (or, with idle-actor reclaim, only hold idle
actors), since when, which may go, and the HPA utilization floor."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.snapshot import ClusterSnapshot, PodKey, RayWorker, WorkerGroupState


def util_of(w: RayWorker, gpu_group: bool) -> float | None:
    return w.gpu_utilization if gpu_group else w.cpu_utilization


def idle_now(w: RayWorker, gpu_group: bool, policy: ScalingDefaults, reclaim: bool = False) -> bool:
    """Under the idle threshold and no Ray work on it; with ``reclaim`` (GPU groups), idle actors
    that leave the GPU under the threshold do not count either (``ray_busy`` True with no task or
    actor method running: ``ray_running_tasks == 0``).  A running task never counts, whatever its GPU
    does (an evaluation, a checkpoint, an input stall inside the task); unknown stays busy."""
    if w.deleting or not w.ready or w.phase != "Running":
        return False
    if w.ray_busy is not False and not (reclaim and gpu_group and w.ray_busy is True and w.ray_running_tasks == 0):
        return False
    u = util_of(w, gpu_group)
    threshold = policy.idle_gpu_utilization if gpu_group else policy.idle_cpu_utilization
    return u is not None and u < threshold


def old_enough(w: RayWorker, grace: float | None, now: float) -> bool:
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
        if idle_now(w, gpu_group, policy, reclaim):
            t = idle_since.get(w.pod, now)
            since[w.pod] = t
            empty = w.ray_busy is False or actor_window is None
            need = window if empty or actor_window is None else actor_window
            if now - t >= need and (empty or old_enough(w, grace, now)):
                removable.append(w)
    removable.sort(key=lambda w: (util_of(w, gpu_group) or 0.0, since[w.pod], w.pod))
    return since, removable


def utilization_floor(
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
