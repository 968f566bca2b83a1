"""Typed, immutable views of raw Kubernetes objects (the JSON dicts a list or watch returns).

Each ``*_view`` function reads only the fields queuepilot uses, ignores every other field, and
raises :class:`MalformedObject` with a short, human-readable reason when a field it needs has the
wrong shape.  The watch caches call them once per received object version (so a malformed object
is counted and logged once per resourceVersion, not once per loop) and keep only the view, never
the raw dict -- that is what keeps the controller small at 50 000 Workloads.

Views that need other objects to be complete (a Workload's ClusterQueue through its LocalQueue, a
Node's requested GPUs from the pods bound to it, a RayCluster's workers from its pods) are left
partial here and completed by ``autoscaler.controller.snapshot_builder``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from types import MappingProxyType
from typing import Any

from autoscaler.core.policy.annotations import parse_policy_annotations
from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    AdmissionCheckObj,
    CheckState,
    ClusterQueueState,
    FlavorState,
    LocalQueueState,
    NodeState,
    PodSetSpec,
    RayClusterState,
    RayJobState,
    WorkerGroupState,
    WorkloadState,
)

EMPTY: Mapping[str, Any] = MappingProxyType({})
RAY_DASHBOARD_PORT = 8265
RAY_CLUSTER_LABEL = "ray.io/cluster"
RAY_GROUP_LABEL = "ray.io/group"
RAY_NODE_TYPE_LABEL = "ray.io/node-type"
# A Secret in the RayCluster's own namespace whose key ``token`` is the dashboard's bearer token.
TOKEN_SECRET_ANNOTATION = "queuepilot.io/ray-token-secret"
# "https": poll the dashboard over TLS (verified against the controller's configured CA file).
DASHBOARD_SCHEME_ANNOTATION = "queuepilot.io/ray-dashboard-scheme"
TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})
# Taints the node lifecycle controller sets; a node carrying one with NoSchedule/NoExecute takes no new pod.
NODE_CONDITION_TAINTS = frozenset(
    {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/unschedulable",
        "node.kubernetes.io/memory-pressure",
        "node.kubernetes.io/disk-pressure",
        "node.kubernetes.io/pid-pressure",
        "node.kubernetes.io/network-unavailable",
    }
)


class MalformedObject(ValueError):
    """A field queuepilot needs is missing or has the wrong shape; the message says which."""


# ------------------------------------------------------------------------------------ primitives
_QUANTITY = re.compile(r"^([+-]?[0-9.]+(?:[eE][+-]?[0-9]+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1), "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9, "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15, "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10, "Mi": Decimal(2) ** 20, "Gi": Decimal(2) ** 30, "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50, "Ei": Decimal(2) ** 60,
}


def parse_quantity(value: Any) -> float:
    """A Kubernetes resource quantity ("500m", "4Gi", "1e3", 8) as a float."""
    if isinstance(value, bool):
        raise MalformedObject(f"quantity {value!r} is not a number")
    if isinstance(value, int | float):
        return float(value)
    if not isinstance(value, str):
        raise MalformedObject(f"quantity {value!r} is not a string or number")
    m = _QUANTITY.match(value.strip())
    if not m or m.group(2) not in _SUFFIX:
        raise MalformedObject(f"quantity {value!r} is not a Kubernetes quantity")
    try:
        return float(Decimal(m.group(1)) * _SUFFIX[m.group(2)])
    except InvalidOperation as e:
        raise MalformedObject(f"quantity {value!r} is not a Kubernetes quantity") from e


def parse_time(value: Any) -> float | None:
    """RFC 3339 time (metav1.Time or MicroTime) as unix seconds; None when absent."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise MalformedObject(f"time {value!r} is not a string")
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError as e:
        raise MalformedObject(f"time {value!r} is not RFC 3339") from e


def _dict(obj: Any, where: str) -> Mapping[str, Any]:
    if obj is None:
        return EMPTY
    if not isinstance(obj, dict):
        raise MalformedObject(f"{where} is {type(obj).__name__}, expected an object")
    return obj


