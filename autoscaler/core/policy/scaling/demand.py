"""Ray's pending demand, assigned to the worker groups that can hold it.

Bundles Ray did not mark INFEASIBLE go to the group Ray named, else to the smallest worker that fits
(CPU-only groups first for bundles without GPUs); bundles no worker can hold, and those Ray marks
INFEASIBLE, are reported as infeasible, never turned into a scale-up.
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.core.policy.packing import Bundle, shape_text
from autoscaler.core.snapshot import RayClusterState, WorkerGroupState

DemandRun = tuple[Bundle, bool, int]  # (bundle shape, STRICT_SPREAD, how many)

CHECKED = ("GPU", "CPU", "memory")


def capacity(g: WorkerGroupState) -> dict[str, float]:
    """One worker's Ray resources; CPU/memory left out when unknown (0) so they are not checked."""
    cap: dict[str, float] = {"GPU": float(g.gpus_per_worker)}
    if g.cpu_per_worker > 0:
        cap["CPU"] = g.cpu_per_worker
    if g.memory_per_worker > 0:
        cap["memory"] = g.memory_per_worker
    cap.update({k: float(v) for k, v in g.ray_resources.items()})
    return cap


def fits(shape: Bundle, cap: Mapping[str, float]) -> bool:
    for k, v in shape.items():
        if v <= 0:
            continue
        if k == "GPU" or k in cap:
            if v > cap.get(k, 0.0) + 1e-9:
                return False
        elif k not in CHECKED and not k.startswith(("node:", "accelerator_type:", "object_store")):
            return False  # a custom resource no worker of this group advertises
    return True


def assign_demand(
    cluster: RayClusterState,
) -> tuple[dict[str, list[DemandRun]], dict[str | None, list[str]]]:
    """Group name -> [(bundle, strict_spread, count)] for Ray's feasible pending demand; and the
    infeasible part, by the group Ray named (None: any group)."""
    per_group: dict[str, list[DemandRun]] = {g.name: [] for g in cluster.groups}
    infeasible: dict[str | None, list[str]] = {}
    caps = {g.name: capacity(g) for g in cluster.groups}
    for d in cluster.demand:
        n = max(0, d.count)
        if d.infeasible:
            infeasible.setdefault(d.group, []).append(f"{n} x {shape_text(d.shape)} ({d.kind}) infeasible per Ray")
            continue
        cands = [g for g in cluster.groups if (d.group is None or g.name == d.group) and fits(d.shape, caps[g.name])]
        if not cands:
            where = f"group {d.group}" if d.group else "any worker group"
            infeasible.setdefault(d.group, []).append(f"{n} x {shape_text(d.shape)} ({d.kind}) fits no worker of {where}")
            continue
        cands.sort(key=lambda g: (caps[g.name].get("GPU", 0), caps[g.name].get("CPU", 0),
                                  caps[g.name].get("memory", 0), g.name))
        if n:
            per_group[cands[0].name].append((d.shape, d.strategy == "STRICT_SPREAD", n))
    return per_group, infeasible


def demand_fits_group(cluster: RayClusterState, group: WorkerGroupState, cap: Mapping[str, float]) -> bool:
    """Whether any feasible pending Ray demand of the cluster could run on a worker of ``group`` (one
    worker's resources: ``cap``)."""
    return any(d.count > 0 and not d.infeasible and (d.group is None or d.group == group.name) and fits(d.shape, cap)
               for d in cluster.demand)
