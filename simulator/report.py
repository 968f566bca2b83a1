"""Plots and timelines of simulation runs (matplotlib, Agg backend: no display needed).

``write_outputs(dir, engines)`` writes ``timeline-<policy>.csv`` and three PNGs: ``wait_cdf.png``
(queue wait CDF per policy), ``idle_gpu_hours.png`` (idle-but-allocated GPU-hours per policy, split by
class, with the run's lower bound on controllable idle) and ``timeline.png`` (queue length, allocated
and used GPUs over time, per policy).  ``accounting_table`` is the printed report's table.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_timelines(out: Path, engines: Mapping[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, e in engines.items():
        p = out / f"timeline-{name}.csv"
        with p.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["t_s", "queue_length", "allocated_gpus", "used_gpus", "pending_gpus"])
            w.writerows(e.metrics.timeline)
        paths.append(p)
    return paths


def plot_wait_cdf(path: Path, engines: Mapping[str, Any]) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, e in engines.items():
        w = np.sort(np.asarray(e.metrics.waits, dtype=float))
        if not w.size:
            continue
        y = np.arange(1, w.size + 1) / w.size
        ax.plot(np.maximum(w, 1.0), y, label=name, linewidth=1.4)
    ax.set_xscale("log")
    ax.set_xlabel("queue wait (s, log; 0 shown at 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("Queue wait CDF (submission -> start)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


CLASS_COLORS = {"empty": "#de2d26", "starting": "#fc9272", "idle_actor": "#fdae6b", "stalled": "#756bb1",
                "in_job": "#bdbdbd"}


def plot_idle(path: Path, engines: Mapping[str, Any]) -> None:
    plt = _plt()
    names = list(engines)
    alloc = [e.metrics.allocated_gpu_s / 3600 for e in engines.values()]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(names))
    ax.bar(x - 0.2, alloc, 0.4, label="allocated GPU-hours", color="#9ecae1")
    bottom = np.zeros(len(names))
    for cls, color in CLASS_COLORS.items():
        vals = np.asarray([e.metrics.idle_class_gpu_s.get(cls, 0.0) / 3600 for e in engines.values()])
        ax.bar(x + 0.2, vals, 0.4, bottom=bottom, label=f"idle (<5 %): {cls}", color=color)
        bottom += vals
    lb = [e.metrics.lower_bound_idle_gpu_s / 3600 for e in engines.values()]
    ax.scatter(x + 0.2, lb, marker="_", s=400, color="black", label="lower bound on controllable idle", zorder=3)
    ax.set_xticks(x, names, rotation=20)
    ax.set_ylabel("GPU-hours")
    ax.set_title("Allocated and idle-but-allocated GPU-hours by policy")
    ax.legend(fontsize=7)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(path: Path, engines: Mapping[str, Any], total_gpus: int | None = None) -> None:
    plt = _plt()
    n = len(engines)
    fig, axes = plt.subplots(n, 1, figsize=(10, 2.2 * n + 0.6), sharex=True, squeeze=False)
    for ax, (name, e) in zip(axes[:, 0], engines.items(), strict=True):
        tl = np.asarray(e.metrics.timeline, dtype=float)
        if not tl.size:
            continue
        hours = tl[:, 0] / 3600
        ax.plot(hours, tl[:, 2], label="allocated GPUs", color="#3182bd", linewidth=0.9)
        ax.plot(hours, tl[:, 3], label="used GPUs (sum of util)", color="#31a354", linewidth=0.9)
        if total_gpus:
            ax.axhline(total_gpus, color="grey", linewidth=0.6, linestyle=":")
        ax2 = ax.twinx()
        ax2.plot(hours, tl[:, 1], label="queue length (jobs)", color="#e6550d", linewidth=0.7, alpha=0.8)
        ax2.set_ylabel("queued", fontsize=8)
        ax.set_ylabel("GPUs", fontsize=8)
        ax.set_title(name, fontsize=9, loc="left")
        if ax is axes[0, 0]:
            h1, l1 = ax.get_legend_handles_labels()
            h2, l2 = ax2.get_legend_handles_labels()
            ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("simulated hours")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(out: Path, engines: Mapping[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = write_timelines(out, engines)
    total = next((e.cluster.total_gpus for e in engines.values()), None)
    for fname, fn in (("wait_cdf.png", plot_wait_cdf), ("idle_gpu_hours.png", plot_idle)):
        fn(out / fname, engines)
        paths.append(out / fname)
    plot_timeline(out / "timeline.png", engines, total)
    paths.append(out / "timeline.png")
    return paths


def recommendations_table(recommendations: Mapping[str, list[dict[str, Any]]], limit: int = 10) -> str:
    """The printed report's right-sizing part: per policy, the worker groups with a recommendation and
    the idle GPU-hours it would have saved over the run (most first, at most ``limit``)."""
    lines = ["right-sizing (idle GPU-hours each recommendation would have saved over the run):"]
    for name, rows in recommendations.items():
        shown = sorted((r for r in rows if r["recommended_gpus_per_worker"] is not None),
                       key=lambda r: (-r["idle_gpu_hours"], r["namespace"], r["raycluster"], r["group"]))
        total = sum(r["idle_gpu_hours"] for r in shown)
        lines.append(f"  {name}: {len(shown)} of {len(rows)} groups recommended, {total:,.1f} GPU-h")
        for r in shown[:limit]:
            lines.append(f"    {r['namespace']}/{r['raycluster']}/{r['group']:<14} "
                         f"{r['gpus_per_worker']}->{r['recommended_gpus_per_worker']} GPUs/worker "
                         f"replicas {r['recommended_min_replicas']}-{r['recommended_max_replicas']} "
                         f"{r['idle_gpu_hours']:>10,.1f} GPU-h  {r['reason']}")
    return "\n".join(lines)


def accounting_table(policies: Mapping[str, Mapping[str, Any]]) -> str:
    """The printed report's accounting table, one row per policy, from each policy's JSON summary:
    idle and controllable idle, idle by class, killed work, the run's lower bound on controllable idle
    (GPU-hours), and p95 / p99 waits per job class (s)."""
    head = (f"{'policy':<20}{'idle':>9}{'ctrl':>9}{'empty':>8}{'start':>8}{'actor':>8}{'stall':>8}{'in_job':>8}"
            f"{'killed':>8}{'bound':>8}  {'task p95/p99 s':>16}  {'workload p95/p99 s':>18}")
    lines = ["accounting (GPU-hours; ctrl = empty + start + actor + stall; bound: no scaler does better):", head]
    for name, p in policies.items():
        c = p["idle_gpu_hours_by_class"]
        w95, w99 = p["wait_p95_s_by_class"], p["wait_p99_s_by_class"]
        lines.append(
            f"{name:<20}{p['idle_gpu_hours']:>9,.0f}{p['idle_gpu_hours_controllable']:>9,.0f}{c['empty']:>8,.0f}"
            f"{c['starting']:>8,.0f}{c['idle_actor']:>8,.0f}{c['stalled']:>8,.0f}{c['in_job']:>8,.0f}"
            f"{p['killed_gpu_hours']:>8,.1f}{p['lower_bound_idle_gpu_hours']:>8,.0f}  "
            f"{w95['ray_task']:>7,.0f}/{w99['ray_task']:>8,.0f}  {w95['workload']:>8,.0f}/{w99['workload']:>9,.0f}")
    return "\n".join(lines)


BASELINES = ("ray-idle", "kueue-quota")  # what a cluster runs without queuepilot: Ray's autoscaler, Kueue alone


def _span(seconds: float) -> str:
    """A duration for people: 40 s, 3.5 min, 2.1 h."""
    s = abs(seconds)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"


def _wait_words(what: str, mine: float, theirs: float) -> str:
    if abs(mine - theirs) < max(1.0, 0.05 * theirs):
        return f"{what} about as long ({_span(mine)} at p95)"
    word = "longer" if mine > theirs else "shorter"
    return f"{what} {_span(mine - theirs)} {word} ({_span(mine)} against {_span(theirs)} at p95)"


def _against(p: Mapping[str, Any], b: Mapping[str, Any], baseline: str) -> str:
    idle, their_idle = p["idle_gpu_hours"], b["idle_gpu_hours"]
    if abs(idle - their_idle) < 0.05:
        held = "as many idle GPU-hours"
    else:
        pct = f" ({abs(idle - their_idle) / their_idle:.0%})" if their_idle > 0 else ""
        held = f"{abs(idle - their_idle):,.1f} idle GPU-hours {'fewer' if idle < their_idle else 'more'}{pct}"
    w95, t95 = p["wait_p95_s_by_class"], b["wait_p95_s_by_class"]
    killed, their_killed = p["killed_gpu_hours"], b["killed_gpu_hours"]
    kills = ("no work killed" if killed == their_killed == 0 else
             f"{killed:,.1f} GPU-hours of work killed against {their_killed:,.1f}")
    return (f"against {baseline}: {held}, {_wait_words('Ray tasks waited', w95['ray_task'], t95['ray_task'])}, "
            f"{_wait_words('workloads waited', w95['workload'], t95['workload'])}, {kills}")


def verdict_lines(policies: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One closing line per policy, in plain words, on how it did against the baselines of the same run
    (Ray's own autoscaler, ``ray-idle``, and Kueue alone, ``kueue-quota``): idle GPU-hours held, p95
    waits of Ray tasks and of workloads, work killed.  Without either baseline in the run, one line that
    says how to get them."""
    present = [b for b in BASELINES if b in policies]
    if not present:
        return [f"(add {' or '.join(BASELINES)} to --policies to compare the policies with the baselines)"]
    out = []
    for name, p in policies.items():
        parts = [_against(p, policies[b], b) for b in present if b != name]
        if parts:
            out.append(f"{name}: " + "; ".join(parts) + ".")
    return out
