"""GPU economics: teams ranked by waste, allocated against used GPUs, allocated against effective cost over
time, and the Ray worker groups with the most idle GPU-hours, from the economics recording rules.

GPU-hours over the dashboard's range are ``sum_over_time(<rule>[$__range]) * $rule_interval / 3600``:
each sample of a recording rule stands for one evaluation interval (the hidden ``rule_interval``
constant, 60 s like the rules' default; change both together). The cost row and its panels repeat once
per value of the ``currency`` variable, which the cost rules set: without a price there are no cost
series, the variable has no value and no cost panel is drawn.
"""

from __future__ import annotations

from grafanalib import core as g

from autoscaler import metrics as cm
from dashboards import common as c

UID = "queuepilot-economics"

# the recording rules of the economics rule file
TEAM = "namespace_local_queue_cluster_queue:"
GROUP = "namespace_raycluster_group:"
ALLOCATED = "queuepilot_gpus_allocated:count"
USED = "queuepilot_gpus_used:sum"
IDLE = "queuepilot_gpus_idle:sum"
COST = "queuepilot_gpu_cost_per_hour:sum"
EFFECTIVE_COST = "queuepilot_gpu_effective_cost_per_hour:sum"
BUSY_WORKERS = "queuepilot_busy_workers:sum"
RULE_INTERVAL_S = 60

T = 'cluster=~"$cluster",namespace=~"$namespace"'
TEAM_BY = "namespace, local_queue, cluster_queue"
TEAM_LEGEND = "{{namespace}}/{{local_queue}}"
GROUP_BY = "namespace, raycluster, group"
GROUP_LEGEND = "{{namespace}}/{{raycluster}}/{{group}}"


def gpu_hours(metric: str, sel: str = T) -> str:
    return f"sum_over_time({metric}{{{sel}}}[$__range]) * $rule_interval / 3600"


def bar_gauge(title: str, description: str, unit: str, expr: str, legend: str, maximum: float | None = None):
    return g.BarGauge(
        title=title,
        description=description,
        dataSource=c.DS,
        targets=[c.target(expr, legend, instant=True)],
        format=unit,
        orientation="horizontal",
        displayMode="gradient",
        calc="lastNotNull",
        min=0,
        max=maximum if maximum is not None else 100,
        thresholds=[g.Threshold("green", 0, 0.0), g.Threshold("orange", 1, 0.3), g.Threshold("red", 2, 0.6)]
        if unit == "percentunit" else [g.Threshold("blue", 0, 0.0)],
        # the current panel shape beside grafanalib's legacy fieldOptions (Grafana reads this one)
        extraJson={
            "fieldConfig": {"defaults": {"unit": unit, "min": 0, **({"max": maximum} if maximum is not None else {})}},
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        },
    )


def _per_currency(panel):
    """Repeat the panel per currency with cost series: no price, no cost series, no panel."""
    panel.repeat = g.Repeat(direction="h", variable="currency")
    return panel


def variables() -> list[g.Template]:
    rule_interval = g.Template(
        name="rule_interval", label="Rule interval (s)", query=str(RULE_INTERVAL_S), type="constant",
        default=str(RULE_INTERVAL_S), hide=2,
    )
    currency = c.query_variable("currency", "Currency", f"label_values({TEAM}{COST}, currency)")
    currency.hide = 2
    return [
        c.cluster_variable(TEAM + ALLOCATED),
        c.query_variable("namespace", "Namespace", f"label_values({TEAM}{ALLOCATED}, namespace)"),
        rule_interval,
        currency,
    ]


