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
from collections.abc import Coroutine, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from autoscaler.cluster.source import CacheStats, ClusterObjects, RayClusterView, RayDashboardTarget
from autoscaler.core.snapshot import frozen_map
from autoscaler.signals.ray_parse import RayStatus
from exporter.podresources.client import Allocations
from exporter.sample import PodRef
from simulator.engine import Engine
from simulator.ray import SimRayCluster
from simulator.snapshot import dashboard_target

RESOURCES = ("workloads", "clusterqueues", "localqueues", "resourceflavors", "admissionchecks", "rayclusters",
             "nodes", "pods")
RAY_WORKER_CONTAINER = "ray-worker"
RAYJOB_CONTAINER = "ray-job"


class SimClusterSource:
    """The controller's ``ClusterSource`` over ``engine`` (every view is current: ``observed_at = now``).

    ``annotations``: RayCluster ("ns/name") -> annotations it carries besides the simulator's (a team that
    opted in to a policy with ``queuepilot.io/*``), parsed as the watch cache parses them: once per version
    of the object."""

    def __init__(self, engine: Engine, annotations: Mapping[str, Mapping[str, str]] | None = None) -> None:
        self.engine = engine
        self.annotations = dict(annotations or {})
        self._annotated: dict[str, tuple[RayClusterView, RayClusterView]] = {}  # key -> (engine's view, ours)
        self._synced = asyncio.Event()

    def mark_synced(self) -> None:
        self._synced.set()

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def objects(self) -> ClusterObjects:
        objects = self.engine.snapshots.objects(self.engine.now)
        if not self.annotations:
            return objects
        rays = dict(objects.ray_clusters)
        for key, extra in self.annotations.items():
            view = rays.get(key)
            if view is None:
                continue
            cached = self._annotated.get(key)
            if cached is None or cached[0] is not view:  # a new version of the object
                state = replace(view.state, annotations=frozen_map({**view.state.annotations, **extra}),
                                policy_annotations=None)  # parsed again from the new annotations
                cached = self._annotated[key] = (view, replace(view, state=state))
            rays[key] = cached[1]
        return replace(objects, ray_clusters=rays)

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
        return {f"{rc.namespace}/{rc.name}": dashboard_target(rc) for rc in self.engine.rays.values()}

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
        return self.engine.snapshots.ray_status(rc, self.engine.now)


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
