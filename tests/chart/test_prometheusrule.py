"""The chart's PrometheusRule follows its values: renamed scrape jobs, a runbook base URL, thresholds and
``for`` durations. Rendered with both helms, extracted, and proven with promtool's own unit tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from alerts import economics
from alerts.config import AlertConfig, chart_key, threshold_fields
from alerts.rules import alerts
from tests.chart.helm import CHART, HELMS, NAMESPACE, PROM_OPERATOR, render, run_helm
from tests.support.paths import REPO
from tests.support.prometheus import promtool

RUNBOOK = "https://runbooks.example.com/queuepilot"
CUSTOM = (
    "monitoring.jobNames.exporter=gpu-metrics",
    "monitoring.jobNames.controller=qp-ctrl",
    f"monitoring.alerts.runbookBaseUrl={RUNBOOK}/",  # a trailing slash is dropped
    "monitoring.alerts.thresholds.pendingSloSeconds=600",
    "monitoring.alerts.thresholds.idleUtilPercent=20",
    "monitoring.alerts.thresholds.idleWindow=10m",
    "monitoring.alerts.thresholds.capacityShortfallGpus=1",
    "monitoring.alerts.thresholds.capacityShortfallRatio=0.01",  # helm --set passes it as a string
    "monitoring.alerts.thresholds.idleActorsKilledCount=2",
    "monitoring.alerts.thresholds.workerCapacityStaleSeconds=60",
    "monitoring.alerts.for.QueuePilotExporterDown=2m",
    "monitoring.alerts.for.QueuePilotControllerNoLeader=3m",
    "monitoring.alerts.for.GPUAllocatedIdle=15m",
)


def _spec(helm: str, sets: tuple[str, ...]) -> dict:
    rules = render(helm, sets, PROM_OPERATOR).of_kind("PrometheusRule")
    (rule,) = [r for r in rules if r["metadata"]["name"].endswith("-queuepilot-rules")]
    return rule["spec"]


def _write_rules(tmp_path: Path, spec: dict) -> Path:
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False, width=4096))
    check = promtool("check", "rules", "--lint-fatal", str(path))
    assert check.returncode == 0, check.stdout + check.stderr
    return path


def _alert(name: str, at: str, *expected: dict) -> dict:
    return {"alertname": name, "eval_time": at, "exp_alerts": list(expected)}


def _exp(labels: dict, summary_of: str, description: str, runbook: str = RUNBOOK) -> dict:
    summary = next(a.summary for a in alerts(AlertConfig()) if a.name == summary_of)
    return {"exp_labels": labels, "exp_annotations": {
        "summary": summary, "description": description, "runbook_url": f"{runbook}#{summary_of.lower()}"}}


def _unit_tests() -> dict:
    """Series and expectations written for the CUSTOM values: each alert fires only because of them."""
    series = [
        # the exporter's job is renamed: its target goes down at 4m; a target left under the old
        # job name is down all along and must not matter
        ('up{job="gpu-metrics",instance="10.0.0.1:9400"}', "1x3 0x30"),
        ('up{job="queuepilot-exporter",instance="10.0.0.9:9400"}', "0x34"),
        # the controller's job is renamed: a leader until 10m; with the default job name absent()
        # would fire from the start
        ('queuepilot_controller_is_leader{job="qp-ctrl",instance="10.0.1.1:8080"}', "1x10 0x24"),
        # pending SLO 600 s: the oldest workload ages 60 s a minute
        ('queuepilot_queue_oldest_pending_seconds{cluster_queue="cq",namespace="team-a",local_queue="lq"}',
         "0+60x40"),
        # idle threshold 20 %: 15 % counts as idle, 25 % does not
        ('DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",Hostname="n1",namespace="team-a",pod="w-0",container="c"}',
         "15x40"),
        ('queuepilot_gpu_allocated{gpu="0",uuid="GPU-0",hostname="n1",namespace="team-a",pod="w-0",container="c"}',
         "1x40"),
        ('DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",Hostname="n1",namespace="team-a",pod="w-1",container="c"}',
         "25x40"),
        ('queuepilot_gpu_allocated{gpu="1",uuid="GPU-1",hostname="n1",namespace="team-a",pod="w-1",container="c"}',
         "1x40"),
        # quota equals capacity (32); 2 GPUs broke: quiet with the defaults (4 GPUs / 5 %), loud here
        ('queuepilot_flavor_gpus{flavor="h100",state="nominal"}', "32x50"),
        ('queuepilot_flavor_gpus{flavor="h100",state="healthy"}', "32x4 30x45"),
        # the renamed controller job reports a stalled workload from 2m; after 10m that replica no longer
        # leads, so its (stale) gauge no longer counts
        ('queuepilot_stalled_workloads{job="qp-ctrl",instance="10.0.1.1:8080",cluster_queue="cq"}', "0x1 1x33"),
        # two workers with idle Ray actors reclaimed (at 5m and 10m): quiet with the default 4, loud with 2
        ('queuepilot_reclaimed_workers_total{namespace="team-a",raycluster="rc",group="gpu",reason="idle_actor",'
         'mode="live"}', "0x4 1x4 2x30"),
        # the leader's (renamed job) view of a MultiKueue worker: its Nodes/Pods age 30 s a minute; over 60 s
        # from 3m (stale for 5m at 8m); with the default 300 s only from 11m, when no replica leads any more
        ('queuepilot_worker_cluster_capacity_age_seconds{job="qp-ctrl",instance="10.0.1.1:8080",cluster="worker-b"}',
         "0+30x34"),
    ]
    down = "The exporter at 10.0.0.1:9400 has not answered scrapes for 2m: GPU health and utilization on that node are unknown."
    no_leader = ("No queuepilot controller replica holds the leader lease: admission checks are not answered "
                 "(Kueue admits nothing through the GPU capacity check) and no Ray group is scaled.")
    checks = [
        _alert("QueuePilotExporterDown", "5m"),
        _alert("QueuePilotExporterDown", "7m", _exp(
            {"severity": "warning", "job": "gpu-metrics", "instance": "10.0.0.1:9400"}, "QueuePilotExporterDown", down)),
        _alert("QueuePilotControllerNoLeader", "5m"),
        _alert("QueuePilotControllerNoLeader", "12m"),
        _alert("QueuePilotControllerNoLeader", "15m", _exp({"severity": "critical"}, "QueuePilotControllerNoLeader", no_leader)),
        _alert("QueuePilotPendingWorkloadTooOld", "20m"),
        _alert("QueuePilotPendingWorkloadTooOld", "30m", _exp(
            {"severity": "warning", "cluster_queue": "cq", "namespace": "team-a", "local_queue": "lq"},
            "QueuePilotPendingWorkloadTooOld",
            "The oldest pending workload in LocalQueue team-a/lq (ClusterQueue cq) has waited 30m 0s since it was "
            "created (Retries and requeues do not reset this), above the objective of 600 s.")),
        _alert("GPUAllocatedIdle", "10m"),
        _alert("GPUAllocatedIdle", "20m", _exp(
            {"severity": "warning", "Hostname": "n1", "namespace": "team-a", "pod": "w-0"}, "GPUAllocatedIdle",
            "1 GPU(s) allocated to pod team-a/w-0 on node n1 stayed below 20% utilization for all of the last 10m; "
            "other teams may be waiting for them.")),
        _alert("QueuePilotHealthyCapacityBelowQuota", "30m"),
        _alert("QueuePilotHealthyCapacityBelowQuota", "40m", _exp(
            {"severity": "warning", "flavor": "h100"}, "QueuePilotHealthyCapacityBelowQuota",
            "Flavor h100 is 2 healthy GPUs short of the nominal quota its ClusterQueues promise (more than 1 GPUs "
            "and more than 0.01 of the quota); admitted work will wait or be retried.")),
    ]
    checks += [
        _alert("QueuePilotStalledWorkload", "5m"),
        _alert("QueuePilotStalledWorkload", "9m", _exp(
            {"severity": "warning", "cluster_queue": "cq"}, "QueuePilotStalledWorkload",
            "ClusterQueue cq has 1 stalled workload(s) (every GPU under the stall threshold for the stall window); "
            "see the StalledWorkload Events.")),
        _alert("QueuePilotStalledWorkload", "15m"),
        _alert("QueuePilotWorkerCapacityStale", "6m"),
        _alert("QueuePilotWorkerCapacityStale", "9m", _exp(
            {"severity": "warning", "job": "qp-ctrl", "instance": "10.0.1.1:8080", "cluster": "worker-b"},
            "QueuePilotWorkerCapacityStale",
            "Nodes/Pods of worker-b were last current 270s ago; check its API server and the MultiKueue kubeconfig "
            "Secret.")),
        _alert("QueuePilotIdleActorsKilled", "7m"),
        _alert("QueuePilotIdleActorsKilled", "15m", _exp(
            {"severity": "info", "namespace": "team-a", "raycluster": "rc"}, "QueuePilotIdleActorsKilled",
            "queuepilot deleted 2 workers of RayCluster team-a/rc in the last hour whose GPUs stayed idle while Ray "
            "actors/tasks held them; that work was killed (alert threshold 2 per hour; past "
            "scaling.reclaim_budget_per_hour, 4 by default, a cluster's reclaims wait). The IdleActorsReclaimed / "
            "IdleWorkersReplaced Events name the pods.")),
    ]
    return {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": [{"series": s, "values": v} for s, v in series],
                   "alert_rule_test": checks}],
    }


def _promtool_test(tmp_path: Path, spec: dict) -> str:
    _write_rules(tmp_path, spec)
    tests = tmp_path / "chart.test.yaml"
    tests.write_text(yaml.safe_dump(_unit_tests(), sort_keys=False, width=4096))
    proc = promtool("test", "rules", str(tests))
    return proc.stdout + proc.stderr if proc.returncode else ""


@pytest.mark.parametrize("helm", HELMS)
def test_default_values_render_the_generated_rule_file(helm: str, tmp_path: Path) -> None:
    spec = _spec(helm, ())
    assert spec == yaml.safe_load((REPO / "alerts/generated/queuepilot-rules.yaml").read_text())
    _write_rules(tmp_path, spec)


@pytest.mark.parametrize("helm", HELMS)
def test_renamed_jobs_runbook_url_and_thresholds_fire_and_stay_silent(helm: str, tmp_path: Path) -> None:
    spec = _spec(helm, CUSTOM)
    text = yaml.safe_dump(spec)
    assert "__QP_" not in text and 'job="queuepilot-' not in text and 'job="gpu-metrics"' in text
    urls = [r["annotations"]["runbook_url"] for g in spec["groups"] for r in g["rules"]]
    assert urls and all(u.startswith(RUNBOOK + "#") for u in urls)
    failure = _promtool_test(tmp_path, spec)
    assert failure == "", failure


@pytest.mark.parametrize("helm", HELMS)
def test_the_same_unit_tests_fail_on_the_default_rules(helm: str, tmp_path: Path) -> None:
    """The unit tests above pin the values: with the chart's defaults the same series give other alerts."""
    failure = _promtool_test(tmp_path, _spec(helm, ()))
    for name in ("QueuePilotExporterDown", "QueuePilotControllerNoLeader", "QueuePilotPendingWorkloadTooOld",
                 "GPUAllocatedIdle", "QueuePilotHealthyCapacityBelowQuota", "QueuePilotStalledWorkload",
                 "QueuePilotIdleActorsKilled", "QueuePilotWorkerCapacityStale"):
        assert f'alertname: {name}' in failure or f'alertname:{name}' in failure.replace(" ", ""), (name, failure)


