"""Policy quality benchmark: the simulator over the Philly trace, as a matrix, and the policy page.

Every run is one policy over one trace window under one utilization model, seed and GPU failure rate
(``benchmarks/policy_matrix.py``: which runs a matrix holds); the targets of issues #42 and #11 are pure
functions of the runs' records (``policy_targets.py``) and the page is generated from them
(``policy_page.py``, ``policy_plots.py``).  Writes ``benchmarks/results/policy.md`` (what the scaler alone
achieves, the targets with a met / not-met line each and why, the decomposition of every gain, the targets
on each held-out week, one table per model), ``policy.json`` (every run's numbers: ``--render-only``
re-renders the page and the plots from it) and PNGs.  Numbers are reported, never asserted.

The whole matrix (``make bench-full``, no flags) is the Philly month (720 h from 2017-10-03) under every
model, seed 1, with the runs at resume share 0.5 the stall targets need, and the four held-out weeks;
the quick matrix (``--quick``, ``make bench``) is the first week under ``grounded``, seed 1, the runs the
targets and the decomposition need, written to ``policy-quick.*``.  Each page says what it covers and how
long it took; ``--plan`` prints a matrix's runs and the wall time they would take.

    python benchmarks/policy.py                 # the whole matrix (`make bench-full`)
    python benchmarks/policy.py --quick         # the quick matrix (`make bench`) -> policy-quick.*
    python benchmarks/policy.py --plan --costs-from benchmarks/results/policy-quick.json   # its runs, time
    python benchmarks/policy.py --models grounded --seeds 1 --policies queuepilot,ray-idle --held-out ''
    python benchmarks/policy.py --render-only   # policy.json -> policy.md + plots
    python benchmarks/policy.py --merge a.json,b.json   # several runs' records -> policy.json + policy.md
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# the worker processes are the parallelism (--jobs): numpy's BLAS threads (numpy is only asked for
# percentiles here) would spin beside them on the same cores
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks.policy_matrix import (  # noqa: E402
    DEFAULT_CAP,
    DEFAULT_HANG,
    DEFAULT_PAUSE_INVISIBLE,
    DEFAULT_REACTIVATE,
    DEFAULT_RESUME,
    MODELS,
    START,
    WEEK_H,
    Task,
    build_matrix,
    default_axes,
    is_queuepilot,
    sim_config,
)
from benchmarks.policy_page import render  # noqa: E402
from benchmarks.policy_plots import plot_cap_sweep, plot_matrix, plot_reference, reference_plots_from  # noqa: E402
from benchmarks.policy_targets import needed_labels  # noqa: E402
from simulator.engine import POLICIES, Engine  # noqa: E402
from simulator.inputs import default_trace, load_window  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
HELIOS = "traces/helios/Earth_vc6YE/cluster_sequence_vc.csv"
COMMAND = "python benchmarks/policy.py"


def held_out_labels(ax: Mapping[str, Any]) -> dict[tuple[str, float], list[str]]:
    """Per (model, resume share) of the held-out weeks, the runs the targets need there
    (``policy_targets.needed_labels``): every model at the default resume share, the stall models also at
    the matrix's other resume shares."""
    out: dict[tuple[str, float], list[str]] = {}
    for model in ax["models"]:
        stall = model in ax["stall_models"]
        for resume in [DEFAULT_RESUME, *(ax["resumes"] if stall else [])]:
            labs = needed_labels(model, resume, stall)
            if labs:
                out[(model, resume)] = labs
    return out


def matrix(ax: Mapping[str, Any], start: str = START) -> list[Task]:
    """Every run of the matrix with axes ``ax`` (``policy_matrix.build_matrix``, the held-out runs from the
    targets' needs)."""
    return build_matrix(ax, start, held_out_labels(ax))


def is_reference(task: Task, ref: tuple[str, int, float], start: str, hours: float) -> bool:
    """The run whose plots (wait CDF, idle, timeline) and Helios shape are drawn: the page's window, the
    first model, seed and rate, the simulator's defaults otherwise."""
    return ((task.model, task.seed, task.rate) == ref and task.cap == DEFAULT_CAP and not task.stall_reclaim
            and task.resume == DEFAULT_RESUME and (task.start, task.hours) == (start, hours)
            and task.stall_share is None)


