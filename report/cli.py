"""``queuepilot report``: which team held how many GPU-hours it did not use, what that cost, and what each
Ray worker group should request instead, read from Prometheus: the economics recording rules where they
ran over the window, and where they did not (not loaded, or loaded after the history began), the same
expressions evaluated over the raw series users already keep (dcgm-exporter's or queuepilot's GPU series
and the controller's ``queuepilot_pod_info``); the table and the JSON say which.

Exit status: 0 report written; 1 Prometheus could not be read; 2 bad arguments; 3 the window holds no
data (the JSON / HTML written then say why).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import re
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from autoscaler.core.policy import rightsizing as rs
from report import model
from report.model import Report, dash, utc_minute
from report.prom import PrometheusClient, ReportError, Series, check_url
from servicekit import gpu_economics as ge
from servicekit.cli import Parser, fail
from servicekit.outpaths import check_writable
from servicekit.prices import Prices, parse_prices

PROG = "queuepilot report"
EXIT_OK, EXIT_PROMETHEUS, EXIT_USAGE, EXIT_NO_DATA = 0, 1, 2, 3
MAX_POINTS = 10_000  # Prometheus refuses range queries of more than 11 000 points per series
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str) -> float:
    """``7d``, ``36h``, ``1w2d``, ``90m`` or a number of seconds."""
    text = text.strip()
    if re.fullmatch(r"\d+(\.\d+)?", text):
        seconds = float(text)
    elif re.fullmatch(r"(\d+[smhdw])+", text):
        seconds = float(sum(int(n) * _UNITS[u] for n, u in re.findall(r"(\d+)([smhdw])", text)))
    else:
        raise ValueError(f"expected a duration like 7d, 36h or 1w2d, got {text!r}")
    if seconds <= 0:
        raise ValueError(f"a duration must be positive, got {text!r}")
    return seconds


def build_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog=PROG,
        description="Which team held how many GPU-hours it did not use, what that cost, and what each Ray "
        "worker group should request instead, read from Prometheus: the economics recording rules where they ran, "
        "else the same expressions over the raw GPU series and queuepilot_pod_info.",
        epilog="Exit status: 0 report written; 1 Prometheus could not be read; 2 bad arguments; 3 no data in "
        "the window (the JSON and HTML written say why).",
    )
    p.add_argument("--prometheus-url", required=True, help="base URL of the Prometheus that holds the history")
    p.add_argument("--window", default="7d", help="how far back to look")
    p.add_argument("--end", type=float, default=None, help="end of the window, unix seconds (default: now)")
    p.add_argument("--step", default=None,
                   help="seconds between points read (default: the recording rules' evaluation interval)")
    p.add_argument("--price", action="append", default=[], metavar="FLAVOR_OR_MODEL=USD",
                   help="USD per GPU-hour for a Kueue flavor or a GPU model name (* for every other GPU); "
                   "a flavor price wins over a model price; repeatable. Without any, no cost is computed.")
    p.add_argument("--namespace", default=None, help="report on this namespace only")
    p.add_argument("--min-history", default="1d",
                   help="history a worker group needs before it gets a recommendation")
    p.add_argument("--json", dest="json_file", default=None, metavar="FILE", help="write the report as JSON")
    p.add_argument("--html", dest="html_file", default=None, metavar="FILE",
                   help="write the report as one HTML file with its plots embedded")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each Prometheus answer")
    return p


def _step(requested: float | None, rule_interval: float | None, window: float) -> float:
    base = requested or rule_interval or 60.0
    return base * max(1, math.ceil(window / base / MAX_POINTS))


async def collect(
    url: str, window: float, end: float, step: float | None, namespace: str | None, prices: Prices,
    policy: rs.RightsizingPolicy, request_timeout_s: float, progress: Callable[[str], None] = lambda _: None,
) -> Report:
    """Read the window from the economics recording rules where they ran, and evaluate the same
    expressions over the raw series where they did not (report/model.py, ``merge``)."""
    async with aiohttp.ClientSession() as session:
        prom = PrometheusClient(url, session, request_timeout_s)
        names = set(await prom.metric_names())
        progress("metric names")
        intervals = await prom.rule_intervals()
        progress("rule intervals")
        step_s = _step(step, intervals.get(model.GPU_BUSY), window)
        start = end - window + step_s
        grid = {start + i * step_s for i in range(round(window / step_s))}
        empty = Report(window, end, step_s, namespace, prices, [], [], [])
        rules = model.GPU_BUSY in names
        raw = ge.POD_INFO in names and bool({ge.GPU_UTIL, ge.ENGINE_ACTIVE} & names)
        if not rules and not raw:
            empty.empty_reason = (
                f"Prometheus has neither the economics recording rules' series ({model.GPU_BUSY}) nor the raw series "
                f"they are computed from ({ge.GPU_UTIL} or {ge.ENGINE_ACTIVE}, and {ge.POD_INFO} from the controller)"
            )
            return empty

        async def ranged(expr: str, what: str) -> list[Series]:
            out = await prom.query_range(expr, start, end, step_s)
            progress(what)
            return out

        async def instant(expr: str) -> list[Series]:
            out = await prom.query(expr, end)
            progress("worker limits")
            return out

        async def none() -> list[Series]:
            return []

        async def both(recorded_expr: str, raw_expr: str, what: str) -> model.Merged:
            recorded = await ranged(recorded_expr, what) if rules else []
            covered = {t for s in recorded for t, _ in s.points}
            missing = raw and not {round(t, 3) for t in grid} <= {round(t, 3) for t in covered}
            return model.merge(recorded, await ranged(raw_expr, f"{what} (raw series)") if missing else [])

        alloc_q, used_q = model.team_queries(namespace)
        raw_alloc_q, raw_used_q = model.raw_team_queries(namespace)
        pod_alloc_q, pod_active_q = model.pod_queries(namespace)
        raw_pod_alloc_q, raw_pod_active_q = model.raw_pod_queries(namespace)
        jobs: list[Awaitable[Any]] = [
            both(alloc_q, raw_alloc_q, "allocated GPUs"), both(used_q, raw_used_q, "used GPUs"),
            both(pod_alloc_q, raw_pod_alloc_q, "GPUs per pod"), both(pod_active_q, raw_pod_active_q, "active GPUs"),
            instant(model.limits_query(namespace)) if model.RAY_WORKERS in names else none(),
        ]
        alloc, used, pod_alloc, pod_active, lims = await asyncio.gather(*jobs)
    team_rows = model.teams(alloc.series, used.series, step_s, prices)
    history = model.pod_history(pod_alloc.series, pod_active.series, step_s)
    report = Report(
        window, end, step_s, namespace, prices, team_rows,
        model.recommendations(history, model.limits(lims), policy),
        model.job_kind_recommendations(history, policy),
        raw_times=alloc.raw_times, times=alloc.times,
    )
    if not team_rows:
        where = f" in namespace {namespace}" if namespace else ""
        report.empty_reason = (
            f"no GPU was held by a pod queuepilot knows{where} between {utc_minute(start - step_s)} and {utc_minute(end)} "
            "(neither the recording rules nor the raw series have samples in this window)"
        )
    return report


def print_tables(report: Report, console: Console) -> None:
    if report.empty_reason:
        console.print(f"[bold]No data:[/bold] {report.empty_reason}", markup=True, highlight=False)
        return
    title = f"GPU economics per team, {utc_minute(report.end - report.window_s)} - {utc_minute(report.end)}"
    t = Table(title=title, caption=f"Read from {report.source}.")
    for col in ("namespace", "LocalQueue", "ClusterQueue", "allocated GPU-h", "used GPU-h", "idle GPU-h", "waste"):
        t.add_column(col, justify="right" if "GPU" in col or col == "waste" else "left")
    if report.prices:
        t.add_column("cost USD", justify="right")
        t.add_column("effective USD", justify="right")
    for team in report.teams:
        row = [team.namespace, team.local_queue or "-", team.cluster_queue or "-", dash(team.allocated_gpu_hours),
               dash(team.used_gpu_hours), dash(team.idle_gpu_hours), dash(team.waste_ratio, "{:.0%}")]
        if report.prices:
            row += [dash(team.cost, "{:,.0f}"), dash(team.effective_cost, "{:,.0f}")]
        t.add_row(*row)
    console.print(t)
    for line in report.warnings:
        console.print(line, markup=False, highlight=False)
    g = Table(title="Worker groups: what to request instead")
    for col in ("namespace", "RayCluster", "group", "GPUs/worker", "-> GPUs", "-> min", "-> max", "GPU-h saved",
                "reason"):
        g.add_column(col)
    for r in report.recommendations:
        g.add_row(r.key.namespace, r.key.raycluster, r.key.group, str(r.gpus_per_worker),
                  dash(r.recommended_gpus_per_worker, "{}"), dash(r.recommended_min_replicas, "{}"),
                  dash(r.recommended_max_replicas, "{}"), dash(r.saved_gpu_hours), r.reason)
    console.print(g)
    if report.job_kinds:
        j = Table(title="Kueue workloads: GPUs requested vs active per pod")
        for col in ("namespace", "job kind", "requested", f"active p{rs.RightsizingPolicy().job_percentile * 100:g}",
                    "-> GPUs", "reason"):
            j.add_column(col)
        for k in report.job_kinds:
            j.add_row(k.namespace, k.job_kind, dash(k.requested_gpus_per_pod, "{}"), dash(k.active_gpus_per_pod, "{}"),
                      dash(k.recommended_gpus_per_pod, "{}"), k.reason)
        console.print(j)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    err = Console(stderr=True)
    try:
        if args.json_file:
            check_writable(Path(args.json_file), directory=False)
        if args.html_file:
            check_writable(Path(args.html_file), directory=False)
        url = check_url(args.prometheus_url)
        window = parse_duration(args.window)
        step = parse_duration(args.step) if args.step else None
        prices = parse_prices(args.price)
        policy = rs.RightsizingPolicy(min_history_s=parse_duration(args.min_history))
        if args.namespace is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", args.namespace):
            raise ValueError(f"--namespace must be a Kubernetes namespace name, got {args.namespace!r}")
    except (ReportError, ValueError) as exc:
        return fail(PROG, str(exc), EXIT_USAGE)
    end = args.end if args.end is not None else time.time()
    progress = Progress(TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=err,
                        transient=True)
    try:
        with progress:
            task = progress.add_task("querying Prometheus", total=11)

            def step_done(what: str) -> None:
                progress.update(task, advance=1, description=f"read {what}")

            report = asyncio.run(collect(url, window, end, step, args.namespace, prices, policy, args.timeout,
                                         step_done))
    except ReportError as exc:
        print(f"queuepilot report: {exc}", file=sys.stderr)
        return EXIT_PROMETHEUS
    print_tables(report, Console(width=max(120, Console().width)))
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if args.html_file:
        from report.html import render_html

        try:
            Path(args.html_file).write_text(render_html(report))
        except ReportError as exc:
            print(f"queuepilot report: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if report.empty_reason:
        print(f"queuepilot report: no data: {report.empty_reason}", file=sys.stderr)
        return EXIT_NO_DATA
    return EXIT_OK
