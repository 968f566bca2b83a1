"""Time windows on the Philly week: what an off-peak cap does to idle GPU-hours and to the wait of tasks.

``queuepilot`` as it ships (no window) against ``queuepilot`` with every team's ClusterQueue given a time
window (the controller's ``scaling.cluster_queue_schedules``; ``queuepilot simulate --schedule``):

- **off-peak caps**: every day, the ``--window-hours`` consecutive clock hours with the fewest job
  submissions in the simulated window, on the trace's own clock (its time zone is unknown,
  shared/research-traces.md, so "night" is read from the trace, not assumed), with ``max=`` a share
  (``--caps``) of the team's usual worker cap (its RayCluster's maxReplicas: the team's nominal GPU
  quota x the worker-cap factor);
- **a warm pool** for the other side (``--warm``, a share of the cap; 0 leaves it out): ``min=`` in
  the same number of busiest consecutive hours.

Each run is one simulation of the controller's own reconcilers (``Engine``, the same as ``queuepilot
simulate --policies queuepilot [--schedule TEXT]``) with the same window, model, seed and failure rate.
Idle and allocated GPU-hours inside and outside the window's hours come from the run's timeline
(one sample every 300 s of simulated time: allocated GPUs and their summed utilization); the rest
from the run's summary.  Writes ``results/time_windows.md`` and ``time_windows.json``.  Numbers are
reported, never asserted.

    python benchmarks/time_windows.py                       # the Philly week from 2017-10-03, grounded
    python benchmarks/time_windows.py --caps 0.5 --warm 0 --model scattered
    python benchmarks/time_windows.py --render-only
"""

from __future__ import annotations

import argparse
import csv
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.sim_runs import page_data, provenance, run_pool, window_parser  # noqa: E402
from simulator.engine import Engine, SimConfig  # noqa: E402
from simulator.inputs import load_window  # noqa: E402
from simulator.metrics import CONTROLLABLE_CLASSES  # noqa: E402
from simulator.schedule_clock import on_simulated_clock  # noqa: E402
from simulator.utilization import MODELS  # noqa: E402

POLICY = "queuepilot"


def hour_counts(trace: str, start: datetime, hours: float) -> list[int]:
    """Job submissions per clock hour of the day (0-23) in [start, start + hours) of the trace."""
    end = start + timedelta(hours=hours)
    counts = [0] * 24
    with open(trace, newline="") as f:
        for row in csv.DictReader(f):
            t = datetime.fromisoformat(row["timestamp"])
            if start <= t < end:
                counts[t.hour] += 1
    return counts


def quietest(counts: Sequence[int], length: int, *, busiest: bool = False) -> int:
    """The first hour of the ``length`` consecutive hours (around midnight too) with the fewest (or,
    ``busiest``, the most) submissions."""
    sums = [sum(counts[(h + i) % 24] for i in range(length)) for h in range(24)]
    pick = max(sums) if busiest else min(sums)
    return sums.index(pick)


def window_text(first: int, length: int, bound: str, name: str) -> str:
    """``* HH:00-HH:00 <bound> name=<name>`` on the trace's clock (``24:00`` for a window ending at midnight)."""
    end = (first + length) % 24
    return f"* {first:02d}:00-{end if end else 24:02d}:00 {bound} name={name}"


