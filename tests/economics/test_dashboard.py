"""The GPU economics dashboard: structure, and every query against the real Prometheus holding the
backfilled history and the economics recording rules."""

from __future__ import annotations

import json
import math
import re
import urllib.parse

import pytest

from alerts import economics as ec
from dashboards import common, economics
from tests.economics import world
from tests.economics.world import CONFIG
from tests.support.prometheus import run_prometheus

DS = {"type": "prometheus", "uid": "${datasource}"}
VAR_REF = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
RANGE = "1d"


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(common.render(economics.build()))


def panels(d: dict) -> list[dict]:
    return [p for p in d["panels"] if p["type"] != "row"]


def substitute(expr: str) -> str:
    values = {"__range": RANGE, "rule_interval": str(int(CONFIG.interval_seconds))}
    return VAR_REF.sub(lambda m: values.get(m.group(1), ".*"), expr)


def test_the_dashboard_reads_the_rules_names():
    names = {economics.TEAM + economics.ALLOCATED, economics.TEAM + economics.USED, economics.TEAM + economics.IDLE,
             economics.TEAM + economics.COST, economics.TEAM + economics.EFFECTIVE_COST,
             economics.GROUP + economics.IDLE, economics.GROUP + economics.BUSY_WORKERS}
    assert names <= {r["record"] for g in ec.rule_file(CONFIG)["groups"] for r in g["rules"] if "record" in r}
    assert economics.RULE_INTERVAL_S == ec.EconomicsConfig().interval_seconds


def test_structure(dashboard):
    assert dashboard["uid"] == economics.UID
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for p in panels(dashboard):
        assert p["description"] and p["datasource"] == DS, p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DS and t["refId"]
            assert all(w == "$__range" for w in re.findall(r"\[([^\]]*)\]", t["expr"])), t["expr"]
    cost = [p["title"] for p in panels(dashboard) if "currency" in p["targets"][0]["expr"]]
    repeated = [p["title"] for p in panels(dashboard) if p.get("repeat") == "currency"]
    assert cost and repeated == cost  # the cost panels, and only they, hide without a currency


def test_every_query_returns_data(backfilled, dashboard):
    prom = backfilled.prom
    for p in panels(dashboard):
        for t in p["targets"]:
            q = substitute(t["expr"])
            if t.get("instant"):
                result = prom.query(q, at=backfilled.end)
            else:
                result = prom.query_range(q, backfilled.end - 6 * 3600, backfilled.end, 300)
            assert any(not math.isnan(float(v[1])) for r in result for v in (r.get("values") or [r["value"]])), (
                p["title"], q)


def test_idle_and_waste_panels_match_the_history(backfilled, dashboard):
    by_title = {p["title"]: p for p in panels(dashboard)}
    idle = backfilled.prom.query(substitute(by_title["Idle GPU-hours by team"]["targets"][0]["expr"]), at=backfilled.end)
    waste = backfilled.prom.query(substitute(by_title["Teams ranked by waste"]["targets"][0]["expr"]), at=backfilled.end)
    for ns in ("team-a", "team-b", "team-c"):
        expect = world.expected_team(ns, backfilled.end, 86400)
        assert {r["metric"]["namespace"]: float(r["value"][1]) for r in idle}[ns] == pytest.approx(expect["idle_gpu_hours"])
        assert {r["metric"]["namespace"]: float(r["value"][1]) for r in waste}[ns] == pytest.approx(expect["waste_ratio"])
    ranked = [float(r["value"][1]) for r in waste]
    assert ranked == sorted(ranked, reverse=True)


def _label_values(prom, selector: str, label: str, end: float) -> list[str]:
    params = urllib.parse.urlencode({"match[]": selector, "start": end - 86400, "end": end})
    return prom.get(f"/api/v1/label/{label}/values?{params}")["data"]


def test_variables_and_the_cost_row_without_prices(backfilled, dashboard, tmp_path):
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    sel = lambda name: re.match(r"label_values\((.*),\s*\w+\)", variables[name]["query"]).group(1)  # noqa: E731
    assert _label_values(backfilled.prom, sel("namespace"), "namespace", backfilled.end) == ["team-a", "team-b", "team-c"]
    assert _label_values(backfilled.prom, sel("currency"), "currency", backfilled.end) == ["USD"]
    # a Prometheus whose rules carry no price has no cost series: the currency variable is empty
    data = backfilled.prom.data_dir
    with run_prometheus(tmp_path / "unpriced", data_dir=tmp_path / "empty") as bare:
        assert _label_values(bare, sel("currency"), "currency", backfilled.end) == []
    assert data.exists()