# --------------------------------------------------------------------------------- the worker
_WINDOWS: dict[tuple[Any, ...], Any] = {}  # per process: a trace window is loaded once per world


def _window(trace: str, task: Task, max_gpus: int) -> tuple[Any, float]:
    key = (trace, task.start, task.hours, task.model, task.seed, max_gpus, task.resume, task.stall_share)
    if key in _WINDOWS:
        return _WINDOWS[key], 0.0
    if len(_WINDOWS) >= 4:  # a window of jobs is tens of MB: keep the last few a process used
        _WINDOWS.pop(next(iter(_WINDOWS)))
    t0 = time.perf_counter()
    _WINDOWS[key] = load_window(trace, task.start, task.hours, task.seed, max_gpus, util_model=task.model,
                                resume_share=task.resume, stall_share=task.stall_share)
    return _WINDOWS[key], time.perf_counter() - t0


def run_task(task: Task, trace: str, detail: bool) -> dict[str, Any]:
    """Run one task (in a pool worker); the record kept in the JSON, plus the series the plots need when
    ``detail`` (the reference run)."""
    cfg = sim_config(task)
    window, load_s = _window(trace, task, cfg.nodes * cfg.gpus_per_node)
    t0, c0 = time.perf_counter(), time.process_time()
    eng = Engine(window.jobs, task.hours * 3600.0, task.policy, cfg)
    eng.run()
    secs, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = eng.metrics
    rec: dict[str, Any] = {**asdict(task), "label": task.label, "summary": m.summary(), "secs": round(secs, 2),
                           "cpu_s": round(cpu, 2), "load_s": round(load_s, 2), "jobs": len(window.jobs),
                           "total_gpus": eng.cluster.total_gpus}
    if detail:
        rec["shape"] = sim_shape(m.timeline, eng.cluster.total_gpus)
        rec["metrics"] = m  # the whole RunMetrics, for the reference plots (not kept in the JSON)
    return rec


def _run_packed(args: tuple[Task, str, bool]) -> dict[str, Any]:
    return run_task(*args)


# rough CPU seconds per simulated hour (a Philly week under grounded, the contention default) where no
# earlier page's JSON gives one
DEFAULT_COST_PER_HOUR = {"stall": 0.75, "queuepilot": 0.85, "baseline": 0.8}


def estimate(task: Task, previous: Mapping[tuple[str, str], float]) -> float:
    """Expected CPU seconds of a run: the CPU seconds per simulated hour of its (model, label) in an earlier
    run's JSON (``previous_costs``), else of its label under another model, else a rough default."""
    per_hour = previous.get((task.model, task.label))
    if per_hour is None:
        others = [v for (_, lab), v in previous.items() if lab == task.label]
        per_hour = float(np.mean(others)) if others else None
    if per_hour is None:
        kind = "stall" if task.stall_reclaim else ("queuepilot" if is_queuepilot(task.policy) or
                                                   task.policy == "kueue-quota" else "baseline")
        per_hour = DEFAULT_COST_PER_HOUR[kind]
    return per_hour * task.hours


