"""The generated dashboards: structural lint (grafana dashboard-linter's rules) and every panel, annotation
and variable query run against a real Prometheus holding three hours of backfilled history."""

from __future__ import annotations

import json
import math
import re
import urllib.parse

import pytest

from dashboards import economics, fleet, gpu_fleet, queuepilot_self, queues, ray_clusters
from dashboards.cli import DASHBOARDS
from tests.observability.files import DASHBOARD_DIR, panels
from tests.support.prometheus import Prometheus

DS = {"type": "prometheus", "uid": "${datasource}"}
BUILTINS = {"__rate_interval": "2m", "__range": "1h", "__interval": "1m", "__range_s": "3600"}
VAR_REF = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")
LABEL_VALUES = re.compile(r"^label_values\((.*),\s*(\w+)\)$")
QUERY_RESULT = re.compile(r"^query_result\((.*)\)$")
COUNTER_SUFFIXES = ("_total", "_bucket")
# read only the economics recording rules: tests/economics/test_dashboard.py runs every query of it
# against weeks of history with those rules backfilled
RULE_FED = {"economics.json"}
ON_HISTORY = sorted(set(DASHBOARDS) - RULE_FED)
# dashboards whose series' `cluster` label names a MultiKueue worker cluster, not the Prometheus' own cluster
WORKER_CLUSTER_DASHBOARDS = {"fleet.json"}


def _load() -> dict[str, dict]:
    return {f.name: json.loads(f.read_text()) for f in sorted(DASHBOARD_DIR.glob("*.json"))}


def _queries() -> list[tuple[str, str, str, bool]]:
    """(dashboard file, panel title, expr, instant) for every panel target."""
    out = []
    for name, d in _load().items():
        if name in RULE_FED:
            continue
        for p in panels(d):
            for t in p.get("targets", []):
                out.append((name, f'{p["title"]} [{t["refId"]}]', t["expr"], bool(t.get("instant"))))
    return out


def substitute(expr: str, values: dict[str, str] | None = None) -> str:
    """What Grafana sends: built-ins replaced, each variable by its value (default: All = .*)."""
    values = values or {}

    def repl(m: re.Match) -> str:
        name = m.group(1)
        if name in BUILTINS:
            return BUILTINS[name]
        return values.get(name, ".*")

    return VAR_REF.sub(repl, expr)


def _has_data(result: list[dict]) -> bool:
    for series in result:
        points = series.get("values") or [series.get("value")]
        if any(p and not math.isnan(float(p[1])) for p in points):
            return True
    return False


def variable_values(prom: Prometheus, var: dict, values: dict[str, str] | None, at: float) -> list[str]:
    """The values Grafana would offer: label_values via the labels API, query_result + regex via a query."""
    m = LABEL_VALUES.match(var["query"])
    if m:
        selector, label = m.groups()
        params = urllib.parse.urlencode({"match[]": substitute(selector, values), "start": at - 3600, "end": at})
        body = prom.get(f"/api/v1/label/{label}/values?{params}")
        assert body["status"] == "success"
        return body["data"]
    expr = QUERY_RESULT.match(var["query"]).group(1)
    regex = re.compile(var["regex"].strip("/"))
    out = []
    for series in prom.query(substitute(expr, values), at=at):
        text = "{" + ",".join(f'{k}="{v}"' for k, v in sorted(series["metric"].items())) + "}"
        found = regex.search(text)
        if found:
            out.append(found.group(1))
    return sorted(set(out))


# --- structure -------------------------------------------------------------------------------------

