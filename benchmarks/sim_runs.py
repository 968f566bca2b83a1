"""What the knob-sweep benchmarks (``stall_delay.py``, ``reclaim_budget.py``, ``placement.py``,
``capacity_wait.py``) share: one simulator run on a trace window (``run_engine``), the runs in a process
pool behind a progress bar, and the provenance their pages print (when, by which command, at which
commit, on what machine and Python), read before the runs so that a commit made meanwhile is not named."""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from simulator.engine import Engine, SimConfig
from simulator.inputs import load_window

ROOT = Path(__file__).resolve().parents[1]
T = TypeVar("T")


def run_engine(policy: str, cfg: SimConfig, trace: str, start: str, hours: float,
               model: str) -> tuple[Engine, float]:
    """``policy`` over the trace window from ``start`` under utilization ``model`` with ``cfg`` (its seed
    draws the window too): the engine after its run, and the CPU seconds of the run (loading excluded)."""
    window = load_window(trace, start, hours, cfg.seed, cfg.nodes * cfg.gpus_per_node, util_model=model)
    t0 = time.process_time()
    eng = Engine(window.jobs, hours * 3600.0, policy, cfg)
    eng.run()
    return eng, round(time.process_time() - t0, 1)


def window_parser(doc: str | None, name: str) -> argparse.ArgumentParser:
    """The flags every knob sweep has: the trace window, seed and failure rate, processes, where its page
    goes (``--out``/``--name``, default ``name``) and ``--render-only``; the sweep adds its own knob."""
    from simulator.inputs import default_trace

    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hours", type=float, default=720.0)
    p.add_argument("--start", default="2017-10-03")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=0.01)
    p.add_argument("--trace", default=str(default_trace()))
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    p.add_argument("--name", default=name)
    p.add_argument("--render-only", action="store_true")
    return p


def provenance(script: str, argv: Sequence[str] | None) -> dict[str, str]:
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip() or "unknown"
    return {"generated": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": f"python benchmarks/{script} " + " ".join(sys.argv[1:] if argv is None else argv),
            "git": git, "machine": f"{platform.machine()}, {os.cpu_count()} cores; "
                       f"{platform.python_implementation()} {platform.python_version()}"}


def run_pool(fn: Callable[[T], dict[str, Any]], packed: Sequence[T], label: str, jobs: int) -> list[dict[str, Any]]:
    """``fn`` over ``packed`` in ``jobs`` processes, results in ``packed``'s order."""
    from rich.progress import Progress

    runs: list[dict[str, Any]] = []
    with Progress() as bar, ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        prog = bar.add_task(label, total=len(packed))
        for rec in pool.map(fn, packed):
            runs.append(rec)
            bar.update(prog, advance=1)
    return runs


def page_data(args: argparse.Namespace, run: Callable[[], dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """The data behind a sweep's page and the folder it goes to: ``NAME.json`` as written before
    (``--render-only``), else ``run()``'s, written there first (the folder made)."""
    out = Path(args.out)
    json_path = out / f"{args.name}.json"
    if args.render_only:
        return out, json.loads(json_path.read_text())
    out.mkdir(parents=True, exist_ok=True)
    data = run()
    json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return out, data


def publish(args: argparse.Namespace, run: Callable[[], dict[str, Any]], plot: Callable[[Path, dict[str, Any]], None],
            render: Callable[[dict[str, Any]], str]) -> int:
    """A sweep's page: its data (``page_data``), then ``NAME.png`` and ``NAME.md`` beside ``NAME.json``."""
    out, data = page_data(args, run)
    plot(out / f"{args.name}.png", data)
    (out / f"{args.name}.md").write_text(render(data))
    print(f"wrote {out / (args.name + '.md')}", file=sys.stderr)
    return 0