def previous_costs(path: Path) -> dict[tuple[str, str], float]:
    """(model, label) -> CPU seconds per simulated hour, mean over the runs of an earlier JSON."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    page_hours = float(data.get("meta", {}).get("hours") or 0) or 1.0
    acc: dict[tuple[str, str], list[float]] = {}
    for r in data.get("runs", []):  # CPU seconds where recorded: what a run takes on a core of its own
        hours = float(r.get("hours") or page_hours)
        acc.setdefault((r["model"], r["label"]), []).append(float(r.get("cpu_s", r["secs"])) / hours)
    return {k: float(np.mean(v)) for k, v in acc.items()}


def pack(costs: Iterable[float], jobs: int) -> float:
    """The wall time of ``costs`` on ``jobs`` processes, longest first onto the least loaded, as the pool
    runs them."""
    procs = [0.0] * max(1, jobs)
    for c in sorted(costs, reverse=True):
        procs[procs.index(min(procs))] += c
    return max(procs)


def run_matrix(tasks: Sequence[Task], trace: str, jobs: int, is_ref: Callable[[Task], bool],
               previous: Mapping[tuple[str, str], float], progress: bool = True,
               title: str = "policy matrix") -> list[dict[str, Any]]:
    """Run every task, longest expected first, on ``jobs`` processes, with a progress bar and ETA."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    cost = {t: estimate(t, previous) for t in tasks}
    # longest first; among equals, tasks of one trace window together (each process loads a window once)
    order = sorted(tasks, key=lambda t: (-round(cost[t], 1), t.start, t.model, t.seed, t.resume, t.rate, t.policy))
    records: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), disable=not progress) as bar:
        runs = bar.add_task(title, total=len(order))

        def done(rec: dict[str, Any], task: Task) -> None:
            records.append(rec)
            bar.update(runs, advance=1, description=f"{task.start} {task.model} s{task.seed} {task.label} "
                                                   f"{rec['secs']:.0f} s")

        if jobs <= 1:
            for t in order:
                done(run_task(t, trace, is_ref(t)), t)
            return records
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            pending: dict[Future[dict[str, Any]], Task] = {
                pool.submit(_run_packed, (t, trace, is_ref(t))): t for t in order}
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for f in finished:
                    done(f.result(), pending.pop(f))
    return records


# ------------------------------------------------------------------------------------- records
RECORD_DEFAULTS = {"cap": DEFAULT_CAP, "resume": DEFAULT_RESUME, "stall_share": None,
                   "pause_invisible": DEFAULT_PAUSE_INVISIBLE, "hang": DEFAULT_HANG, "reactivate": DEFAULT_REACTIVATE}


def normalize(data: Mapping[str, Any]) -> dict[str, Any]:
    """A page's data with every record naming its whole world: a record written before a field existed has
    the page's window and the simulator's defaults there (older pages ran every run on the page's window
    at those defaults), and a meta without the newer axes has them empty."""
    meta = dict(data["meta"])
    runs = []
    for r in data["runs"]:
        rec = {"start": meta["start"], "hours": float(meta["hours"]), **RECORD_DEFAULTS, **r}
        rec["hours"] = float(rec["hours"])
        runs.append(rec)
    for key in ("side_policies", "stall_policies", "resumes", "resume_labels", "caps", "cap_policies", "held_out"):
        meta.setdefault(key, [])
    meta.setdefault("held_out_hours", WEEK_H)
    return {"meta": meta, "runs": runs}


