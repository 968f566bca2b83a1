"""Hand-built ``ClusterSnapshot`` pieces for the pure policy tests (no I/O)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    AdmissionCheckObj,
    CheckState,
    ClusterQueueState,
    ClusterSnapshot,
    FlavorState,
    GpuState,
    LocalQueueState,
    NodeState,
    PodSetSpec,
    RayClusterState,
    RayDemand,
    RayWorker,
    SignalStatus,
    WorkerGroupState,
    WorkloadState,
    frozen_map,
)

NOW = 10_000.0
CHECK = "gpu-capacity"
OURS = "queuepilot.io/gpu-capacity"


def node(name: str, gpus: int = 8, requested: int = 0, unhealthy: int = 0, flavor: str = "a100",
         ready: bool = True, schedulable: bool = True, cpu: float = 0.0, cpu_requested: float = 0.0) -> NodeState:
    gs = tuple(GpuState(uuid=f"{name}-{i}", node=name, index=i, healthy=i >= unhealthy) for i in range(gpus))
    return NodeState(name=name, labels=frozen_map({"flavor": flavor}), ready=ready, schedulable=schedulable,
                     gpu_allocatable=gpus, gpu_requested=requested, gpus=gs, cpu_allocatable=cpu,
                     cpu_requested=cpu_requested, memory_allocatable=0.0)


def workload(name: str, pod_sets: Iterable[tuple[str, int, int]] = (("main", 1, 8),), flavor: str = "a100",
             ns: str = "team-a", cq: str = "cq-a", priority: int = 0, reserved_at: float | None = 9_000.0,
             state: str = "Pending", check: str = CHECK, evicted: bool = False, finished: bool = False,
             quota_reserved: bool = True, uid: str | None = None, flavors: Mapping[str, str] | None = None,
             created: float = 8_000.0, admitted: bool = False, owner_kind: str = "Job", owner_name: str = "",
             ) -> WorkloadState:
    sets = tuple(PodSetSpec(n, c, frozen_map({GPU_RESOURCE: g} if g else {"cpu": 1.0})) for n, c, g in pod_sets)
    fl = {n: frozen_map({GPU_RESOURCE: (flavors or {}).get(n, flavor)}) for n, _, g in pod_sets if g}
    return WorkloadState(
        namespace=ns, name=name, uid=uid or f"uid-{name}", resource_version="1", local_queue="lq", cluster_queue=cq,
        created_at=created, pod_sets=sets, priority=priority, quota_reserved=quota_reserved,
        quota_reserved_at=reserved_at if quota_reserved else None, evicted=evicted, finished=finished,
        admitted=admitted, flavors=frozen_map(fl), checks=(CheckState(check, state, 9_000.0),),
        owner_kind=owner_kind, owner_name=owner_name,
    )


def snapshot(nodes: Iterable[NodeState] = (), workloads: Iterable[WorkloadState] = (), *, now: float = NOW,
             gpu_age: float | None = 5.0, flavors: Iterable[str] = ("a100",), cqs: Iterable[ClusterQueueState] = (),
             ray: Iterable[RayClusterState] = (), controller: str = OURS) -> ClusterSnapshot:
    nodes = list(nodes)
    fl = {f: FlavorState(f, node_labels=frozen_map({"flavor": f}),
                         node_names=tuple(n.name for n in nodes if n.labels.get("flavor") == f)) for f in flavors}
    gpu = SignalStatus("gpu", None if gpu_age is None else now - gpu_age, 60.0)
    cq_map = {c.name: c for c in cqs}
    return ClusterSnapshot(
        taken_at=now,
        nodes=frozen_map({n.name: n for n in nodes}),
        flavors=frozen_map(fl),
        cluster_queues=frozen_map(cq_map),
        local_queues=frozen_map({"team-a/lq": LocalQueueState("team-a", "lq", "cq-a")}),
        workloads=frozen_map({w.key: w for w in workloads}),
        admission_checks=frozen_map({CHECK: AdmissionCheckObj(CHECK, controller, True),
                                     "other": AdmissionCheckObj("other", "example.com/other", True)}),
        ray_clusters=frozen_map({r.key: r for r in ray}),
        signals=frozen_map({"gpu": gpu}),
    )


# ------------------------------------------------------------------------------------------- Ray
def worker(pod: str, util: float | None = 0.9, busy: bool | None = True, gpus: int = 1, phase: str = "Running",
           ready: bool = True, cpu: float | None = None, mem: float | None = None,
           running: int | None = None) -> RayWorker:
    """``running``: tasks/actor methods Ray reports executing on it (0 with ``busy``: idle actors only)."""
    return RayWorker(pod=pod, node="n", phase=phase, ready=ready, gpus=gpus, gpu_utilization=util,
                     cpu_utilization=cpu, memory_utilization=mem, ray_busy=busy, ray_running_tasks=running)


def group(name: str = "gpu", workers: Iterable[RayWorker] = (), replicas: int | None = None, lo: int = 0, hi: int = 10,
          gpus: int = 1, to_delete: tuple[str, ...] = (), cpu: float = 8.0, hosts: int = 1) -> WorkerGroupState:
    ws = tuple(workers)
    return WorkerGroupState(name=name, replicas=len(ws) if replicas is None else replicas, min_replicas=lo,
                            max_replicas=hi, gpus_per_worker=gpus, cpu_per_worker=cpu, workers=ws,
                            workers_to_delete=to_delete, num_of_hosts=hosts)


def ray_cluster(groups: Iterable[WorkerGroupState], *, name: str = "rc", ns: str = "team-a",
                demand: Iterable[RayDemand] = (), ray_age: float | None = 5.0, now: float = NOW,
                annotations: Mapping[str, str] | None = None, labels: Mapping[str, str] | None = None,
                in_tree: bool = False, cq: str | None = None, opted_in: bool = True,
                suspended: bool = False) -> RayClusterState:
    ann = {"queuepilot.io/autoscale": "true"} if opted_in else {}
    ann.update(annotations or {})
    return RayClusterState(
        namespace=ns, name=name, uid=f"uid-{name}", resource_version="7", annotations=frozen_map(ann),
        labels=frozen_map(labels or {}), in_tree_autoscaler=in_tree, suspended=suspended, groups=tuple(groups),
        demand=tuple(demand), cluster_queue=cq,
        demand_signal=SignalStatus(f"ray/{ns}/{name}", None if ray_age is None else now - ray_age, 60.0),
    )


def gpu_demand(gpus: float, count: int = 1, infeasible: bool = False, group: str | None = None,
               cpu: float = 0.0, strategy: str = "") -> RayDemand:
    shape = {"GPU": gpus}
    if cpu:
        shape["CPU"] = cpu
    return RayDemand(kind="task", shape=frozen_map(shape), count=count, infeasible=infeasible, group=group,
                     strategy=strategy)