def _list(obj: Any, where: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise MalformedObject(f"{where} is {type(obj).__name__}, expected a list")
    return obj


def _str_map(obj: Any, where: str) -> Mapping[str, str]:
    d = _dict(obj, where)
    if not d:
        return EMPTY
    return MappingProxyType({str(k): str(v) for k, v in d.items()})


def _int(obj: Any, where: str, default: int | None = None) -> int | None:
    if obj is None:
        return default
    if isinstance(obj, bool) or not isinstance(obj, int | float):
        raise MalformedObject(f"{where} is {obj!r}, expected an integer")
    return int(obj)


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    md = _dict(obj.get("metadata"), "metadata")
    if not md.get("name") or not isinstance(md.get("name"), str):
        raise MalformedObject("metadata.name is missing")
    return md


def object_key(obj: Mapping[str, Any]) -> str:
    """The cache key of a raw object: "ns/name" for namespaced objects, "name" otherwise."""
    md = obj.get("metadata")
    if not isinstance(md, dict):
        md = {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


_TEXT_MAX = 64  # a RayJob status word (jobStatus, jobDeploymentStatus) longer than this is not one


def ray_job_view(obj: Mapping[str, Any]) -> RayJobState:
    """A RayJob's status as the stall detector reads it (``status`` is the operator's, but a tenant
    can write it too: every field is bounded, and a value that is not a word is dropped)."""
    md = _metadata(obj)
    status = _dict(obj.get("status"), "status")

    def word(key: str) -> str:
        v = status.get(key)
        return v if isinstance(v, str) and len(v) <= _TEXT_MAX and v.isalnum() else ""

    cluster = status.get("rayClusterName")
    return RayJobState(
        namespace=str(md.get("namespace", "")),
        name=md["name"],
        uid=str(md.get("uid", "")),
        job_status=word("jobStatus").upper(),
        deployment_status=word("jobDeploymentStatus"),
        cluster_name=cluster if isinstance(cluster, str) and len(cluster) <= 253 else "",
        end_time=parse_time(status.get("endTime")),
    )


def _conditions(status: Mapping[str, Any]) -> dict[str, tuple[bool, float | None]]:
    out: dict[str, tuple[bool, float | None]] = {}
    for i, c in enumerate(_list(status.get("conditions"), "status.conditions")):
        c = _dict(c, f"status.conditions[{i}]")
        if not isinstance(c.get("type"), str):
            raise MalformedObject(f"status.conditions[{i}].type is missing")
        out[c["type"]] = (c.get("status") == "True", parse_time(c.get("lastTransitionTime")))
    return out


# the eviction reasons Kueue gives a workload whose admission check answered Retry or Rejected: they come
# before admission, so they say nothing of whether the workload was ever admitted
_CHECK_EVICTIONS = frozenset({"AdmissionCheck", "DeactivatedDueToAdmissionCheck"})
# v1beta2's name; v1beta1 spelt it with a typo (a server converting for an old client may still say so)
_PAST_EXECUTION = ("accumulatedPastExecutionTimeSeconds", "accumulatedPastExexcutionTimeSeconds")


def _was_admitted(status: Mapping[str, Any]) -> bool:
    """Whether a workload that is not admitted now was admitted before: Kueue adds the admitted time to
    ``status.accumulatedPastExecutionTimeSeconds`` when it leaves Admitted, and counts evictions other
    than an admission check's by reason in ``status.schedulingStats.evictions``.  (Kueue may set
    ``Admitted=False`` on a workload never admitted, so the condition alone does not tell.)"""
    for key in _PAST_EXECUTION:
        if (_int(status.get(key), f"status.{key}") or 0) > 0:
            return True
    stats = _dict(status.get("schedulingStats"), "status.schedulingStats")
    for i, e in enumerate(_list(stats.get("evictions"), "status.schedulingStats.evictions")):
        e = _dict(e, f"status.schedulingStats.evictions[{i}]")
        count = _int(e.get("count"), f"status.schedulingStats.evictions[{i}].count") or 0
        if count > 0 and str(e.get("reason", "")) not in _CHECK_EVICTIONS:
            return True
    return False


# ------------------------------------------------------------------------------ pod templates
def _container_resources(c: Mapping[str, Any], where: str) -> dict[str, float]:
    """A container's requests; where a resource has only a limit, the limit (Kubernetes defaulting)."""
    res = _dict(c.get("resources"), f"{where}.resources")
    req = {k: parse_quantity(v) for k, v in _dict(res.get("requests"), f"{where}.resources.requests").items()}
    for k, v in _dict(res.get("limits"), f"{where}.resources.limits").items():
        if k not in req:
            req[k] = parse_quantity(v)
    return req


def pod_spec_requests(spec: Mapping[str, Any], where: str = "spec") -> dict[str, float]:
    """Effective per-pod requests as the scheduler counts them.

    max(sum of app containers + restartable (sidecar) init containers, each other init container),
    plus ``spec.overhead``.
    """
    total: dict[str, float] = {}
    for i, c in enumerate(_list(spec.get("containers"), f"{where}.containers")):
        for k, v in _container_resources(_dict(c, f"{where}.containers[{i}]"), f"{where}.containers[{i}]").items():
            total[k] = total.get(k, 0.0) + v
    sidecars: dict[str, float] = {}
    init_peak: dict[str, float] = {}
    for i, c in enumerate(_list(spec.get("initContainers"), f"{where}.initContainers")):
        c = _dict(c, f"{where}.initContainers[{i}]")
        r = _container_resources(c, f"{where}.initContainers[{i}]")
        if c.get("restartPolicy") == "Always":
            for k, v in r.items():
                sidecars[k] = sidecars.get(k, 0.0) + v
        else:
            for k, v in r.items():  # an init container runs beside the sidecars started before it
                init_peak[k] = max(init_peak.get(k, 0.0), v + sidecars.get(k, 0.0))
    for k, v in sidecars.items():
        total[k] = total.get(k, 0.0) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0.0), v)
    for k, v in _dict(spec.get("overhead"), f"{where}.overhead").items():
        total[k] = total.get(k, 0.0) + parse_quantity(v)
    return total