def test_every_dashboard_is_generated_with_a_stable_unique_uid(dashboards):
    assert set(dashboards) == set(DASHBOARDS)
    expected = {
        "gpu-fleet.json": gpu_fleet.UID, "queues.json": queues.UID,
        "ray-clusters.json": ray_clusters.UID, "queuepilot.json": queuepilot_self.UID,
        "economics.json": economics.UID, "fleet.json": fleet.UID,
    }
    assert {n: d["uid"] for n, d in dashboards.items()} == expected
    assert len({d["uid"] for d in dashboards.values()}) == len(dashboards)
    for d in dashboards.values():
        assert re.fullmatch(r"[a-z0-9-]{1,40}", d["uid"]), d["uid"]


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_dashboard_lint(dashboards, name):
    d = dashboards[name]
    variables = {v["name"]: v for v in d["templating"]["list"]}
    ds = variables.get("datasource")
    assert ds and ds["type"] == "datasource" and ds["query"] == "prometheus", "template-datasource"

    all_exprs = [t["expr"] for p in panels(d) for t in p.get("targets", [])]
    all_exprs += [a["expr"] for a in d["annotations"]["list"]]
    used_vars = {m for e in all_exprs for m in VAR_REF.findall(e)}
    for var in variables.values():
        if var["type"] != "query":
            continue
        assert LABEL_VALUES.match(var["query"]) or (
            QUERY_RESULT.match(var["query"]) and var["regex"]
        ), f"template-label-promql: {var['name']}"
        assert var["datasource"] == DS, f"variable {var['name']} datasource"
        assert var["refresh"] == 2, f"template-on-time-change-reload: {var['name']}"
        assert var["includeAll"] and var["allValue"] == ".*", f"{var['name']}: All must match an absent label"
        assert var["name"] in used_vars, f"template-unused: {var['name']}"
        used_vars |= set(VAR_REF.findall(var["query"]))
    undeclared = used_vars - set(variables) - set(BUILTINS)
    assert not undeclared, f"undeclared variables {undeclared}"
    # the Fleet dashboard's series carry `cluster` as the worker cluster's name (set by the controller):
    # its $worker variable selects them, and a `cluster` variable filtering them would be wrong
    for key in ("worker",) if name in WORKER_CLUSTER_DASHBOARDS else ("cluster",):
        assert key in variables, f"missing {key} variable"
    if name in WORKER_CLUSTER_DASHBOARDS:
        assert "cluster" not in variables and "$cluster" not in json.dumps(d), "fleet series filtered by $cluster"

    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    occupied: set[tuple[int, int]] = set()
    for p in panels(d):
        pos = p["gridPos"]
        assert 0 <= pos["x"] and pos["x"] + pos["w"] <= 24, f"{p['title']} outside 24 columns"
        cells = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"]) for y in range(pos["y"], pos["y"] + pos["h"])}
        assert not cells & occupied, f"{p['title']} overlaps another panel"
        occupied |= cells
        if p["type"] == "row":
            continue
        title = p["title"]
        assert p["datasource"] == DS, f"panel-datasource: {title}"
        assert p.get("description"), f"panel-title-description: {title}"
        assert p["fieldConfig"]["defaults"].get("unit"), f"panel-units: {title}"
        assert p["targets"], f"panel-no-targets: {title}"
        ref_ids = [t["refId"] for t in p["targets"]]
        assert all(ref_ids) and len(set(ref_ids)) == len(ref_ids), f"refIds of {title}"
        for t in p["targets"]:
            assert t["datasource"] == DS, f"target datasource: {title}"
            _lint_expr(title, t["expr"])
            if re.match(r"^(capacity|max)\b", t["legendFormat"]):
                overrides = p["fieldConfig"].get("overrides", [])
                assert any(
                    any(pr["id"] == "custom.lineStyle" and pr["value"]["fill"] == "dash" for pr in o["properties"])
                    and re.search(o["matcher"]["options"].strip("/"), t["legendFormat"])
                    for o in overrides
                ), f"capacity series of {title} is not drawn dashed"
    for a in d["annotations"]["list"]:
        assert a["datasource"] == DS
        _lint_expr(a["name"], a["expr"])