# ------------------------------------------------------------------------------------- merging
def run_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """What one run of a matrix is: its window, world and label (a normalized record)."""
    share = r.get("stall_share")
    return (r["start"], float(r["hours"]), r["model"], int(r["seed"]), float(r["rate"]), r["label"], float(r["cap"]),
            float(r["resume"]), None if share is None else float(share), float(r["pause_invisible"]), float(r["hang"]),
            float(r["reactivate"]))


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    """The first key (dotted) where two summaries differ, with both values."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for k in sorted(set(a) | set(b)):
            if a.get(k) != b.get(k):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    return f"{path or 'summary'}: {a!r} against {b!r}"


def _matrix_order(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """A merged record's place: by window, model, seed, rate, resume share, then policy in the simulator's
    order, stall, cap and the other knobs."""
    pols = list(POLICIES)
    rank = (MODELS.index(r["model"]) if r["model"] in MODELS else len(MODELS),
            pols.index(r["policy"]) if r["policy"] in pols else len(pols))
    share = r.get("stall_share")
    return (r["start"], float(r["hours"]), rank[0], int(r["seed"]), float(r["rate"]), float(r["resume"]), rank[1],
            bool(r["stall_reclaim"]), float(r["cap"]), -1.0 if share is None else float(share),
            float(r["pause_invisible"]), float(r["hang"]), float(r["reactivate"]))


def _ordered(values: Iterable[Any], order: Sequence[Any] = ()) -> list[Any]:
    """``values`` without repeats: those in ``order`` first, in its order, then the rest sorted."""
    vals = set(values)
    return [v for v in order if v in vals] + sorted(vals - set(order))


def merge(sources: Sequence[tuple[str, Mapping[str, Any]]], command: str,
          supersede: Sequence[str] = ()) -> dict[str, Any]:
    """One matrix from the records of several runs of this script over the same window.

    A run (``run_key``) that more than one source holds must have the same numbers in each, on every
    key both report (the decisions did not change between their commits; a key only one reports, as
    one an older commit did not write yet, is taken from it), else this refuses with the first
    difference: rerun rather than merge.  The exception is a run whose label ``supersede`` names (a
    configuration whose decisions changed since a source ran, rerun): it is taken from the first source
    that holds it and the later sources' runs of that label are dropped unread (they count as not kept).
    Each record keeps the commit and date it was run at; the meta lists the sources and the superseded
    labels; the axes are their union; the reference run is the first source's.  A source that is itself a
    merge (the page) has its own sources listed in its place, each with the number of its runs kept (those
    of its commit): first, all its runs are kept (later runs are checked against it); after reruns of
    superseded labels, it gives the rest."""
    if not sources:
        raise ValueError("nothing to merge")
    rerun = set(supersede)
    sources = [(name, normalize(data)) for name, data in sources]
    first = sources[0][1]["meta"]
    window = (Path(first["trace"]).name, first["start"], float(first["hours"]))
    by_key: dict[tuple[Any, ...], dict[str, Any]] = {}
    origin: dict[tuple[Any, ...], str] = {}
    listed = []
    for name, data in sources:
        meta = data["meta"]
        nested = meta.get("merged_from")
        other = (Path(meta["trace"]).name, meta["start"], float(meta["hours"]))
        if other != window:
            raise ValueError(f"{name} ran another window ({other[2]:g} h from {other[1]} of {other[0]}) than "
                             f"{sources[0][0]} ({window[2]:g} h from {window[1]} of {window[0]})")
        for r in data["runs"]:
            key = run_key(r)
            if key in by_key and r["label"] in rerun:
                continue  # superseded: the first source's run of this label stands
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
        if nested:  # its own sources, each with the runs of its commit that were kept from it
            listed.extend({**src, "kept": sum(1 for k, n in origin.items()
                                              if n == name and by_key[k]["commit"] == src.get("commit"))}
                          for src in nested)
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
        "policies": _ordered((r["policy"] for r in runs
                              if r["policy"] not in (first.get("side_policies") or [])), list(POLICIES)),
        "side_policies": _ordered((p for m in metas for p in m.get("side_policies") or []), list(POLICIES)),
        "stall_models": _ordered((r["model"] for r in runs if r["stall_reclaim"]), MODELS),
        "stall_policies": _ordered((r["policy"] for r in runs if r["stall_reclaim"] and float(r["resume"]) == DEFAULT_RESUME),
                                   list(POLICIES)),
        "resumes": _ordered(float(r["resume"]) for r in runs if float(r["resume"]) != DEFAULT_RESUME),
        "resume_labels": _ordered(r["label"] for r in runs if float(r["resume"]) != DEFAULT_RESUME),
        "caps": _ordered(float(r["cap"]) for r in runs if float(r["cap"]) != DEFAULT_CAP),
        "cap_policies": _ordered((r["policy"] for r in runs if r["cap"] != DEFAULT_CAP), list(POLICIES)),
        "held_out": _ordered(r["start"] for r in runs if (r["start"], float(r["hours"])) != window[1:]),
        "held_out_hours": next((float(r["hours"]) for r in runs if (r["start"], float(r["hours"])) != window[1:]),
                               float(first.get("held_out_hours", WEEK_H))),
        "ref": first["ref"], "quick": False, "merged_from": listed,
    }
    if rerun:
        meta["superseded"] = sorted(rerun)
    return {"meta": meta, "runs": runs}



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
    full, quick = default_axes(quick=False), default_axes(quick=True)

    def dflt(key: str) -> str:
        def text(v: Any) -> str:
            return ",".join(f"{x:g}" if isinstance(x, float) else str(x) for x in v) if isinstance(v, list) else f"{v:g}"
        return f"default {text(full[key]) or 'none'}; --quick: {text(quick[key]) or 'none'}"

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n\n", 2)[2] if __doc__ else None)
    p.add_argument("--trace", default=str(default_trace()))
    p.add_argument("--start", default=START, help="the page's window start (default %(default)s)")
    p.add_argument("--hours", type=float, default=None, help=f"the page's window length ({dflt('hours')})")
    p.add_argument("--models", type=_csv(str), default=None, help=f"utilization models ({dflt('models')})")
    p.add_argument("--seeds", type=_csv(int), default=None, help=dflt("seeds"))
    p.add_argument("--rates", type=_csv(float), default=None,
                   help=f"GPU failure rates per GPU per day, comma-separated ({dflt('rates')})")
    p.add_argument("--policies", type=_csv(str), default=None, help=f"run at every seed ({dflt('policies')})")
    p.add_argument("--side-policies", type=_csv(str), default=None,
                   help=f"baselines run at the first seed and rate only ({dflt('side_policies')}; '' = none)")
    p.add_argument("--stall-models", type=_csv(str), default=None,
                   help=f"models under which --stall-policies also run with stall handling ({dflt('stall_models')})")
    p.add_argument("--stall-policies", type=_csv(str), default=None,
                   help=f"queuepilot policies run with stall handling ({dflt('stall_policies')})")
    p.add_argument("--resumes", type=_csv(float), default=None,
                   help=f"other stall resume shares, under the stall models ({dflt('resumes')}; '' = none)")
    p.add_argument("--resume-labels", type=_csv(str), default=None,
                   help=f"the runs at those resume shares, policy[+stall] ({dflt('resume_labels')})")
    p.add_argument("--caps", type=_csv(float), default=None,
                   help=f"worker-cap factors of a sweep on the first model, seed and rate ({dflt('caps')}; "
                        "sensitivity.py sweeps it over the held-out weeks)")
    p.add_argument("--cap-policies", type=_csv(str), default=None, help=dflt("cap_policies"))
    p.add_argument("--held-out", type=_csv(str), default=None, metavar="WEEKS",
                   help=f"held-out week starts, 168 h each, the runs the targets need ({dflt('held_out')}; '' = none)")
    p.add_argument("--held-out-hours", type=float, default=None, help=f"each held-out window's length ({dflt('held_out_hours')})")
    p.add_argument("--quick", action="store_true",
                   help=f"the quick matrix (make bench): {quick['hours']:g} h under {','.join(quick['models'])}, seed "
                        f"{','.join(map(str, quick['seeds']))}, the runs the targets and the decomposition need; "
                        "writes policy-quick.* unless --name is given")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default=None, help="file prefix: NAME.md, NAME.json, NAME_*.png "
                   "(default policy, --quick: policy-quick)")
    p.add_argument("--render-only", action="store_true", help="re-render NAME.md and the matrix plot from NAME.json")
    p.add_argument("--merge", type=_csv(str), default=None, metavar="JSON,JSON,...",
                   help="write NAME.json / NAME.md from the runs of these policy*.json files (same window; a run "
                        "that several hold must have equal numbers in each); runs nothing")
    p.add_argument("--supersede", type=_csv(str), default=None, metavar="LABELS",
                   help="with --merge: runs of these labels (policy[+stall]) are taken from the first source that "
                        "holds them, the later sources' dropped (their decisions changed since: rerun them first)")
    p.add_argument("--labels", type=_csv(str), default=None, metavar="LABELS",
                   help="run only the matrix's runs of these labels (policy[+stall]), e.g. to rerun the "
                        "configurations a change touched and --merge --supersede them into the page")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--plan", action="store_true", help="print the runs and the expected wall time on --jobs "
                   "processes (CPU seconds per simulated hour from --costs-from), run nothing")
    p.add_argument("--costs-from", default=None, help="a policy*.json whose runs' CPU seconds estimate each run "
                   "(default: policy-quick.json in --out, else NAME.json)")
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
        # the quick page's costs are the latest measure after a `make bench`; else the page's own
        quick_json = out / "policy-quick.json"
        return plan(args, Path(args.costs_from) if args.costs_from else (quick_json if quick_json.exists() else json_path))
    if args.render_only:
        data = normalize(json.loads(json_path.read_text()))
    elif args.merge:
        try:
            data = merge([(Path(f).name, json.loads(Path(f).read_text())) for f in args.merge],
                         " ".join([COMMAND, *argv]), args.supersede or ())
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"policy.py --merge: {e}") from None
        reference_plots_from(plot_source([Path(f) for f in args.merge]), out, name)
        json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    else:
        data = run(args, argv)
        plot_reference(out, name, data["runs"])
        for r in data["runs"]:  # the raw metrics only feed the reference plots: not kept in the JSON
            r.pop("metrics", None)
        json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    plot_matrix(out / f"{name}_controllable_idle.png", data["runs"], data["meta"])
    page = [r for r in data["runs"] if (r["start"], r["hours"]) == (data["meta"]["start"], float(data["meta"]["hours"]))]
    plot_cap_sweep(out / f"{name}_cap_sweep.png", page)
    sweep_path = out / "reclaim_budget.json"
    sweep = json.loads(sweep_path.read_text()) if sweep_path.exists() else None
    text = render(data, helios_shape(shared), name, sweep)
    md_path.write_text(text)
    print(f"wrote {md_path}, {json_path} ({len(data['runs'])} runs)", file=sys.stderr)
    return 0


def axes(args: argparse.Namespace) -> dict[str, Any]:
    """The matrix's axes from the flags (defaults: the whole matrix, or the quick one with --quick)."""
    ax = default_axes(args.quick)

    def pick(key: str) -> Any:
        v = getattr(args, key)
        return ax[key] if v is None else list(v)

    models = pick("models")
    out = {"hours": args.hours if args.hours is not None else ax["hours"], "models": models, "seeds": pick("seeds"),
           "rates": pick("rates"), "policies": pick("policies"), "side_policies": pick("side_policies"),
           "stall_models": [m for m in pick("stall_models") if m in models],
           "stall_policies": pick("stall_policies"), "resumes": pick("resumes"), "resume_labels": pick("resume_labels"),
           "caps": pick("caps"), "cap_policies": pick("cap_policies"), "held_out": pick("held_out"),
           "held_out_hours": args.held_out_hours if args.held_out_hours is not None else ax["held_out_hours"]}
    named = out["policies"] + out["side_policies"] + out["stall_policies"] + out["cap_policies"] + \
        [lab.removesuffix("+stall") for lab in out["resume_labels"]]
    unknown = sorted({p for p in named if p not in POLICIES})
    if unknown:
        raise SystemExit(f"unknown policies {unknown} (known: {', '.join(POLICIES)})")
    if not set(out["stall_policies"]) <= {p for p in POLICIES if is_queuepilot(p)}:
        raise SystemExit("--stall-policies: stall handling is queuepilot's (queuepilot, queuepilot-reclaim)")
    unknown_models = [m for m in models if m not in MODELS]
    if unknown_models:
        raise SystemExit(f"unknown models {unknown_models} (known: {', '.join(MODELS)})")
    out["cap_policies"] = [p for p in out["cap_policies"] if p in out["policies"]]
    return out