def _gpus(requests: Mapping[str, float]) -> int:
    return int(requests.get(GPU_RESOURCE, 0))


# ------------------------------------------------------------------------------------- Kueue
def workload_view(obj: Mapping[str, Any]) -> WorkloadState:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    status = _dict(obj.get("status"), "status")
    created = parse_time(md.get("creationTimestamp"))
    if created is None:
        raise MalformedObject("metadata.creationTimestamp is missing")
    pod_sets = []
    for i, ps in enumerate(_list(spec.get("podSets"), "spec.podSets")):
        ps = _dict(ps, f"spec.podSets[{i}]")
        name = ps.get("name")
        if not isinstance(name, str) or not name:
            raise MalformedObject(f"spec.podSets[{i}].name is missing")
        tmpl_spec = _dict(_dict(ps.get("template"), f"spec.podSets[{i}].template").get("spec"),
                          f"spec.podSets[{i}].template.spec")
        pod_sets.append(
            PodSetSpec(
                name=name,
                count=_int(ps.get("count"), f"spec.podSets[{i}].count", 1) or 0,
                requests=MappingProxyType(pod_spec_requests(tmpl_spec, f"spec.podSets[{i}].template.spec")),
                node_selector=_str_map(tmpl_spec.get("nodeSelector"), f"spec.podSets[{i}].template.spec.nodeSelector"),
            )
        )
    conds = _conditions(status)
    qr, qr_at = conds.get("QuotaReserved", (False, None))
    adm, adm_at = conds.get("Admitted", (False, None))
    admission = _dict(status.get("admission"), "status.admission")
    flavors: dict[str, Mapping[str, str]] = {}
    counts: dict[str, int] = {}
    for i, a in enumerate(_list(admission.get("podSetAssignments"), "status.admission.podSetAssignments")):
        a = _dict(a, f"status.admission.podSetAssignments[{i}]")
        name = str(a.get("name", ""))
        flavors[name] = _str_map(a.get("flavors"), f"status.admission.podSetAssignments[{i}].flavors")
        c = _int(a.get("count"), f"status.admission.podSetAssignments[{i}].count")
        if c is not None:
            counts[name] = c
    for ps in pod_sets:
        counts.setdefault(ps.name, ps.count)
    checks = []
    for i, c in enumerate(_list(status.get("admissionChecks"), "status.admissionChecks")):
        c = _dict(c, f"status.admissionChecks[{i}]")
        if not isinstance(c.get("name"), str):
            raise MalformedObject(f"status.admissionChecks[{i}].name is missing")
        checks.append(
            CheckState(
                name=c["name"],
                state=str(c.get("state", "")),
                last_transition_time=parse_time(c.get("lastTransitionTime")),
                message=str(c.get("message", "")),
                requeue_after_seconds=_int(c.get("requeueAfterSeconds"), f"status.admissionChecks[{i}].requeueAfterSeconds"),
            )
        )
    owner_kind, owner_name = "", ""
    for ref in _list(md.get("ownerReferences"), "metadata.ownerReferences"):
        if isinstance(ref, dict) and (ref.get("controller") or not owner_kind):
            owner_kind, owner_name = str(ref.get("kind", "")), str(ref.get("name", ""))
    requeued = conds.get("Requeued")
    admission_lost_at = adm_at if not adm and adm_at is not None and _was_admitted(status) else None
    active = spec.get("active", True)
    cq = admission.get("clusterQueue")
    return WorkloadState(
        namespace=str(md.get("namespace", "")),
        name=md["name"],
        uid=str(md.get("uid", "")),
        resource_version=str(md.get("resourceVersion", "")),
        local_queue=str(spec.get("queueName") or ""),
        cluster_queue=str(cq) if cq else None,
        created_at=created,
        pod_sets=tuple(pod_sets),
        priority=_int(spec.get("priority"), "spec.priority", 0) or 0,
        active=active is not False,
        quota_reserved=qr,
        quota_reserved_at=qr_at if qr else None,
        admitted=adm,
        admitted_at=adm_at if adm else None,
        evicted=conds.get("Evicted", (False, None))[0],
        finished=conds.get("Finished", (False, None))[0],
        requeued_at=requeued[1] if requeued else None,
        admission_lost_at=admission_lost_at,
        flavors=MappingProxyType(flavors) if flavors else EMPTY,
        admitted_counts=MappingProxyType(counts) if counts else EMPTY,
        checks=tuple(checks),
        owner_kind=owner_kind,
        owner_name=owner_name,
        deactivations=_deactivations(status),
    )


