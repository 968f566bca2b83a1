"""Policy quality benchmark: the simulator over the Philly trace, as a matrix.

Every (utilization model, seed, GPU failure rate, policy) is one run; the queuepilot policies also
run with stall reclaim on (under ``grounded`` and ``serving`` by default); a sweep of the per-team worker cap
(``SimConfig.ray_max_quota_factor``) runs queuepilot and ray-idle under grounded, seed 1, the first
failure rate.  Writes ``benchmarks/results/policy.md`` (summary, one table per model and failure
rate, the targets with a met / not-met line each and a reading generated from the numbers, the cap
sweep, a Helios-shape check), ``policy.json`` (every run's numbers: ``--render-only`` re-renders the
page and the matrix plot from it) and PNGs (wait CDF, idle GPU-hours and timeline of the grounded
seed-1 run at the first failure rate; controllable idle per policy per model with seed error bars).
Numbers are reported, never asserted.

The whole matrix (``make bench-full``) is the Philly month (720 h) under every model, seeds 1-3, one
failure rate, every policy; the quick matrix (``--quick``, ``make bench``) is the same over the first
week (168 h) with seed 1 only, written to ``policy-quick.*``.  Each page says what it covers and how
long it took.

    python benchmarks/policy.py                 # the whole matrix (`make bench-full`)
    python benchmarks/policy.py --quick         # the quick matrix (`make bench`) -> policy-quick.*
    python benchmarks/policy.py --quick --plan --costs-from benchmarks/results/policy.json   # its runs, time
    python benchmarks/policy.py --models grounded --seeds 1 --policies queuepilot,ray-idle
    python benchmarks/policy.py --render-only   # policy.json -> policy.md + matrix PNG
    python benchmarks/policy.py --merge a.json,b.json   # several runs' records -> policy.json + policy.md
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

# the worker processes are the parallelism (--jobs): numpy's BLAS threads (numpy is only asked for
# percentiles here) would spin beside them on the same cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks import reclaim_budget as budget_sweep  # noqa: E402
from simulator.engine import POLICIES, Engine, SimConfig  # noqa: E402
from simulator.inputs import default_trace, load_window  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
HELIOS = "traces/helios/Earth_vc6YE/cluster_sequence_vc.csv"
MODELS = ("grounded", "scattered", "serving")
BASELINE = "ray-idle"  # Ray's own autoscaler: what every target is measured against
DEFAULT_CAP = SimConfig().ray_max_quota_factor
CLASSES = ("ray_task", "workload")
IDLE_CLASSES = ("empty", "starting", "idle_actor", "stalled", "in_job")

# the axes of the two matrices the Makefile runs: the whole one (`make bench-full`, no flags) and the quick
# one (`make bench`, --quick); every axis can be set by its flag instead
RATE = 0.01  # the one GPU failure rate by default (a pod on a failed GPU keeps running: the rate moves little)
# (hours, seeds, worker-cap factors of the sweep): the quick matrix is the first week, one seed, no cap sweep
WINDOWS = {"full": (720.0, (1, 2, 3), (1.0, 2.0, 4.0)), "quick": (168.0, (1,), ())}
STALL_MODELS = ("grounded", "serving")
CAP_POLICIES = ("queuepilot", BASELINE)
# axis -> how a page names it
AXES = {"hours": "window", "models": "models", "seeds": "seeds", "rates": "failure rates", "policies": "policies",
        "stall_models": "`+stall` runs under", "caps": "worker-cap factors", "cap_policies": "cap-sweep policies"}


def default_axes(quick: bool) -> dict[str, Any]:
    """The axes of the quick or the whole matrix, as a run's meta records them."""
    hours, seeds, caps = WINDOWS["quick" if quick else "full"]
    return {"hours": hours, "models": list(MODELS), "seeds": list(seeds), "rates": [RATE],
            "policies": list(POLICIES), "stall_models": list(STALL_MODELS), "caps": list(caps),
            "cap_policies": list(CAP_POLICIES)}

COMMAND = "python benchmarks/policy.py"


# ----------------------------------------------------------------------------------- the matrix
@dataclass(frozen=True, slots=True)
class Task:
    """One simulation run: a policy over one trace window (model, seed) at one failure rate."""

    model: str
    seed: int
    rate: float
    policy: str
    stall_reclaim: bool = False
    cap: float = DEFAULT_CAP

    @property
    def label(self) -> str:
        return run_label(self.policy, self.stall_reclaim)

    @property
    def window(self) -> tuple[str, int]:
        return (self.model, self.seed)


def run_label(policy: str, stall_reclaim: bool) -> str:
    return policy + ("+stall" if stall_reclaim else "")


def is_queuepilot(policy: str) -> bool:
    return policy.startswith("queuepilot")


def build_matrix(models: Sequence[str], seeds: Sequence[int], rates: Sequence[float], policies: Sequence[str],
                 stall_models: Sequence[str], caps: Sequence[float], cap_policies: Sequence[str]) -> list[Task]:
    """Every (model, seed, rate, policy); the queuepilot policies again with stall reclaim under
    ``stall_models``; the cap sweep (``caps`` other than the default) for ``cap_policies`` under the
    first model, seed and rate (the default cap's row comes from the matrix)."""
    tasks = [Task(m, s, r, p) for m in models for s in seeds for r in rates for p in policies]
    tasks += [Task(m, s, r, p, True) for m in models if m in stall_models for s in seeds for r in rates
              for p in policies if is_queuepilot(p)]
    if models and seeds and rates:
        ref = (models[0], seeds[0], rates[0])
        tasks += [Task(*ref, p, cap=c) for c in caps if c != DEFAULT_CAP for p in cap_policies]
    return tasks


def is_reference(task: Task, ref: tuple[str, int, float]) -> bool:
    """The run whose plots (wait CDF, idle, timeline) and Helios shape are drawn."""
    return (task.model, task.seed, task.rate) == ref and task.cap == DEFAULT_CAP and not task.stall_reclaim


def sim_config(task: Task) -> SimConfig:
    """The run's configuration: the simulator's defaults with the task's seed, failure rate, worker cap and
    stall reclaim (what ``queuepilot simulate`` runs with the same flags)."""
    return SimConfig(seed=task.seed, gpu_failure_rate=task.rate, ray_max_quota_factor=task.cap,
                     stall_reclaim=task.stall_reclaim)


# --------------------------------------------------------------------------------- the worker
_WINDOWS: dict[tuple[Any, ...], Any] = {}  # per process: a trace window is loaded once per (model, seed)


def _window(trace: str, start: str, hours: float, model: str, seed: int, max_gpus: int) -> tuple[Any, float]:
    key = (trace, start, hours, model, seed, max_gpus)
    if key in _WINDOWS:
        return _WINDOWS[key], 0.0
    t0 = time.perf_counter()
    _WINDOWS[key] = load_window(trace, start, hours, seed, max_gpus, util_model=model)
    return _WINDOWS[key], time.perf_counter() - t0


def run_task(task: Task, trace: str, start: str, hours: float, detail: bool) -> dict[str, Any]:
    """Run one task (in a pool worker); the record kept in policy.json, plus the series the plots need
    when ``detail`` (the reference run)."""
    cfg = sim_config(task)
    window, load_s = _window(trace, start, hours, task.model, task.seed, cfg.nodes * cfg.gpus_per_node)
    t0, c0 = time.perf_counter(), time.process_time()
    eng = Engine(window.jobs, hours * 3600.0, task.policy, cfg)
    eng.run()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = eng.metrics
    rec: dict[str, Any] = {**asdict(task), "label": task.label, "summary": m.summary(), "secs": round(secs, 2),
                           "cpu_s": round(cpu, 2), "load_s": round(load_s, 2), "jobs": len(window.jobs), "total_gpus": eng.cluster.total_gpus}
    if detail:
        rec["shape"] = sim_shape(m.timeline, eng.cluster.total_gpus)
        rec["metrics"] = m  # the whole RunMetrics, for the reference plots (not kept in the JSON)
    return rec


def _run_packed(args: tuple[Task, str, str, float, bool]) -> dict[str, Any]:
    return run_task(*args)


