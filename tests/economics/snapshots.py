"""Hand-built core snapshots for the economics tests (``queuepilot_pod_info``, the recommender's
observations, the gauges): a clock, Workloads, GPUs, RayClusters and the snapshot that holds them."""

from __future__ import annotations

from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    ClusterSnapshot,
    GpuState,
    PodKey,
    PodSetSpec,
    RayClusterState,
    WorkloadState,
    frozen_map,
)

NOW = 1_000_000.0


def wl(ns, name, lq, cq, kind, owner, podsets=("main",), flavor="h100", admitted=True) -> WorkloadState:
    return WorkloadState(
        namespace=ns, name=name, uid=name, resource_version="1", local_queue=lq, cluster_queue=cq,
        created_at=NOW - 100, admitted=admitted,
        pod_sets=tuple(PodSetSpec(p, 1, frozen_map({GPU_RESOURCE: 1})) for p in podsets),
        flavors=frozen_map({p: frozen_map({GPU_RESOURCE: flavor}) for p in podsets}),
        owner_kind=kind, owner_name=owner,
    )


def gpu(node, idx, pod=None, util=None, mem=None) -> GpuState:
    return GpuState(uuid=f"GPU-{node}-{idx}", node=node, index=idx, utilization=util, memory_used_bytes=mem,
                    pod=PodKey(*pod) if pod else None)


def ray_cluster(ns, name, groups, labels=None, cluster_queue=None) -> RayClusterState:
    return RayClusterState(namespace=ns, name=name, uid=name, resource_version="1",
                           labels=frozen_map(labels or {}), groups=tuple(groups), cluster_queue=cluster_queue)


def snapshot(**kw) -> ClusterSnapshot:
    return ClusterSnapshot(taken_at=NOW, **{k: frozen_map(v) for k, v in kw.items()})
