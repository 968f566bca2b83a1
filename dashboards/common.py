"""Conventions every queuepilot dashboard follows, as small builders over grafanalib.

- a hidden-able ``datasource`` variable (type datasource, prometheus) that every panel, target
  and variable points at (``${datasource}``);
- ``cluster`` / ``node`` / ``namespace`` / ``queue`` variables from ``label_values(...)``, each
  with an All option whose value is ``.*`` so an absent label (a single-cluster Prometheus has no
  ``cluster``) still matches;
- a unit and a description on every panel; ``$__rate_interval`` in every rate/increase;
- capacity drawn as a dashed line: series whose legend starts with ``capacity`` or ``max``;
- GPU pod labels normalised with ``label_replace`` so panels work whether the exporter's pod
  labels arrive as ``pod``/``namespace`` (ServiceMonitor ``honorLabels: true``) or as
  ``exported_pod``/``exported_namespace`` (the Prometheus-operator default).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

from dashboards.modernize import modernize

DS = {"type": "prometheus", "uid": "${datasource}"}
ALL = ".*"
COLUMNS = 24

# legends that mark a capacity line (drawn dashed, not stacked, not filled)
CAPACITY_LEGEND_REGEX = "/^(capacity|max)\\b.*/"


def datasource_variable() -> g.Template:
    return g.Template(
        name="datasource", label="Data source", query="prometheus", type="datasource", default="Prometheus",
    )


def query_variable(name: str, label: str, query: str, multi: bool = True) -> g.Template:
    """A ``label_values`` variable with an All option matching everything, even an absent label."""
    return g.Template(
        name=name,
        label=label,
        query=query,
        dataSource=DS,
        includeAll=True,
        allValue=ALL,
        multi=multi,
        refresh=2,  # on time range change
        default="$__all",
    )


def query_result_variable(name: str, label: str, expr: str, capture: str) -> g.Template:
    """A variable whose values are the ``capture`` label of ``expr``'s series (Grafana ``query_result``).

    For values only PromQL can compute, e.g. pod namespaces normalised from ``exported_namespace``.
    """
    var = query_variable(name, label, f"query_result({expr})")
    var.regex = f'/{capture}="([^"]+)"/'
    return var


def cluster_variable(metric: str) -> g.Template:
    return query_variable("cluster", "Cluster", f"label_values({metric}, cluster)", multi=False)


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False, fmt: str = "time_series") -> g.Target:
    return g.Target(
        expr=expr, legendFormat=legend, refId=ref, datasource=DS, instant=instant, format=fmt, intervalFactor=1,
    )


def targets(*pairs: tuple[str, str]) -> list[g.Target]:
    """Targets from (expr, legend) pairs, refIds A, B, C..."""
    return [target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(pairs)]


CAPACITY_OVERRIDE = {
    "matcher": {"id": "byRegexp", "options": CAPACITY_LEGEND_REGEX},
    "properties": [
        {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
        {"id": "custom.fillOpacity", "value": 0},
        {"id": "custom.stacking", "value": {"group": "A", "mode": "none"}},
        {"id": "custom.lineWidth", "value": 2},
    ],
}


def dashed_override(legend_prefix: str) -> dict:
    """Series whose legend starts with ``legend_prefix`` drawn dashed (a reference line beside the main one)."""
    return {
        "matcher": {"id": "byRegexp", "options": f"^{re.escape(legend_prefix)}.*"},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}},
            {"id": "custom.fillOpacity", "value": 0},
        ],
    }


def timeseries(
    title: str,
    description: str,
    unit: str,
    tgts: list[g.Target],
    stacked: bool = False,
    bars: bool = False,
    capacity: bool = False,
    decimals: int | None = None,
    dashed: str | None = None,
) -> g.TimeSeries:
    """``dashed``: draw the series whose legend starts with it dashed."""
    overrides = [CAPACITY_OVERRIDE] if capacity else []
    if dashed:
        overrides.append(dashed_override(dashed))
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DS,
        targets=tgts,
        unit=unit,
        drawStyle="bars" if bars else "line",
        fillOpacity=30 if (stacked or bars) else 10,
        stacking={"group": "A", "mode": "normal"} if stacked else {},
        overrides=overrides,
        tooltipMode="multi",
        legendDisplayMode="table" if len(tgts) > 1 else "list",
        legendCalcs=["lastNotNull", "max"],
        valueDecimals=decimals,
    )


def stat(title: str, description: str, unit: str, expr: str, reduce: str = "lastNotNull") -> g.Stat:
    return g.Stat(
        title=title,
        description=description,
        dataSource=DS,
        targets=[target(expr)],
        format=unit,
        reduceCalc=reduce,
        graphMode="area",
        thresholds=[g.Threshold("green", 0, 0.0)],
    )


def table(title: str, description: str, unit: str, expr: str, legend: str = "") -> g.Table:
    return g.Table(
        title=title,
        description=description,
        dataSource=DS,
        targets=[target(expr, legend, instant=True, fmt="table")],
        unit=unit,
        transformations=[{"id": "organize", "options": {"excludeByName": {"Time": True}}}],
    )


def state_timeline(title: str, description: str, unit: str, tgts: list[g.Target]) -> g.StateTimeline:
    return g.StateTimeline(
        title=title,
        description=description,
        dataSource=DS,
        targets=tgts,
        extraJson={"fieldConfig": {"defaults": {"unit": unit}}},
    )


def row(title: str) -> g.RowPanel:
    return g.RowPanel(title=title)


def layout(items: Sequence[tuple[g.Panel, int, int]]) -> list[g.Panel]:
    """Place (panel, width, height) left to right, wrapping at 24 columns; rows take a full line."""
    placed: list[g.Panel] = []
    x = y = line_h = 0
    for panel, w, h in items:
        if isinstance(panel, g.RowPanel):
            if x:
                y, x, line_h = y + line_h, 0, 0
            panel.gridPos = g.GridPos(h=1, w=COLUMNS, x=0, y=y)
            y += 1
            placed.append(panel)
            continue
        if x + w > COLUMNS:
            y, x, line_h = y + line_h, 0, 0
        panel.gridPos = g.GridPos(h=h, w=w, x=x, y=y)
        x += w
        line_h = max(line_h, h)
        placed.append(panel)
    return placed


def dashboard(
    title: str,
    uid: str,
    description: str,
    variables: list[g.Template],
    panels: Sequence[tuple[g.Panel, int, int]],
    annotations: list[dict] | None = None,
    tags: Sequence[str] = ("queuepilot",),
) -> g.Dashboard:
    return g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=list(tags),
        timezone="browser",
        refresh="30s",
        time=g.Time("now-6h", "now"),
        graphTooltip=1,  # shared crosshair
        templating=g.Templating(list=[datasource_variable(), *variables]),
        annotations=g.Annotations(list=annotations or []),
        panels=layout(panels),
    ).auto_panel_ids()


def render(dash: g.Dashboard) -> str:
    """Stable JSON text (sorted keys, trailing newline) so regeneration is byte-identical, in the current
    Grafana schema (``dashboards.modernize``: grafanalib writes schema 12)."""
    plain = json.loads(json.dumps(dash.to_json_data(), cls=DashboardEncoder))
    return json.dumps(modernize(plain), sort_keys=True, indent=2) + "\n"


# --- PromQL helpers ---------------------------------------------------------------------------------

def sel(*matchers: str) -> str:
    """A label selector body from matchers, skipping empty ones."""
    return ",".join(m for m in matchers if m)


def dcgm_identity(expr: str) -> str:
    """Give queuepilot's snake_case GPU series dcgm-exporter's ``Hostname``/``UUID`` too, for joins."""
    return f'label_replace(label_replace({expr}, "Hostname", "$1", "hostname", "(.+)"), "UUID", "$1", "uuid", "(.+)")'


def normalize_pod_labels(expr: str) -> str:
    """Copy exported_pod/exported_namespace/exported_container onto pod/namespace/container when present."""
    for label in ("pod", "namespace", "container"):
        expr = f'label_replace({expr}, "{label}", "$1", "exported_{label}", "(.+)")'
    return expr


def gpu_pod_series(metric: str, matchers: str, namespace_var: str = "$namespace", wrap: str = "{series}") -> str:
    """``metric`` per GPU with pod labels normalised and filtered by namespace in either label spelling.

    ``wrap`` puts each selector inside an expression first (e.g. ``"max_over_time({series}[5m])"``);
    the two spellings are joined with ``or`` (identical after normalisation, so no duplicates).
    """
    plain = metric + "{" + sel(matchers, 'namespace=~"' + namespace_var + '"') + "}"
    exported = metric + "{" + sel(matchers, 'exported_namespace=~"' + namespace_var + '"') + "}"
    arms = [normalize_pod_labels(wrap.format(series=s)) for s in (plain, exported)]
    return f"({arms[0]} or {arms[1]})"
