"""The controller families this feature adds (``queuepilot_pod_info``, ``queuepilot_recommendation_*``):
rendered with prometheus_client from a snapshot and a history, and linted by the real promtool.

The specs below are the catalog entries proposed for autoscaler/metrics.py; once they are there, the
test reads them from the catalog instead."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from autoscaler import metrics as cm
from autoscaler.controller.pod_info import LABELS, pod_info
from autoscaler.core.policy import rightsizing as rs
from autoscaler.core.snapshot import NodeState, RayWorker, WorkerGroupState
from exporter.metrics import MetricSpec
from tests.economics.snapshots import NOW, gpu, ray_cluster, snapshot
from tests.support.prometheus import promtool

GROUP_LABELS = ("namespace", "raycluster", "group")
PROPOSED = (
    MetricSpec(
        "queuepilot_pod_info", "gauge",
        "1 for every pod holding GPUs that the controller knows, with the keys that attribute its GPU series "
        "to a namespace, a LocalQueue and ClusterQueue, a Kueue flavor and job kind, and a Ray worker group.",
        "bool", LABELS, "ALPHA", "snapshot: Ray workers, Kueue pods and Workloads, exporter GPU attribution",
    ),
    MetricSpec(
        "queuepilot_recommendation_gpus_per_worker", "gauge",
        "Recommended GPUs per worker of a Ray worker group, from the GPUs its workers kept active.",
        "count", GROUP_LABELS, "ALPHA", "right-sizing recommender",
    ),
    MetricSpec(
        "queuepilot_recommendation_min_replicas", "gauge",
        "Recommended minReplicas of a Ray worker group, from a low percentile of its busy workers.",
        "count", GROUP_LABELS, "ALPHA", "right-sizing recommender",
    ),
    MetricSpec(
        "queuepilot_recommendation_max_replicas", "gauge",
        "Recommended maxReplicas of a Ray worker group, from a high percentile of its busy workers plus a margin.",
        "count", GROUP_LABELS, "ALPHA", "right-sizing recommender",
    ),
    MetricSpec(
        "queuepilot_recommendation_saved_gpu_seconds", "gauge",
        "Idle GPU-seconds the recommendation would have saved over the group's recorded history.",
        "seconds", GROUP_LABELS, "ALPHA", "right-sizing recommender",
    ),
    MetricSpec(
        "queuepilot_recommendation_withheld", "gauge",
        "1 for a Ray worker group that gets no recommendation, with the reason (too little history, no data, no GPUs).",
        "bool", (*GROUP_LABELS, "reason"), "ALPHA", "right-sizing recommender",
    ),
)


def specs() -> dict[str, MetricSpec]:
    return {s.name: cm.BY_NAME.get(s.name, s) for s in PROPOSED}


def test_proposed_names_are_free_or_identical_in_the_catalog():
    for spec in PROPOSED:
        existing = cm.BY_NAME.get(spec.name)
        assert existing is None or (existing.labels, existing.type) == (spec.labels, spec.type), spec.name


def test_rendered_families_pass_promtool_check_metrics():
    rc = ray_cluster("team-a", "rc", [WorkerGroupState("g", 1, 1, 1, gpus_per_worker=8,
                                                       workers=(RayWorker("w1", gpus=8),))])
    snap = snapshot(ray_clusters={"team-a/rc": rc},
                    nodes={"n1": NodeState("n1", gpus=(gpu("n1", 0, ("team-a", "w1"), util=0.9),
                                                       gpu("n1", 1, ("other", "p"))))})
    history = rs.RightsizingHistory()
    for n in range(300):
        history.add({rs.GroupKey("team-a", "rc", "g"): rs.GroupObservation(
            NOW - (300 - n) * 300.0, 300, (rs.WorkerObservation("w1", 8, 2),))})
    history.add({rs.GroupKey("team-b", "rc2", "g"): rs.GroupObservation(NOW, 300, (rs.WorkerObservation("x", 4, 1),))})
    recs = history.recommend(rs.RightsizingPolicy(), snap)
    s = specs()

    class Collector:
        def collect(self):
            info = GaugeMetricFamily(s["queuepilot_pod_info"].name, s["queuepilot_pod_info"].help,
                                     labels=s["queuepilot_pod_info"].labels)
            for labels in pod_info(snap):
                info.add_metric([labels[k] for k in s["queuepilot_pod_info"].labels], 1.0)
            yield info
            for name, samples in rs.recommendation_series(recs).items():
                fam = GaugeMetricFamily(name, s[name].help, labels=s[name].labels)
                for labels, value in samples:
                    fam.add_metric([labels[k] for k in s[name].labels], value)
                yield fam

    registry = CollectorRegistry()
    registry.register(Collector())
    text = generate_latest(registry).decode()
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'queuepilot_pod_info{cluster_queue="",flavor="",group="g",job_kind="",local_queue="",namespace="team-a",pod="w1",raycluster="rc"} 1.0' in text
    assert 'queuepilot_pod_info{cluster_queue="",flavor="",group="",job_kind="",local_queue="",namespace="other",pod="p",raycluster=""} 1.0' in text
    assert 'queuepilot_recommendation_gpus_per_worker{group="g",namespace="team-a",raycluster="rc"} 2.0' in text
    assert 'queuepilot_recommendation_withheld{group="g",namespace="team-b",raycluster="rc2",reason="InsufficientHistory"} 1.0' in text

