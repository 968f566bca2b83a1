"""The alert expressions over the backfilled fleet (tests/observability/history.py): they run on realistic
series from both scrape styles and select exactly the faulty objects."""

from __future__ import annotations

from alerts.config import AlertConfig
from alerts.rules import alerts
from tests.support.prometheus import Prometheus


def _eval(prom: Prometheus, alert_rules: list[dict], name: str, at: float) -> list[dict]:
    rule = next(r for r in alert_rules if r["alert"] == name)
    return prom.query(rule["expr"], at=at)


def test_every_alert_expression_runs(backfilled, history_end, alert_rules):
    for rule in alert_rules:
        backfilled.query(rule["expr"], at=history_end)  # raises on a bad expression


def test_gpu_alerts_pick_the_faulty_gpus(backfilled, history_end, alert_rules):
    fatal = _eval(backfilled, alert_rules, "GPUFatalXid", history_end)
    assert [(r["metric"]["Hostname"], r["metric"]["gpu"], r["metric"]["UUID"]) for r in fatal] == [
        ("node-b", "3", "GPU-node-b-3"),
    ]
    assert _eval(backfilled, alert_rules, "GPULost", history_end) == []
    assert _eval(backfilled, alert_rules, "GPUNodeUnhealthy", history_end) == []  # one bad GPU per node
    assert _eval(backfilled, alert_rules, "QueuePilotExporterStale", history_end) == []
    assert _eval(backfilled, alert_rules, "QueuePilotExporterDown", history_end) == []


def test_idle_alert_names_the_workload_pod_in_both_scrape_styles(backfilled, history_end, alert_rules):
    idle = _eval(backfilled, alert_rules, "GPUAllocatedIdle", history_end)
    found = {(r["metric"]["Hostname"], r["metric"]["namespace"], r["metric"]["pod"]) for r in idle}
    # node-b is scraped without honorLabels: namespace/pod name the exporter until normalised
    assert found == {("node-a", "team-a", "ray-worker-1"), ("node-b", "team-b", "notebook-0")}


def test_queue_and_controller_alerts_on_history(backfilled, history_end, alert_rules):
    # h100: quota 8 = capacity, one GPU unhealthy: quiet with the default thresholds (4 GPUs and 5 %)
    assert _eval(backfilled, alert_rules, "QueuePilotHealthyCapacityBelowQuota", history_end) == []
    strict = AlertConfig().with_settings(["capacity_shortfall_gpus=0", "capacity_shortfall_ratio=0.1"])
    (rule,) = [a for a in alerts(strict) if a.name == "QueuePilotHealthyCapacityBelowQuota"]
    short = backfilled.query(rule.expr, at=history_end)
    assert [(r["metric"]["flavor"], r["value"][1]) for r in short] == [("h100", "1")]
    assert _eval(backfilled, alert_rules, "QueuePilotControllerNoLeader", history_end) == []
    assert _eval(backfilled, alert_rules, "QueuePilotControllerSignalStale", history_end) == []
    # cq-team-b's workload has been stalled since 2h; cq-team-a's was deactivated at 1.5h
    stalled = _eval(backfilled, alert_rules, "QueuePilotStalledWorkload", history_end)
    assert [(r["metric"]["cluster_queue"], r["value"][1]) for r in stalled] == [("cq-team-b", "1")]


def test_idle_actors_killed_names_the_cluster_over_budget(backfilled, history_end, alert_rules):
    # rc-tune: 6 workers with idle actors reclaimed an hour (over the default 4); empty workers do not count
    killed = _eval(backfilled, alert_rules, "QueuePilotIdleActorsKilled", history_end)
    assert [(r["metric"]["namespace"], r["metric"]["raycluster"]) for r in killed] == [("team-a", "rc-tune")]
    assert 5 <= float(killed[0]["value"][1]) <= 7
    lenient = AlertConfig().with_settings(["idle_actors_killed_count=10"])
    (rule,) = [a for a in alerts(lenient) if a.name == "QueuePilotIdleActorsKilled"]
    assert backfilled.query(rule.expr, at=history_end) == []
