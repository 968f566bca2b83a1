"""The simulated world as the controller sees it, and the snapshot the controller's own builder makes.

``SimSnapshotBuilder`` holds the simulated cluster's API objects as the controller's watch caches
would hold them (``ClusterObjects``: Workloads, ClusterQueues, LocalQueues, the ResourceFlavor, our
AdmissionCheck, each team's RayCluster, the Nodes and the Pods of Ray workers and running RayJobs),
the GPU signal as the exporters report it (``GpuReading``: every GPU's health, utilization and the
pod it is attributed to) and Ray's status of each RayCluster (``RayStatus``: pending demand, each
worker's busy state and running tasks, as the dashboard's state API reports them).  A running RayJob
is its RayJob (``RayJobState``) and the RayCluster it created (labelled with its origin, its pods that
cluster's workers), whose Ray status says what runs and waits on it (``Engine.rayjob_ray_work``).  A snapshot is
``SnapshotBuilder.build`` over those inputs: the controller's own joins (flavor -> nodes, node ->
requests and GPUs, RayCluster -> workers with their GPU utilization and Ray state, queue names ->
ClusterQueues), so every policy the simulator runs reads what the deployed controller would read,
all of it, whoever reads it.  Every signal is fresh (``observed_at = now``).

An object's view is made when the object changes, as a watch cache replaces a view when its object's
resourceVersion moves: Workloads by their version, a RayCluster by its spec's version, a worker's pod
and Ray node by the worker's changes (``WorkerViews``), a node's GPUs when a pod, its health or a
utilization on it moved (the engine says which: ``utilization_changed``, ``SimCluster.watch``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from autoscaler.cluster.source import ClusterObjects, PodView, RayClusterView, RayDashboardTarget
from autoscaler.controller.snapshot_builder import BuildConfig, SnapshotBuilder
from autoscaler.core.policy.ray_evidence import RAY_ORIGIN_KIND_LABEL, RAY_ORIGIN_NAME_LABEL
from autoscaler.core.snapshot import (
    AUTOSCALE_ANNOTATION,
    ELASTIC_JOB_ANNOTATION,
    GPU_RESOURCE,
    QUEUE_NAME_LABEL,
    AdmissionCheckObj,
    CheckState,
    ClusterQueueState,
    ClusterSnapshot,
    FlavorState,
    GpuState,
    LocalQueueState,
    NodeState,
    PodKey,
    PodSetSpec,
    RayClusterState,
    RayDemand,
    RayJobState,
    WorkerGroupState,
    WorkloadState,
    frozen_map,
)
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayObservation
from autoscaler.signals.ray_parse import RayNodeInfo, RayStatus
from simulator.cluster import SimCluster, SimNode
from simulator.kueue import ADMITTED, RESERVED, RUNNING, SimKueue, SimWorkload
from simulator.ray import SimRayCluster, SimWorker, WorkerViews

CHECK_NAME = "gpu-capacity"
CONTROLLER_NAME = "queuepilot.io/gpu-capacity"
FLAVOR_LABEL = "queuepilot.io/sim-flavor"
GPU_MODEL = "NVIDIA A100-SXM4-80GB"
POD_SET = "workers"
SIGNAL_STALE_AFTER_S = 120.0
WORKER_CPU = 8.0
WORKER_MEMORY = 64 * 2**30

# the same for every simulated RayCluster (read-only maps, shared by every snapshot)
RAY_ANNOTATIONS = frozen_map({AUTOSCALE_ANNOTATION: "true", ELASTIC_JOB_ANNOTATION: "true"})
_RAY_LABELS = frozen_map({QUEUE_NAME_LABEL: "default"})
_RAY_RESOURCES = frozen_map({"GPU": 1.0, "CPU": WORKER_CPU})
_WORKER_TOTAL = frozen_map({"GPU": 1.0, "CPU": WORKER_CPU})
_WORKER_HELD = frozen_map({"GPU": 0.0, "CPU": 0.0})
RAYJOB_GROUP = "workers"  # a RayJob's cluster's one worker group (its pods)
_RAYJOB_ANNOTATIONS = frozen_map({})  # a RayJob's cluster is not opted in to scaling


class SimWorld(Protocol):
    """What the builder reads of the simulated world besides the cluster and Kueue (the engine)."""

    now: float
    workloads: Mapping[str, SimWorkload]
    rays: Mapping[str, SimRayCluster]
    run_start: Mapping[str, float]
    checks_active: Mapping[str, bool]

    def rayjob_ray_work(self, w: SimWorkload, start: float) -> tuple[int, int] | None: ...


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One Ray worker as the controller's inputs hold it: its pod, and its node in Ray's status
    (None until its raylet joined)."""

    pod: PodView
    ray_node: RayNodeInfo | None


