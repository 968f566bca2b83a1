"""Run every benchmark in one go (`make bench`); each writes its table under benchmarks/results/.

Benchmarks report, they never assert: speeds and memory are compared side by side in each table,
with the command that produced it. This runner only sequences them and prints how long each took.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

# (name, script, args) in the order a reader meets the parts
BENCHMARKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("exporter scrape/collect/RSS", "exporter_bench.py", ()),
    ("NVML call latency (fake library here)", "nvml_latency.py", ("--fake", "--out", "benchmarks/results/nvml-latency-fake.md")),
    ("controller at scale", "controller_bench.py", ()),
    ("decision latency", "decision_latency.py", ()),
    # where a simulated week's time goes, part by part, and how often a pass's inputs are unchanged (the
    # most an exact skip of unchanged work could save): 3 policies, about 1 min on 2 cores
    ("simulator pass profile", "pass_profile.py", ()),
    # the idle-actor reclaim budget: idle GPU-hours against actors killed, the month under each
    # utilization model, budgets 4 (the default) to 1000, ray-idle as the yardstick (19 runs); before
    # the policy page, which reads its verdicts (reclaim_budget.json) for the same window
    ("idle-actor reclaim budget (simulator)", "reclaim_budget.py", ()),
    # the month under every utilization model and policy, seed 1, failure rate 0.01 (about 25 min on
    # 2 cores); the whole matrix of 3 seeds x 2 failure rates is `benchmarks/policy.py` without flags
    # (estimated 1 h 45 min on 2 cores) and writes the same page
    ("policy quality (simulator)", "policy.py", ("--seeds", "1", "--rates", "0.01")),
    # the headline across seeds and failure rates: grounded, seeds 1-3 x rates 0.01/0.05, queuepilot
    # (plain, idle-actor reclaim, each with and without stall reclaim) against ray-idle (30 runs, 44 min
    # wall on 2 cores, 2026-12-01)
    ("policy across seeds and failure rates (simulator)", "policy.py",
     ("--models", "grounded", "--seeds", "1,2,3", "--rates", "0.01,0.05", "--policies",
      "queuepilot,queuepilot-reclaim,ray-idle", "--stall-models", "grounded", "--caps", "2",
      "--name", "policy-seeds")),
    # the same across seeds and failure rates for the other two models: scattered and serving, seeds 1-3 x
    # rates 0.01/0.05, queuepilot (plain, idle-actor reclaim; under serving each also with stall reclaim)
    # against ray-idle (48 runs, 81 min wall on 2 cores, 2026-12-02)
    ("policy across seeds and failure rates, scattered and serving (simulator)", "policy.py",
     ("--models", "scattered,serving", "--seeds", "1,2,3", "--rates", "0.01,0.05", "--policies",
      "queuepilot,queuepilot-reclaim,ray-idle", "--stall-models", "serving", "--caps", "2",
      "--name", "policy-seeds-scattered-serving")),
    # the stall deactivation delay: killed work against idle GPU-hours, grounded month (5 runs)
    ("stall deactivation delay (simulator)", "stall_delay.py", ()),
    # the same under the serving model, longer delays: whether any delay keeps killed work within 1 %
    # where GPUs sit idle between requests (5 runs)
    ("stall deactivation delay, serving (simulator)", "stall_delay.py",
     ("--model", "serving", "--delays", "2h,4h,8h,12h", "--name", "stall_delay-serving")),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="comma-separated substrings of benchmark names to run")
    args = parser.parse_args(argv)
    console = Console()
    table = Table(title="benchmarks (tables in benchmarks/results/)")
    for col in ("benchmark", "script", "exit", "seconds"):
        table.add_column(col)
    failed = 0
    for name, script, extra in BENCHMARKS:
        if args.only and not any(s in name or s in script for s in args.only.split(",")):
            continue
        path = HERE / script
        if not path.exists():
            table.add_row(name, script, "missing", "-")
            failed += 1
            continue
        console.rule(f"{name}: {script}")
        t0 = time.monotonic()
        rc = subprocess.call([sys.executable, str(path), *extra], cwd=REPO)
        table.add_row(name, script, str(rc), f"{time.monotonic() - t0:.1f}")
        failed += rc != 0
    console.print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
