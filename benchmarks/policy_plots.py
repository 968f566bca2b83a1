"""The policy page's PNGs: controllable idle per policy per model (seed error bars), the worker-cap sweep,
and the reference run's wait CDF, idle GPU-hours and timeline (``simulator.report``'s plots)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from benchmarks.policy_matrix import DEFAULT_CAP, DEFAULT_RESUME
from benchmarks.policy_page import labels, stats
from benchmarks.policy_targets import get


def _page_runs(runs: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The runs of the page's window at the default worker cap and resume share."""
    return [r for r in runs if r["start"] == meta["start"] and float(r["hours"]) == float(meta["hours"])
            and r["cap"] == DEFAULT_CAP and float(r["resume"]) == DEFAULT_RESUME]


def plot_matrix(path: Path, runs: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> None:
    """Controllable idle GPU-hours per run label, a panel per model: a bar per failure rate = mean over
    seeds, error bars min-max over seeds (the page's window, default cap and resume share)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = _page_runs(runs, meta)
    models, rates = meta["models"], meta["rates"]
    models = [m for m in models if any(r["model"] == m for r in main)]
    if not models:
        return
    fig, axes = plt.subplots(len(models), 1, figsize=(10, 3.2 * len(models) + 0.4), squeeze=False)
    width = 0.8 / max(1, len(rates))
    for ax, model in zip(axes[:, 0], models, strict=True):
        rs = [r for r in main if r["model"] == model]
        labs = labels(rs)
        x = np.arange(len(labs))
        for i, rate in enumerate(rates):
            means, lo, hi = [], [], []
            for lab in labs:
                vals = [get(r["summary"], "idle_gpu_hours_controllable") for r in rs
                        if r["label"] == lab and r["rate"] == rate]
                m, a, b = stats(vals)
                means.append(m if m is not None else np.nan)
                lo.append((m - a) if m is not None and a is not None else 0.0)
                hi.append((b - m) if m is not None and b is not None else 0.0)
            ax.bar(x + (i - (len(rates) - 1) / 2) * width, means, width, yerr=[lo, hi], capsize=3,
                   label=f"failure rate {rate:g}")
        ax.set_xticks(x, labs, rotation=20, fontsize=8)
        ax.set_ylabel("controllable idle GPU-h", fontsize=8)
        ax.set_title(f"{model}: mean over seeds, error bars min-max over seeds", fontsize=9, loc="left")
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_cap_sweep(path: Path, runs: Sequence[Mapping[str, Any]]) -> bool:
    """Controllable idle GPU-hours and Ray-task p95 wait against the worker-cap factor, a line per swept
    policy (the sweep's model, seed and failure rate).  False (nothing drawn) without a sweep."""
    runs = [r for r in runs if float(r.get("resume", DEFAULT_RESUME)) == DEFAULT_RESUME]
    swept = {r["policy"] for r in runs if r["cap"] != DEFAULT_CAP}
    if not swept:
        return False
    swept_run = next(r for r in runs if r["cap"] != DEFAULT_CAP)
    ref = (swept_run["model"], swept_run["seed"], swept_run["rate"])
    window = (swept_run.get("start"), swept_run.get("hours"))
    rows = [r for r in runs if (r["model"], r["seed"], r["rate"]) == ref and not r["stall_reclaim"]
            and r["policy"] in swept and (r.get("start"), r.get("hours")) == window]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for pol in sorted(swept):
        pts = sorted((r["cap"], r["summary"]) for r in rows if r["policy"] == pol)
        caps = [c for c, _ in pts]
        a.plot(caps, [get(s, "idle_gpu_hours_controllable") for _, s in pts], marker="o", label=pol)
        b.plot(caps, [(get(s, "wait_p95_s_by_class.ray_task") or 0.0) / 3600 for _, s in pts], marker="o", label=pol)
    a.set_xlabel("worker cap factor (maxReplicas / nominal quota)", fontsize=8)
    a.set_ylabel("controllable idle GPU-h", fontsize=8)
    b.set_xlabel("worker cap factor (maxReplicas / nominal quota)", fontsize=8)
    b.set_ylabel("Ray-task wait p95 (h)", fontsize=8)
    for ax in (a, b):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"worker-cap sweep: {ref[0]}, seed {ref[1]}, failure rate {ref[2]:g}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def plot_reference(out: Path, prefix: str, runs: Sequence[Mapping[str, Any]]) -> None:
    from simulator.report import plot_idle, plot_timeline, plot_wait_cdf

    ref = [r for r in runs if r.get("metrics") is not None]
    if not ref:
        return
    engines = {r["label"]: SimpleNamespace(metrics=r["metrics"], cluster=SimpleNamespace(total_gpus=r["total_gpus"]))
               for r in ref}
    plot_wait_cdf(out / f"{prefix}_wait_cdf.png", engines)
    plot_idle(out / f"{prefix}_idle_gpu_hours.png", engines)
    plot_timeline(out / f"{prefix}_timeline.png", engines, ref[0]["total_gpus"])


def reference_plots_from(source: Path, out: Path, prefix: str) -> None:
    """A merge draws no reference plots (the runs' raw metrics are not kept): it keeps those of the source
    that ran the reference runs (``policy.plot_source``), under this page's prefix."""
    for kind in ("wait_cdf", "idle_gpu_hours", "timeline"):
        src, dst = source.with_name(f"{source.stem}_{kind}.png"), out / f"{prefix}_{kind}.png"
        if src.is_file() and src.resolve() != dst.resolve():
            shutil.copyfile(src, dst)


