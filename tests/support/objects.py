"""Kubernetes objects as dicts, shaped as Kueue v1beta2 / KubeRay v1 / core v1 serve them: the one builder
of objects for every test (controller, fake API server, webhook, chart, security, multicluster, system).

They are valid against the real CRDs in $QUEUEPILOT_SHARED/crds, which the fake API server checks on every
write (tests/fakeapi_tests/test_objects.py creates one of each through it). ``created=None`` leaves out what the
server sets (``creationTimestamp``, ``uid``), as a client sends an object; ``metadata`` builds the metadata
alone (labels and annotations only where given).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSION = "v1beta2"
KUEUE = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
RAY = "ray.io/v1"
GPU = "nvidia.com/gpu"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
OPT_IN = {"queuepilot.io/autoscale": "true"}  # the annotation that opts a RayCluster in to scaling
RAY_TOKEN_SECRET = "queuepilot.io/ray-token-secret"  # the annotation naming the Secret with its Ray token
RAY_IMAGE = "rayproject/ray:2.40.0"


def ts(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def metadata(name: str | None, namespace: str | None = None, *, labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, created: float | None = None,
             generate_name: str | None = None) -> dict[str, Any]:
    md: dict[str, Any] = {}
    if name is not None:
        md["name"] = name
    if generate_name is not None:
        md["generateName"] = generate_name
    if namespace is not None:
        md["namespace"] = namespace
    if labels is not None:
        md["labels"] = labels
    if annotations is not None:
        md["annotations"] = annotations
    if created is not None:
        md["creationTimestamp"] = ts(created)
    return md


def condition(type_: str, status: bool, at: float, reason: str | None = None) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True" if status else "False",
        "lastTransitionTime": ts(at),
        "reason": reason or type_,
        "message": f"{type_} is {status}",
    }


def check_state(name: str, state: str, message: str = "", when: float | str = "2026-08-22T10:00:00Z") -> dict:
    """One entry of a Workload's ``status.admissionChecks``."""
    return {"name": name, "state": state, "message": message,
            "lastTransitionTime": when if isinstance(when, str) else ts(when)}


# ------------------------------------------------------------------------------------------ core
def namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def secret(name: str, namespace: str, data: dict[str, str], type_: str | None = None) -> dict[str, Any]:
    """``data``: values already base64-encoded, as the API serves them."""
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
                           "data": data}
    if type_ is not None:
        obj["type"] = type_
    return obj


def container(name: str = "main", gpus: int = 0, cpu: str = "1", memory: str = "1Gi", limits_only: bool = False,
              image: str = "busybox") -> dict:
    res: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        res[GPU] = str(gpus)
    body = {"limits": res} if limits_only else {"requests": res, "limits": {GPU: str(gpus)} if gpus else {}}
    return {"name": name, "image": image, "resources": body}


def pod_template(gpus: int = 0, node_selector: dict | None = None, **kw: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container(gpus=gpus, **kw)], "restartPolicy": "Never"}
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"spec": spec}


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None, ready: bool = True,
         unschedulable: bool = False) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"unschedulable": True} if unschedulable else {},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
            "capacity": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
            "conditions": [
                {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ts(1000),
                 "reason": "KubeletReady", "message": "ok"}
            ],
        },
    }
    return obj


def pod(name: str, namespace: str = "team-a", node: str | None = None, gpus: int = 0, phase: str = "Running",
        labels: dict[str, str] | None = None, ip: str | None = None, ready: bool = True,
        created: float | None = 1000.0) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": [
        {"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    spec: dict[str, Any] = {"containers": [container(gpus=gpus)]}
    if node:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata(name, namespace, labels=labels or {}, created=created),
        "spec": spec,
        "status": status,
    }


def ray_worker_pod(cluster: str, group: str, name: str, namespace: str = "team-a", node: str | None = None,
                   gpus: int = 1, ip: str | None = None) -> dict[str, Any]:
    return pod(name, namespace, node=node, gpus=gpus, ip=ip, labels={
        "ray.io/cluster": cluster, "ray.io/group": group, "ray.io/node-type": "worker", "ray.io/is-ray-node": "yes"})


def ray_head_pod(cluster: str, namespace: str = "team-a", ip: str | None = "10.0.0.1",
                 name: str | None = None) -> dict[str, Any]:
    """KubeRay's head pod of ``cluster``: where the controller reads Ray demand (its ``status.podIP``)."""
    return pod(name or f"{cluster}-head", namespace, ip=ip, labels={
        "ray.io/cluster": cluster, "ray.io/node-type": "head", "ray.io/is-ray-node": "yes"})