def run_one(args: tuple[str, str, float, int, float, str, float | None, str, int, int]) -> dict[str, Any]:
    """One run in a pool worker: ``label`` with every team's ClusterQueue bounded by ``kind`` (``max``/
    ``min``) = ``share`` of its usual cap in the hours from ``first`` (on the trace's clock)."""
    trace, start, hours, seed, rate, model, share, kind, first, length = args
    label = "no window" if share is None else f"{kind}={share:g} x cap"
    cfg = SimConfig(seed=seed, gpu_failure_rate=rate)
    window = load_window(trace, start, hours, seed, cfg.nodes * cfg.gpus_per_node, util_model=model)
    caps = {t: rc.max_replicas for t, rc in Engine(window.jobs, hours * 3600.0, POLICY, cfg).rays.items()}
    schedules: dict[str, str] = {}
    if share is not None:
        name = "off-peak" if kind == "max" else "peak"
        schedules = {f"cq-{t}": window_text(first, length, f"{kind}={int(share * cap)}", name)
                     for t, cap in caps.items()}
        cfg = SimConfig(seed=seed, gpu_failure_rate=rate, cluster_queue_schedules=tuple(
            (cq, on_simulated_clock(text, window.start)) for cq, text in sorted(schedules.items())))
    t0 = time.process_time()
    eng = Engine(window.jobs, hours * 3600.0, POLICY, cfg)
    eng.run()
    # the clock hour of each timeline sample, on the trace's clock; inside: one of the window's hours
    inside = [(window.start.hour + int(t // 3600) - first) % 24 < length for t, *_ in eng.metrics.timeline]
    return {"label": label, "kind": kind, "share": share, "caps": caps, "schedules": schedules,
            "summary": eng.metrics.summary(), "timeline_split": split(eng.metrics.timeline, inside),
            "cpu_s": round(time.process_time() - t0, 1)}


def split(timeline: Sequence[Sequence[float]], inside: Sequence[bool], step_s: float = 300.0) -> dict[str, Any]:
    """Allocated and idle (allocated - used) GPU-hours and the mean queue, inside and outside the window's
    hours, from the run's timeline samples (each standing for ``step_s`` seconds)."""
    out: dict[str, Any] = {}
    for part, want in (("inside", True), ("outside", False)):
        rows = [r for r, i in zip(timeline, inside, strict=True) if i == want]
        out[part] = {"allocated_gpu_hours": round(sum(r[2] for r in rows) * step_s / 3600, 1),
                     "idle_gpu_hours": round(sum(r[2] - r[3] for r in rows) * step_s / 3600, 1),
                     "mean_queue": round(sum(r[1] for r in rows) / len(rows), 1) if rows else 0.0,
                     "samples": len(rows)}
    return out


def _change(a: float | None, b: float | None) -> str:
    if a is None or not b:
        return "n/a"
    r = a / b - 1
    return "±0 %" if abs(r) < 0.005 else f"{r:+.0%}".replace("%", " %")


def _h(v: float) -> str:
    return f"{v / 3600:,.1f} h" if v >= 3600 else f"{v / 60:,.0f} min" if v >= 60 else f"{v:,.0f} s"


def table(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    base = next(r for r in runs if r["share"] is None)
    b = base["summary"]
    out = [
        "| configuration | idle GPU-h (vs none) | controllable idle GPU-h (vs none) | idle in the window's hours "
        "| allocated GPU-h (vs none) | delivered GPU-h | jobs completed / submitted | Ray-task wait p50 / p95 / p99 "
        "| RayJob wait p95 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        s, w = r["summary"], r["timeline_split"]
        t50, t95, t99 = (s[f"wait_p{q}_s_by_class"]["ray_task"] for q in (50, 95, 99))
        out.append(
            f"| {r['label']} | {s['idle_gpu_hours']:,.0f} ({_change(s['idle_gpu_hours'], b['idle_gpu_hours'])}) "
            f"| {s['idle_gpu_hours_controllable']:,.0f} "
            f"({_change(s['idle_gpu_hours_controllable'], b['idle_gpu_hours_controllable'])}) "
            f"| {w['inside']['idle_gpu_hours']:,.0f} "
            f"({_change(w['inside']['idle_gpu_hours'], base['timeline_split']['inside']['idle_gpu_hours'])}) "
            f"| {s['allocated_gpu_hours']:,.0f} ({_change(s['allocated_gpu_hours'], b['allocated_gpu_hours'])}) "
            f"| {s['delivered_gpu_hours']:,.0f} | {s['jobs_completed']:,} / {s['jobs_submitted']:,} "
            f"| {_h(t50)} / {_h(t95)} / {_h(t99)} | {_h(s['wait_p95_s_by_class']['workload'])} |")
    return out


def render(data: Mapping[str, Any]) -> str:
    meta, runs = data["meta"], data["runs"]
    base = next(r for r in runs if r["share"] is None)
    caps = ", ".join(f"{t} {c}" for t, c in sorted(base["caps"].items()))
    off = window_text(meta["quiet_first"], meta["window_hours"], "max=N", "off-peak")
    lines = [
        "# Time windows: an off-peak cap on the Philly week",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}; "
        f"{meta['cpu_s']:,.0f} CPU-s in all, {meta['wall_s']:,.0f} s wall.",
        "",
        f"Philly trace, {meta['hours']:g} h from {meta['start']}; utilization model `{meta['model']}`, seed "
        f"{meta['seed']}, GPU failure rate {meta['rate']:g} per GPU per day; policy `{POLICY}` (the controller's "
        "reconcilers, defaults otherwise). Every team's ClusterQueue gets the same kind of window "
        "(`scaling.cluster_queue_schedules`, `queuepilot simulate --schedule`), with its bound a share of the "
        f"team's usual worker cap (the RayCluster's maxReplicas: {caps}).",
        "",
        f"- **Off-peak**: `{off}` on the trace's clock, the {meta['window_hours']} consecutive clock hours with "
        f"the fewest submissions in this window (submissions per hour of day, 0-23: {meta['hour_counts']}); "
        "the trace's time zone is unknown, so the quiet hours are read from it, not assumed. `N` = the share "
        "in the first column x the team's cap (rounded down).",
    ]
    if any(r["kind"] == "min" for r in runs):
        peak = window_text(meta["busy_first"], meta["window_hours"], "min=N", "peak")
        lines.append(f"- **Warm pool** (the other side, for comparison): `{peak}`, the busiest "
                     f"{meta['window_hours']} hours.")
    lines += [
        "",
        "*Idle* = allocated GPU-hours not used (empty, starting, idle-actor and stalled workers, and idle "
        "segments inside running jobs); *controllable* leaves out the in-job idle "
        "(docs/simulation.md, \"Accounting\"); *idle in the window's hours* is summed from the run's "
        "timeline (one sample per 300 s of simulated time) over the window's clock hours; *delivered* = "
        "allocated − idle − killed work. Waits: Ray tasks queue on their team's RayCluster (the cap bounds "
        "them); RayJobs are Kueue workloads of their own, which a RayCluster's window does not bound.",
        "",
        *table(runs),
        "",
        "## Reading",
        "",
        *reading(runs),
        "",
    ]
    return "\n".join(lines)


def reading(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per window run against the run without one, from the numbers."""
    base = next(r for r in runs if r["share"] is None)
    b, b_in = base["summary"], base["timeline_split"]["inside"]
    out = []
    for r in runs:
        if r["share"] is None:
            continue
        s, inside = r["summary"], r["timeline_split"]["inside"]
        t = {q: (b[f"wait_p{q}_s_by_class"]["ray_task"], s[f"wait_p{q}_s_by_class"]["ray_task"]) for q in (50, 95, 99)}
        out.append(
            f"- **{r['label']}**: idle GPU-hours {s['idle_gpu_hours'] - b['idle_gpu_hours']:+,.0f} over the week "
            f"({_change(s['idle_gpu_hours'], b['idle_gpu_hours'])}), {inside['idle_gpu_hours'] - b_in['idle_gpu_hours']:+,.0f} "
            f"in the window's hours (by the timeline); allocated {s['allocated_gpu_hours'] - b['allocated_gpu_hours']:+,.0f} GPU-h, "
            f"delivered {s['delivered_gpu_hours'] - b['delivered_gpu_hours']:+,.0f} GPU-h and "
            f"{s['jobs_completed'] - b['jobs_completed']:+,} jobs completed within the week; Ray-task wait p50 "
            f"{_h(t[50][0])} -> {_h(t[50][1])}, p95 {_h(t[95][0])} -> {_h(t[95][1])}, p99 {_h(t[99][0])} -> "
            f"{_h(t[99][1])}; Ray tasks queued in the window's hours, on average, {b_in['mean_queue']:,.1f} -> "
            f"{inside['mean_queue']:,.1f}.")
    caps = [r for r in runs if r["share"] is not None and r["kind"] == "max"]
    if caps:
        best = max(caps, key=lambda r: b["idle_gpu_hours"] - r["summary"]["idle_gpu_hours"])
        s = best["summary"]
        saved = b["idle_gpu_hours"] - s["idle_gpu_hours"]
        out.append(
            f"- **Off-peak caps, in sum**: the most any cap here took back is {saved:,.0f} idle GPU-h "
            f"({saved / b['idle_gpu_hours']:.2%} of the week's idle), at {best['label']}, for a Ray-task wait "
            f"p95 {_h(b['wait_p95_s_by_class']['ray_task'])} -> {_h(s['wait_p95_s_by_class']['ray_task'])} and p99 "
            f"{_h(b['wait_p99_s_by_class']['ray_task'])} -> {_h(s['wait_p99_s_by_class']['ray_task'])}."
            + (" Under 1 % of the idle: on this trace an off-peak cap is a way to hold capacity back from the "
               "teams, not a saving on top of the idle path." if saved < 0.01 * b["idle_gpu_hours"] else ""))
    for r in runs:
        if r["kind"] == "min" and r["share"] is not None:
            s = r["summary"]
            out.append(
                f"- **Warm pool**: {r['label']} held {s['idle_gpu_hours'] - b['idle_gpu_hours']:+,.0f} idle GPU-h, and "
                f"the RayJobs' wait p95 went {_h(b['wait_p95_s_by_class']['workload'])} -> "
                f"{_h(s['wait_p95_s_by_class']['workload'])}"
                + (": GPUs every team keeps warm are GPUs the others' work waits for."
                   if s["wait_p95_s_by_class"]["workload"] > b["wait_p95_s_by_class"]["workload"] else "."))
    by = {k: b["idle_gpu_hours_by_class"][k] for k in CONTROLLABLE_CLASSES}
    out.append(f"- Without a window the controllable idle is {b['idle_gpu_hours_controllable']:,.0f} GPU-h ("
               + ", ".join(f"{k} {v:,.0f}" for k, v in by.items())
               + "). A window bounds the team RayClusters' workers only: empty workers already go 90 s after "
                 "they empty, so what a cap can take back is the idle of workers it keeps from starting; "
                 "stalled RayJobs and in-job idle are beyond its reach.")
    return out


def _shares(text: str) -> list[float]:
    try:
        out = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers in [0, 1], got {text!r}") from None
    if any(not 0 <= x <= 1 for x in out):
        raise argparse.ArgumentTypeError(f"shares are in [0, 1], got {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "time_windows")
    p.set_defaults(hours=168.0)
    p.add_argument("--model", choices=sorted(MODELS), default="grounded")
    p.add_argument("--window-hours", type=int, choices=range(1, 24), default=8, metavar="H")
    p.add_argument("--caps", type=_shares, default=[0.5, 0.25, 0.0],
                   help="off-peak max= as shares of each team's usual cap (comma-separated)")
    p.add_argument("--warm", type=float, default=0.25, help="warm-pool min= as a share of the cap (0: no such run)")
    args = p.parse_args(argv)

    def run() -> dict[str, Any]:
        start = datetime.fromisoformat(args.start)
        counts = hour_counts(args.trace, start, args.hours)
        quiet, busy = quietest(counts, args.window_hours), quietest(counts, args.window_hours, busiest=True)
        common = (args.trace, args.start, args.hours, args.seed, args.rate, args.model)
        packed = [(*common, None, "max", quiet, args.window_hours)]
        packed += [(*common, c, "max", quiet, args.window_hours) for c in args.caps]
        if args.warm > 0:
            packed.append((*common, args.warm, "min", busy, args.window_hours))
        meta = provenance("time_windows.py", argv)
        t0 = time.perf_counter()
        runs = run_pool(run_one, packed, "time windows", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "start": args.start, "model": args.model, "seed": args.seed,
                         "rate": args.rate, "window_hours": args.window_hours, "quiet_first": quiet,
                         "busy_first": busy, "hour_counts": counts, "cpu_s": sum(r["cpu_s"] for r in runs),
                         "wall_s": round(time.perf_counter() - t0, 1)},
                "runs": runs}

    out, data = page_data(args, run)
    (out / f"{args.name}.md").write_text(render(data))
    print(f"wrote {out / (args.name + '.md')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
