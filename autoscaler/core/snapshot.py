"""The immutable ``ClusterSnapshot``: everything a decision may look at, taken at one instant.

Built once per loop by ``autoscaler.controller.snapshot_builder`` from the watch caches and the signals (or
by the simulator from its own state), then handed to the pure policies in ``autoscaler.core.policy``.
Nothing here does I/O or reads a clock: ``taken_at`` and every signal's ``observed_at`` are data.

Units: GPU counts are ints, CPU in cores (float), memory in bytes (float), times in unix seconds,
utilization as a 0-1 ratio.  Resource maps use Kubernetes resource names (``nvidia.com/gpu``,
``cpu``, ``memory``; Ray demand uses Ray's names, ``GPU``/``CPU``/``memory``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, TypeVar

if TYPE_CHECKING:
    from autoscaler.core.policy.annotations import PolicyAnnotations

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
ELASTIC_JOB_ANNOTATION = "kueue.x-k8s.io/elastic-job"
AUTOSCALE_ANNOTATION = "queuepilot.io/autoscale"

CHECK_PENDING = "Pending"
CHECK_READY = "Ready"
CHECK_RETRY = "Retry"
CHECK_REJECTED = "Rejected"

ResourceMap = Mapping[str, float]


_K = TypeVar("_K")
_V = TypeVar("_V")


def frozen_map(d: Mapping[_K, _V] | None = None) -> Mapping[_K, _V]:
    """A read-only mapping (dataclass fields must not be mutated after the snapshot is built)."""
    return MappingProxyType(dict(d or {}))


def _empty() -> Mapping[_K, _V]:
    return MappingProxyType({})


# ------------------------------------------------------------------------------------------- signals
@dataclass(frozen=True, slots=True)
class SignalStatus:
    """How fresh an input is. ``observed_at`` is None when the signal has never produced data."""

    name: str  # "gpu", "ray/<ns>/<cluster>", "watch/<resource>"
    observed_at: float | None
    stale_after_seconds: float

    def age(self, now: float) -> float | None:
        return None if self.observed_at is None else max(0.0, now - self.observed_at)

    def is_stale(self, now: float) -> bool:
        age = self.age(now)
        return age is None or age > self.stale_after_seconds


# -------------------------------------------------------------------------------------------- nodes
@dataclass(frozen=True, slots=True)
class PodKey:
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class GpuState:
    """One physical GPU as the GPU signal (exporter series) reports it."""

    uuid: str
    node: str
    index: int
    model: str = ""
    healthy: bool = True
    health_reason: str = ""
    utilization: float | None = None  # 0-1, None when unknown
    # which series ``utilization`` came from: "gr_engine_active" / "sm_active" (profiling) or "gpu_util"
    utilization_source: str = ""
    memory_used_bytes: float | None = None
    pod: PodKey | None = None  # allocated to, per the exporter's PodResources attribution


@dataclass(frozen=True, slots=True)
class NodeState:
    name: str
    labels: Mapping[str, str] = field(default_factory=_empty)
    ready: bool = True
    schedulable: bool = True  # not spec.unschedulable and no NoSchedule taint we don't tolerate
    gpu_allocatable: int = 0  # status.allocatable[nvidia.com/gpu]
    gpu_requested: int = 0  # sum of nvidia.com/gpu requests of non-terminal pods bound here
    cpu_allocatable: float = 0.0
    cpu_requested: float = 0.0
    memory_allocatable: float = 0.0
    memory_requested: float = 0.0
    gpus: tuple[GpuState, ...] = ()  # empty when no GPU signal covers this node
    # derived from ``gpus`` (not an input): each pod the GPU signal names here with its GPUs, in GPU
    # order, so that attributing GPUs to pods is one pass per node built, not one per decision
    gpus_by_pod: tuple[tuple[PodKey, tuple[GpuState, ...]], ...] = field(
        default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        by: dict[PodKey, list[GpuState]] = {}
        for g in self.gpus:
            if g.pod is not None:
                by.setdefault(g.pod, []).append(g)
        object.__setattr__(self, "gpus_by_pod", tuple((p, tuple(gs)) for p, gs in by.items()))

    @property
    def unhealthy_gpus(self) -> int:
        return sum(1 for g in self.gpus if not g.healthy)

    @property
    def unhealthy_unallocated_gpus(self) -> int:
        return sum(1 for g in self.gpus if not g.healthy and g.pod is None)

    @property
    def healthy_gpus(self) -> int:
        """Allocatable GPUs not reported unhealthy (an unhealthy GPU a pod still holds is not healthy
        either: healthy + unhealthy is the node's allocatable)."""
        if not self.ready:
            return 0
        return max(0, self.gpu_allocatable - self.unhealthy_gpus)

    @property
    def free_gpus(self) -> int:
        """GPUs a new pod could get now: allocatable, healthy, not requested by a pod. 0 if not schedulable."""
        if not (self.ready and self.schedulable):
            return 0
        return max(0, self.gpu_allocatable - self.gpu_requested - self.unhealthy_unallocated_gpus)


@dataclass(frozen=True, slots=True)
class FlavorState:
    """A Kueue ResourceFlavor and the nodes its ``spec.nodeLabels`` select."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=_empty)
    node_names: tuple[str, ...] = ()
    tolerations: tuple[Mapping[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class FlavorCapacity:
    flavor: str
    nominal: float  # sum of nvidia.com/gpu nominal quota over ClusterQueues for this flavor
    healthy: int
    unhealthy: int
    allocated: int
    free: int
    free_blocks: tuple[int, ...]  # free GPUs per node, largest first (nodes with 0 omitted)

    @property
    def largest_free_block(self) -> int:
        return self.free_blocks[0] if self.free_blocks else 0


# ---------------------------------------------------------------------------------------- Kueue
@dataclass(frozen=True, slots=True)
class PodSetSpec:
    """One pod set of a Workload: ``count`` pods, each requesting ``requests`` (per pod)."""

    name: str
    count: int
    requests: ResourceMap = field(default_factory=_empty)
    node_selector: Mapping[str, str] = field(default_factory=_empty)

    @property
    def gpus_per_pod(self) -> int:
        return int(self.requests.get(GPU_RESOURCE, 0))


@dataclass(frozen=True, slots=True)
class CheckState:
    """One entry of ``Workload.status.admissionChecks``."""

    name: str
    state: str  # Pending | Ready | Retry | Rejected
    last_transition_time: float | None = None
    message: str = ""
    requeue_after_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class WorkloadState:
    namespace: str
    name: str
    uid: str
    resource_version: str
    local_queue: str  # spec.queueName
    cluster_queue: str | None  # status.admission.clusterQueue, else resolved through the LocalQueue
    created_at: float
    pod_sets: tuple[PodSetSpec, ...] = ()
    priority: int = 0
    active: bool = True
    quota_reserved: bool = False
    quota_reserved_at: float | None = None  # QuotaReserved.lastTransitionTime when True
    admitted: bool = False
    admitted_at: float | None = None
    evicted: bool = False
    finished: bool = False
    requeued_at: float | None = None  # Requeued.lastTransitionTime, if the condition exists
    # when an admitted workload lost its admission (Admitted turned False: preempted, PodsReady timeout,
    # node failure, ...); None for a workload never admitted. A Retry never moves it: a workload Retried
    # before admission was never admitted, and Admitted stays False across later Retries.
    admission_lost_at: float | None = None
    # podset name -> (resource name -> flavor), from status.admission.podSetAssignments
    flavors: Mapping[str, Mapping[str, str]] = field(default_factory=_empty)
    # podset name -> pods counted at admission (podSetAssignments[].count), falls back to spec count
    admitted_counts: Mapping[str, int] = field(default_factory=_empty)
    checks: tuple[CheckState, ...] = ()
    owner_kind: str = ""  # Job, RayJob, RayCluster, PyTorchJob, TrainJob, ...
    owner_name: str = ""
    # times Kueue evicted it as deactivated (status.schedulingStats.evictions, reason Deactivated or
    # DeactivatedDueTo...); an active workload with a count above 0 was reactivated (spec.active: true)
    deactivations: int = 0
    # derived from the fields above (not inputs), once per object: every pass asks each workload for
    # them (the stall detector, queue pressure, the admission order), and most objects last many passes
    key: str = field(default="", init=False, repr=False, compare=False)  # "<namespace>/<name>"
    gpu_demand: int = field(default=0, init=False, repr=False, compare=False)  # GPUs over all pod sets

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")
        object.__setattr__(self, "gpu_demand", sum(ps.count * ps.gpus_per_pod for ps in self.pod_sets))

    @property
    def pending(self) -> bool:
        """Waiting for quota or for its checks: not admitted, not finished, active."""
        return self.active and not self.finished and not self.admitted

    @property
    def queued_since(self) -> float:
        """Kueue's T0: Requeued.lastTransitionTime if present, else creationTimestamp.  A Retry requeues
        a workload every few minutes, so this restarts at each one (Kueue's queue-wait histograms)."""
        return self.requeued_at if self.requeued_at is not None else self.created_at

    @property
    def pending_since(self) -> float:
        """Since when a person has been waiting for it: its creation, or, for a workload that was admitted
        and then evicted, that eviction; Retries and requeues do not move it."""
        lost = self.admission_lost_at
        return lost if lost is not None and lost > self.created_at else self.created_at

    @property
    def decision_order(self) -> tuple[int, float, str]:
        """The order workloads waiting for a check are decided in: higher priority first, then the
        earlier quota reservation, then the key."""
        t = self.quota_reserved_at if self.quota_reserved_at is not None else float("inf")
        return (-self.priority, t, self.key)

    def check(self, name: str) -> CheckState | None:
        for c in self.checks:
            if c.name == name:
                return c
        return None


@dataclass(frozen=True, slots=True)
class ClusterQueueState:
    name: str
    cohort: str | None = None
    # flavor -> nominal quota of nvidia.com/gpu; borrowing limit (None = unlimited within cohort)
    nominal_gpus: Mapping[str, float] = field(default_factory=_empty)
    borrowing_limit_gpus: Mapping[str, float | None] = field(default_factory=_empty)
    # flavor -> nvidia.com/gpu reserved or in use: max(status.flavorsReservation, status.flavorsUsage)
    used_gpus: Mapping[str, float] = field(default_factory=_empty)
    admission_checks: tuple[str, ...] = ()  # AdmissionCheck names from spec.admissionChecksStrategy
    flavor_order: tuple[str, ...] = ()  # resourceGroups' flavor order for nvidia.com/gpu

    def headroom_gpus(self, flavor: str) -> float:
        """GPUs of ``flavor`` this queue can still admit without borrowing."""
        return max(0.0, self.nominal_gpus.get(flavor, 0.0) - self.used_gpus.get(flavor, 0.0))


@dataclass(frozen=True, slots=True)
class LocalQueueState:
    namespace: str
    name: str
    cluster_queue: str


@dataclass(frozen=True, slots=True)
class AdmissionCheckObj:
    name: str
    controller_name: str
    active: bool  # the Active condition is True
    resource_version: str = ""


# ------------------------------------------------------------------------------------------- Ray
DemandKind = Literal["task", "actor", "placement_group"]


@dataclass(frozen=True, slots=True)
class RayDemand:
    """Unscheduled Ray demand: ``count`` bundles of ``shape`` (Ray resource names: GPU, CPU, memory...)."""

    kind: DemandKind
    shape: ResourceMap
    count: int = 1
    infeasible: bool = False  # INFEASIBLE (can never fit any node type) vs NO_RESOURCES (fits, none free)
    strategy: str = ""  # placement group strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)
    group: str | None = None  # worker group Ray asks for, when known (label selectors); None = any


@dataclass(frozen=True, slots=True)
class RayWorker:
    pod: str
    node: str | None = None
    phase: str = "Running"  # Pending | Running | ...
    ready: bool = True
    deleting: bool = False  # metadata.deletionTimestamp set
    created_at: float | None = None
    gpus: int = 0
    gpu_utilization: float | None = None  # mean over its GPUs, 0-1; None when unknown
    cpu_utilization: float | None = None  # 0-1, Ray node metrics
    memory_utilization: float | None = None  # 0-1, Ray node metrics
    ray_busy: bool | None = None  # Ray reports tasks/actors using resources on it; None when unknown
    # tasks and actor methods Ray reports executing on it now (the raylet's core workers); 0 with
    # ``ray_busy`` True: only idle actors hold it; None when unknown
    ray_running_tasks: int | None = None


@dataclass(frozen=True, slots=True)
class WorkerGroupState:
    name: str
    replicas: int
    min_replicas: int
    max_replicas: int
    num_of_hosts: int = 1
    gpus_per_worker: int = 0
    cpu_per_worker: float = 0.0
    memory_per_worker: float = 0.0
    ray_resources: ResourceMap = field(default_factory=_empty)  # the group's Ray logical resources per worker
    workers: tuple[RayWorker, ...] = ()
    workers_to_delete: tuple[str, ...] = ()
    idle_timeout_seconds: int | None = None
    # derived from ``workers`` (not an input): their pod names, for attributing pods to the group
    worker_pods: frozenset[str] = field(default=frozenset(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "worker_pods", frozenset(w.pod for w in self.workers))


@dataclass(frozen=True, slots=True)
class RayClusterState:
    namespace: str
    name: str
    uid: str
    resource_version: str
    annotations: Mapping[str, str] = field(default_factory=_empty)
    labels: Mapping[str, str] = field(default_factory=_empty)
    in_tree_autoscaler: bool = False  # spec.enableInTreeAutoscaling
    suspended: bool = False
    groups: tuple[WorkerGroupState, ...] = ()
    demand: tuple[RayDemand, ...] = ()
    demand_signal: SignalStatus | None = None  # freshness of the Ray demand for this cluster
    # Ray's last answer missed part of the pending work (a state-API list failed or was cut short):
    # ``demand`` is a lower bound, so "nothing waits" cannot be concluded from it
    demand_partial: bool = False
    cluster_queue: str | None = None  # via the queue-name label's LocalQueue
    created_at: float | None = None
    # the queuepilot.io/ policy annotations, parsed once where the object is parsed (from
    # ``annotations`` when not given; ``dataclasses.replace`` hands the parse on)
    policy_annotations: PolicyAnnotations | None = None

    def __post_init__(self) -> None:
        if self.policy_annotations is None:
            from autoscaler.core.policy.annotations import parse_policy_annotations

            object.__setattr__(self, "policy_annotations", parse_policy_annotations(self.annotations))

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def queue_name(self) -> str | None:
        return self.labels.get(QUEUE_NAME_LABEL)

    @property
    def kueue_managed(self) -> bool:
        return bool(self.queue_name)

    @property
    def elastic(self) -> bool:
        return self.annotations.get(ELASTIC_JOB_ANNOTATION, "").lower() == "true"

    @property
    def opted_in(self) -> bool:
        return self.annotations.get(AUTOSCALE_ANNOTATION, "").lower() == "true"


RAYJOB_FINISHED_STATUSES = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True, slots=True)
class RayJobState:
    """A RayJob (``ray.io/v1``) as the controller sees it: its Ray job's status and its cluster."""

    namespace: str
    name: str
    uid: str = ""
    job_status: str = ""  # status.jobStatus: "", PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED
    deployment_status: str = ""  # status.jobDeploymentStatus: Initializing, Running, Complete, Failed, ...
    cluster_name: str = ""  # status.rayClusterName
    end_time: float | None = None  # status.endTime: when the Ray job ended

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def finished(self) -> bool:
        """Its Ray job ended (succeeded, failed or stopped), whatever its cluster still holds."""
        return self.job_status in RAYJOB_FINISHED_STATUSES


# -------------------------------------------------------------------------------------- snapshot
@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    taken_at: float
    nodes: Mapping[str, NodeState] = field(default_factory=_empty)
    flavors: Mapping[str, FlavorState] = field(default_factory=_empty)
    cluster_queues: Mapping[str, ClusterQueueState] = field(default_factory=_empty)
    local_queues: Mapping[str, LocalQueueState] = field(default_factory=_empty)  # key "ns/name"
    workloads: Mapping[str, WorkloadState] = field(default_factory=_empty)  # key "ns/name"
    admission_checks: Mapping[str, AdmissionCheckObj] = field(default_factory=_empty)
    ray_clusters: Mapping[str, RayClusterState] = field(default_factory=_empty)  # key "ns/name"
    ray_jobs: Mapping[str, RayJobState] = field(default_factory=_empty)  # key "ns/name"
    # GPU signal freshness (exporter series via Prometheus or scrape) and the others
    signals: Mapping[str, SignalStatus] = field(default_factory=_empty)

    def gpu_signal_stale(self) -> bool:
        sig = self.signals.get("gpu")
        return sig is None or sig.is_stale(self.taken_at)

    def flavor_nodes(self, flavor: str) -> tuple[NodeState, ...]:
        f = self.flavors.get(flavor)
        if f is None:
            return ()
        return tuple(self.nodes[n] for n in f.node_names if n in self.nodes)

    def flavor_capacity(self, flavor: str, promised: int = 0) -> FlavorCapacity:
        """GPU counts for ``flavor``; ``promised`` GPUs (the reservation ledger) are taken off ``free``."""
        nodes = self.flavor_nodes(flavor)
        healthy = sum(n.healthy_gpus for n in nodes)
        unhealthy = sum(n.unhealthy_gpus for n in nodes) + sum(n.gpu_allocatable for n in nodes if not n.ready)
        allocated = sum(n.gpu_requested for n in nodes)
        blocks = sorted((n.free_gpus for n in nodes if n.free_gpus > 0), reverse=True)
        nominal = sum(cq.nominal_gpus.get(flavor, 0.0) for cq in self.cluster_queues.values())
        return FlavorCapacity(
            flavor=flavor,
            nominal=nominal,
            healthy=healthy,
            unhealthy=unhealthy,
            allocated=allocated,
            free=max(0, sum(blocks) - promised),
            free_blocks=tuple(blocks),
        )

    def cluster_queue_of(self, namespace: str, local_queue: str | None) -> str | None:
        if not local_queue:
            return None
        lq = self.local_queues.get(f"{namespace}/{local_queue}")
        return lq.cluster_queue if lq else None
