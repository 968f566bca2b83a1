"""The economics recording rules and the waste alert, evaluated by a real Prometheus over known history."""

from __future__ import annotations

import re

import pytest
import yaml

from alerts import economics as ec
from tests.economics import world
from tests.economics.world import CONFIG
from tests.support.paths import REPO
from tests.support.prometheus import promtool

WEEK = 7 * 86400
TEAMS = {"team-a": ("lq-a", "cq-a"), "team-b": ("lq-b", "cq-b"), "team-c": ("lq-c", "cq-c")}


def by_namespace(result: list[dict]) -> dict[str, float]:
    return {r["metric"]["namespace"]: float(r["value"][1]) for r in result}


def test_promtool_accepts_the_rules_with_and_without_prices(tmp_path):
    for name, config in (("priced", CONFIG), ("unpriced", ec.EconomicsConfig())):
        path = tmp_path / f"{name}.yaml"
        path.write_text(ec.render(config))
        result = promtool("check", "rules", "--lint-fatal", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
    unpriced = ec.rule_file(ec.EconomicsConfig())
    assert "queuepilot-economics-prices" not in [g["name"] for g in unpriced["groups"]]


def test_price_precedence_flavor_then_model_then_default(tmp_path):
    """promtool's unit test of the cost rules: per GPU the flavor price wins, then the model, then *."""
    config = ec.EconomicsConfig(interval="1m").with_prices(["f1=5", "m1=3", "f2=7", "*=1"])
    rules = tmp_path / "rules.yaml"
    rules.write_text(ec.render(config))
    team = 'namespace="t",local_queue="lq",cluster_queue="cq"'
    gpus = [  # (flavor, model, busy): priced 5 (flavor), 5 (flavor beats model), 3 (model), 1 (default)
        ('flavor="f1",modelName="m9"', "0.5"), ('flavor="f1",modelName="m1"', "1"),
        ('modelName="m1"', "0.25"), ('modelName="m9"', "0"),
    ]
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'{ec.GPU_BUSY}{{{team},gpu="{i}",Hostname="n",pod="p{i}",{labels}}}', "values": f"{busy}x5"}
                for i, (labels, busy) in enumerate(gpus)
            ],
            "promql_expr_test": [
                {"expr": ec.team_metric(ec.COST), "eval_time": "2m",
                 "exp_samples": [{"labels": f'{ec.team_metric(ec.COST)}{{{team},currency="USD"}}',
                                  "value": 5 + 5 + 3 + 1}]},
                {"expr": ec.team_metric(ec.EFFECTIVE_COST), "eval_time": "2m",
                 "exp_samples": [{"labels": f'{ec.team_metric(ec.EFFECTIVE_COST)}{{{team},currency="USD"}}',
                                  "value": 5 * 0.5 + 5 * 1 + 3 * 0.25 + 1 * 0}]},
            ],
        }],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_prometheus_loaded_every_rule(backfilled):
    groups = backfilled.prom.get("/api/v1/rules")["data"]["groups"]
    loaded = {g["name"]: len(g["rules"]) for g in groups}
    expected = {g["name"]: len(g["rules"]) for g in ec.rule_file(CONFIG)["groups"]}
    assert loaded == expected
    assert all(r["health"] != "err" for g in groups for r in g["rules"])


def test_per_gpu_layer_prefers_profiling_and_joins_pod_info(backfilled):
    q = backfilled.prom.query
    busy = q(f"{ec.GPU_BUSY}", at=backfilled.end)
    gpus = [g for g in world.gpus() if g.pod]
    assert len(busy) == len(gpus)  # the free GPU and the exporter pod are not attributed; no duplicates
    truth = {(g.node, str(g.index)): g.busy(backfilled.end) for g in gpus}
    got = {(r["metric"]["Hostname"], r["metric"]["gpu"]): float(r["value"][1]) for r in busy}
    assert got == pytest.approx(truth)
    labels = {r["metric"]["pod"]: r["metric"] for r in busy}
    assert labels["bert-worker-0"]["namespace"] == "team-b"  # from exported_namespace
    assert labels["bert-worker-0"]["job_kind"] == "PyTorchJob"
    assert labels["rc-tune-gpu-workers-1"]["group"] == "gpu-workers"


def test_team_gpu_hours_waste_and_cost_over_a_week(backfilled):
    q = backfilled.prom.query
    per_sample_h = CONFIG.interval_seconds / 3600
    got = {
        "allocated_gpu_hours": q(f"sum_over_time({ec.team_metric(ec.ALLOCATED)}[7d]) * {per_sample_h}", at=backfilled.end),
        "used_gpu_hours": q(f"sum_over_time({ec.team_metric(ec.USED)}[7d]) * {per_sample_h}", at=backfilled.end),
        "idle_gpu_hours": q(f"sum_over_time({ec.team_metric(ec.IDLE)}[7d]) * {per_sample_h}", at=backfilled.end),
        "cost": q(f"sum_over_time({ec.team_metric(ec.COST)}[7d]) * {per_sample_h}", at=backfilled.end),
        "effective_cost": q(f"sum_over_time({ec.team_metric(ec.EFFECTIVE_COST)}[7d]) * {per_sample_h}",
                            at=backfilled.end),
    }
    window = WEEK
    for ns, (lq, cq) in TEAMS.items():
        expect = world.expected_team(ns, backfilled.end, window)
        for key, result in got.items():
            assert by_namespace(result)[ns] == pytest.approx(expect[key], rel=1e-6), (ns, key)
        row = next(r for r in got["allocated_gpu_hours"] if r["metric"]["namespace"] == ns)
        assert (row["metric"]["local_queue"], row["metric"]["cluster_queue"]) == (lq, cq)


