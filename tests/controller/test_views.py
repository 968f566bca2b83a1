"""Raw objects -> typed views: the fields we read, defaults Kubernetes applies, and malformed input."""

from __future__ import annotations

import copy

import pytest

from autoscaler.cluster import views
from autoscaler.core.snapshot import GPU_RESOURCE
from tests.support import kueue_history
from tests.support import objects as o


def test_quantities_and_times():
    assert views.parse_quantity("500m") == pytest.approx(0.5)
    assert views.parse_quantity("4Gi") == 4 * 2**30
    assert views.parse_quantity("1e3") == 1000
    assert views.parse_quantity("2k") == 2000
    assert views.parse_quantity(8) == 8
    for bad in ("lots", "4GiB", True, [1]):
        with pytest.raises(views.MalformedObject):
            views.parse_quantity(bad)
    assert views.parse_time("1970-01-01T00:16:40Z") == 1000
    assert views.parse_time("1970-01-01T00:16:40.250000Z") == 1000.25
    assert views.parse_time(None) is None


def test_pod_requests_follow_kubernetes_rules():
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {GPU_RESOURCE: "2"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m", GPU_RESOURCE: "1"}}},
        ],
        "initContainers": [
            {"name": "init", "resources": {"requests": {"cpu": "4"}}},
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "250m"}}},
        ],
        "overhead": {"cpu": "100m"},
    }
    req = views.pod_spec_requests(spec)
    # GPU: the limit stands in for the missing request; 2 + 1
    assert req[GPU_RESOURCE] == 3
    # cpu: max(1.5 app + 0.25 sidecar, 4 init (started before the sidecar)) + 0.1 overhead
    assert req["cpu"] == pytest.approx(4.1)


def test_workload_view_reads_conditions_admission_and_checks():
    raw = o.workload(
        "wl", created=1000, pod_sets=[("launcher", 1, 0), ("workers", 4, 8)],
        conditions=[
            o.condition("QuotaReserved", True, 1100),
            o.condition("Admitted", True, 1200),
            o.condition("Requeued", True, 1050, "BackoffFinished"),
        ],
        admission=o.admission("cq", [("launcher", "cpu-flavor", 1), ("workers", "h100", 3)]),
        checks=[{"name": "gpu", "state": "Ready", "lastTransitionTime": o.ts(1190), "message": "ok",
                 "requeueAfterSeconds": 30}],
    )
    raw["metadata"]["ownerReferences"] = [
        {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "train", "uid": "u", "controller": True}]
    raw["spec"]["someFutureField"] = {"x": 1}  # unknown fields are tolerated
    w = views.workload_view(raw)
    assert (w.namespace, w.name, w.local_queue, w.cluster_queue) == ("team-a", "wl", "lq-a", "cq")
    assert w.gpu_demand == 32
    assert [ps.gpus_per_pod for ps in w.pod_sets] == [0, 8]
    assert w.quota_reserved and w.quota_reserved_at == 1100
    assert w.admitted and w.admitted_at == 1200
    assert w.requeued_at == 1050 and w.queued_since == 1050
    assert w.flavors["workers"][GPU_RESOURCE] == "h100"
    assert w.admitted_counts == {"launcher": 1, "workers": 3}
    assert w.check("gpu").state == "Ready" and w.check("gpu").requeue_after_seconds == 30
    assert (w.owner_kind, w.owner_name) == ("PyTorchJob", "train")
    assert not w.pending


def test_workload_pending_defaults():
    w = views.workload_view(o.workload("wl", created=500, active=False))
    assert w.cluster_queue is None and not w.quota_reserved and not w.admitted
    assert w.queued_since == 500 and not w.active and not w.pending
    assert w.admitted_counts == {"main": 1}