def estimate(task: Task, hours: float, previous: Mapping[tuple[str, str], float]) -> float:
    """Expected seconds of a run: from the last policy.json (seconds per simulated hour of that label
    under that model) or a rough default (the controller's reconcilers cost more than a baseline's
    scaler, stall reclaim more again)."""
    per_hour = previous.get((task.model, task.label))
    if per_hour is None:
        if task.stall_reclaim:
            per_hour = 0.15
        elif is_queuepilot(task.policy) or task.policy == "kueue-quota":
            per_hour = 0.12
        else:
            per_hour = 0.08
    return per_hour * hours


def previous_costs(path: Path) -> dict[tuple[str, str], float]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    hours = float(data.get("meta", {}).get("hours") or 0) or 1.0
    acc: dict[tuple[str, str], list[float]] = {}
    for r in data.get("runs", []):  # CPU seconds where recorded: what a run takes on a core of its own
        acc.setdefault((r["model"], r["label"]), []).append(float(r.get("cpu_s", r["secs"])) / hours)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def run_matrix(tasks: Sequence[Task], trace: str, start: str, hours: float, jobs: int,
               ref: tuple[str, int, float], previous: Mapping[tuple[str, str], float],
               progress: bool = True) -> list[dict[str, Any]]:
    """Run every task, longest expected first, on ``jobs`` processes, with a progress bar and ETA."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cost = {t: estimate(t, hours, previous) for t in tasks}
    # longest first; among equals, tasks of one trace window together (each process loads a window once)
    order = sorted(tasks, key=lambda t: (-round(cost[t], 1), t.model, t.seed, t.rate, t.policy))
    records: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), disable=not progress) as bar:
        runs = bar.add_task("policy matrix", total=len(order))
        cost_bar = bar.add_task("expected seconds", total=sum(cost.values()), visible=False)

        def done(rec: dict[str, Any], task: Task) -> None:
            records.append(rec)
            bar.update(runs, advance=1, description=f"{task.model} s{task.seed} {task.rate:g} {task.label} "
                                                   f"{rec['secs']:.0f} s")
            bar.update(cost_bar, advance=cost[task])

        if jobs <= 1:
            for t in order:
                done(run_task(t, trace, start, hours, is_reference(t, ref)), t)
            return records
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pending: dict[Future[dict[str, Any]], Task] = {
                pool.submit(_run_packed, (t, trace, start, hours, is_reference(t, ref))): t for t in order}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    done(f.result(), pending.pop(f))
    return records


# ------------------------------------------------------------------------------------- merging
def run_key(r: Mapping[str, Any]) -> tuple[str, int, float, str, float]:
    """What one run of the matrix is: (model, seed, rate, label, cap)."""
    return (r["model"], int(r["seed"]), float(r["rate"]), r["label"], float(r["cap"]))


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """The first key (dotted) where two summaries differ, with both values."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    return f"{path or 'summary'}: {a!r} against {b!r}"


def _matrix_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """A merged record's place: by model, seed, rate, then policy in the simulator's order, stall, cap."""
    pols = list(POLICIES)
    rank = (MODELS.index(r["model"]) if r["model"] in MODELS else len(MODELS),
            pols.index(r["policy"]) if r["policy"] in pols else len(pols))
    return (rank[0], int(r["seed"]), float(r["rate"]), rank[1], bool(r["stall_reclaim"]), float(r["cap"]))


def _ordered(values: Iterable[Any], order: Sequence[Any] = ()) -> list[Any]:
    """``values`` without repeats: those in ``order`` first, in its order, then the rest sorted."""
    vals = set(values)
    return [v for v in order if v in vals] + sorted(vals - set(order))


def merge(sources: Sequence[tuple[str, Mapping[str, Any]]], command: str) -> dict[str, Any]:
    """One matrix from the records of several runs of this script over the same window.

    A run (``run_key``) that more than one source holds must have the same numbers in each, on every
    key both report (the decisions did not change between their commits; a key only one reports, as
    one an older commit did not write yet, is taken from it), else this refuses with the first
    difference: rerun rather than merge.  Each record keeps the commit and date it was run at; the
    meta lists the sources; the axes are their union; the reference run is the first source's.  A
    source that is itself a merge (the page, to check later runs against it) must come first: all its
    runs are kept and its own sources are listed in its place."""
    if not sources:
        raise ValueError("nothing to merge")
    first = sources[0][1]["meta"]
    window = (Path(first["trace"]).name, first["start"], float(first["hours"]))
    by_key: dict[tuple[str, int, float, str, float], dict[str, Any]] = {}
    origin: dict[tuple[str, int, float, str, float], str] = {}
    listed = []
    for i, (name, data) in enumerate(sources):
        meta = data["meta"]
        nested = meta.get("merged_from")
        if nested and i:
            raise ValueError(f"{name} is itself a merge: name it first (its runs are then all kept and its "
                             "sources listed)")
        other = (Path(meta["trace"]).name, meta["start"], float(meta["hours"]))
        if other != window:
            raise ValueError(f"{name} ran another window ({other[2]:g} h from {other[1]} of {other[0]}) than "
                             f"{sources[0][0]} ({window[2]:g} h from {window[1]} of {window[0]})")
        for r in data["runs"]:
            key = run_key(r)
            if key in by_key:
                kept = by_key[key]["summary"]
                common = set(kept) & set(r["summary"])
                a, b = ({k: kept[k] for k in common}, {k: r["summary"][k] for k in common})
                if a != b:
                    raise ValueError(f"{name} and {origin[key]} disagree on {key}: {_first_difference(a, b)} "
                                     "(the decisions changed between their commits: rerun, do not merge)")
                # a number only one of them reports (a key an older commit did not write) is taken
                by_key[key]["summary"] = {**r["summary"], **kept}
                continue
            by_key[key] = {**r, "commit": r.get("commit", meta.get("commit", "?")),
                           "date": r.get("date", meta.get("date", "?"))}
            origin[key] = name
        if nested:  # first, so every run it holds was kept: its sources' counts stand
            listed.extend(dict(src) for src in nested)
            continue
        listed.append({"file": name, "commit": meta.get("commit", "?"), "date": meta.get("date", "?"),
                       "command": meta.get("command", "?"), "runs": len(data["runs"]),
                       "kept": sum(1 for n in origin.values() if n == name),
                       "wall_s": meta.get("wall_s"), "processes": meta.get("processes")})
    runs = sorted(by_key.values(), key=_matrix_order)
    metas = [d["meta"] for _, d in sources]
    meta = {
        "command": command, "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "commit": ", ".join(dict.fromkeys(str(m.get("commit", "?")) for m in metas)),  # in the sources' order
        "dirty": any(m.get("dirty") for m in metas), "machine": first.get("machine", "?"),
        "python": "; ".join(dict.fromkeys(str(m["python"]) for m in metas if m.get("python"))),
        "cores": first.get("cores"), "processes": max(int(m.get("processes") or 1) for m in metas),
        "wall_s": round(sum(float(m.get("wall_s") or 0.0) for m in metas), 1),
        "run_s_sum": round(sum(float(r["secs"]) for r in runs), 1),
        "run_cpu_s_sum": round(sum(float(r.get("cpu_s", r["secs"])) for r in runs), 1),
        "load_s_sum": round(sum(float(r.get("load_s", 0.0)) for r in runs), 1),
        "trace": first["trace"], "start": first["start"], "hours": first["hours"],
        "models": _ordered((r["model"] for r in runs), MODELS),
        "seeds": _ordered(int(r["seed"]) for r in runs), "rates": _ordered(float(r["rate"]) for r in runs),
        "policies": _ordered((r["policy"] for r in runs), list(POLICIES)),
        "stall_models": _ordered((r["model"] for r in runs if r["stall_reclaim"]), MODELS),
        "caps": _ordered(float(r["cap"]) for r in runs),
        "cap_policies": _ordered((r["policy"] for r in runs if r["cap"] != DEFAULT_CAP), list(POLICIES)),
        "ref": first["ref"], "quick": False, "merged_from": listed,
    }
    return {"meta": meta, "runs": runs}


