"""A small scripted cluster, as raw objects, and its views (shared by the builder, collector and e2e tests).

Two flavors: ``h100`` (nodes h1, h2: 8 GPUs each) and ``a100`` (node a1: 8 GPUs, not Ready).
ClusterQueues ``cq-a`` (h100: 16, a100: 8) and ``cq-b`` (h100: 8); LocalQueues ``team-a/lq-a`` ->
cq-a, ``team-b/lq-b`` -> cq-b.  Pods: 4 GPUs on h1 (a Ray worker of team-a/rc), 2 on h2 (a batch pod).
Workloads (created at NOW - age): pending ones in both queues, one admitted, one finished.
GPU reading (``gpu_reading``): the Ray worker's 4 GPUs busy, GPU 7 of h2 unhealthy; ``build`` makes the
snapshot of it all (with Ray statuses from ``FakeRayStatus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.cluster import views
from autoscaler.cluster.source import ClusterObjects
from autoscaler.controller.snapshot_builder import BuildConfig, build_snapshot
from autoscaler.core.snapshot import GpuState, PodKey
from autoscaler.signals.gpu import GpuReading
from tests.support import objects as o

NOW = 1_000_000.0


def raw_objects(now: float = NOW) -> list[dict[str, Any]]:
    return [
        o.resource_flavor("h100", {"gpu": "h100"}),
        o.resource_flavor("a100", {"gpu": "a100"}),
        o.cluster_queue("cq-a", {"h100": 16, "a100": 8}, checks=("gpu-capacity",)),
        o.cluster_queue("cq-b", {"h100": 8}),
        o.local_queue("lq-a", "team-a", "cq-a"),
        o.local_queue("lq-b", "team-b", "cq-b"),
        o.admission_check("gpu-capacity"),
        o.node("h1", 8, {"gpu": "h100"}),
        o.node("h2", 8, {"gpu": "h100"}),
        o.node("a1", 8, {"gpu": "a100"}, ready=False),
        o.node("cpu1", 0, {}),
        o.ray_worker_pod("rc", "gpu", "rc-gpu-worker-1", "team-a", node="h1", gpus=4, ip="10.0.1.1"),
        o.pod("batch-1", "team-b", node="h2", gpus=2),
        o.pod("done-1", "team-b", node="h2", gpus=8, phase="Succeeded"),
        # pending: 2 in team-a (300 s and 100 s old), one requeued (T0 = Requeued ltt)
        o.workload("wl-a1", "team-a", "lq-a", created=now - 300, pod_sets=[("main", 2, 8)]),
        o.workload("wl-a2", "team-a", "lq-a", created=now - 100, pod_sets=[("main", 1, 4)],
                   conditions=[o.condition("QuotaReserved", True, now - 50)],
                   admission=o.admission("cq-a", [("main", "a100", 1)]),
                   checks=[{"name": "gpu-capacity", "state": "Pending", "lastTransitionTime": o.ts(now - 50),
                            "message": ""}]),
        o.workload("wl-b1", "team-b", "lq-b", created=now - 5000, pod_sets=[("main", 1, 8)],
                   conditions=[o.condition("Requeued", True, now - 60, "BackoffFinished")]),
        # admitted: waited 40 s from creation
        o.workload("wl-b2", "team-b", "lq-b", created=now - 1000, pod_sets=[("main", 1, 2)],
                   conditions=[o.condition("QuotaReserved", True, now - 970),
                               o.condition("Admitted", True, now - 960)],
                   admission=o.admission("cq-b", [("main", "h100", 1)])),
        o.workload("wl-b3", "team-b", "lq-b", created=now - 9000,
                   conditions=[o.condition("Finished", True, now - 10, "Succeeded")]),
        o.ray_cluster("rc", "team-a", groups=[o.ray_group("gpu", 1, 0, 4, gpus=4)],
                      annotations={"queuepilot.io/autoscale": "true"}),
    ]


PARSE = {
    "Workload": ("workloads", views.workload_view),
    "ClusterQueue": ("cluster_queues", views.cluster_queue_view),
    "LocalQueue": ("local_queues", views.local_queue_view),
    "ResourceFlavor": ("flavors", views.resource_flavor_view),
    "AdmissionCheck": ("admission_checks", views.admission_check_view),
    "RayCluster": ("ray_clusters", views.ray_cluster_view),
    "Node": ("nodes", views.node_view),
    "Pod": ("pods", views.pod_view),
}


def cluster_objects(raw: list[dict[str, Any]]) -> ClusterObjects:
    out: dict[str, dict[str, Any]] = {v[0]: {} for v in PARSE.values()}
    for obj in raw:
        field, parse = PARSE[obj["kind"]]
        out[field][views.object_key(obj)] = parse(obj)
    return ClusterObjects(**out)


# ------------------------------------------------------------------ signals and the built snapshot
@dataclass
class FakeRayNode:
    node_ip: str
    pod_name: str | None
    is_head: bool = False
    busy: bool = False
    idle_seconds: float = 0.0
    cpu_utilization: float | None = None
    memory_utilization: float | None = None


@dataclass
class FakeRayStatus:
    demand: tuple
    nodes: tuple
    observed_at: float = 0.0


def gpu_reading(now: float) -> GpuReading:
    gpus = [GpuState(f"GPU-h1-{i}", "h1", i, utilization=0.1 * (i + 1), pod=PodKey("team-a", "rc-gpu-worker-1"))
            for i in range(4)]
    gpus += [GpuState(f"GPU-h1-{i}", "h1", i) for i in range(4, 8)]
    gpus += [GpuState(f"GPU-h2-{i}", "h2", i) for i in range(7)]
    gpus.append(GpuState("GPU-h2-7", "h2", 7, healthy=False, health_reason="XidFatal"))
    return GpuReading(tuple(gpus), observed_at=now - 30)


def build(now=NOW, ray=None, gpu=None, config=BuildConfig(gpu_stale_seconds=60, ray_stale_seconds=60)):
    return build_snapshot(
        cluster_objects(raw_objects(now)),
        gpu if gpu is not None else gpu_reading(now),
        ray or {},
        now,
        config,
        watch_observed={"workloads": now - 5, "pods": None},
    )