def plan(args: argparse.Namespace, costs_from: Path) -> int:
    """Print the matrix's runs (how many of each kind) and the wall time they would take on --jobs
    processes, longest first onto the least loaded process as the pool runs them, each run's CPU seconds from
    ``costs_from`` (CPU seconds per simulated hour of that model and label; a default where it has none)."""
    ax = axes(args)
    tasks = select(matrix(ax, args.start), args.labels)
    print(plan_text(tasks, ax, previous_costs(costs_from), args.jobs, str(costs_from)))
    return 0


def plan_text(tasks: Sequence[Task], ax: Mapping[str, Any], prev: Mapping[tuple[str, str], float], jobs: int,
              source: str) -> str:
    hours = float(ax["hours"])
    page = [t for t in tasks if t.hours == hours and t.start not in ax["held_out"]]
    held = [t for t in tasks if t not in set(page)]
    kinds = {
        "at every seed": [t for t in page if not t.stall_reclaim and t.resume == DEFAULT_RESUME and t.cap == DEFAULT_CAP
                          and t.policy in ax["policies"]],
        "baselines at seed 1": [t for t in page if t.policy in ax["side_policies"] and t.policy not in ax["policies"]],
        "+stall": [t for t in page if t.stall_reclaim and t.resume == DEFAULT_RESUME],
        "at other resume shares": [t for t in page if t.resume != DEFAULT_RESUME],
        "worker-cap sweep": [t for t in page if t.cap != DEFAULT_CAP],
        "held-out weeks": held,
    }
    cost = {t: estimate(t, prev) for t in tasks}
    missing = sorted({(t.model, t.label) for t in tasks} - set(prev))
    lines = [f"{len(tasks)} runs: {len(page)} of {hours:g} h from the page's start ("
             + ", ".join(f"{len(v)} {k}" for k, v in kinds.items() if v and k != "held-out weeks") + ")"
             + (f"; {len(held)} on {len(ax['held_out'])} held-out weeks of {held[0].hours:g} h" if held else "")]
    for k, v in kinds.items():
        if v:
            lines.append(f"  {k}: {len(v)} runs, ~{sum(cost[t] for t in v):,.0f} CPU s")
    lines.append(f"summed run CPU seconds ~{sum(cost.values()):,.0f} s, the longest run ~"
                 f"{max(cost.values(), default=0.0):,.0f} s; wall on {jobs} processes ~{pack(cost.values(), jobs) / 60:.1f} "
                 f"min (costs from {source}"
                 + (f"; estimated for {len(missing)} (model, label) pairs it lacks" if missing else "") + ")")
    return "\n".join(lines)


