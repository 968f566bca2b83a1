"""The idle-actor reclaim budget: GPU-hours taken back against actors killed, per utilization model.

``queuepilot-reclaim`` removes a worker whose GPU stayed idle for the reclaim window while only an idle
Ray actor held it, at most ``scaling.reclaim_budget_per_hour`` workers per RayCluster in any hour (the
``queuepilot.io/reclaim-budget`` annotation of a RayCluster that opts in; the controller's default is
4).  This runs the simulator (the controller's own reconcilers) over the Philly month once per budget
in ``--budgets`` and per utilization model, ``ray-idle`` once per model as the yardstick, and under
``--stall-models`` the same budgets with stall reclaim on too (the configuration the policy page
judges there); writes ``results/reclaim_budget.md``, ``reclaim_budget.json`` and ``reclaim_budget.png``.
Every reclaimed worker kills the idle actor on it (its warm state: a loaded model, a cache; the
simulator loses no work with it), so the page shows both the idle GPU-hours and the actors killed.

    python benchmarks/reclaim_budget.py                        # the month, budgets 4,16,64,1000 (make bench-full)
    python benchmarks/reclaim_budget.py --hours 168 --models scattered --budgets 4,1000
    python benchmarks/reclaim_budget.py --render-only          # re-render from reclaim_budget.json

Each run is one ``queuepilot simulate --policies queuepilot-reclaim --reclaim-budget N
[--stall-reclaim]`` (or ``--policies ray-idle``) with the same window, model, seed and failure rate.
Numbers are reported, never asserted.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoscaler.core.policy.config import MAX_RECLAIM_BUDGET, ScalingDefaults  # noqa: E402
from benchmarks.sim_runs import provenance, publish, run_engine, run_pool, window_parser  # noqa: E402
from simulator.engine import SimConfig  # noqa: E402
from simulator.metrics import CONTROLLABLE_CLASSES  # noqa: E402

BASELINE = "ray-idle"
POLICY = "queuepilot-reclaim"
MODELS = ("grounded", "scattered", "serving")
DEFAULT_BUDGETS = (4, 16, 64, 1000)
TARGET = 0.40  # issue #11: controllable idle <= 40 % of ray-idle's
DEFAULTS = ScalingDefaults()
DEFAULT_BUDGET = DEFAULTS.reclaim_budget_per_hour


def run_one(args: tuple[str, str, int | None, bool, str, str, float, int, float]) -> dict[str, Any]:
    """One run in a pool worker: ``policy`` under ``model`` at ``budget`` (None: the baseline's run)."""
    policy, model, budget, stall, trace, start, hours, seed, rate = args
    cfg = SimConfig(seed=seed, gpu_failure_rate=rate, stall_reclaim=stall, reclaim_budget_per_hour=budget)
    eng, cpu_s = run_engine(policy, cfg, trace, start, hours, model)
    return {"policy": policy, "model": model, "budget": budget, "stall_reclaim": stall,
            "clusters": len(eng.rays), "summary": eng.metrics.summary(), "cpu_s": cpu_s}


def plan(models: Sequence[str], budgets: Sequence[int], stall_models: Sequence[str]) -> list[tuple[str, str, int | None, bool]]:
    """(policy, model, budget, stall reclaim) of every run: the baseline first under each model."""
    tasks: list[tuple[str, str, int | None, bool]] = []
    for m in models:
        tasks.append((BASELINE, m, None, False))
        tasks += [(POLICY, m, b, False) for b in budgets]
        if m in stall_models:
            tasks += [(POLICY, m, b, True) for b in budgets]
    return tasks


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _pct(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else f"{v:.{digits}%}"


def _change(a: float | None, b: float | None) -> str:
    r = _ratio(a, b)
    return "n/a" if r is None else ("±0 %" if abs(r - 1) < 0.005 else f"{r - 1:+.0%}".replace("%", " %"))


def actors_per_cluster_hour(run: Mapping[str, Any], hours: float) -> float:
    return run["summary"].get("actors_killed", 0) / (hours * max(1, run["clusters"]))


def _label(run: Mapping[str, Any]) -> str:
    b = run["budget"]
    name = f"{b}" + (" (default)" if b == DEFAULT_BUDGET else "") + (" (unbounded)" if b == MAX_RECLAIM_BUDGET else "")
    return name


def baseline(runs: Sequence[Mapping[str, Any]], model: str) -> Mapping[str, Any] | None:
    """The ray-idle run's summary under ``model``."""
    return next((r["summary"] for r in runs if r["policy"] == BASELINE and r["model"] == model), None)


def series(runs: Sequence[Mapping[str, Any]], model: str, stall: bool) -> list[Mapping[str, Any]]:
    return sorted((r for r in runs if r["policy"] == POLICY and r["model"] == model and r["stall_reclaim"] == stall),
                  key=lambda r: r["budget"])


def verdict(rows: Sequence[Mapping[str, Any]], base: Mapping[str, Any] | None) -> str:
    """The smallest budget whose controllable idle is within the target, from the numbers."""
    if base is None or not rows:
        return "no baseline run: no verdict."
    met = [r for r in rows
           if (x := _ratio(r["summary"]["idle_gpu_hours_controllable"], base["idle_gpu_hours_controllable"])) is not None
           and x <= TARGET]
    if not met:
        best = min(rows, key=lambda r: r["summary"]["idle_gpu_hours_controllable"])
        x = _ratio(best["summary"]["idle_gpu_hours_controllable"], base["idle_gpu_hours_controllable"])
        by = best["summary"]["idle_gpu_hours_by_class"]
        cls = max(CONTROLLABLE_CLASSES, key=lambda k: by[k])
        share = _ratio(by[cls], best["summary"]["idle_gpu_hours_controllable"])
        return (f"no budget here brings controllable idle within {TARGET:.0%} of ray-idle's (the lowest, "
                f"{_pct(x)}, at budget {best['budget']}); the largest class left there is {cls} "
                f"({by[cls]:,.0f} GPU-h, {_pct(share)} of its controllable idle).")
    first = met[0]
    x = _ratio(first["summary"]["idle_gpu_hours_controllable"], base["idle_gpu_hours_controllable"])
    tail = ", the default)." if first["budget"] == DEFAULT_BUDGET else f"); the default is {DEFAULT_BUDGET}."
    return (f"the smallest budget here within {TARGET:.0%} of ray-idle's controllable idle is {first['budget']} "
            f"({_pct(x)}" + tail)


def table(rows: Sequence[Mapping[str, Any]], base: Mapping[str, Any] | None, hours: float) -> list[str]:
    b = base or {}
    out = [
        "| budget / RayCluster-hour | controllable idle GPU-h | vs ray-idle | total idle vs ray-idle | idle_actor GPU-h "
        "| stalled GPU-h | Ray-task p95 / p99 wait vs ray-idle | actors killed | per RayCluster-hour | most in one "
        "RayCluster-hour | killed work / delivered |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r["summary"]
        p95 = _change(s["wait_p95_s_by_class"]["ray_task"], b.get("wait_p95_s_by_class", {}).get("ray_task"))
        p99 = _change(s["wait_p99_s_by_class"]["ray_task"], b.get("wait_p99_s_by_class", {}).get("ray_task"))
        out.append(
            f"| {_label(r)} | {s['idle_gpu_hours_controllable']:,.0f} | "
            f"{_pct(_ratio(s['idle_gpu_hours_controllable'], b.get('idle_gpu_hours_controllable')))} | "
            f"{_pct(_ratio(s['idle_gpu_hours'], b.get('idle_gpu_hours')))} | "
            f"{s['idle_gpu_hours_by_class']['idle_actor']:,.0f} | {s['idle_gpu_hours_by_class']['stalled']:,.0f} | "
            f"{p95} / {p99} | {s.get('actors_killed', 0):,} | {actors_per_cluster_hour(r, hours):.2f} | "
            f"{s.get('actors_killed_peak_hour', 'n/a')} | "
            f"{_pct(_ratio(s['killed_gpu_hours'], s.get('delivered_gpu_hours')), 2)} |")
    if base is not None:
        out.append(f"| ray-idle | {base['idle_gpu_hours_controllable']:,.0f} | 100% | 100% | "
                   f"{base['idle_gpu_hours_by_class']['idle_actor']:,.0f} | "
                   f"{base['idle_gpu_hours_by_class']['stalled']:,.0f} | | {base.get('actors_killed', 0):,} | | "
                   f"{base.get('actors_killed_peak_hour', 'n/a')} | |")
    return out


def render(data: Mapping[str, Any]) -> str:
    meta, runs = data["meta"], data["runs"]
    hours = meta["hours"]
    lines = [
        "# Idle-actor reclaim: how many workers an hour it may take back",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}; "
        f"{meta['cpu_s']:,.0f} CPU-s in all.",
        "",
        f"Philly trace, {hours:g} h from {meta['start']}; seed {meta['seed']}, GPU failure rate {meta['rate']:g} "
        f"per GPU per day; default per-team worker cap. `{POLICY}` (idle-actor reclaim on for every team's "
        "RayCluster: a worker whose GPU stayed under the idle threshold for the reclaim window "
        f"({DEFAULTS.reclaim_window_seconds:g} s) while only an idle actor held it, past its grace period "
        f"({DEFAULTS.reclaim_grace_seconds:g} s after it started), is deleted by name, and a fresh one launched "
        "when tasks queue) with `scaling.reclaim_budget_per_hour` set to each budget "
        "(`queuepilot simulate --policies queuepilot-reclaim --reclaim-budget N`), against `ray-idle` on "
        f"the same run. The controller's default budget is {DEFAULT_BUDGET}; {MAX_RECLAIM_BUDGET} is the most it "
        "takes (in effect no budget). *Actors killed*: workers deleted while an idle actor held them; "
        "the simulator loses no work with them (the actor was idle), a real actor loses its warm state; "
        "*per RayCluster-hour* is the mean over the run and the five team RayClusters, *most in one "
        "RayCluster-hour* the busiest clock hour of the busiest RayCluster (the budget bounds it). "
        f"The target of the policy page: controllable idle <= {TARGET:.0%} of ray-idle's.",
        "",
    ]
    for model in meta["models"]:
        base = baseline(runs, model)
        for stall in (False, True):
            rows = series(runs, model, stall)
            if not rows:
                continue
            title = f"## `{model}`" + (", stall reclaim on too" if stall else "")
            lines += [title, "", *table(rows, base, hours), "", "Reading: " + verdict(rows, base), ""]
    lines += [
        "`reclaim_budget.png`: controllable idle as a share of ray-idle's (left) and actors killed per "
        "RayCluster-hour (right) against the budget, one line per model.",
        "",
    ]
    return "\n".join(lines)


def plot(path: Path, data: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, hours = data["runs"], data["meta"]["hours"]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10.0, 4.0))
    for model in data["meta"]["models"]:
        base = baseline(runs, model)
        for stall in (False, True):
            rows = series(runs, model, stall)
            if not rows or base is None:
                continue
            label = model + (" +stall" if stall else "")
            xs = [r["budget"] for r in rows]
            a.plot(xs, [_ratio(r["summary"]["idle_gpu_hours_controllable"], base["idle_gpu_hours_controllable"])
                        for r in rows], marker="o", label=label)
            b.plot(xs, [actors_per_cluster_hour(r, hours) for r in rows], marker="o", label=label)
    a.axhline(TARGET, color="grey", linestyle="--", linewidth=1, label=f"target {TARGET:.0%}")
    for ax, ylabel in ((a, "controllable idle / ray-idle's"), (b, "actors killed per RayCluster-hour")):
        ax.set_xscale("log")
        ax.set_xlabel("reclaim budget per RayCluster-hour (log)", fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"idle-actor reclaim budget, Philly {hours:g} h", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ints(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not out or any(not 0 <= x <= MAX_RECLAIM_BUDGET for x in out):
        raise argparse.ArgumentTypeError(f"budgets must be whole numbers from 0 to {MAX_RECLAIM_BUDGET}, got {text!r}")
    return sorted(set(out))


def _names(text: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    if any(m not in MODELS for m in out):
        raise argparse.ArgumentTypeError(f"models are {', '.join(MODELS)}, got {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "reclaim_budget")
    p.add_argument("--models", type=_names, default=list(MODELS))
    p.add_argument("--stall-models", type=_names, default=["grounded"],
                   help="models whose budgets also run with stall reclaim on (the policy page's configuration there)")
    p.add_argument("--budgets", type=_ints, default=list(DEFAULT_BUDGETS), help="comma-separated, 0-1000")
    args = p.parse_args(argv)

    def run() -> dict[str, Any]:
        tasks = plan(args.models, args.budgets, [m for m in args.stall_models if m in args.models])
        packed = [(*t, args.trace, args.start, args.hours, args.seed, args.rate) for t in tasks]
        meta = provenance("reclaim_budget.py", argv)
        t0 = time.perf_counter()
        runs = run_pool(run_one, packed, "reclaim budgets", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "start": args.start, "models": args.models, "seed": args.seed,
                         "rate": args.rate, "budgets": args.budgets, "cpu_s": sum(r["cpu_s"] for r in runs),
                         "wall_s": round(time.perf_counter() - t0, 1)},
                "runs": runs}

    return publish(args, run, plot, render)


if __name__ == "__main__":
    raise SystemExit(main())