MAX_EVICTION_STATS = 64  # entries of status.schedulingStats.evictions read (one per reason and cause)


def _deactivations(status: Mapping[str, Any]) -> int:
    """How many times Kueue evicted the workload as deactivated: the counts of
    ``status.schedulingStats.evictions`` whose reason is ``Deactivated`` or ``DeactivatedDueTo<cause>``.
    The entries past the first ``MAX_EVICTION_STATS`` are not read."""
    stats = _dict(status.get("schedulingStats"), "status.schedulingStats")
    total = 0
    for i, e in enumerate(_list(stats.get("evictions"), "status.schedulingStats.evictions")[:MAX_EVICTION_STATS]):
        e = _dict(e, f"status.schedulingStats.evictions[{i}]")
        reason = e.get("reason")
        if isinstance(reason, str) and (reason == "Deactivated" or reason.startswith("DeactivatedDueTo")):
            total += max(0, _int(e.get("count"), f"status.schedulingStats.evictions[{i}].count", 0) or 0)
    return min(total, 1 << 31)


def _flavor_usage(status: Mapping[str, Any], key: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, f in enumerate(_list(status.get(key), f"status.{key}")):
        f = _dict(f, f"status.{key}[{i}]")
        for r in _list(f.get("resources"), f"status.{key}[{i}].resources"):
            if isinstance(r, dict) and r.get("name") == GPU_RESOURCE:
                out[str(f.get("name"))] = parse_quantity(r.get("total", 0))
    return out


def cluster_queue_view(obj: Mapping[str, Any]) -> ClusterQueueState:
    """GPU quota per flavor; usage = max(flavorsReservation, flavorsUsage) (reserved quota is spoken for)."""
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    status = _dict(obj.get("status"), "status")
    nominal: dict[str, float] = {}
    borrowing: dict[str, float | None] = {}
    order: list[str] = []
    for gi, g in enumerate(_list(spec.get("resourceGroups"), "spec.resourceGroups")):
        g = _dict(g, f"spec.resourceGroups[{gi}]")
        for fi, f in enumerate(_list(g.get("flavors"), f"spec.resourceGroups[{gi}].flavors")):
            f = _dict(f, f"spec.resourceGroups[{gi}].flavors[{fi}]")
            fname = f.get("name")
            if not isinstance(fname, str):
                raise MalformedObject(f"spec.resourceGroups[{gi}].flavors[{fi}].name is missing")
            for ri, r in enumerate(_list(f.get("resources"), f"spec.resourceGroups[{gi}].flavors[{fi}].resources")):
                r = _dict(r, f"spec.resourceGroups[{gi}].flavors[{fi}].resources[{ri}]")
                if r.get("name") != GPU_RESOURCE:
                    continue
                nominal[fname] = nominal.get(fname, 0.0) + parse_quantity(r.get("nominalQuota", 0))
                bl = r.get("borrowingLimit")
                borrowing[fname] = None if bl is None else parse_quantity(bl)
                if fname not in order:
                    order.append(fname)
    used = _flavor_usage(status, "flavorsUsage")
    for k, v in _flavor_usage(status, "flavorsReservation").items():
        used[k] = max(used.get(k, 0.0), v)
    strategy = _dict(spec.get("admissionChecksStrategy"), "spec.admissionChecksStrategy")
    checks = tuple(
        str(_dict(c, "spec.admissionChecksStrategy.admissionChecks[]").get("name", ""))
        for c in _list(strategy.get("admissionChecks"), "spec.admissionChecksStrategy.admissionChecks")
    )
    cohort = spec.get("cohortName") or spec.get("cohort")
    return ClusterQueueState(
        name=md["name"],
        cohort=str(cohort) if cohort else None,
        nominal_gpus=MappingProxyType(nominal),
        borrowing_limit_gpus=MappingProxyType(borrowing),
        used_gpus=MappingProxyType(used),
        admission_checks=checks,
        flavor_order=tuple(order),
    )


def local_queue_view(obj: Mapping[str, Any]) -> LocalQueueState:
    md = _metadata(obj)
    cq = _dict(obj.get("spec"), "spec").get("clusterQueue")
    if not isinstance(cq, str) or not cq:
        raise MalformedObject("spec.clusterQueue is missing")
    return LocalQueueState(namespace=str(md.get("namespace", "")), name=md["name"], cluster_queue=cq)


def resource_flavor_view(obj: Mapping[str, Any]) -> FlavorState:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    tolerations = tuple(
        _str_map(t, "spec.tolerations[]") for t in _list(spec.get("tolerations"), "spec.tolerations")
    )
    return FlavorState(
        name=md["name"], node_labels=_str_map(spec.get("nodeLabels"), "spec.nodeLabels"), tolerations=tolerations
    )


def admission_check_view(obj: Mapping[str, Any]) -> AdmissionCheckObj:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    cn = spec.get("controllerName")
    if not isinstance(cn, str):
        raise MalformedObject("spec.controllerName is missing")
    active = _conditions(_dict(obj.get("status"), "status")).get("Active", (False, None))[0]
    return AdmissionCheckObj(
        name=md["name"], controller_name=cn, active=active, resource_version=str(md.get("resourceVersion", ""))
    )


# ------------------------------------------------------------------------------------------ Ray
@dataclass(frozen=True, slots=True)
class RayDashboardTarget:
    """Where the controller may ask one RayCluster's head for its demand and node state, and with what.

    Built only from the RayCluster's name, namespace, spec and annotations, never from ``status``
    (which names any address the operator, or whoever edits status, writes there): the host is the
    cluster's own head Service in the cluster's own namespace (KubeRay's naming), so whatever is
    sent there stays inside that namespace.  The address is that namespace's running head pod
    (``ray.io/cluster=<name>``, ``ray.io/node-type=head``) as the controller's pod cache shows it,
    or the head Service's DNS name before one is seen.  ``token_secret``: the Secret (key ``token``) in
    ``namespace`` whose bearer token goes with the requests, None for none (or the shared,
    single-tenant token when the controller was given one).
    """

    namespace: str
    cluster: str
    service: str
    port: int = RAY_DASHBOARD_PORT
    scheme: str = "http"
    token_secret: str | None = None
    # the IP of the cluster's running head pod as the pod cache shows it (``status.podIP``, written by
    # the kubelet, in the cluster's own namespace); None until one is seen
    head_ip: str | None = None
    # a cluster that did not opt in to scaling: asked only while the stall detector needs Ray's view of
    # its workload (``autoscaler.core.policy.stall.ray_clusters_to_watch``), and never given the shared
    # ``--ray-token-file`` token (only the Secret it names in its own namespace)
    evidence_only: bool = False

    @property
    def host(self) -> str:
        """The head pod's IP when the pod cache has one, else ``<head service>.<namespace>.svc`` (resolves
        in any cluster domain through the pod's DNS search path)."""
        if self.head_ip:
            return f"[{self.head_ip}]" if ":" in self.head_ip else self.head_ip
        return f"{self.service}.{self.namespace}.svc"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class RayClusterView:
    """A RayCluster without its workers and demand (the builder adds those), plus where its dashboard
    may be polled: ``dashboard`` is None unless the cluster opted in (``queuepilot.io/autoscale: "true"``);
    ``evidence_head`` is the same kind of target for a cluster that did not (``evidence_only``), asked
    only while the stall detector needs Ray's view of its workload.  ``head_error``: why no such target
    could be derived from a cluster that did not opt in (an annotation or head spec queuepilot cannot
    use; the view itself stays usable)."""

    state: RayClusterState
    dashboard: RayDashboardTarget | None
    evidence_head: RayDashboardTarget | None = None
    head_error: str = ""

    @property
    def head(self) -> RayDashboardTarget | None:
        """Where this cluster's head may be asked: the opted-in target, else the evidence-only one."""
        return self.dashboard if self.dashboard is not None else self.evidence_head


def _ray_resources(start: Mapping[str, Any], extra: Mapping[str, Any], req: Mapping[str, float]) -> dict[str, float]:
    """Ray's logical resources of a node: rayStartParams num-cpus/num-gpus/memory/resources override the pod's."""
    out: dict[str, float] = {}
    if "cpu" in req:
        out["CPU"] = req["cpu"]
    if _gpus(req):
        out["GPU"] = float(_gpus(req))
    if "memory" in req:
        out["memory"] = req["memory"]
    for param, name in (("num-cpus", "CPU"), ("num-gpus", "GPU"), ("memory", "memory")):
        if param in start:
            try:
                out[name] = float(str(start[param]).strip("'\""))
            except ValueError as e:
                raise MalformedObject(f"rayStartParams.{param} {start[param]!r} is not a number") from e
    if "resources" in start:
        raw = str(start["resources"]).strip()
        if raw[:1] in "'\"":
            raw = raw[1:-1]
        try:
            custom = json.loads(raw.replace('\\"', '"'))
        except ValueError as e:
            raise MalformedObject(f"rayStartParams.resources {start['resources']!r} is not JSON") from e
        if not isinstance(custom, dict):
            raise MalformedObject("rayStartParams.resources is not a JSON object")
        out.update({str(k): float(v) for k, v in custom.items()})
    for k, v in extra.items():
        try:
            out[str(k)] = float(parse_quantity(v))
        except MalformedObject as e:
            raise MalformedObject(f"resources.{k}: {e}") from e
    return out


def ray_cluster_view(obj: Mapping[str, Any]) -> RayClusterView:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    groups = []
    for i, g in enumerate(_list(spec.get("workerGroupSpecs"), "spec.workerGroupSpecs")):
        where = f"spec.workerGroupSpecs[{i}]"
        g = _dict(g, where)
        name = g.get("groupName")
        if not isinstance(name, str) or not name:
            raise MalformedObject(f"{where}.groupName is missing")
        pod_spec = _dict(_dict(g.get("template"), f"{where}.template").get("spec"), f"{where}.template.spec")
        req = pod_spec_requests(pod_spec, f"{where}.template.spec")
        start = _dict(g.get("rayStartParams"), f"{where}.rayStartParams")
        ray_res = _ray_resources(start, _dict(g.get("resources"), f"{where}.resources"), req)
        gpus = _gpus(req) or int(ray_res.get("GPU", 0))
        minimum = _int(g.get("minReplicas"), f"{where}.minReplicas", 0) or 0
        maximum = _int(g.get("maxReplicas"), f"{where}.maxReplicas", 2147483647)
        strategy = _dict(g.get("scaleStrategy"), f"{where}.scaleStrategy")
        groups.append(
            WorkerGroupState(
                name=name,
                replicas=_int(g.get("replicas"), f"{where}.replicas", 0) or 0,
                min_replicas=minimum,
                max_replicas=maximum if maximum is not None else 2147483647,
                num_of_hosts=_int(g.get("numOfHosts"), f"{where}.numOfHosts", 1) or 1,
                gpus_per_worker=gpus,
                cpu_per_worker=req.get("cpu", 0.0),
                memory_per_worker=req.get("memory", 0.0),
                ray_resources=MappingProxyType(ray_res),
                workers_to_delete=tuple(str(p) for p in _list(strategy.get("workersToDelete"), f"{where}.scaleStrategy.workersToDelete")),
                idle_timeout_seconds=_int(g.get("idleTimeoutSeconds"), f"{where}.idleTimeoutSeconds"),
            )
        )
    ns = str(md.get("namespace", ""))
    annotations = _str_map(md.get("annotations"), "metadata.annotations")
    state = RayClusterState(
        namespace=ns,
        name=md["name"],
        uid=str(md.get("uid", "")),
        resource_version=str(md.get("resourceVersion", "")),
        annotations=annotations,
        policy_annotations=parse_policy_annotations(annotations),  # once per object version
        labels=_str_map(md.get("labels"), "metadata.labels"),
        in_tree_autoscaler=spec.get("enableInTreeAutoscaling") is True,
        suspended=spec.get("suspend") is True,
        groups=tuple(groups),
        created_at=parse_time(md.get("creationTimestamp")),
    )
    if state.opted_in:  # a cluster that opted in and names a head queuepilot cannot use is refused whole
        return RayClusterView(state=state, dashboard=_dashboard_target(ns, md["name"], spec, state.annotations))
    try:  # any other cluster: its head, in case the stall detector needs Ray's view of its workload
        head = _dashboard_target(ns, md["name"], spec, state.annotations, evidence_only=True)
    except MalformedObject as e:
        return RayClusterView(state=state, dashboard=None, head_error=str(e)[:300])
    return RayClusterView(state=state, dashboard=None, evidence_head=head)


_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HEAD_SVC_MAX = 50  # KubeRay's CheckName keeps the last 50 characters


def head_service_name(cluster: str, spec: Mapping[str, Any]) -> str:
    """KubeRay's head Service name: ``spec.headGroupSpec.headService.metadata.name`` when set, else
    ``<cluster>-head-svc`` shortened as KubeRay's ``CheckName`` does (the last 50 characters; a
    leading digit or punctuation replaced by ``r``)."""
    head = _dict(spec.get("headGroupSpec"), "spec.headGroupSpec")
    svc_md = _dict(_dict(head.get("headService"), "spec.headGroupSpec.headService").get("metadata"),
                   "spec.headGroupSpec.headService.metadata")
    custom = svc_md.get("name")
    if custom:
        if not isinstance(custom, str) or not _DNS_LABEL.match(custom):
            raise MalformedObject(f"spec.headGroupSpec.headService.metadata.name {custom!r} is not a Service name")
        return custom
    name = f"{cluster}-head-svc"
    if len(name) > _HEAD_SVC_MAX:
        name = name[len(name) - _HEAD_SVC_MAX:]
    if not name[0].isalpha():
        name = "r" + name[1:]
    return name


def _head_dashboard_port(spec: Mapping[str, Any]) -> int:
    """The head container port named ``dashboard`` (KubeRay's head Service exposes it), else 8265."""
    head = _dict(spec.get("headGroupSpec"), "spec.headGroupSpec")
    pod_spec = _dict(_dict(head.get("template"), "spec.headGroupSpec.template").get("spec"),
                     "spec.headGroupSpec.template.spec")
    for c in _list(pod_spec.get("containers"), "spec.headGroupSpec.template.spec.containers"):
        for p in _list(_dict(c, "spec.headGroupSpec.template.spec.containers[]").get("ports"), "ports"):
            p = _dict(p, "spec.headGroupSpec.template.spec.containers[].ports[]")
            if p.get("name") == "dashboard":
                port = p.get("containerPort")
                if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
                    raise MalformedObject(f"head container port 'dashboard' {port!r} is not a port")
                return port
    return RAY_DASHBOARD_PORT


def _dashboard_target(
    namespace: str, cluster: str, spec: Mapping[str, Any], annotations: Mapping[str, str], *,
    evidence_only: bool = False,
) -> RayDashboardTarget:
    scheme = annotations.get(DASHBOARD_SCHEME_ANNOTATION, "http").strip().lower() or "http"
    if scheme not in ("http", "https"):
        raise MalformedObject(
            f"annotation {DASHBOARD_SCHEME_ANNOTATION}={annotations[DASHBOARD_SCHEME_ANNOTATION]!r}: "
            "expected http or https"
        )
    secret = annotations.get(TOKEN_SECRET_ANNOTATION, "").strip() or None
    if secret is not None and (len(secret) > 253 or not _DNS_SUBDOMAIN.match(secret)):
        raise MalformedObject(f"annotation {TOKEN_SECRET_ANNOTATION}={secret!r} is not a Secret name")
    if not _DNS_LABEL.match(namespace):
        raise MalformedObject(f"metadata.namespace {namespace!r} is not a namespace name")
    return RayDashboardTarget(
        namespace=namespace,
        cluster=cluster,
        service=head_service_name(cluster, spec),
        port=_head_dashboard_port(spec),
        scheme=scheme,
        token_secret=secret,
        evidence_only=evidence_only,
    )


# ----------------------------------------------------------------------------------- core objects
@dataclass(frozen=True, slots=True)
class PodView:
    """What the controller keeps of a pod: placement, requests and its Ray identity."""

    namespace: str
    name: str
    node: str | None
    phase: str
    ready: bool
    deleting: bool
    ip: str | None
    created_at: float | None
    gpu_requests: int = 0
    cpu_requests: float = 0.0
    memory_requests: float = 0.0
    ray_cluster: str | None = None
    ray_group: str | None = None
    ray_node_type: str | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: EMPTY)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_POD_PHASES


