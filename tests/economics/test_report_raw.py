"""``queuepilot report`` on day one: a real Prometheus holding eight days of raw exporter history
(tests/economics/world.py, backfilled with promtool) and no recording rules.  The report evaluates the
rules' own expressions over the raw series, gets the numbers the definitions give, and says so."""

from __future__ import annotations

import json
import math

import pytest

from report import cli, model
from tests.economics import world

WEEK = 7 * 86400
PRICE_ARGS = [a for k, v in world.PRICES.items() for a in ("--price", f"{k}={v}")]


@pytest.fixture(scope="module")
def raw_report(raw_history, tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("raw-report") / "report.json"
    import io
    from contextlib import redirect_stdout

    text = io.StringIO()
    with redirect_stdout(text):
        rc = cli.main(["--prometheus-url", raw_history.prom.url, "--window", "7d", "--end", str(raw_history.end),
                       *PRICE_ARGS, "--json", str(out)])
    assert rc == cli.EXIT_OK
    return json.loads(out.read_text()), text.getvalue()


def test_no_recording_rule_ran(raw_history):
    import urllib.request

    with urllib.request.urlopen(f"{raw_history.prom.url}/api/v1/label/__name__/values") as r:
        names = set(json.load(r)["data"])
    assert model.GPU_BUSY not in names and model.POD_ALLOCATED not in names
    assert {"DCGM_FI_DEV_GPU_UTIL", "queuepilot_pod_info"} <= names


def test_team_waste_and_cost_from_raw_series(raw_report, raw_history):
    doc, _ = raw_report
    assert doc["raw_series_share"] == 1.0
    assert doc["source"].startswith("the recording rules did not run over this window: the raw series")
    got = {t["namespace"]: t for t in doc["teams"]}
    assert set(got) == {"team-a", "team-b", "team-c"}
    for ns, t in got.items():
        for key, value in world.expected_team(ns, raw_history.end, WEEK).items():
            assert t[key] == pytest.approx(value, rel=1e-9), (ns, key)
    assert doc["warnings"] == []


def test_right_sizing_from_raw_series(raw_report, raw_history):
    doc, _ = raw_report
    recs = {r["raycluster"]: r for r in doc["recommendations"]}
    a, c = recs["rc-tune"], recs["rc-notebooks"]
    assert (a["gpus_per_worker"], a["recommended_gpus_per_worker"]) == (8, 4)
    assert (a["recommended_min_replicas"], a["recommended_max_replicas"]) == (3, math.ceil(3 * 1.15))
    assert (c["recommended_min_replicas"], c["recommended_max_replicas"]) == (0, math.ceil(4 * 1.15))
    [job] = doc["job_kinds"]
    assert (job["job_kind"], job["recommended_gpus_per_pod"], job["reason"]) == ("PyTorchJob", 4, "AlreadyRightSized")


def test_the_table_says_where_the_numbers_came_from(raw_report):
    _, text = raw_report
    flat = " ".join(text.split())
    for needle in ("GPU economics per team", "team-a", "waste", "cost USD", "Worker groups: what to request instead",
                   "rc-tune", "Read from the recording rules did not run over this window"):
        assert needle in flat, needle


def test_unpriced_gpu_hours_are_a_warning_never_zero_cost(raw_history, tmp_path, capsys):
    """Only the h100 flavor priced: team-c (no flavor, GPU model unpriced) gets no cost and a warning line;
    team-a and team-b keep theirs."""
    out = tmp_path / "r.json"
    assert cli.main(["--prometheus-url", raw_history.prom.url, "--window", "1d", "--end", str(raw_history.end),
                     "--price", "h100=4", "--json", str(out)]) == cli.EXIT_OK
    doc = json.loads(out.read_text())
    got = {t["namespace"]: t for t in doc["teams"]}
    assert got["team-c"]["cost"] is None and got["team-c"]["effective_cost"] is None
    assert got["team-c"]["unpriced_gpu_hours"] == pytest.approx(8 * 24)
    assert got["team-c"]["unpriced"] == [{"flavor": "", "modelName": world.MODEL}]
    assert got["team-a"]["cost"] == pytest.approx(24 * 24 * 4.0) and got["team-a"]["unpriced_gpu_hours"] == 0
    [warning] = doc["warnings"]
    assert warning.startswith("warning: team-c/lq-c: 192.0 GPU-hours had no price (flavor (none) / model "
                              f"{world.MODEL}; add --price for them), no cost shown")
    assert warning in " ".join(capsys.readouterr().out.split())


def test_merge_takes_the_rules_where_they_ran_and_the_raw_series_elsewhere():
    from report.prom import Series

    team = {"namespace": "team-a", "local_queue": "lq-a"}
    other = {"namespace": "team-b", "local_queue": "lq-b"}
    # the rules ran from t=300 on; the raw evaluation has every moment (and a team the rules missed at 300)
    recorded = [Series(team, [(300.0, 8.0), (400.0, 8.0)])]
    raw = [Series(team, [(100.0, 6.0), (200.0, 6.0), (300.0, 7.0), (400.0, 7.0)]),
           Series(other, [(200.0, 2.0), (300.0, 2.0)])]
    m = model.merge(recorded, raw)
    got = {s.labels["namespace"]: s.points for s in m.series}
    # a moment the rules answered keeps their answer whole: team-b's raw point at 300 is not mixed in
    assert got == {"team-a": [(100.0, 6.0), (200.0, 6.0), (300.0, 8.0), (400.0, 8.0)], "team-b": [(200.0, 2.0)]}
    assert m.raw_times == {100.0, 200.0} and m.times == {100.0, 200.0, 300.0, 400.0}
    text = model.source_text(m.raw_times, m.times, 100.0)
    assert text.startswith("the recording rules, and where they did not run (50% of the moments with data, ")
    assert model.source_text(frozenset(), m.times, 100.0) == "the economics recording rules"
    assert model.merge(recorded, []).raw_times == frozenset()


def test_raw_queries_are_the_rules_expressions():
    """The raw queries are the report's rule queries with each rule name replaced by the rule's expression."""
    from alerts import economics as ec

    rules = {r["record"]: r["expr"] for g in ec.rule_file(ec.EconomicsConfig())["groups"] for r in g["rules"]
             if "record" in r}
    alloc, used = model.team_queries(None)
    raw_alloc, raw_used = model.raw_team_queries(None)
    assert raw_alloc == alloc.replace(model.GPU_BUSY, rules[model.GPU_BUSY])
    assert raw_used == used.replace(model.GPU_BUSY, rules[model.GPU_BUSY])
    raw_pod_alloc, raw_pod_active = model.raw_pod_queries(None)
    assert raw_pod_alloc == rules[model.POD_ALLOCATED].replace(model.GPU_BUSY, rules[model.GPU_BUSY])
    assert raw_pod_active == rules[model.POD_ACTIVE].replace(ec.GPU_ACTIVE, rules[ec.GPU_ACTIVE])
    # a namespace narrows the pods through queuepilot_pod_info
    assert 'queuepilot_pod_info{namespace="team-b"}' in model.raw_team_queries("team-b")[0]


def test_the_raw_inputs_are_catalog_names():
    from autoscaler import metrics as cm
    from exporter import metrics as em
    from servicekit import gpu_economics as ge

    assert {ge.ENGINE_ACTIVE, ge.GPU_UTIL, ge.FB_USED} <= set(em.BY_NAME)
    assert ge.POD_INFO in cm.BY_NAME and set(ge.INFO_LABELS) <= set(cm.BY_NAME[ge.POD_INFO].labels)