def test_instant_waste_and_busy_workers(backfilled):
    q = backfilled.prom.query
    day_t = next(t for t in range(backfilled.end, backfilled.end - 86400, -world.STEP) if world.is_day(t))
    night_t = next(t for t in range(backfilled.end, backfilled.end - 86400, -world.STEP) if not world.is_day(t))
    assert by_namespace(q(ec.team_metric(ec.WASTE), at=day_t)) == pytest.approx(
        {"team-a": 1 - 12 * 0.8 / 24, "team-b": 1 - 0.9, "team-c": 1 - 0.8})
    assert by_namespace(q(ec.team_metric(ec.WASTE), at=night_t))["team-c"] == pytest.approx(1.0)
    busy = {(r["metric"]["raycluster"], float(r["value"][1])) for r in q(ec.group_metric(ec.BUSY_WORKERS), at=night_t)}
    assert busy == {("rc-tune", 3.0), ("rc-notebooks", 0.0)}
    active = {r["metric"]["pod"]: float(r["value"][1]) for r in q(ec.POD_ACTIVE, at=day_t)}
    assert active["rc-tune-gpu-workers-0"] == 4 and active["rc-notebooks-workers-3"] == 2
    assert active["bert-worker-1"] == 4


def test_waste_alert_selects_the_wasteful_teams(backfilled):
    fired = backfilled.prom.query(ec.waste_alert_expr(CONFIG), at=backfilled.end)
    day = world.window_steps(backfilled.end, 86400)
    waste_c = 1 - sum(world.TEAM_C_BUSY(t) for t in day) / len(day)
    assert CONFIG.waste_ratio_threshold < waste_c  # the history is built so that team-c is over it
    assert by_namespace(fired) == pytest.approx({"team-a": 1 - 0.8 * 12 / 24, "team-c": waste_c})


def test_waste_alert_waits_its_for_duration(tmp_path):
    """promtool's own unit test of the alert: a team at 90 % waste fires only after ``for``."""
    config = ec.EconomicsConfig(interval="1h", waste_for="2h", waste_window="6h")
    rules = tmp_path / "rules.yaml"
    rules.write_text(ec.render(config))
    team = 'namespace="t",local_queue="lq",cluster_queue="cq"'
    test = {
        "rule_files": [rules.name],
        "evaluation_interval": "1h",
        "tests": [{
            "interval": "1h",
            "input_series": [
                {"series": f"{ec.team_metric(ec.ALLOCATED)}{{{team}}}", "values": "10x12"},
                {"series": f"{ec.team_metric(ec.USED)}{{{team}}}", "values": "1x12"},
            ],
            "alert_rule_test": [
                {"eval_time": "1h", "alertname": ec.ALERT_NAME, "exp_alerts": []},
                {"eval_time": "5h", "alertname": ec.ALERT_NAME, "exp_alerts": [{
                    "exp_labels": {"severity": "warning", "namespace": "t", "local_queue": "lq",
                                   "cluster_queue": "cq"},
                    "exp_annotations": {
                        "summary": "A team leaves much of the GPU time it holds idle.",
                        "description": (
                            "Over the last 6h LocalQueue t/lq (ClusterQueue cq) left 90% of its allocated GPU-hours "
                            "idle, above the 0.5 threshold; `queuepilot report` says which worker groups and job "
                            "kinds to right-size."),
                        "runbook_url": f"{config.runbook_base_url}#{ec.ALERT_NAME.lower()}",
                    },
                }]},
            ],
        }],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test, sort_keys=False))
    result = promtool("test", "rules", str(tmp_path / "test.yaml"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_documented_join_attributes_every_held_gpu(backfilled):
    doc = (REPO / "docs" / "economics.md").read_text()
    join = re.search(r"```promql\n(.*?)```", doc, re.S).group(1)
    result = backfilled.prom.query(join, at=backfilled.end)
    held = [g for g in world.gpus() if g.pod]
    assert len(result) == len(held)
    got = {(r["metric"]["namespace"], r["metric"]["pod"]) for r in result}
    assert got == {(g.namespace, g.pod) for g in held}
    by_pod = {r["metric"]["pod"]: r["metric"] for r in result}
    assert by_pod["rc-notebooks-workers-0"]["raycluster"] == "rc-notebooks"
    assert by_pod["bert-worker-0"]["local_queue"] == "lq-b"


def test_chart_copy_with_its_tokens_filled_in_is_the_default_rule_file():
    text = ec.render_chart()
    defaults = ec.EconomicsConfig()
    filled = text.replace("__QP_RUNBOOK_BASE_URL__", defaults.runbook_base_url)
    filled = filled.replace(f"__QP_FOR_{ec.ALERT_NAME}:{defaults.waste_for}__", defaults.waste_for)
    for field, key in ec.CHART_THRESHOLDS.items():
        filled = filled.replace(f"__QP_T_{key}__", ec.fmt_number(getattr(defaults, field)))
    assert "__QP_" not in filled
    assert yaml.safe_load(filled) == yaml.safe_load(ec.render(defaults))
