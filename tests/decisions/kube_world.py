"""A small Kueue + KubeRay world on the fake API server for the decision scenarios.

The test plays Kueue's part, as its workload and admission-check controllers do: reserve quota
with our check Pending; on Ready set Admitted; on Retry evict (Evicted=True reason AdmissionCheck,
checks reset to Pending with retryCount+1, quota released, Requeued=False); on Rejected deactivate
(spec.active=false, Evicted reason DeactivatedDueToAdmissionCheck, quota released).  And KubeRay's
part, as its RayCluster controller does: delete every pod named in workersToDelete, then create or
delete pods to match replicas clamped to [min, max] (deleting arbitrary pods only when
autoscaling is off).  Snapshots are built with the controller's own ``views`` + ``build_snapshot``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from autoscaler.controller.snapshot_builder import BuildConfig, build_snapshot
from autoscaler.core.snapshot import ClusterSnapshot, GpuState, PodKey, RayDemand, frozen_map
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayObservation
from autoscaler.signals.ray_parse import RayNodeInfo, RayStatus
from tests.controller.scenario import PARSE, cluster_objects

KUEUE = "kueue.x-k8s.io/v1beta2"
RAY = "ray.io/v1"
GPU = "nvidia.com/gpu"
CHECK = "gpu-capacity"
CONTROLLER = "queuepilot.io/gpu-capacity"


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(type_: str, status: bool, at: float, reason: str | None = None, message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": "True" if status else "False", "lastTransitionTime": ts(at),
            "reason": reason or type_, "message": message or type_}


def container(name: str = "main", gpus: int = 0, cpu: str = "1", memory: str = "1Gi") -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": cpu, "memory": memory}
    limits: dict[str, Any] = {}
    if gpus:
        req[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    return {"name": name, "image": "busybox", "resources": {"requests": req, "limits": limits}}


# ------------------------------------------------------------------------------------ Kueue objects
def flavor(name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": {"gpu": name}}}


def cluster_queue(name: str, quotas: dict[str, int], checks: tuple[str, ...] = (CHECK,)) -> dict[str, Any]:
    spec: dict[str, Any] = {"resourceGroups": [{"coveredResources": [GPU], "flavors": [
        {"name": f, "resources": [{"name": GPU, "nominalQuota": str(q)}]} for f, q in quotas.items()]}]}
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    return {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, ns: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq}}


def admission_check(name: str = CHECK, controller: str = CONTROLLER, active: bool | None = True) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
                           "spec": {"controllerName": controller}}
    if active is not None:
        obj["status"] = {"conditions": [cond("Active", active, 1000.0)]}
    return obj


def workload(name: str, ns: str = "team-a", queue: str = "lq-a", pod_sets=(("main", 1, 8),), created: float = 1000.0,
             owner: tuple[str, str] | None = None, priority: int | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {"name": name, "namespace": ns, "creationTimestamp": ts(created)}
    if owner:
        api = {"PyTorchJob": "kubeflow.org/v1", "RayCluster": RAY, "RayJob": RAY}.get(owner[0], "batch/v1")
        md["ownerReferences"] = [{"apiVersion": api, "kind": owner[0], "name": owner[1], "uid": f"uid-{owner[1]}",
                                  "controller": True}]
    spec: dict[str, Any] = {"queueName": queue, "podSets": [
        {"name": n, "count": c, "template": {"spec": {"containers": [container(gpus=g)], "restartPolicy": "Never"}}}
        for n, c, g in pod_sets]}
    if priority is not None:
        spec["priority"] = priority
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": md, "spec": spec}


# ------------------------------------------------------------------------------------- core objects
def node(name: str, gpus: int = 8, gpu_flavor: str = "a100") -> dict[str, Any]:
    alloc = {"cpu": "64", "memory": "512Gi", GPU: str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"gpu": gpu_flavor}},
            "spec": {}, "status": {"allocatable": alloc, "capacity": alloc,
                                   "conditions": [cond("Ready", True, 1000.0, "KubeletReady")]}}


def pod(name: str, ns: str = "team-a", node_name: str | None = None, gpus: int = 0, labels: dict | None = None,
        phase: str = "Running") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(gpus=gpus)]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "creationTimestamp": ts(1000.0)},
            "spec": spec, "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}]}}


# -------------------------------------------------------------------------------------------- Ray
def ray_cluster(name: str, ns: str = "team-a", replicas: int = 3, lo: int = 0, hi: int = 8, gpus: int = 1,
                labels: dict | None = None, annotations: dict | None = None, autoscaler: bool = False,
                opted_in: bool = True) -> dict[str, Any]:
    ann = {"queuepilot.io/autoscale": "true"} if opted_in else {}
    ann.update(annotations or {})
    group = {"groupName": "gpu", "replicas": replicas, "minReplicas": lo, "maxReplicas": hi, "rayStartParams": {},
             "template": {"spec": {"containers": [container("ray-worker", gpus=gpus, cpu="8", memory="32Gi")]}}}
    return {"apiVersion": RAY, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": ann,
                         "creationTimestamp": ts(1000.0)},
            "spec": {"enableInTreeAutoscaling": autoscaler,
                     "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container("ray-head")]}}},
                     "workerGroupSpecs": [group]}}


def worker_pod(cluster: str, name: str, ns: str = "team-a", node_name: str = "n0", gpus: int = 1) -> dict[str, Any]:
    return pod(name, ns, node_name, gpus, labels={"ray.io/cluster": cluster, "ray.io/group": "gpu",
                                                  "ray.io/node-type": "worker", "ray.io/is-ray-node": "yes"})


# ----------------------------------------------------------------------------------------- world
API = {"Workload": KUEUE, "ClusterQueue": KUEUE, "LocalQueue": KUEUE, "ResourceFlavor": KUEUE,
       "AdmissionCheck": KUEUE, "RayCluster": RAY, "Node": "v1", "Pod": "v1"}


class World:
    """The store of the fake API server seen through the controller's views, plus Kueue and KubeRay."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.unhealthy: set[tuple[str, int]] = set()  # (node, gpu index) with a fatal XID
        self.gpu_util: dict[tuple[str, str], float] = {}  # (ns, pod) -> 0-1
        self.ray_busy: dict[str, bool] = {}  # pod -> Ray reports work on it
        # pod -> tasks/actor methods Ray reports running on it; by default 1 on a pod whose GPU is in
        # use and 0 on one at 0 % (idle actors hold it)
        self.ray_running: dict[str, int | None] = {}
        self.ray_demand: dict[str, tuple[RayDemand, ...]] = {}  # "ns/name" -> demand

    def add(self, *objs: dict[str, Any]) -> None:
        for o in objs:
            self.api.create(o)

    def get(self, kind: str, name: str, ns: str | None = None) -> dict[str, Any]:
        if ns is None and kind in ("Workload", "LocalQueue", "RayCluster", "Pod"):
            ns = "team-a"
        return self.api.get(API[kind], kind, name, ns)

    # ---- snapshot
    def snapshot(self, now: float, gpu_fresh: bool = True) -> ClusterSnapshot:
        objects = cluster_objects([obj for kind in PARSE for obj in self.api.list(API[kind], kind)])
        gpus = []
        pods_by_node: dict[str, list[tuple[str, str, int]]] = {}
        for p in objects.pods.values():
            if p.node and p.gpu_requests and not p.terminal:
                pods_by_node.setdefault(p.node, []).append((p.namespace, p.name, p.gpu_requests))
        for n in objects.nodes.values():
            owners: list[tuple[str, str] | None] = []
            for ns, name, g in sorted(pods_by_node.get(n.name, [])):
                owners += [(ns, name)] * g
            for i in range(n.gpu_allocatable):
                owner = owners[i] if i < len(owners) else None
                gpus.append(GpuState(
                    uuid=f"GPU-{n.name}-{i}", node=n.name, index=i, healthy=(n.name, i) not in self.unhealthy,
                    health_reason="xid_79" if (n.name, i) in self.unhealthy else "",
                    utilization=self.gpu_util.get(owner, 0.0) if owner else 0.0, utilization_source="gpu_util",
                    pod=PodKey(*owner) if owner else None))
        reading = GpuReading(tuple(gpus), now if gpu_fresh else now - 3600)
        ray = {}
        for key, rc in objects.ray_clusters.items():
            nodes = tuple(
                RayNodeInfo(node_id=p.name, node_ip="", pod_name=p.name, is_head=False, alive=True,
                            total=frozen_map({"GPU": 1.0}), available=frozen_map({}), busy=self.ray_busy.get(p.name, True),
                            idle_seconds=None, cpu_utilization=None, memory_utilization=None,
                            running_tasks=self.ray_running.get(
                                p.name, 1 if self.gpu_util.get((p.namespace, p.name), 0.0) >= 0.05 else 0))
                for p in objects.pods.values() if p.ray_cluster == rc.state.name and p.namespace == rc.state.namespace)
            status = RayStatus(demand=self.ray_demand.get(key, ()), nodes=nodes, source="state_api",
                               autoscaler_version=None, observed_at=now)
            ray[key] = RayObservation(status=status, observed_at=now)
        return build_snapshot(objects, reading, ray, now, BuildConfig())

    # ---- Kueue's part
    def reserve(self, name: str, cq: str, assignments: dict[str, str], now: float, ns: str = "team-a") -> None:
        """Quota reserved in ``cq`` with pod set -> GPU flavor; our check entry Pending."""
        w = self.get("Workload", name, ns)
        st = w.setdefault("status", {})
        conds = [c for c in st.get("conditions", []) if c["type"] not in ("QuotaReserved", "Evicted", "Requeued")]
        conds.append(cond("QuotaReserved", True, now, "QuotaReserved", f"Quota reserved in ClusterQueue {cq}"))
        conds.append(cond("Admitted", False, now, "UnsatisfiedAdmissionChecks"))
        st["conditions"] = conds
        counts = {ps["name"]: ps.get("count", 1) for ps in w["spec"]["podSets"]}
        st["admission"] = {"clusterQueue": cq, "podSetAssignments": [
            {"name": ps, "flavors": {GPU: f}, "count": counts[ps]} for ps, f in assignments.items()]}
        old = {c["name"]: c for c in st.get("admissionChecks", [])}
        entry = old.get(CHECK, {"name": CHECK, "state": "Pending", "lastTransitionTime": ts(now), "message": ""})
        entry["state"] = "Pending"
        st["admissionChecks"] = [entry]
        self.api.update_status(w)

    def kueue_react(self, now: float) -> list[tuple[str, str]]:
        """Kueue's reaction to our check states; returns (workload, what Kueue did)."""
        did = []
        for w in self.api.list(KUEUE, "Workload"):
            st = w.get("status") or {}
            entry = next((c for c in st.get("admissionChecks", []) if c["name"] == CHECK), None)
            reserved = any(c["type"] == "QuotaReserved" and c["status"] == "True" for c in st.get("conditions", []))
            if entry is None or not reserved:
                continue
            name = w["metadata"]["name"]
            others = [c for c in st["conditions"] if c["type"] not in ("Admitted", "QuotaReserved", "Evicted", "Requeued")]
            if entry["state"] == "Ready" and not any(c["type"] == "Admitted" and c["status"] == "True"
                                                     for c in st["conditions"]):
                st["conditions"] = [*others, cond("QuotaReserved", True, now), cond("Admitted", True, now)]
                did.append((name, "admitted"))
            elif entry["state"] in ("Retry", "Rejected"):
                if entry["state"] == "Rejected":
                    w["spec"]["active"] = False
                    w = self.api.replace({**w, "status": st})
                    st = w["status"]
                reason = "AdmissionCheck" if entry["state"] == "Retry" else "DeactivatedDueToAdmissionCheck"
                st["conditions"] = [*others, cond("QuotaReserved", False, now, "Pending"),
                                    cond("Evicted", True, now, reason), cond("Requeued", False, now, "AdmissionCheck")]
                st.pop("admission", None)
                prev = entry["state"]
                entry.update(state="Pending", message=f"Reset to Pending after eviction. Previously: {prev}",
                             retryCount=int(entry.get("retryCount", 0)) + 1)
                did.append((name, "evicted" if prev == "Retry" else "deactivated"))
            else:
                continue
            self.api.update_status(w)
        return did

    # ---- KubeRay's part
    def kuberay_sync(self, cluster: str, ns: str = "team-a", node_name: str = "n0") -> None:
        rc = self.get("RayCluster", cluster, ns)
        g = rc["spec"]["workerGroupSpecs"][0]
        pods = sorted(p["metadata"]["name"] for p in self.api.list("v1", "Pod", ns)
                      if p["metadata"].get("labels", {}).get("ray.io/cluster") == cluster
                      and p["metadata"].get("labels", {}).get("ray.io/node-type") != "head")  # workers only
        for name in (g.get("scaleStrategy") or {}).get("workersToDelete") or []:
            if name in pods:
                self.api.delete("v1", "Pod", name, ns)
                pods.remove(name)
        desired = max(g.get("minReplicas", 0), min(g.get("maxReplicas", 2**31 - 1), g.get("replicas", 0)))
        i = 0
        while len(pods) < desired:
            name = f"{cluster}-gpu-worker-new{i}"
            i += 1
            if name not in pods:
                self.api.create(worker_pod(cluster, name, ns, node_name))
                pods.append(name)
        if len(pods) > desired and not rc["spec"].get("enableInTreeAutoscaling"):
            for name in pods[: len(pods) - desired]:  # "random": list order
                self.api.delete("v1", "Pod", name, ns)

    def check_entry(self, name: str, ns: str = "team-a") -> dict[str, Any]:
        w = self.get("Workload", name, ns)
        return next(c for c in w["status"]["admissionChecks"] if c["name"] == CHECK)
