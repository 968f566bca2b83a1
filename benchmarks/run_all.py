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
    # the whole matrix (#11): the Philly month under every utilization model, seeds 1-3, GPU failure rates
    # 0.01 and 0.05, every policy (the queuepilot ones also with stall reclaim under grounded and serving),
    # plus the worker-cap sweep: 154 runs, one table per model and failure rate and a summary
    # (`policy.py --plan` estimates its wall time from a run's costs; measured whole on 2026-12-04 at
    # 79088d9: 40.0 min on 2 cores interpreted; 2026-12-05 at 301e8c4 on the mypyc build, a machine
    # about 1.5x slower: 39.3 min; 2026-12-06 at 9a096b4 on the 16-module build, the same machine:
    # 36.4 min, at 377ef68 37.4 min (a slower hour); at 2698b70 in .venv-bench (Debian's python3.11)
    # 34.2 and 28.3 min in two runs the same morning; at 5b191ab and faf273b that afternoon 22.4 and
    # 21.9 min, at ef9e59a that evening 19.4, 21.0 and 21.4 min; more or less as the machine's speed moves,
    # which the page reports beside its wall time: docs/simulation.md, "Speed")
    ("policy quality, the whole matrix (simulator)", "policy.py", ()),
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
