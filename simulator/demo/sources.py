"""What the demo's real ``Controller`` and real exporters read, served from the simulated world.

- ``SimClusterSource``: the controller's ``ClusterSource`` over the engine (what the watch caches
  hold on a cluster: Workloads, ClusterQueues, LocalQueues, ResourceFlavors, the AdmissionCheck,
  RayClusters, Nodes and Pods, as the views the caches keep); synced once the world is warm.
- ``SimRayClient``: the Ray dashboard client for the controller's ``RaySignals``: each RayCluster's
  pending GPU tasks and its workers' Ray state (busy, CPU use), as the state API reports them.
- ``SimPodResources``: the kubelet PodResources ``List`` for one node's exporter: which pod holds
  which GPU, so the exporter attributes GPUs through its own attribution path (``pod_resources_up``
  is 1 because the attribution really comes from it).

GPU readings take the production path: the controller scrapes the demo's exporters over HTTP
(``ScrapeGpuSignal``) and joins them to the pods by name, as it does in a cluster.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from types import MappingProxyType
from typing import Any

from autoscaler.cluster.views import PodView, RayClusterView, RayDashboardTarget
from autoscaler.controller.collector import CacheStats
from autoscaler.controller.snapshot_builder import ClusterObjects
from autoscaler.core.snapshot import RayDemand
from autoscaler.signals.ray_parse import RayNodeInfo, RayStatus
from exporter.podresources.client import Allocations
from exporter.sample import PodRef
from simulator.engine import Engine
from simulator.ray import SimRayCluster

RESOURCES = ("workloads", "clusterqueues", "localqueues", "resourceflavors", "admissionchecks", "rayclusters",
             "nodes", "pods")
WORKER_CPU = 8.0
WORKER_MEMORY = 64 * 2**30
RAY_WORKER_CONTAINER = "ray-worker"
RAYJOB_CONTAINER = "ray-job"


class SimClusterSource:
    """The controller's ``ClusterSource`` over ``engine`` (every view is current: ``observed_at = now``)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._synced = asyncio.Event()

    def mark_synced(self) -> None:
        self._synced.set()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def objects(self) -> ClusterObjects:
        e = self.engine
        b = e.snapshots
        now = e.now
        workloads = {f"{w.namespace}/{w.name}": b.workload_state(w) for w in e.workloads.values()}
        rays = {}
        for rc in e.rays.values():
            state = b.ray_state(rc, now)
            bare = dataclasses.replace(state, groups=tuple(dataclasses.replace(g, workers=()) for g in state.groups),
                                       demand=(), demand_signal=None, cluster_queue=None)
            rays[state.key] = RayClusterView(bare, self._target(rc))
        return ClusterObjects(
            workloads=workloads,
            cluster_queues=b.cluster_queues(),
            local_queues=b.local_queues,
            flavors=b.flavors,
            admission_checks=b.admission_checks(e.checks_active),
            ray_clusters=rays,
            nodes={n.name: b.node_state(n) for n in e.cluster.nodes},
            pods=self._pods(),
        )

    @staticmethod
    def _target(rc: SimRayCluster) -> RayDashboardTarget:
        return RayDashboardTarget(rc.namespace, rc.name, f"{rc.name}-head-svc")

    def _pods(self) -> dict[str, Any]:
        e = self.engine
        out: dict[str, Any] = {}
        for rc in e.rays.values():
            for w in rc.workers.values():
                pod = f"{rc.namespace}/{w.name}"
                out[pod] = PodView(
                    namespace=rc.namespace, name=w.name, node=e.cluster.node_of(pod), phase="Running",
                    ready=w.ready(e.now), deleting=False, ip=None, created_at=w.created, gpu_requests=1,
                    cpu_requests=WORKER_CPU, memory_requests=WORKER_MEMORY, ray_cluster=rc.name,
                    ray_group=rc.group, ray_node_type="worker",
                )
        for name, start in e.run_start.items():
            w = e.workloads.get(name)
            if w is None:
                continue
            for i in range(w.job.pods):
                pod = f"{w.namespace}/{w.name}-{i}"
                out[pod] = PodView(
                    namespace=w.namespace, name=f"{w.name}-{i}", node=e.cluster.node_of(pod), phase="Running",
                    ready=True, deleting=False, ip=None, created_at=start, gpu_requests=w.job.gpus_per_pod,
                )
        return out

    def observed_at(self, now: float) -> dict[str, float | None]:
        return dict.fromkeys(RESOURCES, now if self.synced else None)

    def not_synced(self) -> list[str]:
        return [] if self.synced else list(RESOURCES)

    def stats(self) -> list[CacheStats]:
        o = self.objects()
        counts = {"workloads": len(o.workloads), "clusterqueues": len(o.cluster_queues),
                  "localqueues": len(o.local_queues), "resourceflavors": len(o.flavors),
                  "admissionchecks": len(o.admission_checks), "rayclusters": len(o.ray_clusters),
                  "nodes": len(o.nodes), "pods": len(o.pods)}
        return [CacheStats(r, counts[r], self.synced) for r in RESOURCES]

    def ray_targets(self) -> dict[str, RayDashboardTarget | None]:
        return {f"{rc.namespace}/{rc.name}": self._target(rc) for rc in self.engine.rays.values()}

    def runners(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return []

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def stale(self, now: float) -> list[str]:
        return []  # the simulated world is read directly: nothing can fall behind


class SimRayClient:
    """``RayClient`` for the controller's ``RaySignals``: the simulated Ray of each RayCluster."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    async def fetch_status(self, target: Any, now: float) -> RayStatus:
        rc = self.engine.find_ray_cluster(target.namespace, target.cluster)
        if rc is None:
            raise LookupError(f"no RayCluster {target.namespace}/{target.cluster}")
        t = self.engine.now
        demand = (RayDemand("task", MappingProxyType({"GPU": 1.0}), count=len(rc.queue)),) if rc.queue else ()
        nodes = []
        for w in sorted(rc.workers.values(), key=lambda x: x.name):
            if not w.ready(t):
                continue  # the raylet has not joined yet
            u = w.util(t)
            used = 1.0 if w.ray_busy() else 0.0
            nodes.append(RayNodeInfo(
                node_id=w.name, node_ip="", pod_name=w.name, is_head=False, alive=True,
                total=MappingProxyType({"GPU": 1.0, "CPU": WORKER_CPU}),
                available=MappingProxyType({"GPU": 1.0 - used, "CPU": WORKER_CPU * (1.0 - used)}),
                busy=w.ray_busy(), idle_seconds=None if w.ray_busy() else max(0.0, t - w.idle_since),
                cpu_utilization=0.05 + 0.5 * u, memory_utilization=None, group=rc.group,
                running_tasks=w.running_tasks(t),
            ))
        return RayStatus(demand=demand, nodes=tuple(nodes), source="state_api", autoscaler_version="v2",
                         observed_at=now)


class SimPodResources:
    """The kubelet PodResources ``List`` of one simulated node, for that node's exporter."""

    def __init__(self, engine: Engine, node: str, uuids: tuple[str, ...]) -> None:
        self.engine = engine
        self.node = node
        self.uuids = uuids

    async def list_allocations(self) -> Allocations:
        node = self.engine.cluster.by_name[self.node]
        by_device: dict[str, PodRef] = {}
        for i, owner in enumerate(node.owner):
            if owner is None or i >= len(self.uuids):
                continue
            ns, _, pod = owner.partition("/")
            by_device[self.uuids[i]] = PodRef(ns, pod, container_of(pod))
        return Allocations(MappingProxyType(by_device))

    async def close(self) -> None:
        return None


def container_of(pod: str) -> str:
    return RAY_WORKER_CONTAINER if f"-{SimRayCluster.group}-" in pod else RAYJOB_CONTAINER