def pod_view(obj: Mapping[str, Any], keep_labels: tuple[str, ...] = ()) -> PodView:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    status = _dict(obj.get("status"), "status")
    labels = _str_map(md.get("labels"), "metadata.labels")
    req = pod_spec_requests(spec)
    ready = _conditions(status).get("Ready", (False, None))[0]
    kept = {k: labels[k] for k in keep_labels if k in labels}
    return PodView(
        namespace=str(md.get("namespace", "")),
        name=md["name"],
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        deleting=md.get("deletionTimestamp") is not None,
        ip=status.get("podIP") or None,
        created_at=parse_time(md.get("creationTimestamp")),
        gpu_requests=_gpus(req),
        cpu_requests=req.get("cpu", 0.0),
        memory_requests=req.get("memory", 0.0),
        ray_cluster=labels.get(RAY_CLUSTER_LABEL),
        ray_group=labels.get(RAY_GROUP_LABEL),
        ray_node_type=labels.get(RAY_NODE_TYPE_LABEL),
        labels=MappingProxyType(kept) if kept else EMPTY,
    )


def node_view(obj: Mapping[str, Any]) -> NodeState:
    """A Node without its GPUs and pod requests (the builder adds them)."""
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    status = _dict(obj.get("status"), "status")
    alloc = _dict(status.get("allocatable"), "status.allocatable")
    ready = _conditions(status).get("Ready", (False, None))[0]
    schedulable = spec.get("unschedulable") is not True
    for i, t in enumerate(_list(spec.get("taints"), "spec.taints")):
        t = _dict(t, f"spec.taints[{i}]")
        if t.get("key") in NODE_CONDITION_TAINTS and t.get("effect") in ("NoSchedule", "NoExecute"):
            schedulable = False
    return NodeState(
        name=md["name"],
        labels=_str_map(md.get("labels"), "metadata.labels"),
        ready=ready,
        schedulable=schedulable,
        gpu_allocatable=int(parse_quantity(alloc.get(GPU_RESOURCE, 0))),
        cpu_allocatable=parse_quantity(alloc.get("cpu", 0)),
        memory_allocatable=parse_quantity(alloc.get("memory", 0)),
    )


