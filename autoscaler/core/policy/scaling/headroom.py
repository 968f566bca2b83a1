"""What the decisions for every RayCluster of one snapshot share (``ScalingContext``): who waits
(queue pressure), the Workloads each RayCluster owns and the cohorts' quota (quota headroom of elastic
Kueue clusters)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from autoscaler.core.policy.pressure import WaitingIndex, pending_gpu_workloads, pressure_of
from autoscaler.core.policy.quota import CohortTotals, admittable_gpus, cohort_totals
from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    ClusterSnapshot,
    RayClusterState,
    WorkerGroupState,
    WorkloadState,
    frozen_map,
)

OwnedWorkloads = Mapping[tuple[str, str], Sequence[WorkloadState]]  # (namespace, RayCluster) -> Workloads


def ray_cluster_workloads(snapshot: ClusterSnapshot) -> Mapping[tuple[str, str], tuple[WorkloadState, ...]]:
    """(namespace, RayCluster name) -> the Workloads it owns, in snapshot order."""
    out: dict[tuple[str, str], list[WorkloadState]] = {}
    for wl in snapshot.workloads.values():
        if wl.owner_kind == "RayCluster":
            out.setdefault((wl.namespace, wl.owner_name), []).append(wl)
    return frozen_map({k: tuple(v) for k, v in out.items()})


@dataclass(frozen=True)
class ScalingContext:
    """What the decisions for every RayCluster of one snapshot share; built once per pass
    (``ScalingContext.build``) and handed to ``decide_scaling(..., context=)`` for each cluster.

    ``waiting``: the pending GPU workloads with their pressure index (queue pressure).  ``owned``
    (the Workloads each RayCluster owns) and ``cohorts`` (the cohorts' quota totals) serve the quota
    headroom of elastic Kueue clusters; each is computed when first asked.
    """

    snapshot: ClusterSnapshot
    now: float
    waiting: WaitingIndex

    @classmethod
    def build(cls, snapshot: ClusterSnapshot, now: float) -> ScalingContext:
        return cls(snapshot, now, pending_gpu_workloads(snapshot, now))

    @cached_property
    def owned(self) -> OwnedWorkloads:
        return ray_cluster_workloads(self.snapshot)

    @cached_property
    def cohorts(self) -> CohortTotals:
        return cohort_totals(self.snapshot.cluster_queues)

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
