"""The generated dashboards in the shape the target Grafana (11.x / 12.x) writes itself.

No Grafana server can run here, so these are the structural expectations of Grafana's dashboard schema
at ``TARGET_SCHEMA_VERSION`` (the keys its dashboard kind knows, current panel types, datasource
references as objects, threshold steps, legend and table options as migrations 37 and 38 leave them,
Prometheus targets as the query editor writes them), plus a check that modernising grafanalib's
JSON loses no query, legend or variable.
"""

from __future__ import annotations

import json

import pytest
from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from dashboards.cli import DASHBOARDS
from dashboards.common import DS, dashboard, render
from dashboards.modernize import DEPRECATED_PANEL_TYPES, TARGET_SCHEMA_VERSION, modernize
from tests.observability.files import DASHBOARD_DIR

# keys of Grafana's dashboard kind (schema 39+) that a dashboard may carry at the top level
DASHBOARD_KEYS = {
    "id", "uid", "title", "description", "revision", "gnetId", "tags", "timezone", "editable", "graphTooltip",
    "time", "timepicker", "fiscalYearStartMonth", "liveNow", "weekStart", "refresh", "schemaVersion", "version",
    "panels", "templating", "annotations", "links", "snapshot",
}
PANEL_KEYS = {
    "type", "id", "pluginVersion", "tags", "targets", "title", "description", "transparent", "datasource", "links",
    "repeat", "repeatDirection", "maxPerRow", "maxDataPoints", "transformations", "interval", "timeFrom", "timeShift",
    "hideTimeOverride", "libraryPanel", "options", "fieldConfig", "gridPos", "cacheTimeout", "queryCachingTTL",
}
ROW_KEYS = {"type", "collapsed", "title", "datasource", "gridPos", "id", "panels", "repeat"}
# core panel plugins of Grafana 11/12 (none deprecated)
CORE_PANEL_TYPES = {
    "timeseries", "stat", "table", "state-timeline", "status-history", "row", "bargauge", "gauge", "heatmap",
    "text", "barchart", "piechart", "histogram", "logs", "trend", "xychart", "candlestick", "canvas", "geomap",
    "nodeGraph", "traces", "flamegraph", "alertlist", "annolist", "dashlist", "news", "datagrid",
}
TARGET_ALLOWED = {"datasource", "expr", "legendFormat", "refId", "instant", "range", "format", "interval", "hide",
                  "editorMode", "exemplar", "intervalFactor"}
VARIABLE_TYPES = {"query", "datasource", "custom", "constant", "interval", "textbox", "adhoc", "groupby"}


def _load() -> dict[str, dict]:
    return {name: json.loads((DASHBOARD_DIR / name).read_text()) for name in DASHBOARDS}


def _panels(d: dict):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def _is_ds_ref(ds: object) -> bool:
    return isinstance(ds, dict) and set(ds) == {"type", "uid"} and ds["type"] == "prometheus" and ds["uid"]


def _nulls(node: object, path: str = "") -> list[str]:
    """Paths of null values, except the base threshold step's (null is how Grafana writes -Infinity)."""
    if node is None:
        return [] if path.endswith("thresholds.steps[0].value") else [path]
    if isinstance(node, dict):
        return [n for k, v in node.items() for n in _nulls(v, f"{path}.{k}")]
    if isinstance(node, list):
        return [n for i, v in enumerate(node) for n in _nulls(v, f"{path}[{i}]")]
    return []


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_top_level_is_the_current_schema(name: str) -> None:
    d = _load()[name]
    assert d["schemaVersion"] >= TARGET_SCHEMA_VERSION >= 39
    assert set(d) <= DASHBOARD_KEYS, f"legacy keys: {set(d) - DASHBOARD_KEYS}"
    assert isinstance(d["refresh"], str) and d["refresh"]  # schema 40
    assert "time_options" not in d.get("timepicker", {})  # schema 41
    assert d["graphTooltip"] in (0, 1, 2) and isinstance(d["editable"], bool)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_panels_are_current_types_with_current_options(name: str) -> None:
    d = _load()[name]
    for p in _panels(d):
        where = f"{name}: {p.get('title')}"
        assert p["type"] in CORE_PANEL_TYPES and p["type"] not in DEPRECATED_PANEL_TYPES, where
        if p["type"] == "row":
            assert set(p) <= ROW_KEYS, f"{where}: {set(p) - ROW_KEYS}"
            continue
        assert set(p) <= PANEL_KEYS, f"{where}: {set(p) - PANEL_KEYS}"
        assert not _nulls(p), f"{where}: null placeholders at {_nulls(p)}"
        assert _is_ds_ref(p["datasource"]), where
        steps = p["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
        for i, step in enumerate(steps):
            assert set(step) == {"color", "value"}, where
            assert (step["value"] is None) if i == 0 else isinstance(step["value"], int | float), where
        legend = p.get("options", {}).get("legend")
        if legend is not None:
            assert isinstance(legend["showLegend"], bool) and legend["displayMode"] in ("list", "table"), where
        if p["type"] == "table":
            custom = p["fieldConfig"]["defaults"].get("custom", {})
            assert "displayMode" not in custom and custom["cellOptions"]["type"], where
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(set(refs)) == len(refs), where
        for t in p["targets"]:
            assert set(t) <= TARGET_ALLOWED, f"{where}: {set(t) - TARGET_ALLOWED}"
            assert _is_ds_ref(t["datasource"]) and t["expr"] and t["editorMode"] == "code", where
            assert t["range"] is not t.get("instant", False), where


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_variables_and_annotations_use_datasource_objects(name: str) -> None:
    d = _load()[name]
    for v in d["templating"]["list"]:
        assert v["type"] in VARIABLE_TYPES
        assert not _nulls(v), f"{name}: variable {v['name']}: {_nulls(v)}"
        if v["type"] == "query":
            assert _is_ds_ref(v["datasource"]) and v["definition"] == v["query"]
    for a in d["annotations"]["list"]:
        assert _is_ds_ref(a["datasource"]) and not _nulls(a)


@pytest.mark.parametrize("name", sorted(DASHBOARDS))
def test_modernizing_loses_no_query(name: str) -> None:
    raw = json.loads(json.dumps(DASHBOARDS[name]().to_json_data(), cls=DashboardEncoder))
    assert raw["schemaVersion"] < TARGET_SCHEMA_VERSION  # grafanalib's own output is the old schema

    def content(d: dict) -> set:
        out = {(p["title"], p["type"], p.get("description"), json.dumps(p.get("gridPos"), sort_keys=True))
               for p in _panels(d)}
        out |= {(p["title"], t["refId"], t["expr"], t.get("legendFormat", ""), t.get("instant", False))
                for p in _panels(d) for t in p.get("targets", [])}
        out |= {(v["name"], v["type"], v["query"], v.get("regex") or "") for v in d["templating"]["list"]}
        return out

    assert content(modernize(raw)) == content(raw)
    assert modernize(raw)["panels"] == _load()[name]["panels"]


def test_a_deprecated_panel_type_is_refused() -> None:
    d = dashboard("t", "t", "d", [], [(g.Graph(title="old", dataSource=DS, targets=[]), 12, 8)])
    with pytest.raises(ValueError, match="deprecated"):
        render(d)