def _lint_expr(title: str, expr: str) -> None:
    for window in re.findall(r"\[([^\]]*)\]", expr):
        assert window in ("$__rate_interval", "$__rate_interval:", "$__range"), (
            f"target-rate-interval: {title} uses a fixed window [{window}]"
        )
    for name in re.findall(r"\b([A-Za-z_:][\w:]*(?:_total|_bucket))\b", expr):
        for m in re.finditer(rf"\b{name}\b(\{{[^}}]*\}})?", expr):
            rest = expr[m.end():].lstrip()
            assert rest.startswith("["), f"target-counter-agg: {title} uses counter {name} without a range function"


def test_namespace_variable_offers_workload_namespaces_in_both_spellings(backfilled, history_end, dashboards):
    var = next(v for v in dashboards["gpu-fleet.json"]["templating"]["list"] if v["name"] == "namespace")
    # team-a's pods arrive as namespace (honorLabels), team-b's as exported_namespace; the exporter's
    # own namespace (a target label on node-b) is never offered
    assert variable_values(backfilled, var, None, history_end) == ["team-a", "team-b"]


def test_gpu_panels_accept_both_pod_label_spellings(dashboards):
    """Every GPU query filtered by namespace also matches exported_namespace (ServiceMonitor without honorLabels)."""
    checked = 0
    for p in panels(dashboards["gpu-fleet.json"]):
        for t in p.get("targets", []):
            if 'namespace=~"$namespace"' in t["expr"]:
                checked += 1
                assert 'exported_namespace=~"$namespace"' in t["expr"], p["title"]
                assert '"pod", "$1", "exported_pod"' in t["expr"], p["title"]
    assert checked >= 3


# --- against a real Prometheus ------------------------------------------------------------------------

@pytest.mark.parametrize(("dashboard", "panel", "expr", "instant"), _queries(), ids=lambda v: str(v)[:60])
def test_panel_query_returns_data(backfilled: Prometheus, history_end, dashboard, panel, expr, instant):
    query = substitute(expr)
    if instant:
        result = backfilled.query(query, at=history_end)
    else:
        result = backfilled.query_range(query, history_end - 3600, history_end, 60)
    assert _has_data(result), f"{dashboard} / {panel}: no data for {query}"


@pytest.mark.parametrize("name", ON_HISTORY)
def test_variables_and_annotations_return_data(backfilled: Prometheus, history_end, dashboards, name):
    d = dashboards[name]
    for var in d["templating"]["list"]:
        if var["type"] != "query":
            continue
        assert variable_values(backfilled, var, None, history_end), f"{name}: variable {var['name']} has no values"
    for a in d["annotations"]["list"]:
        result = backfilled.query_range(substitute(a["expr"]), history_end - 3600, history_end, 60)
        assert _has_data(result), f"{name}: annotation {a['name']} finds no events"
        assert {"reason", "direction", "raycluster"} <= set(result[0]["metric"]), "annotation text labels missing"


@pytest.mark.parametrize(("namespace", "pod"), [("team-a", "ray-worker-1"), ("team-b", "notebook-0")])
def test_idle_gpu_panels_find_pods_in_either_label_spelling(backfilled, history_end, dashboards, namespace, pod):
    """team-a's exporter is scraped with honorLabels (pod), team-b's without (exported_pod)."""
    by_title = {p["title"]: p for p in panels(dashboards["gpu-fleet.json"])}
    by_ns = by_title["Idle allocated GPUs by namespace"]["targets"][0]["expr"]
    result = backfilled.query(substitute(by_ns, {"namespace": namespace}), at=history_end)
    assert [(r["metric"]["namespace"], r["value"][1]) for r in result] == [(namespace, "1")]
    by_queue = by_title["Idle allocated GPUs by queue"]["targets"][0]["expr"]
    result = backfilled.query(substitute(by_queue, {"namespace": namespace}), at=history_end)
    assert [(r["metric"]["namespace"], r["metric"]["label_kueue_x_k8s_io_local_queue_name"],
             r["metric"]["label_kueue_x_k8s_io_cluster_queue_name"]) for r in result] == [
        (namespace, f"{namespace}-queue", f"cq-{namespace}")]
    idlest = by_title["Idlest allocated pods"]["targets"][0]["expr"]
    result = backfilled.query(substitute(idlest, {"namespace": namespace}), at=history_end)
    assert pod in {r["metric"]["pod"] for r in result}
    # the exporter pod's own name (a target label on the non-honorLabels node) never appears as a workload
    assert not any(r["metric"]["pod"].startswith("queuepilot-exporter") for r in result)


