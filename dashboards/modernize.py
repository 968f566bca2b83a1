"""Bring grafanalib's dashboard JSON to the current Grafana dashboard schema (Grafana 11.x / 12.x).

grafanalib 0.7.1 stamps ``schemaVersion: 12`` and carries keys Grafana stopped using years ago
(``rows``, ``style``, ``sharedCrosshair``, ``span``, null placeholders, old table options, legacy
Prometheus target fields). Grafana migrates such JSON on load, but then every import re-runs some
27 schema migrations, a provisioned copy shows as "changed" the moment someone opens it, and a
dashboard linter or a diff against an export from Grafana sees noise. The panels queuepilot uses are
already the current ones (timeseries, stat, table, state-timeline, row) with datasource objects, so
instead of replacing the generator this module applies, to our JSON, what Grafana's migrations up to
``TARGET_SCHEMA_VERSION`` would do to it, and stamps that version:

- top level: drop ``rows``, ``style``, ``hideControls``, ``sharedCrosshair`` (``graphTooltip`` is set),
  ``__inputs``, ``gnetId``; ``timepicker`` without ``time_options`` (gone in schema 41);
- panels: drop null placeholders and the pre-7 keys (``span``, ``height``, ``minSpan``, ``error``,
  per-panel ``editable``) and grafanalib's ``maxDataPoints: 100`` (Grafana then sizes it to the panel); rows keep only what a row has; threshold steps are ``{color, value}``
  with a ``null`` base (grafanalib writes the string ``"null"``);
- legends get ``showLegend`` (schema 37); tables get ``cellOptions`` instead of the old
  ``displayMode`` and lose the table-old keys ``styles``/``columns``/``fontSize`` (schema 38);
- Prometheus targets: ``expr``, ``legendFormat``, ``refId``, ``instant``/``range``, ``format``,
  ``datasource``, ``editorMode: code``; no ``intervalFactor``/``step``/``metric``/``target``/``query``;
- variables: no null placeholders or tag fields; query variables get ``definition``.

Schema 39 is what Grafana 10.4 and 11.0 write; 11.3+ and 12 migrate it to 40/41 on load, and those
two steps (a string ``refresh``, no ``time_options``) find nothing to change in this JSON.
"""

from __future__ import annotations

import copy
from typing import Any

TARGET_SCHEMA_VERSION = 39
# Grafana versions the generated JSON is written for (docs/dashboards.md)
TARGET_GRAFANA = "11.x and 12.x"

LEGACY_TOP_LEVEL = ("rows", "style", "hideControls", "sharedCrosshair", "__inputs", "gnetId")
LEGACY_PANEL_KEYS = ("span", "height", "minSpan", "error", "editable", "cacheTimeout", "hideTimeOverride")
TABLE_OLD_KEYS = ("styles", "columns", "fontSize", "color", "mappings")
TARGET_KEYS = ("datasource", "expr", "legendFormat", "refId", "instant", "format", "interval", "hide")
GRAFANALIB_MAX_DATA_POINTS = 100  # grafanalib's default on every panel: 100 points per series, too coarse
VARIABLE_DROP = ("tags", "tagsQuery", "tagValuesQuery", "useTags", "auto", "auto_count", "auto_min")


def _drop_nulls(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [_drop_nulls(v) for v in node]
    return node


def _thresholds(field_config: dict) -> None:
    th = field_config.get("defaults", {}).get("thresholds")
    if not th:
        return
    steps = []
    for i, step in enumerate(th.get("steps", [])):
        value = step.get("value")
        steps.append({"color": step["color"], "value": None if i == 0 or value in ("null", None) else value})
    th["steps"] = steps


def _target(t: dict) -> dict:
    out = {k: t[k] for k in TARGET_KEYS if k in t and t[k] is not None}
    out["editorMode"] = "code"
    out["range"] = not t.get("instant", False)
    if not out.get("interval"):
        out.pop("interval", None)
    if out.get("hide") is False:
        out.pop("hide")
    return out


# panel types Grafana has removed or replaced (graph -> timeseries, singlestat -> stat, ...); modernize()
# does not convert their options, so a dashboard must not use them
DEPRECATED_PANEL_TYPES = frozenset({
    "graph", "singlestat", "table-old", "grafana-singlestat-panel", "grafana-piechart-panel",
    "grafana-worldmap-panel", "grafana-clock-panel", "heatmap-old",
})


def _panel(p: dict) -> dict:
    if p.get("type") in DEPRECATED_PANEL_TYPES:
        raise ValueError(f"panel {p.get('title')!r}: type {p['type']!r} is deprecated in Grafana {TARGET_GRAFANA}; "
                         "use TimeSeries / Stat / Table / PieChartv2 instead")
    if p.get("type") == "row":
        row = {k: p[k] for k in ("type", "title", "id", "gridPos", "collapsed", "repeat") if p.get(k) is not None}
        row["panels"] = [_panel(c) for c in p.get("panels", [])]
        return row
    out = {k: v for k, v in p.items() if k not in LEGACY_PANEL_KEYS}
    if out.get("maxDataPoints") == GRAFANALIB_MAX_DATA_POINTS:  # let Grafana size it to the panel
        out.pop("maxDataPoints")
    if out.get("repeat") is None:
        out.pop("repeatDirection", None)
    if out.get("type") == "table":
        for k in TABLE_OLD_KEYS:
            out.pop(k, None)
    out = _drop_nulls(out)
    fc = out.get("fieldConfig")
    if fc:
        _thresholds(fc)
        custom = fc.get("defaults", {}).get("custom", {})
        if out.get("type") == "table" and "displayMode" in custom:
            custom["cellOptions"] = {"type": custom.pop("displayMode")}
    legend = out.get("options", {}).get("legend")
    if isinstance(legend, dict):
        legend.setdefault("showLegend", legend.get("displayMode") != "hidden")
        if legend.get("displayMode") == "hidden":
            legend["displayMode"] = "list"
    out["targets"] = [_target(t) for t in out.get("targets", [])]
    return out


def _variable(v: dict) -> dict:
    out = {k: val for k, val in v.items() if k not in VARIABLE_DROP and val is not None}
    if isinstance(out.get("current"), dict):
        out["current"] = {k: val for k, val in out["current"].items() if k != "tags"}
    if out.get("type") == "query" and isinstance(out.get("query"), str):
        out["definition"] = out["query"]
    return out


def modernize(dashboard: dict[str, Any]) -> dict[str, Any]:
    """A copy of grafanalib's ``to_json_data()`` output in schema ``TARGET_SCHEMA_VERSION`` form."""
    d = copy.deepcopy(dashboard)
    for k in LEGACY_TOP_LEVEL:
        d.pop(k, None)
    d["schemaVersion"] = TARGET_SCHEMA_VERSION
    tp = d.get("timepicker")
    if isinstance(tp, dict):
        tp.pop("time_options", None)
        d["timepicker"] = _drop_nulls(tp)
    d["panels"] = [_panel(p) for p in d.get("panels", [])]
    tmpl = d.get("templating", {})
    tmpl["list"] = [_variable(v) for v in tmpl.get("list", [])]
    ann = d.get("annotations", {})
    ann["list"] = [_drop_nulls(a) for a in ann.get("list", [])]
    return d