# ----------------------------------------------------------------------------------------- Kueue
def workload(
    name: str,
    namespace: str = "team-a",
    queue: str = "lq-a",
    created: float | None = 1_000.0,
    pod_sets: list[tuple[str, int, int]] | None = None,  # (name, count, gpus per pod)
    conditions: list[dict] | None = None,
    admission: dict | None = None,
    checks: list[dict] | None = None,
    active: bool | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod_sets = pod_sets if pod_sets is not None else [("main", 1, 8)]
    spec: dict[str, Any] = {
        "queueName": queue,
        "podSets": [{"name": n, "count": c, "template": pod_template(gpus=g)} for n, c, g in pod_sets],
    }
    if active is not None:
        spec["active"] = active
    md = metadata(name, namespace, labels=labels, created=created)
    if created is not None:
        md["uid"] = f"uid-{name}"
    obj: dict[str, Any] = {"apiVersion": KUEUE, "kind": "Workload", "metadata": md, "spec": spec}
    status: dict[str, Any] = {}
    if conditions:
        status["conditions"] = conditions
    if admission:
        status["admission"] = admission
    if checks:
        status["admissionChecks"] = checks
    if status:
        obj["status"] = status
    return obj


# Kubeflow job kinds as Kueue's integrations turn them into Workloads (no Kubeflow CRD is needed: the
# Workload's ownerReferences and podSets are what Kueue and queuepilot read)
PYTORCHJOB = ("kubeflow.org/v1", "PyTorchJob")
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")


def owned_by(obj: dict[str, Any], api_version: str, kind: str, name: str) -> dict[str, Any]:
    """``obj`` with a controller ownerReference to the job ``kind``/``name`` (what Kueue's job integrations set)."""
    obj["metadata"]["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": name,
                                           "uid": f"uid-{kind.lower()}-{name}", "controller": True,
                                           "blockOwnerDeletion": True}]
    return obj


def pytorchjob_workload(job: str, namespace: str = "team-a", queue: str = "lq-a", workers: int = 1,
                        gpus_per_pod: int = 8, master_gpus: int | None = None,
                        created: float | None = 1_000.0) -> dict[str, Any]:
    """The Workload Kueue's pytorchjob integration makes for a PyTorchJob (``kubeflow.org/v1``): one pod set
    per replica type, lower-cased, ``master`` (1 pod) then ``worker`` (``workers`` pods), each with the
    replica template's requests; named ``pytorchjob-<job>-<hash>``."""
    master = gpus_per_pod if master_gpus is None else master_gpus
    obj = workload(f"pytorchjob-{job}-5b3e1", namespace, queue, created=created,
                   pod_sets=[("master", 1, master), ("worker", workers, gpus_per_pod)])
    return owned_by(obj, *PYTORCHJOB, job)


def trainjob_workload(job: str, namespace: str = "team-a", queue: str = "lq-a", nodes: int = 2,
                      gpus_per_node: int = 8, initializers: bool = True,
                      created: float | None = 1_000.0) -> dict[str, Any]:
    """The Workload Kueue's trainjob integration makes for a TrainJob (``trainer.kubeflow.org/v1alpha1``): one
    pod set per replicatedJob of the JobSet its runtime creates, named after it; a torch runtime with
    initializers has ``dataset-initializer`` and ``model-initializer`` (1 pod each, no GPU) and ``node``
    (``numNodes`` pods with the trainer's GPUs); named ``trainjob-<job>-<hash>``."""
    pod_sets = [("dataset-initializer", 1, 0), ("model-initializer", 1, 0)] if initializers else []
    pod_sets.append(("node", nodes, gpus_per_node))
    obj = workload(f"trainjob-{job}-8c2d4", namespace, queue, created=created, pod_sets=pod_sets)
    return owned_by(obj, *TRAINJOB, job)


def admission(cluster_queue: str, assignments: list[tuple[str, str, int]]) -> dict[str, Any]:
    """assignments: (podset name, GPU flavor, count)."""
    return {
        "clusterQueue": cluster_queue,
        "podSetAssignments": [
            {"name": n, "flavors": {GPU: f}, "count": c} for n, f, c in assignments
        ],
    }