# ------------------------------------------------------------------------------------ MultiKueue
MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"  # AdmissionCheck spec.controllerName of MultiKueue


@dataclass(frozen=True, slots=True)
class MultiKueueClusterView:
    """A MultiKueueCluster: where its kubeconfig lives and whether Kueue reaches it (``Active``)."""

    name: str
    active: bool
    secret: str | None  # spec.clusterSource.kubeConfig.location when locationType is Secret
    location_type: str  # Secret | Path | ClusterProfile
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class MultiKueueConfigView:
    name: str
    clusters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class MultiKueueCheckView:
    """An AdmissionCheck with MultiKueue's controllerName and the MultiKueueConfig it names."""

    name: str
    config: str | None


@dataclass(frozen=True, slots=True)
class PlacementView:
    """What the dispatcher reads of a Workload besides ``WorkloadState``: where MultiKueue stands."""

    namespace: str
    name: str
    uid: str
    nominated: tuple[str, ...]
    cluster_name: str | None


def multikueue_cluster_view(obj: Mapping[str, Any]) -> MultiKueueClusterView:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    source = _dict(spec.get("clusterSource"), "spec.clusterSource")
    kc = _dict(source.get("kubeConfig"), "spec.clusterSource.kubeConfig")
    secret: str | None = None
    if kc:
        loc = kc.get("location")
        if not isinstance(loc, str) or not loc:
            raise MalformedObject("spec.clusterSource.kubeConfig.location is missing")
        kind = kc.get("locationType") or "Secret"
        if kind not in ("Secret", "Path"):
            raise MalformedObject(f"spec.clusterSource.kubeConfig.locationType is {kind!r}")
        secret = loc if kind == "Secret" else None
    else:
        kind = "ClusterProfile" if source.get("clusterProfileRef") else ""
    active = _conditions(_dict(obj.get("status"), "status")).get("Active", (False, None))[0]
    return MultiKueueClusterView(name=md["name"], active=active, secret=secret, location_type=str(kind),
                                 resource_version=str(md.get("resourceVersion", "")))