# ------------------------------------------------------------------------------ reading numbers
def get(summary: Mapping[str, Any], key: str) -> float | None:
    """``summary[key]``, with ``a.b`` for nested keys; None when the simulator does not report it."""
    cur: Any = summary
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return None if cur is None else float(cur)


def delivered_gpu_hours(s: Mapping[str, Any]) -> float | None:
    """The GPU-hours of work the run delivered to jobs: ``delivered_gpu_hours`` when reported, else
    allocated less idle less killed (the simulator's definition) from a record that predates the key."""
    v = get(s, "delivered_gpu_hours")
    if v is not None:
        return v
    alloc, idle, killed = get(s, "allocated_gpu_hours"), get(s, "idle_gpu_hours"), get(s, "killed_gpu_hours")
    if alloc is None or idle is None:
        return None
    return max(0.0, alloc - idle - (killed or 0.0))


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return a / b


# ------------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    key: str
    text: str
    limit: float
    value: Callable[[Mapping[str, Any], Mapping[str, Any]], float | None]  # (queuepilot's, ray-idle's)
    unit: str  # how the value reads: "x ray-idle", "of delivered", "count", "x bound"
    models: tuple[str, ...] | None = None  # None: every model
    stall_only: bool = False  # judged only for the stall-reclaim configurations (the others: every one)


def _wait_tail(q: Mapping[str, Any], r: Mapping[str, Any]) -> float | None:
    worst: float | None = None
    for quant in ("p95", "p99"):
        for cls in CLASSES:
            x = ratio(get(q, f"wait_{quant}_s_by_class.{cls}"), get(r, f"wait_{quant}_s_by_class.{cls}"))
            if x is None:
                return None
            worst = x if worst is None else max(worst, x)
    return worst


TARGETS: tuple[Target, ...] = (
    Target("controllable_idle", "controllable idle GPU-hours <= 40 % of ray-idle's, under every model", 0.40,
           lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"), get(r, "idle_gpu_hours_controllable")),
           "x ray-idle"),
    Target("total_idle", "total idle GPU-hours <= 70 % of ray-idle's under grounded, stall reclaim on", 0.70,
           lambda q, r: ratio(get(q, "idle_gpu_hours"), get(r, "idle_gpu_hours")), "x ray-idle",
           models=("grounded",), stall_only=True),
    Target("wait_tails", "p95 and p99 wait per job class (Ray task, workload) within 2 % of ray-idle's", 1.02,
           _wait_tail, "x ray-idle (worst class and quantile)"),
    Target("killed_work", "killed work <= 1 % of delivered GPU-hours", 0.01,
           lambda q, r: ratio(get(q, "killed_gpu_hours"), delivered_gpu_hours(q)), "of delivered"),
    Target("unplaceable", "0 admitted-but-unplaceable workloads", 0.0,
           lambda q, r: get(q, "unplaceable_admissions"), "workloads"),
    Target("scale_down_after_up", "0 scale-downs within 300 s after a scale-up", 0.0,
           lambda q, r: get(q, "scale_downs_after_up_300s"), "scale-downs"),
    Target("bound", "controllable idle within 1.5x of the lower bound", 1.5,
           lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"), get(q, "lower_bound_idle_gpu_hours")),
           "x bound"),
)
TOLERANCE = 1e-9  # float noise only: a value exactly at the limit meets the target


@dataclass(frozen=True)
class Verdict:
    target: str
    model: str
    config: str  # the queuepilot run label judged (e.g. queuepilot, queuepilot+stall)
    met: bool | None  # None: not measurable (no ray-idle pair or a key the simulator does not report)
    runs: int  # paired runs (seeds x failure rates)
    runs_met: int
    worst: float | None  # the worst value over those runs
    mean: float | None
    limit: float


def pair_runs(runs: Iterable[Mapping[str, Any]], cap: float = DEFAULT_CAP
              ) -> dict[tuple[str, str], list[tuple[Mapping[str, Any], Mapping[str, Any]]]]:
    """(model, queuepilot label) -> [(its run, ray-idle's run on the same window and failure rate)]."""
    base: dict[tuple[str, int, float], Mapping[str, Any]] = {}
    qp: list[Mapping[str, Any]] = []
    for r in runs:
        if r["cap"] != cap:
            continue
        if r["policy"] == BASELINE and not r["stall_reclaim"]:
            base[(r["model"], r["seed"], r["rate"])] = r
        elif is_queuepilot(r["policy"]):
            qp.append(r)
    out: dict[tuple[str, str], list[tuple[Mapping[str, Any], Mapping[str, Any]]]] = {}
    for r in qp:
        b = base.get((r["model"], r["seed"], r["rate"]))
        out.setdefault((r["model"], r["label"]), [])
        if b is not None:
            out[(r["model"], r["label"])].append((r, b))
    return out


def evaluate_targets(runs: Iterable[Mapping[str, Any]], targets: Sequence[Target] = TARGETS) -> list[Verdict]:
    """Each target, per model, per queuepilot configuration present: met when it holds on every paired
    run (every seed and failure rate) of that model; not measurable when nothing pairs or a number is
    missing.  A pure function of the run records."""
    paired = pair_runs(list(runs))
    verdicts = []
    for t in targets:
        for (model, label), pairs in sorted(paired.items()):
            if t.models is not None and model not in t.models:
                continue
            if t.stall_only and not label.endswith("+stall"):
                continue
            values = [t.value(q["summary"], b["summary"]) for q, b in pairs]
            if not values or any(v is None for v in values):
                verdicts.append(Verdict(t.key, model, label, None, len(values), 0, None, None, t.limit))
                continue
            vals = [float(v) for v in values if v is not None]
            ok = sum(v <= t.limit + TOLERANCE for v in vals)
            finite = [v for v in vals if math.isfinite(v)]
            verdicts.append(Verdict(t.key, model, label, ok == len(vals), len(vals), ok, max(vals),
                                    float(np.mean(finite)) if len(finite) == len(vals) else math.inf, t.limit))
    return verdicts


# the configuration the page states a target for, first present wins: queuepilot deployed to cut
# waste, both opt-ins on (idle-actor reclaim, stall deactivation), then with fewer of them
STATED = ("queuepilot-reclaim+stall", "queuepilot-reclaim", "queuepilot+stall", "queuepilot")


def primary(verdicts: Sequence[Verdict], target: str, model: str) -> Verdict | None:
    """The verdict the page states for (target, model): the first configuration of ``STATED`` judged
    (every opt-in on where it ran), else the first configuration judged."""
    cands = [v for v in verdicts if v.target == target and v.model == model]
    for name in STATED:
        for v in cands:
            if v.config == name:
                return v
    return cands[0] if cands else None


# ------------------------------------------------------------------------------------ rendering
def _fmt(v: float | None, spec: str = ",.0f") -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf"
    return format(v, spec)


def _pct(v: float | None, digits: int = 0) -> str:
    return "n/a" if v is None else ("inf" if math.isinf(v) else f"{v * 100:.{digits}f} %")