def cluster_queue(
    name: str,
    quotas: dict[str, int],  # flavor -> nominal GPUs, in resourceGroups order
    cohort: str | None = None,
    checks: tuple[str, ...] = (),
    used: dict[str, int] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": [GPU],
                "flavors": [{"name": f, "resources": [{"name": GPU, "nominalQuota": str(q)}]} for f, q in quotas.items()],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    obj = {"apiVersion": KUEUE, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}
    if used:
        obj["status"] = {
            "flavorsUsage": [{"name": f, "resources": [{"name": GPU, "total": str(n)}]} for f, n in used.items()]
        }
    return obj


def local_queue(name: str, namespace: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": cq}}


def resource_flavor(name: str, node_labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": name},
            "spec": {"nodeLabels": node_labels}}


def admission_check(name: str, controller: str = "queuepilot.io/gpu-capacity", active: bool | None = True,
                    parameters: dict[str, str] | None = None) -> dict:
    """``parameters``: apiGroup, kind and name of the check's configuration object."""
    obj: dict[str, Any] = {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": name},
                           "spec": {"controllerName": controller}}
    if parameters is not None:
        obj["spec"]["parameters"] = parameters
    if active is not None:
        obj["status"] = {"conditions": [condition("Active", active, 1000.0, "Active")]}
    return obj


def multikueue_cluster(name: str, kubeconfig_secret: str, active: bool = True) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": kubeconfig_secret}}},
            "status": {"conditions": [condition("Active", active, 1000.0, "Active")]}}


def multikueue_config(name: str, clusters: list[str]) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "MultiKueueConfig", "metadata": {"name": name},
            "spec": {"clusters": list(clusters)}}


# ------------------------------------------------------------------------------------------- Ray
def ray_cluster(
    name: str,
    namespace: str = "team-a",
    groups: list[dict[str, Any]] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    autoscaler: bool = False,
    head_ip: str | None = "10.0.0.1",
    dashboard_port: int | None = None,
    ray_version: str | None = None,
    created: float | None = 1000.0,
) -> dict[str, Any]:
    """``head_ip=None``: no ``status`` (as a client creates it); ``ray_version`` sets ``spec.rayVersion``."""
    groups = groups if groups is not None else [ray_group("gpu", replicas=2, min_replicas=0, max_replicas=4, gpus=1)]
    obj: dict[str, Any] = {
        "apiVersion": RAY,
        "kind": "RayCluster",
        "metadata": metadata(name, namespace, labels=labels or {}, annotations=annotations or {}, created=created),
        "spec": ray_cluster_spec(groups, autoscaler=autoscaler, ray_version=ray_version),
    }
    if dashboard_port:  # the head container's port named "dashboard" (the controller reads the spec, not status)
        head = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
        head["ports"] = [{"name": "dashboard", "containerPort": int(dashboard_port)}]
    status: dict[str, Any] = {}
    if head_ip:
        status["head"] = {"serviceIP": head_ip, "podIP": "10.9.9.9", "serviceName": f"{name}-head-svc"}
    if dashboard_port:
        status["endpoints"] = {"dashboard": str(dashboard_port)}
    if status:
        obj["status"] = status
    return obj


def ray_cluster_spec(groups: list[dict[str, Any]], autoscaler: bool = False, ray_version: str | None = None,
                     image: str = "busybox") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "enableInTreeAutoscaling": autoscaler,
        "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [container("ray-head",
                                                                                                image=image)]}}},
        "workerGroupSpecs": groups,
    }
    if ray_version is not None:
        spec["rayVersion"] = ray_version
    return spec


def ray_group(name: str, replicas: int, min_replicas: int, max_replicas: int, gpus: int = 1,
              start_params: dict[str, str] | None = None, workers_to_delete: list[str] | None = None,
              image: str = "busybox") -> dict:
    g: dict[str, Any] = {
        "groupName": name,
        "replicas": replicas,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "rayStartParams": start_params or {},
        "template": {"spec": {"containers": [container("ray-worker", gpus=gpus, cpu="8", memory="32Gi",
                                                       image=image)]}},
    }
    if workers_to_delete is not None:
        g["scaleStrategy"] = {"workersToDelete": workers_to_delete}
    return g


def ray_job(name: str | None, namespace: str, cluster_spec: dict[str, Any], labels: dict[str, str] | None = None,
            generate_name: str | None = None, entrypoint: str = "python train.py") -> dict[str, Any]:
    """A RayJob that brings its own cluster (``spec.rayClusterSpec``)."""
    return {"apiVersion": RAY, "kind": "RayJob",
            "metadata": metadata(name, namespace, labels=labels, generate_name=generate_name),
            "spec": {"entrypoint": entrypoint, "shutdownAfterJobFinishes": True, "rayClusterSpec": cluster_spec}}
