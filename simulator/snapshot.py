"""Build ``ClusterSnapshot``s from the simulator's state, as the controller's snapshot builder would.

The simulated world is mapped onto the same immutable types the controller hands the policies:
nodes with per-GPU health and pod attribution (the exporter's view), one ResourceFlavor per
simulated flavor, a ClusterQueue per team (with our AdmissionCheck when the policy uses it),
Workloads for RayJobs with their Kueue conditions, and each team's RayCluster with its workers'
GPU utilization and Ray's pending demand.  Every signal is fresh (``observed_at = now``).
NodeStates and WorkloadStates are cached by version: a month of trace builds tens of thousands of
snapshots.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial

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
    RayWorker,
    SignalStatus,
    WorkerGroupState,
    WorkloadState,
    frozen_map,
    kept_map,
)
from simulator.cluster import SimCluster, SimNode
from simulator.kueue import ADMITTED, RESERVED, RUNNING, SimKueue, SimWorkload
from simulator.ray import SimRayCluster, SimWorker, WorkerViews

CHECK_NAME = "gpu-capacity"
CONTROLLER_NAME = "queuepilot.io/gpu-capacity"
FLAVOR_LABEL = "queuepilot.io/sim-flavor"
GPU_MODEL = "NVIDIA A100-SXM4-80GB"
POD_SET = "workers"
SIGNAL_STALE_AFTER_S = 120.0


# the same for every simulated RayCluster (read-only maps, shared by every snapshot)
RAY_ANNOTATIONS = frozen_map({AUTOSCALE_ANNOTATION: "true", ELASTIC_JOB_ANNOTATION: "true"})
_RAY_LABELS = frozen_map({QUEUE_NAME_LABEL: "default"})
_RAY_RESOURCES = frozen_map({"GPU": 1.0, "CPU": 8.0})


def pod_key(pod_id: str) -> PodKey:
    ns, _, name = pod_id.partition("/")
    return PodKey(ns, name)


class RayClusterMap(Mapping[str, RayClusterState]):
    """A snapshot's RayClusters, built when a reconciler first reads them (keys and length need none):
    most control passes of a baseline policy read no RayCluster (queuepilot's admission check does
    not; the right-sizing feed does every few minutes).  What it builds is what ``build`` would have
    built then: nothing may change a RayCluster between the snapshot and that first read, nor may
    the builder have built a later snapshot meanwhile (its caches would be of a later time); if either
    happened, the read fails loudly instead of showing a later state."""

    __slots__ = ("_at", "_builder", "_built", "_keys", "_now", "_rays")

    def __init__(self, builder: SnapshotBuilder, rays: tuple[SimRayCluster, ...], now: float) -> None:
        self._builder = builder
        self._rays = rays
        self._now = now
        self._at = self._state_of_world()
        self._keys = tuple(f"{rc.namespace}/{rc.name}" for rc in rays)
        self._built: Mapping[str, RayClusterState] | None = None

    def _state_of_world(self) -> tuple[object, ...]:
        """What ``ray_state`` reads that can move: each RayCluster's workers (epoch), spec (version)
        and queue, and how many snapshots the builder has built."""
        return (self._builder.builds, *((rc.epoch, rc.version, len(rc.queue)) for rc in self._rays))

    def _states(self) -> Mapping[str, RayClusterState]:
        if self._built is None:
            if self._state_of_world() != self._at:
                raise RuntimeError("simulator: a RayCluster or the snapshot builder moved between a snapshot "
                                   "and its first read of the RayClusters")
            self._built = frozen_map({k: self._builder.ray_state(rc, self._now)
                                      for k, rc in zip(self._keys, self._rays, strict=True)})
        return self._built

    @property
    def built(self) -> bool:
        """Whether the RayClusters were read (and so built)."""
        return self._built is not None

    def __getitem__(self, key: str) -> RayClusterState:
        return self._states()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __repr__(self) -> str:
        return f"RayClusterMap({dict(self._states())!r})"


class SnapshotBuilder:
    """``pod_util``: the GPU signal, each bound pod's GPU utilization by ``"<namespace>/<pod>"`` (the
    exporter's, by the pod a GPU is attributed to; 0 on a free GPU); the owner calls
    ``utilization_changed(node)`` when a pod's value there changes.  None: no GPU signal (utilization
    unknown)."""

    def __init__(self, cluster: SimCluster, kueue: SimKueue, with_check: bool,
                 pod_util: Mapping[str, float] | None = None) -> None:
        self.cluster = cluster
        self.kueue = kueue
        self.with_check = with_check
        self._pod_util = pod_util
        self._unread: Callable[[str], bool] | None = None  # the pods whose GPUs carry no utilization
        self.builds = 0  # snapshots built (a RayClusterMap read after a later build fails)
        self._util_gen: dict[str, int] = {}  # node -> bumped when a pod's utilization there changed
        self._nodes: dict[str, tuple[tuple[int, int], NodeState]] = {}
        self._labels: dict[str, Mapping[str, str]] = {}  # flavor -> a node's labels (read-only, shared)
        # "<namespace>/<pod>" -> its PodKey, one object per pod so an unchanged GPU is seen by identity
        # (cleared when it outgrows the cluster many times over: pods come and go)
        self._pod_keys: dict[str, PodKey] = {}
        self._workloads: dict[str, tuple[int, WorkloadState]] = {}
        self._wl_map: Mapping[str, WorkloadState] | None = None  # the last snapshot's Workloads
        self._wl_moves: int | None = None  # ``SimKueue.workload_moves`` when that map was built
        self._workers: dict[str, tuple[tuple[object, ...], RayWorker]] = {}
        self._busy_at_mean = False  # a worker running a task carries its task's mean level (``busy_workers_at_mean``)
        # whole-map caches: the node map until a node changes, the ClusterQueues by their usage
        # (each RayCluster's worker tuple is kept by change: ``_ray_workers``)
        self._node_map: Mapping[str, NodeState] | None = None
        self._node_states: dict[str, NodeState] = {}
        self._changed: set[str] = set()  # nodes changed since the node map was built
        cluster.watch(self._changed)
        self._cq_map: tuple[tuple[object, ...], Mapping[str, ClusterQueueState]] | None = None
        self._cq_moves = -1  # Kueue's usage_moves when the map was last looked at
        self._ray_workers: dict[str, WorkerViews[RayWorker]] = {}  # RayCluster -> its workers' views, by change
        # each RayCluster's WorkerGroupState while its workers (the same tuple), replicas and
        # workersToDelete are unchanged; Ray's demand by the queue's length (immutable, shared)
        self._ray_groups: dict[str, tuple[tuple[object, ...], WorkerGroupState]] = {}
        self._ray_demand: dict[int, tuple[RayDemand, ...]] = {}
        self._flavors = frozen_map({
            f: FlavorState(f, frozen_map({FLAVOR_LABEL: f}), tuple(n.name for n in nodes))
            for f, nodes in cluster.flavors.items()
        })
        self._checks: Mapping[str, AdmissionCheckObj] = frozen_map()
        self._checks_key: tuple[tuple[str, bool], ...] | None = None
        self._checks_version = 0
        self._local_queues = frozen_map({
            f"{q.namespace}/{q.local_queue}": LocalQueueState(q.namespace, q.local_queue, q.name)
            for q in kueue.cqs.values()
        })

    def checks_changed(self) -> None:
        self._checks_key = None

    def admission_checks(self, active: Mapping[str, bool]) -> Mapping[str, AdmissionCheckObj]:
        """Our AdmissionChecks with their ``Active`` condition (``active``: name -> Active)."""
        key = tuple(sorted(active.items()))
        if key != self._checks_key:
            self._checks_version += 1
            self._checks = frozen_map({
                name: AdmissionCheckObj(name, CONTROLLER_NAME, on, str(self._checks_version))
                for name, on in active.items()
            })
            self._checks_key = key
        return self._checks

    def _flavor_labels(self, flavor: str) -> Mapping[str, str]:
        labels = self._labels.get(flavor)
        if labels is None:
            labels = self._labels[flavor] = frozen_map({FLAVOR_LABEL: flavor})
        return labels

    def without_utilization(self, of: Callable[[str], bool] | None = None) -> None:
        """From now on the GPUs carry no utilization (as with no GPU signal), and a change of it is no
        change of a node: for a world whose snapshot readers read none.  ``of``: only the GPUs of the
        pods it selects (by ``"<namespace>/<pod>"``) carry none, for readers that read the others
        only; the owner then calls ``utilization_changed`` for the others' pods alone.  Before the
        first snapshot."""
        if self.builds or self._nodes:
            raise RuntimeError("simulator: the GPU utilization can be left out only before the first snapshot")
        if of is None:
            self._pod_util = None
        self._unread = of

    def busy_workers_at_mean(self) -> None:
        """From now on a Ray worker running a task carries its task's mean level (``Job.util``) as its
        GPU utilization, not the level of the task's current segment, and its view is built again only
        when its task, readiness or busy state moves: for a world whose readers never read a busy
        worker's value (the scaling decision reads a worker's utilization only once no task runs on it,
        unless the utilization target is kept as a floor; ``Engine.busy_worker_utilization``).  Before
        the first snapshot."""
        if self.builds or self._workers:
            raise RuntimeError("simulator: busy workers' utilization can be set only before the first snapshot")
        self._busy_at_mean = True

    def utilization_changed(self, node: str) -> None:
        """A pod on ``node`` has a new GPU utilization in ``pod_util``: its NodeState is built anew."""
        if self._pod_util is None:
            return  # the GPUs carry no utilization: nothing on the node changed
        self._util_gen[node] = self._util_gen.get(node, 0) + 1
        self._changed.add(node)

    def node_state(self, n: SimNode) -> NodeState:
        key = (n.version, self._util_gen.get(n.name, 0))
        cached = self._nodes.get(n.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        util, unread = self._pod_util, self._unread
        old = cached[1].gpus if cached is not None and len(cached[1].gpus) == n.gpus else None
        gpus = []
        for i, o in enumerate(n.owner):
            if not o:
                u = None if util is None else 0.0  # a free GPU: idle, where the signal is carried
            elif util is None or (unread is not None and unread(o)):
                u = None  # this pod's utilization is left out (no reader reads it)
            else:
                u = util.get(o, 0.0)
            healthy = n.healthy[i]
            prev = old[i] if old is not None else None
            pod = self._pod_keys.get(o) if o else None
            if o and pod is None:
                if len(self._pod_keys) > 8 * self.cluster.total_gpus:
                    self._pod_keys.clear()
                pod = self._pod_keys[o] = pod_key(o)
            if prev is not None and prev.pod is pod and prev.utilization == u and prev.healthy == healthy:
                gpus.append(prev)  # this GPU is as it was: the GpuState built before
                continue
            gpus.append(GpuState(
                uuid=f"GPU-{n.name}-{i}", node=n.name, index=i, model=GPU_MODEL, healthy=healthy,
                health_reason="" if healthy else "XidFatal", utilization=u,
                utilization_source="gpu_util" if u is not None else "", pod=pod,
            ))
        state = NodeState(
            name=n.name, labels=self._flavor_labels(n.flavor), gpu_allocatable=n.gpus,
            gpu_requested=n.allocated, gpus=tuple(gpus),
        )
        self._nodes[n.name] = (key, state)
        return state

    def workload_state(self, w: SimWorkload) -> WorkloadState:
        return self._workload_state(f"{w.namespace}/{w.name}", w)

    def _workload_state(self, key: str, w: SimWorkload) -> WorkloadState:
        """``workload_state`` for the Workload whose key (``WorkloadState.key``) is ``key``."""
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
            requeued_at=w.requeued_at,
            flavors=frozen_map({POD_SET: frozen_map({GPU_RESOURCE: w.flavor})}) if w.flavor else frozen_map(),
            admitted_counts=frozen_map({POD_SET: w.job.pods}) if reserved else frozen_map(),
            # owned by its RayJob, by the name its pods carry (``<rayjob>-<i>``), so the stall
            # detector attributes the pods' GPUs to it as the deployed controller would
            checks=checks, owner_kind="RayJob", owner_name=w.name,
        )
        self._workloads[key] = (w.version, state)
        return state

    def forget(self, w: SimWorkload) -> None:
        self._workloads.pop(f"{w.namespace}/{w.name}", None)

    def _worker_tuple(self, rc: SimRayCluster, now: float) -> tuple[RayWorker, ...]:
        """The group's workers by name, each the view built before while it was not touched and its
        ready/busy state did not flip (``WorkerViews``)."""
        views = self._ray_workers.get(rc.name)
        if views is None:
            views = self._ray_workers[rc.name] = WorkerViews(rc, partial(self._worker, rc))
        return views.at(now)

    def ray_state(self, rc: SimRayCluster, now: float) -> RayClusterState:
        """The RayCluster as the controller would see it at ``now``: its worker group and Ray's demand
        are the previous pass's objects while nothing in them changed; only the signal's time is new."""
        workers = self._worker_tuple(rc, now)
        to_delete = tuple(n for n in rc.workers_to_delete if n in rc.workers) if rc.workers_to_delete else ()
        group_key = (workers, rc.replicas, rc.min_replicas, rc.max_replicas, to_delete)
        cached = self._ray_groups.get(rc.name)
        if cached is not None and cached[0] == group_key:
            group = cached[1]
        else:
            group = WorkerGroupState(
                name=rc.group, replicas=rc.replicas, min_replicas=rc.min_replicas, max_replicas=rc.max_replicas,
                gpus_per_worker=1, cpu_per_worker=8.0, memory_per_worker=64 * 2**30,
                ray_resources=_RAY_RESOURCES, workers=workers, workers_to_delete=to_delete,
            )
            self._ray_groups[rc.name] = (group_key, group)
        # Ray reports the pending tasks as one shape with their full count (the scaler packs
        # identical bundles as one run, so a count of thousands costs no more than one)
        queued = len(rc.queue)
        demand = self._ray_demand.get(queued)
        if demand is None:
            demand = (RayDemand("task", frozen_map({"GPU": 1.0}), count=queued),) if queued else ()
            self._ray_demand[queued] = demand
        return RayClusterState(
            namespace=rc.namespace, name=rc.name, uid=f"uid-{rc.name}", resource_version=str(rc.version),
            annotations=RAY_ANNOTATIONS, labels=_RAY_LABELS, in_tree_autoscaler=False, groups=(group,),
            demand=demand, demand_signal=SignalStatus(f"ray/{rc.namespace}/{rc.name}", now, 60.0),
            cluster_queue=rc.cq, created_at=0.0,
        )

    def _worker(self, rc: SimRayCluster, w: SimWorker, now: float) -> RayWorker:
        ready, busy = w.ready(now), w.busy(now)
        key = (*w.view_key(self._busy_at_mean), ready, busy)  # (``busy_workers_at_mean``)
        cached = self._workers.get(w.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        u = w.seen_util(now, self._busy_at_mean)
        state = RayWorker(
            pod=w.name, node=self.cluster.node_of(f"{rc.namespace}/{w.name}"), phase="Running", ready=ready,
            created_at=w.created, gpus=1, gpu_utilization=u, cpu_utilization=0.05 + 0.5 * u, ray_busy=w.ray_busy(),
            ray_running_tasks=w.running_tasks(now),
        )
        self._workers[w.name] = (key, state)
        return state

    def forget_worker(self, name: str) -> None:
        self._workers.pop(name, None)

    @property
    def flavors(self) -> Mapping[str, FlavorState]:
        return self._flavors

    @property
    def local_queues(self) -> Mapping[str, LocalQueueState]:
        return self._local_queues

    def cluster_queue_map(self) -> Mapping[str, ClusterQueueState]:
        """``cluster_queues()`` as a read-only map, rebuilt only when some queue's usage changed (not
        looked at while Kueue's ``usage_moves`` count is the last one's)."""
        if self._cq_map is not None and self.kueue.usage_moves == self._cq_moves:
            return self._cq_map[1]
        self._cq_moves = self.kueue.usage_moves
        key = tuple((q.name, tuple(q.usage.items()), tuple(q.nominal.items()), tuple(q.borrowing_limit.items()))
                    for q in self.kueue.cqs.values())
        if self._cq_map is None or self._cq_map[0] != key:
            self._cq_map = (key, frozen_map(self.cluster_queues()))
        return self._cq_map[1]

    def node_map(self) -> Mapping[str, NodeState]:
        """Every node's ``NodeState``; only the nodes that changed since the last call are built again (the
        cluster tells its watchers, ``SimCluster.watchers``; ``utilization_changed`` adds the rest)."""
        if self._node_map is not None and not self._changed:
            return self._node_map
        if self._node_map is None:
            self._node_states = {n.name: self.node_state(n) for n in self.cluster.nodes}
        else:  # only the nodes that changed since (the cluster and utilization_changed say which)
            by_name = self.cluster.by_name
            for name in self._changed:
                self._node_states[name] = self.node_state(by_name[name])
        self._changed.clear()
        self._node_map = frozen_map(self._node_states)  # a copy: later changes do not reach it
        return self._node_map

    def cluster_queues(self) -> dict[str, ClusterQueueState]:
        return {
            q.name: ClusterQueueState(
                name=q.name, cohort=q.cohort, nominal_gpus=frozen_map(q.nominal),
                borrowing_limit_gpus=frozen_map(q.borrowing_limit), used_gpus=frozen_map(q.usage),
                admission_checks=(CHECK_NAME,) if self.with_check else (), flavor_order=tuple(q.nominal),
            )
            for q in self.kueue.cqs.values()
        }

    def build(self, now: float, workloads: Iterable[SimWorkload], rays: Iterable[SimRayCluster],
              checks_active: Mapping[str, bool], *, lazy_rays: bool = False,
              workload_moves: int | None = None) -> ClusterSnapshot:
        """The snapshot at ``now``; ``lazy_rays``: its RayClusters built at their first read;
        ``workload_moves``: ``SimKueue.workload_moves`` of ``workloads``' Kueue (the same count as at
        the last build: no Workload came, went or moved since, and the last map is handed out as it is)."""
        self.builds += 1
        if workload_moves is None or workload_moves != self._wl_moves or self._wl_map is None:
            wls = {}
            for w in workloads:
                key = f"{w.namespace}/{w.name}"
                wls[key] = self._workload_state(key, w)
            # the previous snapshot's map while every Workload is the very state it held (``kept_map``)
            self._wl_map = kept_map(self._wl_map, wls)
            self._wl_moves = workload_moves
        ray_clusters: Mapping[str, RayClusterState]
        if lazy_rays:
            ray_clusters = RayClusterMap(self, tuple(rays), now)
        else:
            ray_clusters = frozen_map({f"{rc.namespace}/{rc.name}": self.ray_state(rc, now) for rc in rays})
        signals = {"gpu": SignalStatus("gpu", now, SIGNAL_STALE_AFTER_S)}
        return ClusterSnapshot(
            taken_at=now, nodes=self.node_map(), flavors=self._flavors, cluster_queues=self.cluster_queue_map(),
            local_queues=self._local_queues, workloads=self._wl_map,
            admission_checks=self.admission_checks(checks_active),
            ray_clusters=ray_clusters, signals=frozen_map(signals),
        )