def build():
    waste = (
        f"sort_desc(1 - sum by ({TEAM_BY}) (sum_over_time({TEAM}{USED}{{{T}}}[$__range])) "
        f"/ sum by ({TEAM_BY}) (sum_over_time({TEAM}{ALLOCATED}{{{T}}}[$__range])))"
    )
    cost_row = c.row("Cost")
    cost_row.extraJson = {"repeat": "currency"}
    cur = 'currency=~"$currency"'
    panels = [
        (c.row("Teams"), 24, 1),
        (bar_gauge(
            "Teams ranked by waste",
            "Share of the GPU-hours each LocalQueue held over the range that its GPUs spent idle "
            "(1 - used / allocated; used = engine-active time, DCGM profiling where the GPU has it, else "
            "utilization).",
            "percentunit", waste, TEAM_LEGEND, maximum=1,
        ), 12, 9),
        (bar_gauge(
            "Idle GPU-hours by team",
            "GPU-hours held by each LocalQueue's pods over the range while the GPUs were not busy.",
            "none", f"sort_desc(sum by ({TEAM_BY}) ({gpu_hours(TEAM + IDLE)}))", TEAM_LEGEND,
        ), 12, 9),
        (c.timeseries(
            "Allocated and used GPUs by team",
            "GPUs held by each LocalQueue's pods (allocated) and the sum of their busy ratios (used); the gap "
            "is idle but allocated.",
            "none",
            c.targets(
                (f"sum by ({TEAM_BY}) ({TEAM}{ALLOCATED}{{{T}}})", "allocated " + TEAM_LEGEND),
                (f"sum by ({TEAM_BY}) ({TEAM}{USED}{{{T}}})", "used " + TEAM_LEGEND),
            ),
        ), 24, 8),
        (cost_row, 24, 1),
        (_per_currency(c.timeseries(
            "Allocated and effective cost per hour",
            "Cost rate of the GPUs each LocalQueue holds (allocated) and of the part it uses (effective), at "
            "the configured price per GPU-hour of the GPUs' flavor or model.",
            "currencyUSD",
            c.targets(
                (f"sum by ({TEAM_BY}) ({TEAM}{COST}{{{T},{cur}}})", "allocated " + TEAM_LEGEND),
                (f"sum by ({TEAM_BY}) ({TEAM}{EFFECTIVE_COST}{{{T},{cur}}})", "effective " + TEAM_LEGEND),
            ),
        )), 16, 8),
        (_per_currency(bar_gauge(
            "Cost of idle GPUs by team",
            "Allocated minus effective cost over the range: what the idle-but-allocated GPU-hours cost.",
            "currencyUSD",
            f"sort_desc(sum by ({TEAM_BY}) ({gpu_hours(TEAM + COST, T + ',' + cur)}) - "
            f"sum by ({TEAM_BY}) ({gpu_hours(TEAM + EFFECTIVE_COST, T + ',' + cur)}))",
            TEAM_LEGEND,
        )), 8, 8),
        (c.row("Ray worker groups"), 24, 1),
        (bar_gauge(
            "Worker groups with the most idle GPU-hours",
            "The ten RayCluster worker groups whose workers held the most GPU-hours without using them over "
            "the range; `queuepilot report` says what each should request instead.",
            "none", f"topk(10, sum by ({GROUP_BY}) ({gpu_hours(GROUP + IDLE)}))", GROUP_LEGEND,
        ), 12, 9),
        (c.timeseries(
            "Busy and current workers by group",
            "Workers with at least one active GPU (engine busy or framebuffer in use) against the workers "
            "the group runs and its maxReplicas (dashed): a group whose busy workers stay well under its "
            "size can shrink.",
            "none",
            c.targets(
                (f"sum by ({GROUP_BY}) ({GROUP}{BUSY_WORKERS}{{{T}}})", "busy " + GROUP_LEGEND),
                (f'max by ({GROUP_BY}) ({cm.RAY_WORKERS.name}{{{T},kind="current"}})', "current " + GROUP_LEGEND),
                (f'max by ({GROUP_BY}) ({cm.RAY_WORKERS.name}{{{T},kind="max"}})', "max " + GROUP_LEGEND),
            ),
            capacity=True,
        ), 12, 9),
    ]
    return c.dashboard(
        "GPU economics",
        UID,
        "Which team holds GPUs it does not use, what that costs, and which Ray worker groups hold the most "
        "idle GPU-hours (queuepilot's economics recording rules).",
        variables(),
        panels,
    )
