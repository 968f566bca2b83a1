"""Build one immutable ``ClusterSnapshot`` from the cached views and the signals (a pure function).

``build_snapshot(objects, gpu, ray, now, config)`` does no I/O and reads no clock: the controller,
the demo and the tests call it with what they hold.  The joins it makes:

- ResourceFlavor -> Nodes: a node belongs to a flavor when its labels contain all of the flavor's
  ``spec.nodeLabels`` (an empty ``nodeLabels`` matches every node, as in Kueue);
- Node -> requested GPUs/CPU/memory: the sum over non-terminal pods bound to it; GPUs are the max
  of that and the GPUs the exporter reports allocated on the node (covers pods the controller does
  not watch);
- Node -> GPUs: the GPU signal's GPUs whose ``Hostname`` is the node name;
- Workload / RayCluster -> ClusterQueue: ``status.admission.clusterQueue``, else through the
  LocalQueue named by ``spec.queueName`` / the ``kueue.x-k8s.io/queue-name`` label;
- RayCluster -> workers: pods labelled ``ray.io/cluster=<name>``, ``ray.io/node-type=worker``,
  grouped by ``ray.io/group``; per-worker GPU utilization from the GPU signal joined by pod; Ray's
  node view (busy, CPU and memory utilization) joined by pod name, else by pod IP.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from autoscaler.cluster.views import PodView, RayClusterView
from autoscaler.core.snapshot import (
    QUEUE_NAME_LABEL,
    AdmissionCheckObj,
    ClusterQueueState,
    ClusterSnapshot,
    FlavorState,
    GpuState,
    LocalQueueState,
    NodeState,
    RayClusterState,
    RayDemand,
    RayWorker,
    SignalStatus,
    WorkloadState,
)
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayObservation

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class ClusterObjects:
    """The cached views of every watched resource, keyed as the caches key them ("ns/name" or "name")."""

    workloads: Mapping[str, WorkloadState] = field(default_factory=dict)
    cluster_queues: Mapping[str, ClusterQueueState] = field(default_factory=dict)
    local_queues: Mapping[str, LocalQueueState] = field(default_factory=dict)
    flavors: Mapping[str, FlavorState] = field(default_factory=dict)
    admission_checks: Mapping[str, AdmissionCheckObj] = field(default_factory=dict)
    ray_clusters: Mapping[str, RayClusterView] = field(default_factory=dict)
    nodes: Mapping[str, NodeState] = field(default_factory=dict)
    pods: Mapping[str, PodView] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class BuildConfig:
    gpu_stale_seconds: float = 120.0
    ray_stale_seconds: float = 120.0
    watch_stale_seconds: float = 300.0


def _label_match(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _resolve_cq(local_queues: Mapping[str, LocalQueueState], namespace: str, lq: str | None) -> str | None:
    if not lq:
        return None
    q = local_queues.get(f"{namespace}/{lq}")
    return q.cluster_queue if q else None


def _nodes(
    nodes: Mapping[str, NodeState], pods: Mapping[str, PodView], gpus_by_node: Mapping[str, list[GpuState]]
) -> dict[str, NodeState]:
    req: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
    for p in pods.values():
        if p.node and not p.terminal:
            r = req[p.node]
            r[0] += p.gpu_requests
            r[1] += p.cpu_requests
            r[2] += p.memory_requests
    out: dict[str, NodeState] = {}
    for name, n in nodes.items():
        gpus = tuple(gpus_by_node.get(name, ()))
        g, c, m = req.get(name, (0, 0.0, 0.0))
        allocated_by_exporter = sum(1 for x in gpus if x.pod is not None)
        out[name] = dataclasses.replace(
            n,
            gpu_requested=max(int(g), allocated_by_exporter),
            cpu_requested=c,
            memory_requested=m,
            gpus=gpus,
        )
    return out


def _flavors(flavors: Mapping[str, FlavorState], nodes: Mapping[str, NodeState]) -> dict[str, FlavorState]:
    ordered = sorted(nodes.values(), key=lambda n: n.name)
    return {
        name: dataclasses.replace(
            f, node_names=tuple(n.name for n in ordered if _label_match(n.labels, f.node_labels))
        )
        for name, f in flavors.items()
    }


def _ray_cluster(
    view: RayClusterView,
    workers_by_group: Mapping[str, list[PodView]],
    util_by_pod: Mapping[tuple[str, str], float],
    obs: RayObservation | None,
    local_queues: Mapping[str, LocalQueueState],
    ray_stale: float,
) -> RayClusterState:
    rc = view.state
    nodes_by_pod: dict[str, Any] = {}
    nodes_by_ip: dict[str, Any] = {}
    status = obs.status if obs else None
    for info in getattr(status, "nodes", ()) or ():
        if getattr(info, "pod_name", None):
            nodes_by_pod[info.pod_name] = info
        if getattr(info, "node_ip", None):
            nodes_by_ip[info.node_ip] = info
    groups = []
    for g in rc.groups:
        workers = []
        for p in sorted(workers_by_group.get(g.name, ()), key=lambda p: p.name):
            info = nodes_by_pod.get(p.name) or (nodes_by_ip.get(p.ip) if p.ip else None)
            workers.append(
                RayWorker(
                    pod=p.name,
                    node=p.node,
                    phase=p.phase,
                    ready=p.ready,
                    deleting=p.deleting,
                    created_at=p.created_at,
                    gpus=p.gpu_requests or g.gpus_per_worker,
                    gpu_utilization=util_by_pod.get((p.namespace, p.name)),
                    cpu_utilization=getattr(info, "cpu_utilization", None),
                    memory_utilization=getattr(info, "memory_utilization", None),
                    ray_busy=getattr(info, "busy", None),
                )
            )
        groups.append(dataclasses.replace(g, workers=tuple(workers)) if workers else g)
    demand: tuple[RayDemand, ...] = tuple(getattr(status, "demand", ()) or ())
    return dataclasses.replace(
        rc,
        groups=tuple(groups),
        demand=demand,
        demand_signal=SignalStatus(f"ray/{rc.namespace}/{rc.name}", obs.observed_at if obs else None, ray_stale),
        cluster_queue=_resolve_cq(local_queues, rc.namespace, rc.labels.get(QUEUE_NAME_LABEL)),
    )


def build_snapshot(
    objects: ClusterObjects,
    gpu: GpuReading,
    ray: Mapping[str, RayObservation],
    now: float,
    config: BuildConfig = BuildConfig(),
    watch_observed: Mapping[str, float | None] = _EMPTY,
) -> ClusterSnapshot:
    """One ``ClusterSnapshot`` at ``now``.

    ``ray`` is keyed "ns/name" like ``objects.ray_clusters``; ``watch_observed`` maps a watched
    resource to when its cache was last known current (it becomes signal ``watch/<resource>``).
    """
    gpus_by_node: dict[str, list[GpuState]] = defaultdict(list)
    util_acc: dict[tuple[str, str], list[float]] = defaultdict(list)
    for g in gpu.gpus:
        gpus_by_node[g.node].append(g)
        if g.pod is not None and g.utilization is not None:
            util_acc[(g.pod.namespace, g.pod.name)].append(g.utilization)
    util_by_pod = {k: sum(v) / len(v) for k, v in util_acc.items()}

    nodes = _nodes(objects.nodes, objects.pods, gpus_by_node)
    flavors = _flavors(objects.flavors, nodes)

    workloads: dict[str, WorkloadState] = {}
    for key, w in objects.workloads.items():
        if w.cluster_queue is None:
            cq = _resolve_cq(objects.local_queues, w.namespace, w.local_queue)
            if cq is not None:
                w = dataclasses.replace(w, cluster_queue=cq)
        workloads[key] = w

    workers: dict[tuple[str, str], dict[str, list[PodView]]] = defaultdict(lambda: defaultdict(list))
    for p in objects.pods.values():
        if p.ray_cluster and p.ray_node_type == "worker" and p.ray_group and not p.terminal:
            workers[(p.namespace, p.ray_cluster)][p.ray_group].append(p)
    ray_clusters = {
        key: _ray_cluster(
            v,
            workers.get((v.state.namespace, v.state.name), {}),
            util_by_pod,
            ray.get(key),
            objects.local_queues,
            config.ray_stale_seconds,
        )
        for key, v in objects.ray_clusters.items()
    }

    signals: dict[str, SignalStatus] = {"gpu": SignalStatus("gpu", gpu.observed_at, config.gpu_stale_seconds)}
    for rc in ray_clusters.values():
        if rc.demand_signal is not None:
            signals[rc.demand_signal.name] = rc.demand_signal
    for resource, observed in watch_observed.items():
        name = f"watch/{resource}"
        signals[name] = SignalStatus(name, observed, config.watch_stale_seconds)

    return ClusterSnapshot(
        taken_at=now,
        nodes=MappingProxyType(nodes),
        flavors=MappingProxyType(flavors),
        cluster_queues=MappingProxyType(dict(objects.cluster_queues)),
        local_queues=MappingProxyType(dict(objects.local_queues)),
        workloads=MappingProxyType(workloads),
        admission_checks=MappingProxyType(dict(objects.admission_checks)),
        ray_clusters=MappingProxyType(ray_clusters),
        signals=MappingProxyType(signals),
    )