def _stats(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    vals = [v for v in values if v is not None]
    if not vals or len(vals) != len(values):
        return None, None, None
    if any(math.isinf(v) for v in vals):
        return math.inf, min(vals), max(vals)
    return float(np.mean(vals)), min(vals), max(vals)


def _range(values: Sequence[float | None], fmt: Callable[[float | None], str]) -> str:
    mean, lo, hi = _stats(values)
    if mean is None:
        return "n/a"
    if len(values) == 1 or lo == hi:
        return fmt(mean)
    return f"{fmt(mean)} ({fmt(lo)}-{fmt(hi)})"


def _val_by_class(s: Mapping[str, Any], quant: str, cls: str) -> float | None:
    return get(s, f"wait_{quant}_s_by_class.{cls}")


COLUMNS: tuple[tuple[str, Callable[[Mapping[str, Any]], float | None], Callable[[float | None], str], bool], ...] = (
    # (header, value from a run record, format, show min-max over seeds)
    ("controllable idle GPU-h", lambda r: get(r["summary"], "idle_gpu_hours_controllable"), _fmt, True),
    ("total idle GPU-h", lambda r: get(r["summary"], "idle_gpu_hours"), _fmt, True),
    ("allocated GPU-h", lambda r: get(r["summary"], "allocated_gpu_hours"), _fmt, False),
    ("killed GPU-h", lambda r: get(r["summary"], "killed_gpu_hours"), lambda v: _fmt(v, ",.1f"), False),
    ("killed / delivered", lambda r: ratio(get(r["summary"], "killed_gpu_hours"), delivered_gpu_hours(r["summary"])),
     lambda v: _pct(v, 2), False),
    ("task p95 s", lambda r: _val_by_class(r["summary"], "p95", "ray_task"), _fmt, False),
    ("task p99 s", lambda r: _val_by_class(r["summary"], "p99", "ray_task"), _fmt, False),
    ("workload p95 s", lambda r: _val_by_class(r["summary"], "p95", "workload"), _fmt, False),
    ("workload p99 s", lambda r: _val_by_class(r["summary"], "p99", "workload"), _fmt, False),
    ("unplaceable admissions", lambda r: get(r["summary"], "unplaceable_admissions"), lambda v: _fmt(v, ".1f"), False),
    ("scale-downs <300 s after up", lambda r: get(r["summary"], "scale_downs_after_up_300s"),
     lambda v: _fmt(v, ".1f"), False),
    ("controllable idle / bound", lambda r: ratio(get(r["summary"], "idle_gpu_hours_controllable"),
                                                   get(r["summary"], "lower_bound_idle_gpu_hours")),
     lambda v: _fmt(v, ".2f"), False),
    ("sim s", lambda r: float(r["secs"]), _fmt, False),
)


def _labels(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    order: dict[str, None] = {}
    pols = list(POLICIES)
    for r in sorted(runs, key=lambda r: (pols.index(r["policy"]) if r["policy"] in pols else len(pols),
                                         r["stall_reclaim"])):
        order[r["label"]] = None
    return list(order)


def model_table(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Rows = run labels, each cell the mean over seeds (min-max where marked)."""
    lines = ["| policy | seeds | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for label in _labels(runs):
        rs = [r for r in runs if r["label"] == label]
        cells = []
        for _, fn, fmt, rng in COLUMNS:
            vals = [fn(r) for r in rs]
            cells.append(_range(vals, fmt) if rng else fmt(_stats(vals)[0]))
        lines.append(f"| {label} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


SUMMARY_COLUMNS: tuple[tuple[str, Callable[[Mapping[str, Any], Mapping[str, Any]], float | None],
                             Callable[[float | None], str]], ...] = (
    ("controllable idle vs ray-idle", lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"),
                                                         get(r, "idle_gpu_hours_controllable")), _pct),
    ("total idle vs ray-idle", lambda q, r: ratio(get(q, "idle_gpu_hours"), get(r, "idle_gpu_hours")), _pct),
    ("killed / delivered", lambda q, r: ratio(get(q, "killed_gpu_hours"), delivered_gpu_hours(q)),
     lambda v: _pct(v, 2)),
    *((f"{cls.replace('ray_', '')} {quant} vs ray-idle",
       (lambda q, r, quant=quant, cls=cls: ratio(_val_by_class(q, quant, cls), _val_by_class(r, quant, cls))),
       lambda v: "n/a" if v is None else ("inf" if math.isinf(v) else f"{(v - 1) * 100:+.0f} %"))
      for cls in CLASSES for quant in ("p95", "p99")),
    ("controllable idle / bound", lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"),
                                                     get(q, "lower_bound_idle_gpu_hours")), lambda v: _fmt(v, ".2f")),
)


def summary_section(runs: Sequence[Mapping[str, Any]], models: Sequence[str]) -> list[str]:
    paired = pair_runs(runs)
    lines = ["Each queuepilot configuration against ray-idle on the same trace window and failure rate: mean over "
             "seeds x failure rates, (min-max) when they differ. Wait columns: the relative change of the "
             "queuepilot run's percentile against ray-idle's (negative = shorter).", ""]
    for model in models:
        labels = [lab for (m, lab), pairs in paired.items() if m == model and pairs]
        if not labels:
            continue
        order = _labels([q for lab in labels for q, _ in paired[(model, lab)][:1]])
        n = len(paired[(model, order[0])])
        lines += [f"### {model} ({n} paired run{'s' if n != 1 else ''} per configuration)", "",
                  "| configuration | " + " | ".join(c[0] for c in SUMMARY_COLUMNS) + " |",
                  "|---|" + "---:|" * len(SUMMARY_COLUMNS)]
        for lab in order:
            pairs = paired[(model, lab)]
            cells = [_range([fn(q["summary"], b["summary"]) for q, b in pairs], fmt) for _, fn, fmt in SUMMARY_COLUMNS]
            lines.append(f"| {lab} | " + " | ".join(cells) + " |")
        lines += ["", *reading(model, paired), ""]
    return lines


def reading(model: str, paired: Mapping[tuple[str, str], Sequence[tuple[Mapping[str, Any], Mapping[str, Any]]]]
            ) -> list[str]:
    """The answer for one model, in words generated from the numbers: waste removed against ray-idle,
    the cost in wait and killed work, the distance to the bound."""
    out = []
    for lab in ("queuepilot", "queuepilot+stall", "queuepilot-reclaim", "queuepilot-reclaim+stall"):
        pairs = paired.get((model, lab)) or []
        if not pairs:
            continue
        q = [p[0]["summary"] for p in pairs]
        r = [p[1]["summary"] for p in pairs]

        def mean(key: str, rows: Sequence[Mapping[str, Any]]) -> float | None:
            return _stats([get(s, key) for s in rows])[0]

        cq, cr = mean("idle_gpu_hours_controllable", q), mean("idle_gpu_hours_controllable", r)
        tq, tr = mean("idle_gpu_hours", q), mean("idle_gpu_hours", r)
        killed = _stats([ratio(get(s, "killed_gpu_hours"), delivered_gpu_hours(s)) for s in q])[0]
        bound = _stats([ratio(get(s, "idle_gpu_hours_controllable"), get(s, "lower_bound_idle_gpu_hours"))
                        for s in q])[0]
        waits = []
        for cls in CLASSES:
            for quant in ("p95", "p99"):
                a, b = mean(f"wait_{quant}_s_by_class.{cls}", q), mean(f"wait_{quant}_s_by_class.{cls}", r)
                if a is not None and b is not None:
                    waits.append(f"{cls} {quant} {a:,.0f} s vs {b:,.0f} s")

        def change(a: float | None, b: float | None) -> str:
            if a is None or b is None or b == 0:
                return "n/a"
            x = 1 - a / b
            return f"{x:.0%} less" if x >= 0 else f"{-x:.0%} more"

        out.append(
            f"- **{lab}** under `{model}`: controllable idle {_fmt(cq)} GPU-h against ray-idle's {_fmt(cr)} "
            f"({change(cq, cr)}), total idle {_fmt(tq)} against {_fmt(tr)} ({change(tq, tr)}), means; "
            f"wait ({'; '.join(waits) if waits else 'n/a'}); killed work {_pct(killed, 2)} of delivered GPU-hours; "
            f"controllable idle {_fmt(bound, '.2f')}x the lower bound.")
    return out


def targets_section(runs: Sequence[Mapping[str, Any]], models: Sequence[str]) -> list[str]:
    verdicts = evaluate_targets(runs)
    lines = ["Against `ray-idle` on the same run (same trace window, seed and failure rate), default worker cap. "
             "A target is **met** for a model when it holds in every paired run (every seed and failure rate); "
             "the stated configuration is queuepilot as deployed to cut waste, with both opt-ins on: "
             "`queuepilot-reclaim+stall` (idle-actor reclaim and stall deactivation) where it ran, else the "
             "first of `queuepilot-reclaim`, `queuepilot+stall`, `queuepilot`; "
             "the other configurations, plain `queuepilot` among them, follow on the same line.", ""]
    for t in TARGETS:
        lines.append(f"- **{t.text}** (limit {_limit(t)}):")
        for model in models:
            if t.models is not None and model not in t.models:
                continue
            main = primary(verdicts, t.key, model)
            if main is None:
                lines.append(f"  - `{model}`: not run")
                continue
            others = [v for v in verdicts if v.target == t.key and v.model == model and v is not main]
            rest = "; ".join(f"{v.config}: {_word(v)} ({_vdetail(v, t)})" for v in others)
            lines.append(f"  - `{model}`: **{_word(main).upper()}** by {main.config} ({_vdetail(main, t)})"
                         + (f"; {rest}" if rest else ""))
    lines += ["", "### Why", ""]
    lines += why(runs, verdicts, models)
    return lines


def _limit(t: Target) -> str:
    if t.unit.startswith("x"):
        return f"{t.limit:g}x"
    if t.unit == "of delivered":
        return f"{t.limit:.0%}"
    return f"{t.limit:g}"


def _word(v: Verdict) -> str:
    return "not measured" if v.met is None else ("met" if v.met else "not met")


def _vdetail(v: Verdict, t: Target) -> str:
    if v.met is None:
        return "no ray-idle run to pair with" if v.runs == 0 else "the simulator does not report this number"
    if t.unit == "of delivered":
        worst, mean = _pct(v.worst, 2), _pct(v.mean, 2)
    elif t.unit.startswith("x"):
        worst, mean = _fmt(v.worst, ".3f") + "x", _fmt(v.mean, ".3f") + "x"
    else:
        worst, mean = _fmt(v.worst, "g"), _fmt(v.mean, ".1f")
    return f"{v.runs_met}/{v.runs} runs; worst {worst}, mean {mean}"


def why(runs: Sequence[Mapping[str, Any]], verdicts: Sequence[Verdict], models: Sequence[str]) -> list[str]:
    """One paragraph per model, generated from the numbers: for each target the primary configuration
    misses, what the numbers say about where the gap is."""
    paired = pair_runs(runs)
    out: list[str] = []
    for model in models:
        notes: list[str] = []
        for t in TARGETS:
            v = primary(verdicts, t.key, model)
            if v is None or v.met is None:
                continue
            pairs = paired.get((model, v.config)) or []
            q = [p[0]["summary"] for p in pairs]
            r = [p[1]["summary"] for p in pairs]
            if v.met:
                continue
            note = _why_one(t, v, q, r)
            alts = [a for a in verdicts if a.target == t.key and a.model == model and a.config != v.config and a.met]
            if alts:
                note += " Met by " + ", ".join(f"{a.config} ({_vdetail(a, t)})" for a in alts) + "."
            notes.append(note)
        met = [t.key for t in TARGETS if (v := primary(verdicts, t.key, model)) is not None and v.met]
        unmeasured = [t.key for t in TARGETS if (v := primary(verdicts, t.key, model)) is not None and v.met is None]
        head = f"**`{model}`**: met {', '.join(met) if met else 'none'}"
        if unmeasured:
            head += f"; not measured: {', '.join(unmeasured)} (the simulator does not report the number yet)"
        out.append(head + (". Not met: " + " ".join(notes) if notes else ". Every measured target is met."))
        out.append("")
    return out


def _mean_key(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    return _stats([get(s, key) for s in rows])[0]


def _classes(rows: Sequence[Mapping[str, Any]]) -> str:
    parts = []
    for c in IDLE_CLASSES:
        v = _mean_key(rows, f"idle_gpu_hours_by_class.{c}")
        if v is not None:
            parts.append((v, c))
    if not parts:
        return "no breakdown by class reported"
    parts.sort(reverse=True)
    return ", ".join(f"{c} {v:,.0f}" for v, c in parts)


def _largest_controllable(rows: Sequence[Mapping[str, Any]]) -> str:
    parts = [(v, c) for c in IDLE_CLASSES[:-1] if (v := _mean_key(rows, f"idle_gpu_hours_by_class.{c}")) is not None]
    total = sum(v for v, _ in parts)
    if not parts or total <= 0:
        return ""
    v, c = max(parts)
    return f"; the largest controllable class is {c}: {v:,.0f} GPU-h, {v / total:.0%} of the controllable idle"


def _why_one(t: Target, v: Verdict, q: Sequence[Mapping[str, Any]], r: Sequence[Mapping[str, Any]]) -> str:
    who = f"{v.config} ({v.runs - v.runs_met} of {v.runs} runs over the limit)"
    if t.key == "controllable_idle":
        return (f"*{t.key}*: {who} leaves {_fmt(_mean_key(q, 'idle_gpu_hours_controllable'))} controllable idle "
                f"GPU-h against ray-idle's {_fmt(_mean_key(r, 'idle_gpu_hours_controllable'))} (mean "
                f"{_fmt(v.mean, '.2f')}x, limit {t.limit:g}x); its idle GPU-h by class, largest first: {_classes(q)} "
                f"(ray-idle: {_classes(r)}){_largest_controllable(q)}.")
    if t.key == "total_idle":
        ctrl, tot = _mean_key(q, "idle_gpu_hours_controllable"), _mean_key(q, "idle_gpu_hours")
        rest = None if ctrl is None or tot is None else tot - ctrl
        return (f"*{t.key}*: {who} leaves {_fmt(tot)} idle GPU-h against ray-idle's "
                f"{_fmt(_mean_key(r, 'idle_gpu_hours'))} (mean {_fmt(v.mean, '.2f')}x, limit {t.limit:g}x); "
                f"{_fmt(rest)} GPU-h of it is counted as not controllable (by class: {_classes(q)}).")
    if t.key == "wait_tails":
        parts = []
        for cls in CLASSES:
            for quant in ("p95", "p99"):
                a = _mean_key(q, f"wait_{quant}_s_by_class.{cls}")
                b = _mean_key(r, f"wait_{quant}_s_by_class.{cls}")
                x = ratio(a, b)
                if x is not None and x > t.limit + TOLERANCE:
                    parts.append(f"{cls} {quant} {a:,.0f} s vs {b:,.0f} s")
        return (f"*{t.key}*: {who}, worst {_fmt(v.worst, '.2f')}x; over the limit on the mean: "
                f"{'; '.join(parts) if parts else 'none (only single runs exceed it)'}.")
    if t.key == "killed_work":
        return (f"*{t.key}*: {who} kills {_fmt(_mean_key(q, 'killed_gpu_hours'), ',.1f')} GPU-h of work per run "
                f"(mean) out of {_fmt(_stats([delivered_gpu_hours(s) for s in q])[0])} delivered "
                f"({_pct(v.mean, 2)}; tasks killed per run {_fmt(_mean_key(q, 'tasks_killed'), ',.0f')}).")
    if t.key == "unplaceable":
        return (f"*{t.key}*: {who}: up to {_fmt(v.worst, 'g')} admitted-but-unplaceable workloads in a run "
                f"(unplaceable workload-hours, mean {_fmt(_mean_key(q, 'unplaceable_hours'), ',.1f')}).")
    if t.key == "scale_down_after_up":
        return (f"*{t.key}*: {who}: up to {_fmt(v.worst, 'g')} scale-downs within 300 s of a scale-up in a run, "
                f"out of {_fmt(_mean_key(q, 'scale_events'))} scale events (mean).")
    if t.key == "bound":
        return (f"*{t.key}*: {who}: controllable idle {_fmt(_mean_key(q, 'idle_gpu_hours_controllable'))} GPU-h "
                f"against a lower bound of {_fmt(_mean_key(q, 'lower_bound_idle_gpu_hours'))} (mean "
                f"{_fmt(v.mean, '.2f')}x, limit {t.limit:g}x); idle by class: {_classes(q)}{_largest_controllable(q)}.")
    return f"*{t.key}*: {who}, worst {_fmt(v.worst, '.3g')}."


def cap_section(runs: Sequence[Mapping[str, Any]], ref: tuple[str, int, float]) -> list[str]:
    rows = [r for r in runs if (r["model"], r["seed"], r["rate"]) == ref and not r["stall_reclaim"]]
    caps = sorted({r["cap"] for r in rows})
    swept = {r["policy"] for r in rows if r["cap"] != DEFAULT_CAP}
    if len(caps) < 2:
        return ["Not run (a single worker cap)."]
    lines = [f"`{ref[0]}`, seed {ref[1]}, failure rate {ref[2]:g}; a team RayCluster's `maxReplicas` = its nominal "
             f"GPU quota x the factor (`--worker-cap-factor`, `SimConfig.ray_max_quota_factor`; the matrix uses "
             f"{DEFAULT_CAP:g}).", "",
             "| policy | cap factor | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for label in _labels([r for r in rows if r["policy"] in swept]):
        for cap in caps:
            for r in rows:
                if r["label"] == label and r["cap"] == cap:
                    lines.append(f"| {label} | {cap:g} | " + " | ".join(fmt(fn(r)) for _, fn, fmt, _ in COLUMNS) + " |")
    return lines


def helios_section(runs: Sequence[Mapping[str, Any]], helios: Mapping[str, float] | None) -> list[str]:
    shaped = [r for r in runs if r.get("shape")]
    if not helios:
        return ["Helios series not found (set QUEUEPILOT_SHARED)."]
    if not shaped:
        return ["No reference run in this matrix."]
    r0 = shaped[0]
    lines = [f"Pending GPUs over time, as a fraction of cluster GPUs (Helios Earth vc6YE, May 2020, 208 GPUs, per "
             f"minute; simulation: `{r0['model']}`, seed {r0['seed']}, failure rate {r0['rate']:g}, every 5 min). "
             "The simulated queue is the policy's own, so the check is of the trace replay's burstiness and "
             "daily cycle, not of a policy's quality.", "",
             "| series | time with pending GPUs | mean pending / GPUs | p95 pending / GPUs | "
             "hour-of-day peak/trough of mean pending | CV |", "|---|---:|---:|---:|---:|---:|"]
    for name, h in [("Helios vc6YE", helios)] + [(f"sim {r['label']}", r["shape"]) for r in shaped]:
        lines.append(f"| {name} | {h['share_minutes_pending']:.1%} | {h['pending_mean_frac']:.3f} | "
                     f"{h['pending_p95_frac']:.3f} | {h['hourly_peak_trough']:.1f} | {h['cv']:.1f} |")
    return lines


def budget_section(sweep: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> list[str]:
    """What the idle-actor reclaim budget sweep (``reclaim_budget.py``) found, when it ran on this page's
    reference window (same start, length, seed and failure rate)."""
    if sweep is None:
        return ["No reclaim budget sweep (`benchmarks/reclaim_budget.py`) in this results folder."]
    sm, ref = sweep["meta"], meta["ref"]
    window = (sm["start"], float(sm["hours"]), int(sm["seed"]), float(sm["rate"]))
    if window != (meta["start"], float(meta["hours"]), int(ref[1]), float(ref[2])):
        return [f"The reclaim budget sweep in [reclaim_budget.md](reclaim_budget.md) ran on another window "
                f"({window[1]:g} h from {window[0]}, seed {window[2]}, rate {window[3]:g}): not compared here."]
    lines = [f"`queuepilot-reclaim` reclaims at most `scaling.reclaim_budget_per_hour` workers per RayCluster in "
             f"any hour (default {budget_sweep.DEFAULT_BUDGET}). [reclaim_budget.md](reclaim_budget.md) runs it at "
             f"budgets {', '.join(str(b) for b in sm['budgets'])} over this page's window ({window[1]:g} h from "
             f"{window[0]}), seed {ref[1]}, failure rate {ref[2]:g} (git {sm['git']}), against ray-idle on the same "
             "run; per model:", ""]
    for model in sm["models"]:
        base = budget_sweep.baseline(sweep["runs"], model)
        for stall in (False, True):
            rows = budget_sweep.series(sweep["runs"], model, stall)
            if rows:
                lines.append(f"- `{model}`{' +stall' if stall else ''}: " + budget_sweep.verdict(rows, base))
    return lines


def matrix_kind(meta: Mapping[str, Any]) -> str | None:
    """``"full"`` or ``"quick"`` when a run's axes are exactly those of ``make bench-full`` / ``make bench``
    (``policy.py`` without flags / with ``--quick`` alone), else None (a partial or merged matrix)."""
    mine = {k: meta.get(k) for k in AXES}
    for kind in ("full", "quick"):
        if mine == default_axes(quick=kind == "quick"):
            return kind
    return None


def _axis_text(key: str, value: Any) -> str:
    if key == "hours":
        return f"{float(value):g} h"
    if isinstance(value, list):
        return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) or "none"
    return str(value)


def scope(meta: Mapping[str, Any], n_runs: int) -> list[str]:
    """What the page covers, said exactly: which matrix it is, and every axis on which it differs from the
    whole matrix (``make bench-full``, ``policy.md``)."""
    kind = matrix_kind(meta)
    name = {"full": "the whole matrix (`make bench-full`)", "quick": "the quick matrix (`make bench`)"}.get(
        kind or "", "a partial matrix (neither `make bench` nor `make bench-full`)")
    if "merged_from" in meta:
        name = "a merge of several runs of this script"
    sweep = sum(1 for r in meta.get("caps") or [] if float(r) != DEFAULT_CAP) * len(meta.get("cap_policies") or [])
    head = (f"**What this page covers**: {name}, {n_runs} runs of {float(meta['hours']):g} h each "
            f"(every model x seed x failure rate x policy, the `+stall` runs, and the worker-cap sweep"
            f"{f' of {sweep} runs' if sweep else ': none'}).")
    if kind == "full":
        return [head]
    full = default_axes(quick=False)
    diffs = [f"{AXES[k]} {_axis_text(k, meta.get(k))} here, {_axis_text(k, full[k])} there" for k in AXES
             if meta.get(k) != full[k]]
    if not diffs:
        return [head]
    return [head + " Against the whole matrix ([policy.md](policy.md), `make bench-full`): " + "; ".join(diffs)
            + ". A verdict here is over fewer runs than there, and a shorter window holds fewer long jobs "
            "and stalls: read it as a quick check, the whole matrix as the answer."]


def provenance(meta: Mapping[str, Any], n_runs: int) -> list[str]:
    """Who made the page: the command and commit of one run of this script, or each source of a merge;
    the machine, and the wall time the run took (measured)."""
    cost = (f"summed run seconds {meta['run_s_sum']:,.0f} s "
            + (f"({meta['run_cpu_s_sum']:,.0f} CPU s) " if "run_cpu_s_sum" in meta else "")
            + f"(simulation only; trace loading {meta['load_s_sum']:,.0f} s more)")
    dirty = " with uncommitted changes in the working tree" if meta.get("dirty") else ""
    python = f", {meta['python']}" if meta.get("python") else ""
    if "merged_from" not in meta:
        target = {"full": "make bench-full", "quick": "make bench"}.get(matrix_kind(meta) or "")
        return [f"Generated {meta['date']} by `{meta['command']}`"
                + (f" (`{target}` runs it)" if target else "") + f", git {meta['commit']}{dirty}.",
                f"Machine: {meta['machine']}, {meta['cores']} cores{python}; {meta['processes']} worker processes. "
                f"Wall time {meta['wall_s'] / 60:.1f} min for {n_runs} runs (measured); {cost}."]
    lines = [f"Merged {meta['date']} by `{meta['command']}` from {len(meta['merged_from'])} runs of this script over "
             f"the same window{dirty}: each run's numbers are those of the commit it ran at, and a run that more "
             "than one of them holds was checked to agree on every number both report (`merge` refuses otherwise). "
             "`make bench-full` runs the whole matrix in one go instead.", ""]
    for src in meta["merged_from"]:
        wall = f", {float(src['wall_s']) / 60:.1f} min wall on {src['processes']} processes" if src.get("wall_s") else ""
        lines.append(f"- `{src['file']}`: {src['kept']} of its {src['runs']} runs kept; git {src['commit']}, "
                     f"{src['date']}{wall}: `{src['command']}`")
    lines += ["", f"Machine: {meta['machine']}, {meta['cores']} cores{python}. {n_runs} runs; wall time summed over the "
              f"sources {meta['wall_s'] / 60:.1f} min; {cost}."]
    return lines


def render(data: Mapping[str, Any], helios: Mapping[str, float] | None, prefix: str,
           sweep: Mapping[str, Any] | None = None) -> str:
    meta = data["meta"]
    runs: list[Mapping[str, Any]] = data["runs"]
    ref = (meta["ref"][0], int(meta["ref"][1]), float(meta["ref"][2]))
    models = [m for m in meta["models"] if any(r["model"] == m for r in runs)]
    main = [r for r in runs if r["cap"] == DEFAULT_CAP]
    lines = [
        "# Policy benchmark (trace-driven simulation, a matrix)",
        "",
        *provenance(meta, len(runs)),
        "",
        *scope(meta, len(runs)),
        "",
        f"Workload: Philly trace (`philly-pollux/philly.csv`), {meta['hours']:g} h from {meta['start']}; utilization "
        f"models {', '.join(f'`{m}`' for m in models)} (calibration: [utilization.md](utilization.md)); seeds "
        f"{', '.join(str(s) for s in meta['seeds'])}; GPU failure rates {', '.join(f'{x:g}' for x in meta['rates'])} "
        f"per GPU per day; cluster {runs[0]['total_gpus'] if runs else '?'} GPUs; per-team worker cap "
        f"{DEFAULT_CAP:g}x the team's nominal quota{' (swept below)' if len(runs) > len(main) else ''}. Policies: {', '.join(meta['policies'])}; "
        f"`+stall`: the same policy with stall reclaim on (under {', '.join(meta['stall_models']) or 'no model'}). "
        "Every run is one process: `queuepilot simulate --util-model M --seed S --gpu-failure-rate R "
        f"--hours {meta['hours']:g} --start {meta['start']} --policies P [--stall-reclaim] [--worker-cap-factor F]` "
        "gives the same numbers.",
        "",
        "Definitions (docs/simulation.md): *controllable idle* = idle-but-allocated GPU-hours a scaler could have "
        "removed (empty, starting, idle-actor and stalled workers); *total idle* adds the idle segments inside "
        "running jobs; *killed work* = GPU-hours of work lost to a worker deleted mid-task (redone from scratch); "
        "*delivered* = `delivered_gpu_hours`, the GPU-hours of work jobs kept (allocated less idle less "
        "killed)"
        + "; *bound* = the lower bound of controllable idle GPU-hours on that run.",
        "",
        "## Summary: queuepilot against Ray's own autoscaler (ray-idle)",
        "",
        *summary_section(main, models),
        "## Targets",
        "",
        *targets_section(main, models),
    ]
    for model in models:
        lines += [f"## `{model}`", ""]
        for rate in meta["rates"]:
            rs = [r for r in main if r["model"] == model and r["rate"] == rate]
            if not rs:
                continue
            seeds = sorted({r["seed"] for r in rs})
            lines += [f"Failure rate {rate:g} per GPU per day; mean over seeds {', '.join(map(str, seeds))} "
                      "(min-max where shown).", "", *model_table(rs), ""]
    lines += ["## Per-team worker cap sweep", "", *cap_section(runs, ref), "",
              "## Idle-actor reclaim budget", "", *budget_section(sweep, meta), "",
              "## Queue dynamics vs Helios (shape check, reported not asserted)", "", *helios_section(runs, helios), "",
              "## Plots", "",
              f"- `{prefix}_cap_sweep.png`: the worker-cap sweep above, controllable idle and Ray-task p95 wait "
              "against the cap factor.",
              f"- `{prefix}_controllable_idle.png`: controllable idle GPU-hours per policy, one panel per model, "
              "a bar per failure rate = mean over seeds, error bars = min-max over seeds.",
              f"- `{prefix}_wait_cdf.png`, `{prefix}_idle_gpu_hours.png`, `{prefix}_timeline.png`: the `{ref[0]}` "
              f"seed-{ref[1]} run at failure rate {ref[2]:g}.", ""]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------- plots
def plot_matrix(path: Path, runs: Sequence[Mapping[str, Any]], models: Sequence[str], rates: Sequence[float]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    main = [r for r in runs if r["cap"] == DEFAULT_CAP]
    models = [m for m in models if any(r["model"] == m for r in main)]
    if not models:
        return
    fig, axes = plt.subplots(len(models), 1, figsize=(10, 3.2 * len(models) + 0.4), squeeze=False)
    width = 0.8 / max(1, len(rates))
    for ax, model in zip(axes[:, 0], models, strict=True):
        rs = [r for r in main if r["model"] == model]
        labels = _labels(rs)
        x = np.arange(len(labels))
        for i, rate in enumerate(rates):
            means, lo, hi = [], [], []
            for lab in labels:
                vals = [get(r["summary"], "idle_gpu_hours_controllable") for r in rs
                        if r["label"] == lab and r["rate"] == rate]
                m, a, b = _stats(vals)
                means.append(m if m is not None else np.nan)
                lo.append((m - a) if m is not None and a is not None else 0.0)
                hi.append((b - m) if m is not None and b is not None else 0.0)
            ax.bar(x + (i - (len(rates) - 1) / 2) * width, means, width, yerr=[lo, hi], capsize=3,
                   label=f"failure rate {rate:g}")
        ax.set_xticks(x, labels, rotation=20, fontsize=8)
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
    swept = {r["policy"] for r in runs if r["cap"] != DEFAULT_CAP}
    if not swept:
        return False
    ref = next((r["model"], r["seed"], r["rate"]) for r in runs if r["cap"] != DEFAULT_CAP)
    rows = [r for r in runs if (r["model"], r["seed"], r["rate"]) == ref and not r["stall_reclaim"]
            and r["policy"] in swept]
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
    """A merge draws no reference plots (the runs' raw metrics are not kept): it keeps those of the first
    source, which holds the reference run, under this page's prefix."""
    for kind in ("wait_cdf", "idle_gpu_hours", "timeline"):
        src, dst = source.with_name(f"{source.stem}_{kind}.png"), out / f"{prefix}_{kind}.png"
        if src.is_file() and src.resolve() != dst.resolve():
            shutil.copyfile(src, dst)


# -------------------------------------------------------------------------------------- helios
def helios_shape(shared: Path) -> dict[str, float] | None:
    path = shared / HELIOS
    if not path.is_file():
        return None
    pending, total, hours = [], [], []
    with path.open() as f:
        for r in csv.DictReader(f):
            pending.append(float(r["pending_gpu_num"]))
            total.append(float(r["total_gpu_num"]))
            hours.append(int(r["time"][11:13]))
    return _shape(np.asarray(pending), float(np.mean(total)), np.asarray(hours))


def _shape(pending: np.ndarray, total: float, hours: np.ndarray) -> dict[str, float]:
    by_hour = np.array([pending[hours == h].mean() if (hours == h).any() else 0.0 for h in range(24)])
    return {
        "share_minutes_pending": float((pending > 0).mean()),
        "pending_mean_frac": float(pending.mean() / total),
        "pending_p95_frac": float(np.percentile(pending, 95) / total),
        "hourly_peak_trough": float(by_hour.max() / max(by_hour.min(), 1e-9)),
        "cv": float(pending.std() / max(pending.mean(), 1e-9)),
    }


def sim_shape(timeline: Sequence[Sequence[float]], total: int) -> dict[str, float]:
    tl = np.asarray(timeline, dtype=float)
    hours = ((tl[:, 0] // 3600) % 24).astype(int)
    return _shape(tl[:, 4], float(total), hours)


# ---------------------------------------------------------------------------------------- main
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def _machine() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} ({platform.machine()})"
    except OSError:
        pass
    return f"{platform.machine()} {platform.system()}"


def _csv(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    def parse(text: str) -> list[Any]:
        try:
            return [kind(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2] if __doc__ else None)
    p.add_argument("--trace", default=str(default_trace()))
    p.add_argument("--start", default="2017-10-03")
    full, quick = WINDOWS["full"], WINDOWS["quick"]
    p.add_argument("--hours", type=float, default=None,
                   help=f"window length (default {full[0]:g}; --quick: {quick[0]:g})")
    p.add_argument("--models", type=_csv(str), default=None, help=f"utilization models (default {','.join(MODELS)})")
    p.add_argument("--seeds", type=_csv(int), default=None,
                   help=f"default {','.join(map(str, full[1]))} (--quick: {','.join(map(str, quick[1]))})")
    p.add_argument("--rates", type=_csv(float), default=None,
                   help=f"GPU failure rates per GPU per day, comma-separated (default {RATE:g})")
    p.add_argument("--policies", type=_csv(str), default=None, help="default: every policy the simulator has")
    p.add_argument("--stall-models", type=_csv(str), default=list(STALL_MODELS),
                   help="models under which the queuepilot policies also run with stall reclaim ('' = none)")
    p.add_argument("--caps", type=_csv(float), default=None,
                   help=f"worker-cap factors of the sweep ('' = no sweep; default {','.join(f'{c:g}' for c in full[2])}; "
                        "--quick: no sweep)")
    p.add_argument("--cap-policies", type=_csv(str), default=list(CAP_POLICIES))
    p.add_argument("--quick", action="store_true",
                   help=f"the quick matrix (make bench): {quick[0]:g} h, seed(s) {','.join(map(str, quick[1]))}, "
                        "no cap sweep, the rest as the whole matrix; writes policy-quick.* unless --name is given")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default=None, help="file prefix: NAME.md, NAME.json, NAME_*.png "
                   "(default policy, --quick: policy-quick)")
    p.add_argument("--render-only", action="store_true", help="re-render NAME.md and the matrix plot from NAME.json")
    p.add_argument("--merge", type=_csv(str), default=None, metavar="JSON,JSON,...",
                   help="write NAME.json / NAME.md from the runs of these policy*.json files (same window; a run "
                        "that several hold must have equal numbers in each); runs nothing")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--plan", action="store_true", help="print the runs and the expected wall time on --jobs "
                   "processes (seconds per simulated hour from --costs-from), run nothing")
    p.add_argument("--costs-from", default=None, help="a policy*.json whose run seconds estimate each run "
                   "(default: NAME.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    name = args.name or ("policy-quick" if args.quick else "policy")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{name}.json", out / f"{name}.md"
    shared = Path(args.trace).resolve().parents[2]
    if args.plan:
        return plan(args, Path(args.costs_from) if args.costs_from else json_path)
    if args.render_only:
        data = json.loads(json_path.read_text())
    elif args.merge:
        try:
            data = merge([(Path(f).name, json.loads(Path(f).read_text())) for f in args.merge],
                         " ".join([COMMAND, *argv]))
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"policy.py --merge: {e}") from None
        reference_plots_from(Path(args.merge[0]), out, name)
        json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        data = run(args, argv, json_path)
        plot_reference(out, name, data["runs"])
        for r in data["runs"]:  # the raw metrics only feed the reference plots: not kept in the JSON
            r.pop("metrics", None)
        json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    plot_matrix(out / f"{name}_controllable_idle.png", data["runs"], data["meta"]["models"], data["meta"]["rates"])
    plot_cap_sweep(out / f"{name}_cap_sweep.png", data["runs"])
    sweep_path = out / "reclaim_budget.json"
    sweep = json.loads(sweep_path.read_text()) if sweep_path.exists() else None
    text = render(data, helios_shape(shared), name, sweep)
    md_path.write_text(text)
    print(f"wrote {md_path}, {json_path} ({len(data['runs'])} runs)", file=sys.stderr)
    return 0


def axes(args: argparse.Namespace) -> dict[str, Any]:
    """The matrix's axes from the flags (defaults: the whole matrix, or the quick one with --quick)."""
    ax = default_axes(args.quick)
    models = args.models or ax["models"]
    policies = args.policies or ax["policies"]
    unknown = [p for p in policies + args.cap_policies if p not in POLICIES]
    if unknown:
        raise SystemExit(f"unknown policies {unknown} (known: {', '.join(POLICIES)})")
    return {"hours": args.hours if args.hours is not None else ax["hours"], "models": models,
            "seeds": args.seeds or ax["seeds"], "rates": args.rates or ax["rates"], "policies": policies,
            "stall_models": [m for m in args.stall_models if m in models],
            "caps": ax["caps"] if args.caps is None else list(args.caps),
            "cap_policies": [p for p in args.cap_policies if p in policies]}


def matrix(ax: Mapping[str, Any]) -> list[Task]:
    return build_matrix(ax["models"], ax["seeds"], ax["rates"], ax["policies"], ax["stall_models"], ax["caps"],
                        ax["cap_policies"])


def plan(args: argparse.Namespace, costs_from: Path) -> int:
    """Print the matrix's runs (how many of each kind) and the wall time they would take on --jobs
    processes, longest first onto the least loaded process as the pool runs them, each run's seconds from
    ``costs_from`` (CPU seconds per simulated hour of that model and label; a default where it has none)."""
    ax = axes(args)
    tasks = matrix(ax)
    prev = previous_costs(costs_from)
    cost = {t: estimate(t, ax["hours"], prev) for t in tasks}
    procs = [0.0] * max(1, args.jobs)
    for c in sorted(cost.values(), reverse=True):  # longest first onto the least loaded process, as the pool does
        procs[procs.index(min(procs))] += c
    missing = sorted({(t.model, t.label) for t in tasks} - set(prev))
    stall = sum(t.stall_reclaim for t in tasks)
    sweep = sum(t.cap != DEFAULT_CAP for t in tasks)
    print(f"{len(tasks)} runs of {ax['hours']:g} h: {len(tasks) - stall - sweep} = {len(ax['models'])} models x "
          f"{len(ax['seeds'])} seeds x {len(ax['rates'])} failure rates x {len(ax['policies'])} policies; "
          f"{stall} +stall; {sweep} worker-cap sweep")
    print(f"summed run seconds ~{sum(cost.values()):,.0f} s, the longest run ~{max(cost.values(), default=0.0):,.0f} s; "
          f"wall on {args.jobs} processes ~{max(procs) / 60:.1f} min (costs from {costs_from}"
          + (f"; default cost for {len(missing)} (model, label) pairs it lacks" if missing else "") + ")")
    return 0


def run(args: argparse.Namespace, argv: list[str], json_path: Path) -> dict[str, Any]:
    ax = axes(args)
    tasks = matrix(ax)
    hours = ax["hours"]
    ref = (ax["models"][0], ax["seeds"][0], ax["rates"][0])
    print(f"{len(tasks)} runs on {args.jobs} processes ({hours:g} h each)", file=sys.stderr)
    commit = _git("rev-parse", "--short", "HEAD") or "?"  # what the runs ran: read before them
    dirty = bool(_git("status", "--porcelain", "--", "simulator", "autoscaler", "benchmarks/policy.py"))
    t0 = time.perf_counter()
    records = run_matrix(tasks, args.trace, args.start, hours, args.jobs, ref, previous_costs(json_path),
                         progress=not args.no_progress)
    wall = time.perf_counter() - t0
    order = {t: i for i, t in enumerate(tasks)}
    records.sort(key=lambda r: order[Task(r["model"], r["seed"], r["rate"], r["policy"], r["stall_reclaim"],
                                          r["cap"])])
    meta = {
        "command": " ".join([COMMAND, *argv]), "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "commit": commit,
        "dirty": dirty, "machine": _machine(), "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cores": os.cpu_count(), "processes": args.jobs, "wall_s": round(wall, 1),
        "run_s_sum": round(sum(r["secs"] for r in records), 1),
        "run_cpu_s_sum": round(sum(r["cpu_s"] for r in records), 1),
        "load_s_sum": round(sum(r["load_s"] for r in records), 1),
        "trace": args.trace, "start": args.start, **ax, "ref": list(ref), "quick": args.quick,
    }
    return {"meta": meta, "runs": records}


if __name__ == "__main__":
    sys.exit(main())