def multikueue_config_view(obj: Mapping[str, Any]) -> MultiKueueConfigView:
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    clusters = _list(spec.get("clusters"), "spec.clusters")
    if not all(isinstance(c, str) and c for c in clusters):
        raise MalformedObject("spec.clusters must be a list of names")
    return MultiKueueConfigView(name=md["name"], clusters=tuple(clusters))


def multikueue_check_view(obj: Mapping[str, Any]) -> MultiKueueCheckView | None:
    """The AdmissionCheck if it is MultiKueue's, else None (not wanted in the cache)."""
    md = _metadata(obj)
    spec = _dict(obj.get("spec"), "spec")
    if spec.get("controllerName") != MULTIKUEUE_CONTROLLER:
        return None
    params = _dict(spec.get("parameters"), "spec.parameters")
    name = params.get("name") if params.get("kind") == "MultiKueueConfig" else None
    return MultiKueueCheckView(name=md["name"], config=name if isinstance(name, str) and name else None)


def placement_view(obj: Mapping[str, Any]) -> PlacementView:
    md = _metadata(obj)
    status = _dict(obj.get("status"), "status")
    nominated = _list(status.get("nominatedClusterNames"), "status.nominatedClusterNames")
    if not all(isinstance(c, str) for c in nominated):
        raise MalformedObject("status.nominatedClusterNames must be a list of names")
    cn = status.get("clusterName")
    if cn is not None and not isinstance(cn, str):
        raise MalformedObject("status.clusterName must be a string")
    return PlacementView(namespace=str(md.get("namespace", "")), name=md["name"], uid=str(md.get("uid", "")),
                         nominated=tuple(nominated), cluster_name=cn or None)
