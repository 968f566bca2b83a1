"""``queuepilot_pod_info``: one series = 1 per pod holding GPUs that the controller knows, carrying the
join keys that attribute any per-pod GPU series to a team, a queue and a Ray worker group.

A pure function of the ``ClusterSnapshot`` (and, optionally, the Kueue pods the controller watches):

- Ray worker pods (``ray.io/cluster`` / ``ray.io/group``, as the snapshot's worker groups hold them):
  ``raycluster`` and ``group``; the queues from the RayCluster's ``kueue.x-k8s.io/queue-name`` label,
  or, for a RayCluster a RayJob created (``ray.io/originated-from-cr-name``), from the RayJob's Workload.
- Kueue pods with ``kueue.x-k8s.io/local-queue-name`` / ``kueue.x-k8s.io/cluster-queue-name`` labels
  (Kueue sets them on the pods of admitted jobs): the queues from the labels, the flavor and job kind
  from the owning Workload (same namespace, matched through the ``kueue.x-k8s.io/podset`` label and the
  LocalQueue, else by the job name the pod name starts with).
- Any other pod the exporter reports holding a GPU: matched to an admitted Workload of its namespace
  whose job name the pod name starts with (Job ``<job>-<hash>``, PyTorchJob ``<job>-worker-0``,
  TrainJob ``<job>-node-0-0-<hash>``; the longest job name wins), else emitted with its namespace only.

Labels: ``namespace``, ``pod``, ``raycluster``, ``group``, ``cluster_queue``, ``local_queue``, ``flavor``
and ``job_kind`` (the Workload's owner kind: RayCluster, RayJob, Job, PyTorchJob, TrainJob, ...). An
unknown value is ``""``.  ``flavor`` is the Kueue ResourceFlavor of the pod's GPUs, which prices them in
``queuepilot report`` and the cost rules: the flavor its Workload was admitted with for that pod set, else
(a RayCluster Kueue does not manage, a worker group whose pod set is not named after it) the flavor whose
``nodeLabels`` select the node the pod runs on (the most specific one where several do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from autoscaler.core.snapshot import GPU_RESOURCE, ClusterSnapshot, RayClusterState, WorkloadState

LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
PODSET_LABEL = "kueue.x-k8s.io/podset"
RAY_ORIGIN_NAME_LABEL = "ray.io/originated-from-cr-name"
RAY_ORIGIN_KIND_LABEL = "ray.io/originated-from-crd"
# the pod labels the controller must keep (``pod_view(obj, keep_labels=KUEUE_POD_LABELS)``) for this
KUEUE_POD_LABELS = (LOCAL_QUEUE_LABEL, CLUSTER_QUEUE_LABEL, PODSET_LABEL)

LABELS = ("namespace", "pod", "raycluster", "group", "cluster_queue", "local_queue", "flavor", "job_kind")


@dataclass(frozen=True, slots=True)
class KueuePod:
    """What ``pod_info`` needs of a pod outside Ray (``autoscaler.cluster.views.PodView`` fits)."""

    namespace: str
    name: str
    gpu_requests: int
    labels: Mapping[str, str]
    node: str | None = None


def _gpu_flavor(w: WorkloadState, podset: str | None) -> str:
    if podset and podset in w.flavors:
        return w.flavors[podset].get(GPU_RESOURCE, "")
    found = {f[GPU_RESOURCE] for f in w.flavors.values() if GPU_RESOURCE in f}
    return found.pop() if len(found) == 1 else ""


def node_flavors(snapshot: ClusterSnapshot) -> dict[str, str]:
    """Node -> the ResourceFlavor whose ``nodeLabels`` select it: the one with the most labels where several
    do (a flavor without labels selects every node); none where two equally specific ones do."""
    best: dict[str, tuple[int, str | None]] = {}
    for f in snapshot.flavors.values():
        rank = len(f.node_labels)
        for node in f.node_names:
            have = best.get(node)
            if have is None or rank > have[0]:
                best[node] = (rank, f.name)
            elif rank == have[0]:
                best[node] = (rank, None)  # ambiguous
    return {node: name for node, (_, name) in best.items() if name is not None}


def _by_job_name(workloads: Iterable[WorkloadState], namespace: str, pod: str) -> WorkloadState | None:
    best: WorkloadState | None = None
    for w in workloads:
        if w.namespace != namespace or not w.owner_name or not w.admitted or w.finished:
            continue
        if pod.startswith(w.owner_name + "-") and (best is None or len(w.owner_name) > len(best.owner_name)):
            best = w
    return best


def _kueue_owner(
    workloads: list[WorkloadState], p: KueuePod, local_queue: str, podset: str | None,
) -> WorkloadState | None:
    """The admitted Workload of a labelled pod: same namespace and LocalQueue, a pod set of the pod's
    ``podset`` label; among those the one whose job name the pod name starts with (longest first), else
    the only candidate."""
    candidates = [
        w for w in workloads
        if w.namespace == p.namespace and w.admitted and not w.finished
        and (not local_queue or w.local_queue == local_queue)
        and (not podset or any(ps.name == podset for ps in w.pod_sets))
    ]
    named = _by_job_name(candidates, p.namespace, p.name)
    if named is not None:
        return named
    return candidates[0] if len(candidates) == 1 else None


class _Workloads:
    """The snapshot's Workloads indexed once per render: by namespace (in snapshot order) and by
    (namespace, owner kind, owner name) (first unfinished one in snapshot order), so each pod costs a
    look-up in its namespace instead of a scan of every Workload of the cluster."""

    def __init__(self, snap: ClusterSnapshot) -> None:
        self.by_namespace: dict[str, list[WorkloadState]] = {}
        self.by_owner: dict[tuple[str, str, str], tuple[int, WorkloadState]] = {}
        for i, w in enumerate(snap.workloads.values()):
            self.by_namespace.setdefault(w.namespace, []).append(w)
            if not w.finished and w.owner_kind and w.owner_name:
                self.by_owner.setdefault((w.namespace, w.owner_kind, w.owner_name), (i, w))

    def in_namespace(self, namespace: str) -> list[WorkloadState]:
        return self.by_namespace.get(namespace, [])

    def of_ray_cluster(self, rc: RayClusterState) -> WorkloadState | None:
        """The first unfinished Workload (snapshot order) owned by the RayCluster itself or by the
        RayJob (or other kind) its origin labels name."""
        origin = rc.labels.get(RAY_ORIGIN_NAME_LABEL)
        kind = rc.labels.get(RAY_ORIGIN_KIND_LABEL, "RayJob")
        found = [self.by_owner.get((rc.namespace, "RayCluster", rc.name))]
        if origin:
            found.append(self.by_owner.get((rc.namespace, kind, origin)))
        hits = [f for f in found if f is not None]
        return min(hits, key=lambda f: f[0])[1] if hits else None


def pod_info(snapshot: ClusterSnapshot, kueue_pods: Iterable[KueuePod] = ()) -> list[dict[str, str]]:
    """Label sets of ``queuepilot_pod_info``, one per GPU-holding pod, sorted by (namespace, pod)."""
    out: dict[tuple[str, str], dict[str, str]] = {}
    index = _Workloads(snapshot)
    on_node = node_flavors(snapshot)

    def flavor(w: WorkloadState | None, podset: str | None, node: str | None) -> str:
        return (_gpu_flavor(w, podset) if w else "") or on_node.get(node or "", "")

    def put(namespace: str, pod: str, **labels: str) -> None:
        row = dict.fromkeys(LABELS, "")
        row.update(namespace=namespace, pod=pod, **{k: v or "" for k, v in labels.items()})
        out.setdefault((namespace, pod), row)

    # Ray workers
    for key in sorted(snapshot.ray_clusters):
        rc = snapshot.ray_clusters[key]
        w = index.of_ray_cluster(rc)
        local_queue = rc.queue_name or (w.local_queue if w else "")
        cluster_queue = rc.cluster_queue or (w.cluster_queue if w else None) or snapshot.cluster_queue_of(
            rc.namespace, local_queue,
        ) or ""
        for g in rc.groups:
            for worker in g.workers:
                if (worker.gpus or g.gpus_per_worker) <= 0:
                    continue
                put(
                    rc.namespace, worker.pod, raycluster=rc.name, group=g.name,
                    local_queue=local_queue or "", cluster_queue=cluster_queue,
                    flavor=flavor(w, g.name.lower(), worker.node),
                    job_kind=(w.owner_kind if w else ""),
                )

    # Kueue pods with queue labels
    for p in kueue_pods:
        if p.gpu_requests <= 0 or (p.namespace, p.name) in out:
            continue
        lq = p.labels.get(LOCAL_QUEUE_LABEL, "")
        cq = p.labels.get(CLUSTER_QUEUE_LABEL, "") or snapshot.cluster_queue_of(p.namespace, lq) or ""
        podset = p.labels.get(PODSET_LABEL)
        owner = _kueue_owner(index.in_namespace(p.namespace), p, lq, podset)
        put(
            p.namespace, p.name, local_queue=lq or (owner.local_queue if owner else ""),
            cluster_queue=cq or ((owner.cluster_queue or "") if owner else ""),
            flavor=flavor(owner, podset, p.node),
            job_kind=owner.owner_kind if owner else "",
        )

    # every other pod the exporter reports holding a GPU
    for node_name in sorted(snapshot.nodes):
        for gpu in snapshot.nodes[node_name].gpus:
            if gpu.pod is None or (gpu.pod.namespace, gpu.pod.name) in out:
                continue
            owner = _by_job_name(index.in_namespace(gpu.pod.namespace), gpu.pod.namespace, gpu.pod.name)
            put(
                gpu.pod.namespace, gpu.pod.name,
                local_queue=owner.local_queue if owner else "",
                cluster_queue=(owner.cluster_queue or "") if owner else "",
                flavor=flavor(owner, None, node_name),
                job_kind=owner.owner_kind if owner else "",
            )
    return [out[k] for k in sorted(out)]
