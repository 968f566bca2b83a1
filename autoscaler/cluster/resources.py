"""The resources the controller watches: one row per watch (group, version, plural, selectors).

Pods are the one resource watched with a selector.  Default (``pods: all``): every pod that is not
terminal (field selector ``status.phase!=Succeeded,status.phase!=Failed``), because a node's free
GPUs are its allocatable minus the GPU requests of *all* pods bound to it, and only a full view
gets that right; the cache keeps a ~300-byte projection per pod (``autoscaler.cluster.views.PodView``),
never the pod itself.  ``pods: labeled`` watches only Ray pods (``ray.io/cluster``) and Kueue pods
(``kueue.x-k8s.io/podset``) -- two watches, one per selector -- and relies on the exporter's
``queuepilot_gpu_allocated`` for GPUs held by other pods.
"""

from __future__ import annotations

from dataclasses import dataclass

KUEUE = "kueue.x-k8s.io"
RAY = "ray.io"
COORD = "coordination.k8s.io"

KUEUE_VERSION = "v1beta2"
RAY_VERSION = "v1"
NON_TERMINAL_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """One watch: ``name`` is the cache name (metric label ``resource``), ``plural`` the API resource."""

    name: str
    group: str
    version: str
    plural: str
    label_selector: str | None = None
    field_selector: str | None = None

    @property
    def list_path(self) -> str:
        """The cluster-wide collection path (all namespaces)."""
        if self.group == "":
            return f"/api/{self.version}/{self.plural}"
        return f"/apis/{self.group}/{self.version}/{self.plural}"


WORKLOADS = ResourceSpec("workloads", KUEUE, KUEUE_VERSION, "workloads")
CLUSTER_QUEUES = ResourceSpec("clusterqueues", KUEUE, KUEUE_VERSION, "clusterqueues")
LOCAL_QUEUES = ResourceSpec("localqueues", KUEUE, KUEUE_VERSION, "localqueues")
RESOURCE_FLAVORS = ResourceSpec("resourceflavors", KUEUE, KUEUE_VERSION, "resourceflavors")
ADMISSION_CHECKS = ResourceSpec("admissionchecks", KUEUE, KUEUE_VERSION, "admissionchecks")
RAY_CLUSTERS = ResourceSpec("rayclusters", RAY, RAY_VERSION, "rayclusters")
RAY_JOBS = ResourceSpec("rayjobs", RAY, RAY_VERSION, "rayjobs")
NODES = ResourceSpec("nodes", "", "v1", "nodes")
PODS_ALL = ResourceSpec("pods", "", "v1", "pods", field_selector=NON_TERMINAL_PODS)
PODS_RAY = ResourceSpec("pods-ray", "", "v1", "pods", label_selector="ray.io/cluster", field_selector=NON_TERMINAL_PODS)
PODS_KUEUE = ResourceSpec(
    "pods-kueue", "", "v1", "pods", label_selector="kueue.x-k8s.io/podset,!ray.io/cluster",
    field_selector=NON_TERMINAL_PODS,
)


def watched_resources(pods_mode: str = "all") -> tuple[ResourceSpec, ...]:
    """Every watch the controller runs; ``pods_mode`` is "all" or "labeled" (see the module doc)."""
    pods = (PODS_ALL,) if pods_mode == "all" else (PODS_RAY, PODS_KUEUE)
    return (
        WORKLOADS, CLUSTER_QUEUES, LOCAL_QUEUES, RESOURCE_FLAVORS, ADMISSION_CHECKS,
        RAY_CLUSTERS, RAY_JOBS, NODES, *pods,
    )