def test_workload_view_counts_the_deactivations_kueue_kept():
    """Kueue counts evictions by (reason, underlyingCause) in status.schedulingStats; the deactivations
    (reason Deactivated, or DeactivatedDueTo<cause>) are the workload's history of being brought back."""
    raw = o.workload("wl", created=500)
    assert views.workload_view(raw).deactivations == 0
    raw["status"] = {"schedulingStats": {"evictions": [
        {"reason": "Deactivated", "underlyingCause": "", "count": 2},
        {"reason": "DeactivatedDueToRequeuingLimitExceeded", "underlyingCause": "", "count": 1},
        {"reason": "Preempted", "underlyingCause": "InClusterQueue", "count": 5},
        {"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 3},
    ]}}
    assert views.workload_view(raw).deactivations == 3
    raw["status"]["schedulingStats"]["evictions"][0]["count"] = -4  # nonsense counts nothing
    assert views.workload_view(raw).deactivations == 1
    raw["status"]["schedulingStats"]["evictions"][0]["count"] = "two"
    with pytest.raises(views.MalformedObject, match=r"schedulingStats.evictions\[0\].count"):
        views.workload_view(raw)


@pytest.mark.parametrize(
    ("mutate", "what"),
    [
        (lambda r: r["spec"].__setitem__("podSets", {"not": "a list"}), "spec.podSets"),
        (lambda r: r["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]
         .__setitem__(GPU_RESOURCE, "eight"), "quantity"),
        (lambda r: r["metadata"].__setitem__("creationTimestamp", "yesterday"), "time"),
        (lambda r: r["metadata"].pop("name"), "metadata.name"),
        (lambda r: r["spec"]["podSets"][0].__setitem__("count", "two"), "count"),
    ],
)
def test_malformed_workloads_say_what_is_wrong(mutate, what):
    raw = o.workload("wl")
    mutate(raw)
    with pytest.raises(views.MalformedObject, match=what.split(".")[-1]):
        views.workload_view(raw)


def test_cluster_queue_view():
    raw = o.cluster_queue("cq", {"h100": 16, "a100": 8}, cohort="co", checks=("gpu-capacity",), used={"h100": 4})
    raw["spec"]["resourceGroups"].insert(0, {"coveredResources": ["cpu"], "flavors": [
        {"name": "cpu-flavor", "resources": [{"name": "cpu", "nominalQuota": "100"}]}]})
    raw["spec"]["resourceGroups"][1]["flavors"][1]["resources"][0]["borrowingLimit"] = "4"
    raw["status"]["flavorsReservation"] = [{"name": "h100", "resources": [{"name": GPU_RESOURCE, "total": "12"}]}]
    cq = views.cluster_queue_view(raw)
    assert cq.cohort == "co"
    assert dict(cq.nominal_gpus) == {"h100": 16, "a100": 8}
    assert cq.flavor_order == ("h100", "a100")
    assert dict(cq.borrowing_limit_gpus) == {"h100": None, "a100": 4}
    assert dict(cq.used_gpus) == {"h100": 12}  # reservation counts (quota spoken for)
    assert cq.admission_checks == ("gpu-capacity",)
    assert cq.headroom_gpus("h100") == 4


def test_flavor_check_localqueue_node_views():
    f = views.resource_flavor_view(o.resource_flavor("h100", {"gpu": "h100"}))
    assert dict(f.node_labels) == {"gpu": "h100"}
    ac = views.admission_check_view(o.admission_check("gpu"))
    assert ac.controller_name == "queuepilot.io/gpu-capacity" and ac.active
    assert not views.admission_check_view(o.admission_check("gpu", active=None)).active
    lq = views.local_queue_view(o.local_queue("lq", "ns", "cq"))
    assert (lq.namespace, lq.name, lq.cluster_queue) == ("ns", "lq", "cq")
    n = views.node_view(o.node("n1", gpus=8, labels={"gpu": "h100"}))
    assert n.gpu_allocatable == 8 and n.ready and n.schedulable and n.labels["gpu"] == "h100"
    raw = o.node("n2", unschedulable=False)
    raw["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
                             {"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    assert not views.node_view(raw).schedulable
    assert not views.node_view(o.node("n3", unschedulable=True)).schedulable
    assert not views.node_view(o.node("n4", ready=False)).ready


def test_ray_cluster_view():
    raw = o.ray_cluster(
        "rc", groups=[
            o.ray_group("gpu", 2, 1, 4, gpus=2, workers_to_delete=["rc-gpu-worker-abcde"]),
            o.ray_group("fake", 1, 0, 3, gpus=0, start_params={"num-gpus": "1", "resources": '"{\\"fakegpu\\": 2}"'}),
        ],
        labels={"kueue.x-k8s.io/queue-name": "lq"}, annotations={"queuepilot.io/autoscale": "true"},
        autoscaler=True, head_ip="10.1.2.3", dashboard_port=8266,
    )
    raw["spec"]["workerGroupSpecs"][0]["idleTimeoutSeconds"] = 120
    raw["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0].pop("ports")  # only status names 8266
    v = views.ray_cluster_view(raw)
    rc = v.state
    # opted in: polled at its own head Service, never at the address in its status (10.1.2.3:8266)
    assert v.dashboard is not None and v.dashboard.base_url == "http://rc-head-svc.team-a.svc:8265"
    assert rc.in_tree_autoscaler and rc.opted_in and rc.kueue_managed and not rc.elastic
    g0, g1 = rc.groups
    assert (g0.replicas, g0.min_replicas, g0.max_replicas, g0.gpus_per_worker) == (2, 1, 4, 2)
    assert g0.workers_to_delete == ("rc-gpu-worker-abcde",) and g0.idle_timeout_seconds == 120
    assert g0.ray_resources["GPU"] == 2 and g0.cpu_per_worker == 8
    assert g1.gpus_per_worker == 1 and g1.ray_resources["fakegpu"] == 2


def test_dashboard_target_comes_from_the_spec_never_the_status():
    opt_in = {"queuepilot.io/autoscale": "true"}
    assert views.ray_cluster_view(o.ray_cluster("rc", head_ip="10.6.6.6", dashboard_port=80)).dashboard is None
    raw = o.ray_cluster("rc", head_ip=None, annotations=opt_in)
    t = views.ray_cluster_view(raw).dashboard
    assert t is not None and (t.namespace, t.cluster, t.base_url, t.token_secret) == (
        "team-a", "rc", "http://rc-head-svc.team-a.svc:8265", None)
    raw["status"] = {"head": {"serviceIP": "10.6.6.6", "podIP": "10.6.6.7", "serviceName": "evil"},
                     "endpoints": {"dashboard": "80"}}
    assert views.ray_cluster_view(raw).dashboard == t
    # the head container's "dashboard" port (what KubeRay's head Service exposes), https, a token Secret
    raw["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"] = [
        {"name": "gcs", "containerPort": 6379}, {"name": "dashboard", "containerPort": 8443}]
    raw["metadata"]["annotations"] |= {"queuepilot.io/ray-dashboard-scheme": "https",
                                       "queuepilot.io/ray-token-secret": "ray-token"}
    t = views.ray_cluster_view(raw).dashboard
    assert t is not None and (t.base_url, t.token_secret) == ("https://rc-head-svc.team-a.svc:8443", "ray-token")
    # a custom head Service name (spec.headGroupSpec.headService), as KubeRay names it
    raw["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "my-head"}}
    assert views.ray_cluster_view(raw).dashboard.host == "my-head.team-a.svc"


@pytest.mark.parametrize(("cluster", "service"), [
    ("rc", "rc-head-svc"),
    ("a" * 60, "a" * 41 + "-head-svc"),  # KubeRay's CheckName keeps the last 50 characters
    ("9rc", "rrc-head-svc"),  # a leading digit becomes "r"
    ("x" * 10 + "-" + "y" * 40, "r" + "y" * 40 + "-head-svc"),  # cut to a leading "-": "r" too
])
def test_head_service_name_follows_kuberay(cluster, service):
    assert views.head_service_name(cluster, {}) == service


@pytest.mark.parametrize(("annotations", "spec_change", "match"), [
    ({"queuepilot.io/ray-dashboard-scheme": "ftp"}, None, "ray-dashboard-scheme"),
    ({"queuepilot.io/ray-token-secret": "team-b/token"}, None, "ray-token-secret"),
    ({}, {"headService": {"metadata": {"name": "evil.example.com"}}}, "headService"),
    ({}, {"template": {"spec": {"containers": [{"name": "h", "ports": [{"name": "dashboard",
                                                                        "containerPort": 70000}]}]}}}, "port"),
])
def test_malformed_dashboard_settings_are_refused(annotations, spec_change, match):
    raw = o.ray_cluster("rc", annotations={"queuepilot.io/autoscale": "true", **annotations})
    if spec_change:
        raw["spec"]["headGroupSpec"] |= spec_change
    with pytest.raises(views.MalformedObject, match=match):
        views.ray_cluster_view(raw)
    # a cluster that did not opt in (a RayJob's): the view stays, without a head to ask, saying why
    del raw["metadata"]["annotations"]["queuepilot.io/autoscale"]
    v = views.ray_cluster_view(raw)
    assert v.head is None and v.dashboard is None and match in v.head_error


def test_a_cluster_that_did_not_opt_in_has_an_evidence_only_head():
    """A RayJob's RayCluster (KubeRay's origin labels, the RayJob's annotations copied): the same head
    rules as an opted-in cluster, marked ``evidence_only`` (asked only for the stall detector)."""
    raw = o.ray_cluster("train-raycluster-x7k2p", head_ip="10.6.6.6", dashboard_port=8443,
                        labels={"ray.io/originated-from-cr-name": "train", "ray.io/originated-from-crd": "RayJob"},
                        annotations={"queuepilot.io/ray-token-secret": "ray-token"})
    v = views.ray_cluster_view(raw)
    assert v.dashboard is None and not v.state.opted_in and v.head_error == ""
    t = v.head
    assert t is not None and t is v.evidence_head and t.evidence_only
    assert (t.base_url, t.token_secret) == ("http://train-raycluster-x7k2p-head-svc.team-a.svc:8443", "ray-token")
    opted = views.ray_cluster_view(o.ray_cluster("rc", annotations={"queuepilot.io/autoscale": "true"}))
    assert opted.head is opted.dashboard and opted.head is not None and not opted.head.evidence_only


def test_pod_view():
    p = views.pod_view(o.ray_worker_pod("rc", "gpu", "rc-gpu-worker-1", node="n1", gpus=2, ip="10.0.0.5"))
    assert (p.ray_cluster, p.ray_group, p.ray_node_type, p.gpu_requests, p.node, p.ip) == (
        "rc", "gpu", "worker", 2, "n1", "10.0.0.5")
    assert p.ready and not p.deleting and not p.terminal
    raw = o.pod("x", phase="Succeeded")
    raw["metadata"]["deletionTimestamp"] = o.ts(2000)
    p = views.pod_view(raw)
    assert p.terminal and p.deleting


def test_views_do_not_share_mutable_state():
    raw = o.workload("wl")
    w = views.workload_view(copy.deepcopy(raw))
    with pytest.raises(TypeError):
        w.pod_sets[0].requests[GPU_RESOURCE] = 1  # type: ignore[index]


def test_a_rayjob_view_reads_its_ray_jobs_status_and_drops_what_is_not_a_word():
    obj = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "train", "namespace": "team-a", "uid": "u1"},
           "status": {"jobStatus": "SUCCEEDED", "jobDeploymentStatus": "Complete", "rayClusterName": "train-raycluster-x",
                      "endTime": "2026-01-01T00:00:00Z"}}
    v = views.ray_job_view(obj)
    assert (v.key, v.job_status, v.deployment_status, v.cluster_name, v.finished) == (
        "team-a/train", "SUCCEEDED", "Complete", "train-raycluster-x", True)
    assert v.end_time == views.parse_time("2026-01-01T00:00:00Z")
    # a tenant can write status: anything that is not a short word is no status
    hostile = copy.deepcopy(obj)
    hostile["status"].update({"jobStatus": "SUCCEEDED; rm -rf", "jobDeploymentStatus": {"x": 1},
                              "rayClusterName": "x" * 300})
    h = views.ray_job_view(hostile)
    assert (h.job_status, h.deployment_status, h.cluster_name, h.finished) == ("", "", "", False)
    assert not views.ray_job_view({"metadata": {"name": "new", "namespace": "ns"}}).finished


def test_pending_age_runs_from_creation_across_retries():
    """A workload Retried every 10 minutes for 3 hours: Kueue's T0 moves to each requeue, the age a person
    sees stays at the creation (Kueue writes Admitted=False at the first reservation, an AdmissionCheck
    eviction at every Retry; none of it says the workload was ever admitted)."""
    created = 10_000.0
    for t in (created + 10, created + 45, created + 75, created + 3 * 3600 + 20, created + 3 * 3600 + 70):
        w = views.workload_view(kueue_history.retried(t, created=created))
        assert w.pending and not w.admitted
        assert w.admission_lost_at is None and w.pending_since == created, t
        cycle = created + (t - created) // 600 * 600  # requeued then (BackoffFinished), Retried 60 s later
        last_transition = cycle + 60 if t - cycle >= 60 else cycle if cycle > created else None
        assert w.queued_since == (last_transition or created), t  # Kueue: Requeued.lastTransitionTime
    late = views.workload_view(kueue_history.retried(created + 3 * 3600 + 20, created=created))
    assert late.evicted is False and late.quota_reserved is False and late.requeued_at == created + 3 * 3600


def test_pending_age_of_an_admitted_workload_runs_from_its_eviction():
    """Admitted at 2000, preempted at 9000 (Kueue adds the time it ran to accumulatedPastExecutionTimeSeconds),
    then Retried: the age a person sees runs from the preemption, not from creation or the last requeue."""
    for t in (9000.0, 9040.0, 9070.0, 9000.0 + 1200 + 70):
        w = views.workload_view(kueue_history.evicted_after_admission(t, 1000.0, 2000.0, 9000.0))
        assert w.pending and w.admission_lost_at == 9000.0 and w.pending_since == 9000.0, t
    requeued = views.workload_view(kueue_history.evicted_after_admission(9000.0 + 1200 + 70, 1000.0, 2000.0, 9000.0))
    assert requeued.queued_since == 9000.0 + 1200 + 60  # Retried 60 s after the last requeue
    # the same object without the evidence it was admitted (a Kueue that writes Admitted=False before
    # admission): the condition alone does not move the age
    raw = kueue_history.evicted_after_admission(9070.0, 1000.0, 2000.0, 9000.0)
    del raw["status"]["accumulatedPastExecutionTimeSeconds"]
    raw["status"]["schedulingStats"]["evictions"] = [
        e for e in raw["status"]["schedulingStats"]["evictions"] if e["reason"] == "AdmissionCheck"]
    w = views.workload_view(raw)
    assert w.admission_lost_at is None and w.pending_since == 1000.0
