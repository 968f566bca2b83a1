"""Calibration report of the utilization models (simulator/utilization.py) against published data.

Loads the Philly month (2017-10-03, 720 h, seeds 1, 2, 3) under each model, samples every job's
per-GPU utilization every 60 s of its allocated time (run start to the end of its work plus, for a
Ray task, its idle tail; the engine's 60 s RayJob start-up is not the job's and is left out), weights
each sample by the job's GPUs, and writes benchmarks/results/utilization.md: share of samples at
0 % (< 1 %), p25, median, p75 and mean next to the published targets, and the share of GPU-time per
phase.  Report only: no asserts.

    .venv/bin/python benchmarks/utilization_fit.py [--trace PATH] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.inputs import default_trace
from simulator.utilization import GROUNDED, MODELS, PHASES, SERVING, fleet_samples
from simulator.workload import load_philly

START = datetime(2017, 10, 3)
HOURS = 720.0
SEEDS = (1, 2, 3)
MAX_GPUS = 896  # the default simulated cluster (112 nodes x 8 GPUs)
ZERO = 0.01  # "0 %": under 1 %

ACME = "AcmeTrace `data/utilization/util_pkl/util_gpu_{}.pkl` (NSDI'24): the CDF arrays of its analysis.ipynb, cell \"CDF: GPU Job Duration & Utilization\""
# published per-sample targets: share at 0 %, median, p75 (p25 and the mean are not published)
TARGETS: dict[str, tuple[str, float, float, float, str]] = {
    "grounded": ("Philly", 0.322, 0.486, 0.92, ACME.format("philly")),
    "scattered": ("Philly", 0.322, 0.486, 0.92, ACME.format("philly") + " (stress case: not fitted)"),
    "serving": ("PAI (AntMan)", 0.361, 0.04, 0.14, ACME.format("pai")),
}


def wquantile(u: np.ndarray, w: np.ndarray, p: float) -> float:
    order = np.argsort(u, kind="stable")
    c = np.cumsum(w[order]) / w.sum()
    return float(u[order][min(len(u) - 1, int(np.searchsorted(c, p)))])


def stats(u: np.ndarray, w: np.ndarray, ph: np.ndarray) -> dict[str, float]:
    tot = w.sum()
    out = {"zero": float(w[u < ZERO].sum() / tot), "p25": wquantile(u, w, 0.25), "p50": wquantile(u, w, 0.5),
           "p75": wquantile(u, w, 0.75), "mean": float((u * w).sum() / tot), "gpu_hours": float(tot / 60.0)}
    for p in PHASES:
        out[p] = float(w[ph == p].sum() / tot)
    return out


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path, default=default_trace())
    ap.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "utilization.md")
    args = ap.parse_args()
    lines = [
        "# Utilization models vs published per-sample distributions",
        "",
        f"`python benchmarks/utilization_fit.py`: Philly trace from {START:%Y-%m-%d}, {HOURS:.0f} h, seeds "
        f"{', '.join(map(str, SEEDS))}, jobs of at most {MAX_GPUS} GPUs.  Each job's per-GPU utilization is sampled every "
        "60 s of its allocated time (run start to the end of its work plus a Ray task's idle tail), weighted by "
        "its GPUs.  \"0 %\" is under 1 %.  p25 and the mean are not published (\"–\").  Model: "
        "`simulator/utilization.py`; parameters and sources: docs/simulation.md, \"Utilization\".",
        "",
        "Samples are weighted by GPU-time, so a handful of long multi-GPU jobs carry much of each month: the "
        "spread over seeds (min–max in brackets) is mostly which of those jobs stall.",
        "",
    ]
    for name in ("grounded", "scattered", "serving"):
        per_seed = []
        for seed in SEEDS:
            w = load_philly(args.trace, START, HOURS, seed, MAX_GPUS, util_model=name)
            s = fleet_samples(list(w.jobs))
            per_seed.append(stats(np.array(s.util), np.array(s.weight), np.array(s.phase)))
            print(name, seed, {k: round(v, 3) for k, v in per_seed[-1].items()}, flush=True)
        src, t0, t50, t75, cite = TARGETS[name]

        def cell(key: str, per_seed: list[dict[str, float]] = per_seed) -> str:
            v = [d[key] for d in per_seed]
            return f"{pct(float(np.mean(v)))} [{pct(min(v))}–{pct(max(v))}]"

        lines += [
            f"## `{name}`" + (" (default)" if name == "grounded" else ""),
            "",
            "| | share at 0 % | p25 | median | p75 | mean |",
            "|---|---|---|---|---|---|",
            f"| simulated (mean of seeds [min–max]) | {cell('zero')} | {cell('p25')} | {cell('p50')} | {cell('p75')} | "
            f"{cell('mean')} |",
            f"| published, {src} | {pct(t0)} | – | {pct(t50)} | {pct(t75)} | – |",
            "",
            f"Published: {cite}.",
            "",
            "Share of allocated GPU-time per phase: "
            + ", ".join(f"{p} {cell(p)}" for p in PHASES)
            + f"; {np.mean([d['gpu_hours'] for d in per_seed]):,.0f} GPU-hours sampled per seed.",
            "",
        ]
    lines += [
        "Parameters at the time of this run: "
        f"grounded `{GROUNDED}`; serving `{SERVING}`; scattered: Beta(1.0, 0.45) level, 1/3 of a RayJob's 5-minute "
        "segments idle, Ray task tail exponential (mean 0.5 x duration, at most 4 h).",
        "",
    ]
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out} ({', '.join(MODELS)})")


if __name__ == "__main__":
    main()