# One concrete selection per dashboard (what a user picks instead of All). A filter on a label the
# series do not carry returns nothing here, while `.*` would hide it. node-b / team-b is the node
# scraped without honorLabels (exported_* pod labels), the harder case.
CONCRETE = {
    "gpu-fleet.json": {"cluster": "prod", "node": "node-b", "namespace": "team-b"},
    "queues.json": {"cluster": "prod", "queue": "cq-team-a", "flavor": "h100"},
    "ray-clusters.json": {"cluster": "prod", "namespace": "team-a", "raycluster": "rc-tune"},
    "queuepilot.json": {"cluster": "prod", "node": "node-b"},
    # worker-b was unreachable for part of the hour and has only the h100 flavor
    "fleet.json": {"worker": "worker-b", "flavor": "h100"},
}


@pytest.mark.parametrize("name", ON_HISTORY)
def test_panel_queries_with_concrete_variable_values(backfilled, history_end, dashboards, name):
    d = dashboards[name]
    values = CONCRETE[name]
    declared = {v["name"] for v in d["templating"]["list"] if v["type"] == "query"}
    assert declared == set(values), "keep CONCRETE in step with the dashboard's variables"
    for var in d["templating"]["list"]:  # each chosen value is one the variable offers
        if var["type"] == "query":
            assert values[var["name"]] in variable_values(backfilled, var, values, history_end), var["name"]
    empty = []
    for p in panels(d):
        for t in p.get("targets", []):
            query = substitute(t["expr"], values)
            if t.get("instant"):
                result = backfilled.query(query, at=history_end)
            else:
                result = backfilled.query_range(query, history_end - 3600, history_end, 60)
            if not _has_data(result):
                empty.append(f'{p["title"]} [{t["refId"]}]')
    assert not empty, f"{name}: no data with {values} for {empty}"


def test_fleet_panels_separate_workers_and_follow_the_partition(backfilled, history_end, dashboards):
    """Per-worker series stay per worker (not summed with the manager's `cluster` external label), and
    worker-b's unreachable half hour shows as up 0 with an ageing capacity view."""
    by_title = {p["title"]: p for p in panels(dashboards["fleet.json"])}
    assert variable_values(backfilled, next(v for v in dashboards["fleet.json"]["templating"]["list"]
                                            if v["name"] == "worker"), None, history_end) == ["worker-a", "worker-b"]
    up = by_title["Worker clusters usable"]["targets"][0]["expr"]
    result = backfilled.query_range(substitute(up), history_end - 3600, history_end, 60)
    seen = {r["metric"]["cluster"]: {float(v) for _, v in r["values"]} for r in result}
    assert seen == {"worker-a": {1.0}, "worker-b": {0.0, 1.0}}
    age = by_title["Capacity age"]["targets"][0]["expr"]
    result = backfilled.query_range(substitute(age, {"worker": "worker-b"}), history_end - 3600, history_end, 60)
    assert max(float(v) for r in result for _, v in r["values"]) > 1000
    blocks = by_title["Largest free block"]["targets"][0]["expr"]
    result = backfilled.query(substitute(blocks, {"flavor": "a100"}), at=history_end)
    assert [r["metric"]["cluster"] for r in result] == ["worker-a"]
    stat = by_title["Worker clusters"]["targets"][0]["expr"]
    assert backfilled.query(substitute(stat), at=history_end)[0]["value"][1] == "2"