def plot_source(sources: Sequence[Path]) -> Path:
    """The source whose reference plots a merge keeps: the one that ran the most reference runs (every
    policy's run on its window at the first model, seed and rate, at the defaults; the plots draw them
    all), the first of those on a tie."""
    def refs(path: Path) -> int:
        data = normalize(json.loads(path.read_text()))
        meta = data["meta"]
        ref = (meta["ref"][0], int(meta["ref"][1]), float(meta["ref"][2]))
        return sum(1 for r in data["runs"] if is_reference(Task(**{k: r[k] for k in Task.__dataclass_fields__}),
                                                           ref, meta["start"], float(meta["hours"])))
    counts = [refs(p) for p in sources]
    return sources[counts.index(max(counts))]


def select(tasks: Sequence[Task], labels: Sequence[str] | None) -> list[Task]:
    """The runs of ``labels`` (all with None); a label the matrix does not hold is refused."""
    if labels is None:
        return list(tasks)
    unknown = sorted(set(labels) - {t.label for t in tasks})
    if unknown:
        raise SystemExit(f"--labels: the matrix has no runs labelled {unknown}")
    return [t for t in tasks if t.label in labels]


def run(args: argparse.Namespace, argv: list[str]) -> dict[str, Any]:
    ax = axes(args)
    tasks = select(matrix(ax, args.start), args.labels)
    hours = float(ax["hours"])
    ref = (ax["models"][0], ax["seeds"][0], ax["rates"][0])
    print(f"{len(tasks)} runs on {args.jobs} processes", file=sys.stderr)
    commit = _git("rev-parse", "--short", "HEAD") or "?"  # what the runs ran: read before them
    dirty = bool(_git("status", "--porcelain", "--", "simulator", "autoscaler", "benchmarks"))
    name = args.name or ("policy-quick" if args.quick else "policy")
    t0 = time.perf_counter()
    records = run_matrix(tasks, args.trace, args.jobs, lambda t: is_reference(t, ref, args.start, hours),
                         previous_costs(Path(args.out) / f"{name}.json"), progress=not args.no_progress)
    wall = time.perf_counter() - t0
    order = {t: i for i, t in enumerate(tasks)}
    fields = Task.__dataclass_fields__
    records.sort(key=lambda r: order[Task(**{k: r[k] for k in fields})])
    meta = {
        "command": " ".join([COMMAND, *argv]), "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC", "commit": commit,
        "dirty": dirty, "machine": _machine(), "python": f"{platform.python_implementation()} {platform.python_version()}",
        "cores": os.cpu_count(), "processes": args.jobs, "wall_s": round(wall, 1),
        "run_s_sum": round(sum(r["secs"] for r in records), 1),
        "run_cpu_s_sum": round(sum(r["cpu_s"] for r in records), 1),
        "load_s_sum": round(sum(r["load_s"] for r in records), 1),
        "trace": args.trace, "start": args.start, **ax, "ref": list(ref), "quick": args.quick,
    }
    if args.labels is not None:
        meta["labels"] = list(args.labels)
    return {"meta": meta, "runs": records}


if __name__ == "__main__":
    sys.exit(main())
