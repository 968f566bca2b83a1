"""queuepilot simulate --clusters N: one trace over N MultiKueue worker clusters, per dispatcher.

Examples::

    queuepilot simulate --clusters 3 --trace ../shared/traces/philly-pollux/philly.csv --start 2017-10-03 \\
        --hours 168 --nodes 96 --gpu-failure-rate 0.05 --seed 1 --json fleet.json
    queuepilot simulate --clusters 4 --trace synthetic --hours 48 --dispatchers all-at-once,capacity

Compares Kueue's built-in MultiKueue dispatchers (all-at-once, incremental) with queuepilot's
capacity-aware dispatcher (the controller's DispatchReconciler): queue wait per job class,
unplaceable dispatches, remote copies created and deleted.  Bad input is one line on stderr and
exit status 2.  What each number means: docs/multicluster.md, "Simulation".
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from servicekit.cli import Parser
from simulator.fleet import CLASSES, DISPATCHERS, FleetConfig, FleetSim, run_dispatchers, split_nodes
from simulator.fleet_table import table_rows
from simulator.inputs import (
    DEFAULT_START,
    check_writable,
    default_trace,
    load_window,
    non_negative_rate,
    positive_hours,
)

PROG = "queuepilot simulate"


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog=PROG, description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--trace", default=str(default_trace()),
                   help="a Philly-format CSV (timestamp,duration,num_gpus,gpu_time,cluster) or 'synthetic'")
    p.add_argument("--start", default=DEFAULT_START, help="window start (ISO date/time; ignored for synthetic)")
    p.add_argument("--hours", type=positive_hours, default=24.0, help="window length in hours")
    p.add_argument("--nodes", type=_int_at_least(2), default=FleetConfig().nodes,
                   help="8-GPU nodes in the whole fleet, split evenly over the clusters")
    p.add_argument("--clusters", type=_int_at_least(2), default=3, help="worker clusters (>= 2)")
    p.add_argument("--dispatchers", default=",".join(DISPATCHERS),
                   help=f"comma-separated, or 'all': {', '.join(DISPATCHERS)}")
    p.add_argument("--gpu-failure-rate", type=non_negative_rate, default=0.0,
                   help="injected GPU failures per GPU per day (repaired after ~6 h)")
    p.add_argument("--seed", type=int, default=0, help="seed of everything random")
    p.add_argument("--json", default=None, help="also write the per-dispatcher results (JSON) here")
    p.add_argument("--no-progress", action="store_true", default=False, help="no progress bar")
    return p


def parse_dispatchers(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(DISPATCHERS)
    unknown = [n for n in names if n not in DISPATCHERS]
    if unknown or not names:
        raise ValueError(f"unknown dispatchers {unknown or [text]} (known: {', '.join(DISPATCHERS)})")
    return list(dict.fromkeys(names))


def results(sims: dict[str, FleetSim], meta: dict[str, Any]) -> dict[str, Any]:
    return {"meta": meta, "dispatchers": {name: s.metrics.summary() for name, s in sims.items()}}


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # a usage error (one line already on stderr) or --help
        return e.code if isinstance(e.code, int) else 2
    try:
        dispatchers = parse_dispatchers(args.dispatchers)
        split_nodes(args.nodes, args.clusters)
        cfg = FleetConfig(nodes=args.nodes, clusters=args.clusters, gpu_failure_rate=args.gpu_failure_rate,
                          seed=args.seed)
        if args.json:
            check_writable(Path(args.json), directory=False)
        biggest = max(split_nodes(args.nodes, args.clusters)) * cfg.gpus_per_node
        window = load_window(args.trace, args.start, args.hours, args.seed, biggest)
    except (ValueError, FileNotFoundError) as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    window_s = args.hours * 3600.0
    sizes = split_nodes(args.nodes, args.clusters)
    print(f"{len(window.jobs)} jobs ({window.dropped_too_large} larger than one worker dropped), "
          f"{args.clusters} clusters of {'/'.join(map(str, sizes))} nodes x {cfg.gpus_per_node} GPUs, "
          f"{args.hours:g} h, failures {args.gpu_failure_rate:g}/GPU/day, seed {args.seed}", file=sys.stderr)
    t0 = time.perf_counter()
    sims = _run(window.jobs, window_s, dispatchers, cfg, progress=not args.no_progress)
    elapsed = time.perf_counter() - t0
    meta = {
        "trace": args.trace, "start": args.start if args.trace != "synthetic" else None, "hours": args.hours,
        "seed": args.seed, "gpu_failure_rate": args.gpu_failure_rate, "nodes": args.nodes,
        "clusters": args.clusters, "nodes_per_cluster": sizes, "gpus_per_node": cfg.gpus_per_node,
        "jobs": len(window.jobs), "dropped_too_large": window.dropped_too_large,
        "command": f"{PROG} " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    out = results(sims, meta)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print_table(out["dispatchers"])
    print(f"simulated {len(dispatchers)} dispatchers in {elapsed:.1f}s", file=sys.stderr)
    return 0


def print_table(summaries: dict[str, dict[str, Any]]) -> None:
    """Two tables (queue wait; what dispatching cost), so each stays readable in 100 columns."""
    from rich.console import Console
    from rich.table import Table

    header, rows = table_rows(summaries)
    split = 1 + len(CLASSES)
    console = Console()
    for title, cols in (("queue wait, submission -> pods bound (p50/p95/p99)", range(1, split)),
                        ("what dispatching cost", range(split, len(header)))):
        table = Table(title=title, title_justify="left")
        table.add_column(header[0], no_wrap=True)
        for i in cols:
            table.add_column(header[i].removeprefix("wait ").removesuffix(" p50/p95/p99"), justify="right")
        for r in rows:
            table.add_row(r[0], *(r[i] for i in cols))
        console.print(table)


def _run(jobs, window_s: float, dispatchers: list[str], cfg: FleetConfig, progress: bool) -> dict[str, FleetSim]:
    if not progress:
        return run_dispatchers(jobs, window_s, dispatchers, cfg)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<12}"), BarColumn(), TextColumn("{task.fields[sim]}"),
                  TimeElapsedColumn(), transient=False, redirect_stdout=False) as bar:
        tasks = {d: bar.add_task(d, total=window_s, sim="") for d in dispatchers}

        def factory(name: str):
            last = [-1e18]

            def update(t: float) -> None:
                if t - last[0] >= 600 or t >= window_s:  # a redraw every 10 simulated minutes is plenty
                    last[0] = t
                    bar.update(tasks[name], completed=t, sim=f"{t / 3600:,.0f}/{window_s / 3600:,.0f} h")

            return update

        return run_dispatchers(jobs, window_s, dispatchers, cfg, factory)


if __name__ == "__main__":
    raise SystemExit(main())
