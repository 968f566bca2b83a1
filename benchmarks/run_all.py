"""Run the benchmarks in one go: the quick set (``make bench``, the default) or the full one (``make bench-full``).

Each benchmark writes its own page under benchmarks/results/; this runner only sequences them, prints how
long each took, and writes a page of its own (``make-bench.md`` / ``make-bench-full.md``) listing what it
ran, each benchmark's exit status and seconds, and the wall time of the whole run, as measured.

- quick (``--quick``, the default): the exporter, NVML-call, controller-at-scale and decision-latency
  benchmarks, and the quick policy matrix (``policy.py --quick``: the Philly week under ``grounded``, seed 1,
  the runs the targets and the decomposition need) -> ``policy-quick.*``.
- full (``--full``): the same, the idle-actor reclaim budget sweep, the whole policy matrix
  (``policy.py``: the Philly month under every model, seed 1, and the four held-out weeks) ->
  ``policy.*``, the sensitivity of the stall targets over the held-out weeks (``sensitivity.py``) ->
  ``sensitivity.*``, node scoring beside the admission check (``placement.py``) -> ``placement.*``, the
  admission check's capacity wait (``capacity_wait.py``) -> ``capacity_wait.*``, and the stall deactivation
  delay sweeps (grounded, serving).  It takes what it takes
  (``policy.py --plan`` and ``sensitivity.py --plan`` estimate it); its pages say how long.

Benchmarks report, they never assert: speeds and memory are compared side by side in each table, with
the command that produced it.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"

Benchmark = tuple[str, str, tuple[str, ...]]  # (name, script, args)

# (name, script, args) in the order a reader meets the parts
SERVICES: tuple[Benchmark, ...] = (
    ("exporter scrape/collect/RSS", "exporter_bench.py", ()),
    ("NVML call latency (fake library here)", "nvml_latency.py", ("--fake", "--out", "benchmarks/results/nvml-latency-fake.md")),
    ("controller at scale", "controller_bench.py", ()),
    ("decision latency", "decision_latency.py", ("--out", "benchmarks/results/decisions.md")),
)
QUICK: tuple[Benchmark, ...] = (
    *SERVICES,
    ("policy quality, the quick matrix (simulator)", "policy.py", ("--quick",)),
)
FULL: tuple[Benchmark, ...] = (
    *SERVICES,
    # the idle-actor reclaim budget over the month, per model, ray-idle as the yardstick; before the policy
    # page, which quotes its verdicts (reclaim_budget.json) for the same window
    ("idle-actor reclaim budget (simulator)", "reclaim_budget.py", ()),
    ("policy quality, the whole matrix and the held-out weeks (simulator)", "policy.py", ()),
    # the stall targets against the reaper as each unrecorded assumption moves, over the held-out weeks
    ("stall targets' sensitivity, held-out weeks (simulator)", "sensitivity.py", ()),
    # the admission targets' yardstick under the other node scoring a user can configure (MostAllocated)
    ("node scoring beside the admission check, five weeks (simulator)", "placement.py", ()),
    # how long the check lets a workload wait for GPUs with its quota before Retry, five weeks
    ("the admission check's capacity wait, five weeks (simulator)", "capacity_wait.py", ()),
    # the stall deactivation delay: killed work against idle GPU-hours, grounded month
    ("stall deactivation delay (simulator)", "stall_delay.py", ()),
    # the same under the serving model, longer delays
    ("stall deactivation delay, serving (simulator)", "stall_delay.py",
     ("--model", "serving", "--delays", "2h,4h,8h,12h", "--name", "stall_delay-serving")),
)
MODES = {"quick": ("make bench", "make-bench", QUICK), "full": ("make bench-full", "make-bench-full", FULL)}


def selected(benchmarks: tuple[Benchmark, ...], only: str | None) -> list[Benchmark]:
    """The benchmarks ``--only`` names (comma-separated substrings of a name or script), else all."""
    if not only:
        return list(benchmarks)
    words = [w for w in only.split(",") if w]
    return [b for b in benchmarks if any(w in b[0] or w in b[1] for w in words)]


def _git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip() or "?"
    except (OSError, subprocess.CalledProcessError):
        return "?"


def page(target: str, rows: list[tuple[str, str, str, float | None]], wall_s: float, commit: str,
         date: str) -> str:
    """The runner's page: what ``target`` ran, each benchmark's exit status and seconds, the total."""
    lines = [f"# `{target}`", "",
             f"Run {date} at git {commit} on {platform.machine()}, {os.cpu_count()} cores, "
             f"{platform.python_implementation()} {platform.python_version()} (`benchmarks/run_all.py`; each "
             "benchmark's own page, in this folder, has its numbers and the command that produced them).", "",
             "| benchmark | command | exit | seconds |", "|---|---|---:|---:|"]
    for name, cmd, rc, secs in rows:
        lines.append(f"| {name} | `{cmd}` | {rc} | {'-' if secs is None else f'{secs:,.1f}'} |")
    failed = sum(1 for _, _, rc, _ in rows if rc != "0")
    lines += ["", f"Wall time {wall_s / 60:.1f} min (measured) for {len(rows)} benchmarks"
              + (f"; {failed} failed." if failed else "; all exited 0."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--quick", dest="mode", action="store_const", const="quick",
                      help="the quick set, make bench (the default)")
    mode.add_argument("--full", dest="mode", action="store_const", const="full",
                      help="every benchmark with the whole policy matrix, make bench-full")
    parser.set_defaults(mode="quick")
    parser.add_argument("--only", help="comma-separated substrings of benchmark names or scripts to run "
                        "(no runner page is written then)")
    args = parser.parse_args(argv)
    target, stem, benchmarks = MODES[args.mode]
    console = Console()
    table = Table(title=f"{target}: benchmarks (pages in benchmarks/results/)")
    for col in ("benchmark", "script", "exit", "seconds"):
        table.add_column(col)
    commit, date = _git_commit(), f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC"
    rows: list[tuple[str, str, str, float | None]] = []
    t_all = time.monotonic()
    for name, script, extra in selected(benchmarks, args.only):
        path = HERE / script
        cmd = " ".join(["python", f"benchmarks/{script}", *extra])
        if not path.exists():
            table.add_row(name, script, "missing", "-")
            rows.append((name, cmd, "missing", None))
            continue
        console.rule(f"{name}: {script}")
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, str(path), *extra], cwd=REPO)
        secs = time.monotonic() - t0
        table.add_row(name, script, str(rc), f"{secs:.1f}")
        rows.append((name, cmd, str(rc), secs))
    wall = time.monotonic() - t_all
    console.print(table)
    console.print(f"{target}: {wall / 60:.1f} min")
    if not args.only:
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{stem}.md").write_text(page(target, rows, wall, commit, date))
    return 1 if any(rc != "0" for _, _, rc, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
