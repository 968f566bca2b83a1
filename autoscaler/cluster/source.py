"""Where a pass's cluster objects come from: the seam between the watch caches (or a simulated
world) and the snapshot builder.

- ``ClusterObjects``: the typed views of every watched resource, as the caches hold them (the view
  records it carries, ``PodView``, ``RayClusterView`` and ``RayDashboardTarget``, are re-exported
  here so that a source needs this module only);
- ``ClusterSource``: what the controller's pass loop asks of a source; ``WatchSource`` is the
  Kubernetes one (one list-then-watch ``WatchCache`` per resource, each parsing its objects with
  the parser ``PARSERS`` names); the demo's source is a simulated world;
- ``CacheStats``: one resource's cache size and sync state, for the controller's metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from autoscaler.cluster.cache import WatchCache
from autoscaler.cluster.views import (
    PodView,
    RayClusterView,
    RayDashboardTarget,
    admission_check_view,
    cluster_queue_view,
    local_queue_view,
    node_view,
    pod_view,
    ray_cluster_view,
    ray_job_view,
    resource_flavor_view,
    workload_view,
)
from autoscaler.core.snapshot import (
    AdmissionCheckObj,
    ClusterQueueState,
    FlavorState,
    LocalQueueState,
    NodeState,
    RayJobState,
    WorkloadState,
)

__all__ = [
    "PARSERS",
    "CacheStats",
    "ClusterObjects",
    "ClusterSource",
    "PodView",
    "RayClusterView",
    "RayDashboardTarget",
    "WatchSource",
]


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """The cached views of every watched resource, keyed as the caches key them ("ns/name" or "name")."""

    workloads: Mapping[str, WorkloadState] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueueState] = field(default_factory=dict)
    local_queues: Mapping[str, LocalQueueState] = field(default_factory=dict)
    flavors: Mapping[str, FlavorState] = field(default_factory=dict)
    admission_checks: Mapping[str, AdmissionCheckObj] = field(default_factory=dict)
    ray_clusters: Mapping[str, RayClusterView] = field(default_factory=dict)
    ray_jobs: Mapping[str, RayJobState] = field(default_factory=dict)
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    pods: Mapping[str, PodView] = field(default_factory=dict)

    def copied(self) -> ClusterObjects:
        """The same objects in private dicts: what the caches hold now, unchanged by later watch events."""
        return ClusterObjects(**{f: dict(getattr(self, f)) for f in self.__dataclass_fields__})


@dataclass(frozen=True, slots=True)
class CacheStats:
    """One watched resource's cache, for ``queuepilot_cache_objects`` / ``queuepilot_cache_synced``."""

    resource: str
    objects: int
    synced: bool


def _pod(obj: Any) -> Any:
    v = pod_view(obj)
    return None if v.terminal else v


PARSERS: dict[str, Callable[[Any], Any]] = {
    "workloads": workload_view,
    "clusterqueues": cluster_queue_view,
    "localqueues": local_queue_view,
    "resourceflavors": resource_flavor_view,
    "admissionchecks": admission_check_view,
    "rayclusters": ray_cluster_view,
    "rayjobs": ray_job_view,  # its Ray job's status: the stall detector's evidence
    "nodes": node_view,
    "pods": _pod,
    "pods-ray": _pod,
    "pods-kueue": _pod,
}


class ClusterSource(Protocol):
    """Where a pass's cluster objects come from (the watch caches, or a simulated world)."""

    @property
    def synced(self) -> bool:
        """Every resource listed at least once (no pass acts before)."""
        ...

    def objects(self) -> ClusterObjects: ...

    def observed_at(self, now: float) -> Mapping[str, float | None]:
        """Resource -> when its view was last known current (signal ``watch/<resource>``)."""
        ...

    def not_synced(self) -> list[str]: ...

    def stats(self) -> list[CacheStats]: ...

    def ray_targets(self) -> Mapping[str, RayDashboardTarget | None]:
        """RayCluster "ns/name" -> where its Ray demand may be read (None: nowhere).  A target marked
        ``evidence_only`` (a cluster that did not opt in to scaling) is asked only while the stall
        detector needs Ray's view of its workload: the controller decides (``Controller.ray_targets``)."""
        ...

    def runners(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        """(task name, coroutine) to run for the controller's lifetime (the watches)."""
        ...

    async def wait_synced(self) -> None: ...

    def stale(self, now: float) -> list[str]:
        """Watches that have made no progress within their staleness limit ("name (N s)"): /healthz fails."""
        ...


class WatchSource:
    """The Kubernetes ``ClusterSource``: one list-then-watch ``WatchCache`` per watched resource."""

    def __init__(self, caches: Mapping[str, WatchCache[Any]]) -> None:
        self.caches = dict(caches)

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.caches.values())

    def objects(self) -> ClusterObjects:
        c = self.caches
        pods: dict[str, Any] = {}
        for name in ("pods", "pods-ray", "pods-kueue"):
            if name in c:
                pods.update(c[name].items)
        return ClusterObjects(
            workloads=c["workloads"].items,
            cluster_queues=c["clusterqueues"].items,
            local_queues=c["localqueues"].items,
            flavors=c["resourceflavors"].items,
            admission_checks=c["admissionchecks"].items,
            ray_clusters=c["rayclusters"].items,
            ray_jobs=c["rayjobs"].items if "rayjobs" in c else {},
            nodes=c["nodes"].items,
            pods=pods,
        )

    def observed_at(self, now: float) -> dict[str, float | None]:
        return {name: cache.observed_at(now) for name, cache in self.caches.items()}

    def not_synced(self) -> list[str]:
        return [n for n, c in self.caches.items() if not c.synced]

    def stats(self) -> list[CacheStats]:
        return [CacheStats(name, len(c.items), c.synced) for name, c in self.caches.items()]

    def ray_targets(self) -> dict[str, RayDashboardTarget | None]:
        """Each cluster's head (``RayClusterView.head``: opted in, or ``evidence_only``): its running head
        pod's IP from the pod cache (same namespace, ``ray.io/cluster`` + ``ray.io/node-type=head``), else
        its head Service's name."""
        heads: dict[str, str] = {}
        for name in ("pods", "pods-ray"):
            if name in self.caches:
                for p in self.caches[name].items.values():
                    if p.ray_node_type == "head" and p.ray_cluster and p.ip and not p.terminal and not p.deleting:
                        heads[f"{p.namespace}/{p.ray_cluster}"] = p.ip
        out: dict[str, RayDashboardTarget | None] = {}
        for key, view in self.caches["rayclusters"].items.items():
            target = view.head
            if target is not None and key in heads:
                target = dataclasses.replace(target, head_ip=heads[key])
            out[key] = target
        return out

    def runners(self) -> list[tuple[str, Coroutine[Any, Any, None]]]:
        return [(f"watch-{cache.name}", cache.run()) for cache in self.caches.values()]

    async def wait_synced(self) -> None:
        await asyncio.gather(*(c.synced_event.wait() for c in self.caches.values()))

    def stale(self, now: float) -> list[str]:
        return [f"{n} ({c.stale_for(now):.0f} s)" for n, c in self.caches.items() if not c.healthy(now)]