def pod_key(pod_id: str) -> PodKey:
    ns, _, name = pod_id.partition("/")
    return PodKey(ns, name)


class SimSnapshotBuilder:
    """The controller's inputs over ``world`` and the snapshot built from them (see the module doc).

    ``pod_util``: the GPU signal, each bound pod's GPU utilization by ``"<namespace>/<pod>"`` (the
    exporter's, by the pod a GPU is attributed to; 0 on a free GPU); the engine calls
    ``utilization_changed(node)`` when a pod's value there changes."""

    def __init__(self, world: SimWorld, cluster: SimCluster, kueue: SimKueue, with_check: bool,
                 pod_util: Mapping[str, float]) -> None:
        self.world = world
        self.cluster = cluster
        self.kueue = kueue
        self.with_check = with_check
        self._pod_util = pod_util
        self.builds = 0
        self._builder = SnapshotBuilder(BuildConfig(gpu_stale_seconds=SIGNAL_STALE_AFTER_S,
                                                    ray_stale_seconds=SIGNAL_STALE_AFTER_S))
        self._flavors = frozen_map({
            f: FlavorState(f, frozen_map({FLAVOR_LABEL: f})) for f in cluster.flavors
        })
        self._local_queues = frozen_map({
            f"{q.namespace}/{q.local_queue}": LocalQueueState(q.namespace, q.local_queue, q.name)
            for q in kueue.cqs.values()
        })
        self._nodes = frozen_map({n.name: NodeState(
            name=n.name, labels=frozen_map({FLAVOR_LABEL: n.flavor}), gpu_allocatable=n.gpus,
        ) for n in cluster.nodes})
        self._checks: tuple[tuple[tuple[str, bool], ...], Mapping[str, AdmissionCheckObj]] | None = None
        self._checks_version = 0
        self._workloads: dict[str, tuple[int, WorkloadState]] = {}
        self._rayjob_pods: dict[str, tuple[float, tuple[RayJobState, RayClusterView,
                                                        tuple[tuple[str, PodView], ...]]]] = {}
        self._ray_views: dict[str, tuple[tuple[object, ...], RayClusterView]] = {}
        # a running RayJob's Ray status parts while what it reports is the same (running, waiting)
        self._rayjob_ray: dict[str, tuple[tuple[int, int], tuple[RayNodeInfo, ...], tuple[RayDemand, ...]]] = {}
        self._workers: dict[str, WorkerViews[WorkerView]] = {}
        # the GPU signal: each node's GPUs, made again when a pod, a health or a utilization on it moved
        self._gpus: dict[str, tuple[GpuState, ...]] = {}
        self._changed: set[str] = {n.name for n in cluster.nodes}
        cluster.watch(self._changed)
        self._reading: GpuReading | None = None

    # ---------------------------------------------------------------------------- what changed
    def utilization_changed(self, node: str) -> None:
        """A pod on ``node`` has a new GPU utilization in ``pod_util``: the node's GPUs are read anew."""
        self._changed.add(node)

    def forget(self, w: SimWorkload) -> None:
        """``w`` is gone (finished or deactivated)."""
        self._workloads.pop(f"{w.namespace}/{w.name}", None)
        self._rayjob_pods.pop(w.name, None)
        self._rayjob_ray.pop(w.name, None)

    # ------------------------------------------------------------------------- the watched objects
    def workload_view(self, w: SimWorkload) -> WorkloadState:
        key = f"{w.namespace}/{w.name}"
        cached = self._workloads.get(key)
        if cached is not None and cached[0] == w.version:
            return cached[1]
        reserved = w.state in (RESERVED, ADMITTED, RUNNING)
        checks = (
            (CheckState(CHECK_NAME, w.check_state, w.check_changed_at, w.check_message),) if self.with_check else ()
        )
        state = WorkloadState(
            namespace=w.namespace, name=w.name, uid=w.uid, resource_version=str(w.version),
            local_queue="default", cluster_queue=w.cq, created_at=w.created,
            pod_sets=(PodSetSpec(POD_SET, w.job.pods, frozen_map({GPU_RESOURCE: w.job.gpus_per_pod})),),
            quota_reserved=reserved, quota_reserved_at=w.reserved_at if reserved else None,
            admitted=w.state in (ADMITTED, RUNNING), admitted_at=w.admitted_at,
            requeued_at=w.requeued_at, admission_lost_at=w.admission_lost_at,
            flavors=frozen_map({POD_SET: frozen_map({GPU_RESOURCE: w.flavor})}) if w.flavor else frozen_map(),
            admitted_counts=frozen_map({POD_SET: w.job.pods}) if reserved else frozen_map(),
            # owned by its RayJob (the same name when its owner creates it again: ``job_name``); the
            # RayJob's cluster names it, so the stall detector attributes the pods' GPUs to it as the
            # deployed controller does
            checks=checks, owner_kind="RayJob", owner_name=w.job_name,
            # Kueue's schedulingStats: the deactivations a reactivated Workload keeps (engine ``_on_resubmit``)
            deactivations=w.deactivations,
        )
        self._workloads[key] = (w.version, state)
        return state

    def admission_checks(self) -> Mapping[str, AdmissionCheckObj]:
        """Our AdmissionChecks with their ``Active`` condition (a new resourceVersion when it moves)."""
        key = tuple(sorted(self.world.checks_active.items()))
        if self._checks is None or self._checks[0] != key:
            self._checks_version += 1
            self._checks = (key, frozen_map({
                name: AdmissionCheckObj(name, CONTROLLER_NAME, on, str(self._checks_version)) for name, on in key
            }))
        return self._checks[1]

    def cluster_queues(self) -> dict[str, ClusterQueueState]:
        return {
            q.name: ClusterQueueState(
                name=q.name, cohort=q.cohort, nominal_gpus=frozen_map(q.nominal),
                borrowing_limit_gpus=frozen_map(q.borrowing_limit), used_gpus=frozen_map(q.usage),
                admission_checks=(CHECK_NAME,) if self.with_check else (), flavor_order=tuple(q.nominal),
            )
            for q in self.kueue.cqs.values()
        }

    @property
    def flavors(self) -> Mapping[str, FlavorState]:
        return self._flavors

    @property
    def local_queues(self) -> Mapping[str, LocalQueueState]:
        return self._local_queues

    def ray_cluster_view(self, rc: SimRayCluster) -> RayClusterView:
        """The RayCluster without its workers and demand, as the watch cache holds it."""
        # (the operator's view of workersToDelete: the names whose pods still exist)
        to_delete = tuple(n for n in rc.workers_to_delete if n in rc.workers)
        key = (rc.version, rc.replicas, rc.min_replicas, rc.max_replicas, to_delete)
        cached = self._ray_views.get(rc.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        group = WorkerGroupState(
            name=rc.group, replicas=rc.replicas, min_replicas=rc.min_replicas, max_replicas=rc.max_replicas,
            gpus_per_worker=1, cpu_per_worker=WORKER_CPU, memory_per_worker=WORKER_MEMORY,
            ray_resources=_RAY_RESOURCES, workers_to_delete=to_delete,
        )
        state = RayClusterState(
            namespace=rc.namespace, name=rc.name, uid=f"uid-{rc.name}", resource_version=str(rc.version),
            annotations=RAY_ANNOTATIONS, labels=_RAY_LABELS, in_tree_autoscaler=False, groups=(group,),
            created_at=0.0,
        )
        view = RayClusterView(state, dashboard_target(rc))
        self._ray_views[rc.name] = (key, view)
        return view

    def worker_views(self, rc: SimRayCluster, now: float) -> tuple[WorkerView, ...]:
        """The RayCluster's workers in pod-name order: each one's pod and Ray node."""
        views = self._workers.get(rc.name)
        if views is None:
            views = self._workers[rc.name] = WorkerViews(rc, lambda w, t: self._worker_view(rc, w, t))
        return views.at(now)

    def _worker_view(self, rc: SimRayCluster, w: SimWorker, now: float) -> WorkerView:
        ready = w.ready(now)
        pod = PodView(
            namespace=rc.namespace, name=w.name, node=self.cluster.node_of(f"{rc.namespace}/{w.name}"),
            phase="Running", ready=ready, deleting=False, ip=None, created_at=w.created, gpu_requests=1,
            cpu_requests=WORKER_CPU, memory_requests=WORKER_MEMORY, ray_cluster=rc.name, ray_group=rc.group,
            ray_node_type="worker",
        )
        if not ready:
            return WorkerView(pod, None)  # the raylet has not joined yet
        held = w.ray_busy()
        node = RayNodeInfo(
            node_id=w.name, node_ip="", pod_name=w.name, is_head=False, alive=True, total=_WORKER_TOTAL,
            available=_WORKER_HELD if held else _WORKER_TOTAL, busy=held, idle_seconds=None,
            cpu_utilization=0.05 + 0.5 * w.util(now), memory_utilization=None, group=rc.group,
            running_tasks=w.running_tasks(now),
        )
        return WorkerView(pod, node)

    def rayjob_views(self, w: SimWorkload, start: float) -> tuple[RayJobState, RayClusterView,
                                                                  tuple[tuple[str, PodView], ...]]:
        """A running RayJob (bound since ``start``): its RayJob, the RayCluster it created and that
        cluster's pods ("<namespace>/<pod>", view)."""
        cached = self._rayjob_pods.get(w.name)
        if cached is not None and cached[0] == start:
            return cached[1]
        cluster = rayjob_cluster_name(w)
        pods = []
        for i in range(w.job.pods):
            key = f"{w.namespace}/{w.name}-{i}"
            pods.append((key, PodView(
                namespace=w.namespace, name=f"{w.name}-{i}", node=self.cluster.node_of(key), phase="Running",
                ready=True, deleting=False, ip=None, created_at=start, gpu_requests=w.job.gpus_per_pod,
                ray_cluster=cluster, ray_group=RAYJOB_GROUP, ray_node_type="worker",
            )))
        group = WorkerGroupState(name=RAYJOB_GROUP, replicas=w.job.pods, min_replicas=w.job.pods,
                                 max_replicas=w.job.pods, gpus_per_worker=w.job.gpus_per_pod)
        rc = RayClusterState(
            namespace=w.namespace, name=cluster, uid=f"uid-{cluster}", resource_version="1",
            annotations=_RAYJOB_ANNOTATIONS, labels=frozen_map({RAY_ORIGIN_NAME_LABEL: w.job_name,
                                                                RAY_ORIGIN_KIND_LABEL: "RayJob"}),
            groups=(group,), created_at=start,
        )
        out = (RayJobState(w.namespace, w.job_name, w.uid, job_status="RUNNING", deployment_status="Running",
                           cluster_name=cluster), RayClusterView(rc, None), tuple(pods))
        self._rayjob_pods[w.name] = (start, out)
        return out

    def objects(self, now: float) -> ClusterObjects:
        """Every watched resource's views now."""
        world = self.world
        pods: dict[str, PodView] = {}
        rays: dict[str, RayClusterView] = {}
        for rc in world.rays.values():
            view = self.ray_cluster_view(rc)
            rays[view.state.key] = view
            for wv in self.worker_views(rc, now):
                pods[f"{rc.namespace}/{wv.pod.name}"] = wv.pod
        ray_jobs: dict[str, RayJobState] = {}
        for name, start in world.run_start.items():
            w = world.workloads.get(name)
            if w is not None:
                job, view, job_pods = self.rayjob_views(w, start)
                ray_jobs[job.key] = job
                rays[view.state.key] = view
                pods.update(job_pods)
        return ClusterObjects(
            workloads={f"{w.namespace}/{w.name}": self.workload_view(w) for w in world.workloads.values()},
            cluster_queues=self.cluster_queues(),
            local_queues=self._local_queues,
            flavors=self._flavors,
            admission_checks=self.admission_checks(),
            ray_clusters=rays,
            ray_jobs=ray_jobs,
            nodes=self._nodes,
            pods=pods,
        )

    # ---------------------------------------------------------------------------------- the signals
    def gpu_reading(self, now: float) -> GpuReading:
        """Every GPU as the exporters report it now: health, utilization, the pod holding it."""
        if self._changed or self._reading is None:
            by_name = self.cluster.by_name
            for name in self._changed:
                self._gpus[name] = self._node_gpus(by_name[name])
            self._changed.clear()
            by_node = MappingProxyType({n.name: self._gpus[n.name] for n in self.cluster.nodes})
            self._reading = GpuReading(tuple(g for gs in by_node.values() for g in gs), now, by_node)
        elif self._reading.observed_at != now:
            self._reading = GpuReading(self._reading.gpus, now, self._reading.by_node)
        return self._reading

    def _node_gpus(self, n: SimNode) -> tuple[GpuState, ...]:
        util = self._pod_util
        gpus = []
        for i, owner in enumerate(n.owner):
            healthy = n.healthy[i]
            gpus.append(GpuState(
                uuid=f"GPU-{n.name}-{i}", node=n.name, index=i, model=GPU_MODEL, healthy=healthy,
                health_reason="" if healthy else "XidFatal",
                utilization=util.get(owner, 0.0) if owner else 0.0,  # a free GPU: idle
                utilization_source="gpu_util", pod=pod_key(owner) if owner else None,
            ))
        return tuple(gpus)

    def ray_status(self, rc: SimRayCluster, now: float) -> RayStatus:
        """Ray's status of the RayCluster now: its pending tasks (one shape with their count, as the
        state API groups them) and its joined workers."""
        queued = len(rc.queue)
        demand = (RayDemand("task", frozen_map({"GPU": 1.0}), count=queued),) if queued else ()
        nodes = tuple(wv.ray_node for wv in self.worker_views(rc, now) if wv.ray_node is not None)
        return RayStatus(demand=demand, nodes=nodes, source="state_api", autoscaler_version="v2", observed_at=now)

    def rayjob_status(self, w: SimWorkload, start: float, now: float) -> RayStatus | None:
        """Ray's status of a running RayJob's cluster now (None while it starts: no Ray signal yet)."""
        work = self.world.rayjob_ray_work(w, start)
        if work is None:
            return None
        cached = self._rayjob_ray.get(w.name)
        if cached is None or cached[0] != work:  # what Ray reports moved: its node list and demand anew
            running, waiting = work
            demand = (RayDemand("task", frozen_map({"CPU": 1.0}), count=waiting),) if waiting else ()
            total = frozen_map({"GPU": float(w.job.gpus_per_pod), "CPU": WORKER_CPU})
            nodes = tuple(RayNodeInfo(
                node_id=f"{w.name}-{i}", node_ip="", pod_name=f"{w.name}-{i}", is_head=False, alive=True,
                total=total, available=total, busy=i < running, idle_seconds=None, cpu_utilization=None,
                memory_utilization=None, group=RAYJOB_GROUP, running_tasks=1 if i < running else 0)
                for i in range(w.job.pods))
            cached = self._rayjob_ray[w.name] = (work, nodes, demand)
        return RayStatus(demand=cached[2], nodes=cached[1], source="state_api", autoscaler_version="v2",
                         observed_at=now)

    def ray_observations(self, now: float) -> dict[str, RayObservation]:
        out = {f"{rc.namespace}/{rc.name}": RayObservation(self.ray_status(rc, now), now)
               for rc in self.world.rays.values()}
        world = self.world
        for name, start in world.run_start.items():
            w = world.workloads.get(name)
            status = self.rayjob_status(w, start, now) if w is not None else None
            if w is not None and status is not None:
                out[f"{w.namespace}/{rayjob_cluster_name(w)}"] = RayObservation(status, now)
        return out

    # ------------------------------------------------------------------------------------ snapshot
    def build(self, now: float) -> ClusterSnapshot:
        """The snapshot at ``now``: the controller's ``SnapshotBuilder`` over the inputs above."""
        self.builds += 1
        return self._builder.build(self.objects(now), self.gpu_reading(now), self.ray_observations(now), now)


def rayjob_cluster_name(w: SimWorkload) -> str:
    """The RayCluster a RayJob created (KubeRay names it ``<rayjob>-raycluster-<suffix>``)."""
    return f"{w.name}-raycluster"


def dashboard_target(rc: SimRayCluster) -> RayDashboardTarget:
    return RayDashboardTarget(rc.namespace, rc.name, f"{rc.name}-head-svc")