def test_threshold_values_are_the_generator_defaults() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]["alerts"]
    config = AlertConfig()
    assert values["runbookBaseUrl"] == config.runbook_base_url
    economy = economics.EconomicsConfig()
    assert values["thresholds"] == {chart_key(f): getattr(config, f) for f in threshold_fields()} | {
        key: getattr(economy, f) for f, key in economics.CHART_THRESHOLDS.items()}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("monitoring.alerts.for.GPUFatalXidd=2m",), "GPUFatalXid"),  # a typo names no alert
        (("monitoring.alerts.thresholds.idleWindow=5min",), "idleWindow"),
        (("monitoring.alerts.thresholds.idleUtilPercent=high",), "idleUtilPercent"),
        (("monitoring.jobNames.exporter=a\"b",), "exporter"),
        (("monitoring.alerts.runbookBaseUrl=not a url",), "runbookBaseUrl"),
    ],
)
def test_schema_rejects_bad_alert_values(sets: tuple[str, ...], message: str) -> None:
    from tests.chart.helm import RELEASE, run_helm

    args = ["template", RELEASE, str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = run_helm("helm3", *args)
    assert proc.returncode != 0
    assert re.search(message, proc.stderr), proc.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_object_names_do_not_repeat_the_release_name(helm: str) -> None:
    """Release ``queuepilot`` (the install guide's): the rules are ``queuepilot-rules`` and
    ``queuepilot-economics``, and no object is named ``queuepilot-queuepilot-…``."""
    args = ["template", "queuepilot", str(CHART), "--namespace", NAMESPACE, "--api-versions",
            "monitoring.coreos.com/v1/PrometheusRule", "--set", "config.webhook.namespace_queues.team-a=team-a-queue"]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    names = {d["metadata"]["name"] for d in docs}
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "PrometheusRule"} == {
        "queuepilot-rules", "queuepilot-economics"}
    assert not [n for n in names if "queuepilot-queuepilot" in n]
