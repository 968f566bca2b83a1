"""Multi-cluster benchmark: Kueue's built-in MultiKueue dispatchers against queuepilot's capacity-aware one.

Runs ``simulator.fleet`` (docs/multicluster.md, "Simulation") over a week of the Philly trace for a
few fixed fleets and writes ``benchmarks/results/multicluster.md``: per configuration the command
line that reproduces it, the table and the seconds each dispatcher took; then the 6-cluster case
again over several seeds and without GPU failures (all-at-once and capacity), to tell a dispatcher's
effect from the run-to-run spread.  Numbers are reported, never asserted.

    .venv/bin/python benchmarks/fleet.py [--out benchmarks/results/multicluster.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from simulator.fleet import ALL_AT_ONCE, CAPACITY, CLASSES, DISPATCHERS, FleetConfig, FleetSim, split_nodes  # noqa: E402
from simulator.fleet_table import table_rows, waits_text  # noqa: E402
from simulator.inputs import default_trace, load_window  # noqa: E402

START = "2017-10-03"
HOURS = 168.0


@dataclass(frozen=True)
class Case:
    title: str
    nodes: int
    clusters: int
    rate: float
    seed: int


CASES = (
    Case("A. 112 nodes (the single-cluster default), 3 clusters, 0.05 failures/GPU/day, seed 1", 112, 3, 0.05, 1),
    Case("B. 88 nodes, 3 clusters, 0.05 failures/GPU/day, seed 1", 88, 3, 0.05, 1),
    Case("C. 88 nodes, 3 clusters, 0.05 failures/GPU/day, seed 2", 88, 3, 0.05, 2),
    Case("D. 88 nodes, 6 clusters, 0.05 failures/GPU/day, seed 1", 88, 6, 0.05, 1),
    Case("E. 88 nodes, 3 clusters, 0.5 failures/GPU/day, seed 1", 88, 3, 0.5, 1),
)
# F: case D (6 clusters) again with other seeds (other GPU failures), and without failures, to tell the
# dispatcher's effect on the 1-GPU tail from the run-to-run spread; case D's own runs are reused
SEEDS = (1, 2, 3, 4, 5)
SEED_DISPATCHERS = (ALL_AT_ONCE, CAPACITY)
SEED_CASE = CASES[3]

READING = """\
## Reading

(Written against the tables above; rerunning regenerates the tables, not this text.)

- **Unplaceable dispatches: the effect.**  All-at-once and incremental let a worker win on quota
  alone; when its GPUs have failed or its free GPUs are scattered over nodes, the pods stay Pending
  while the workload holds quota in the manager and in that worker.  That happened 6 to 455 times a
  week here (9 to 5,710 GPU-hours of quota held by Pending pods, growing with the failure rate).
  The capacity dispatcher nominates only workers where the pods pack onto healthy free GPUs: 0 in
  every run.
- **Wait.**  On the lightly loaded fleet (A) all three are equal.  With many failures (E, 0.5 per GPU
  per day) capacity-aware dispatch cuts the tails: 1-GPU p95 2.7 h vs 4.3 h, multi-GPU p95 97 min vs
  3.5 h and p99 3.9 h vs 12.2 h, multi-pod p99 13.3 h vs 75.4 h.  With 0.05 failures (B, C, D) one
  seed's 1-GPU p95 differs by minutes either way (B 106 vs 95 min, C 101 vs 103, D 107 vs 91), and
  multi-pod has n=21 jobs: its tails are one or two jobs, read them as noise.
- **The 1-GPU p95 with 6 clusters (D) is not a dispatch effect (F).**  Without GPU failures the two
  dispatchers give 1-GPU jobs the same waits (p50/p95/p99 and mean equal).  With failures the sign of
  the difference changes with the seed: capacity minus all-at-once is +16, +4, -3, -8 and -9 min at
  p95 over seeds 1-5, 97 min on average for both; p99 is 4.1-4.2 h in every run.  This week's 1-GPU
  tail is one stretch of about 14 h in which the fleet is full and jobs queue for the manager's quota
  (`queued for quota`).  Kueue's quota counts failed GPUs, so while that queue stands every failed
  GPU that no pod holds (its pod ended; the repair takes hours) is quota the queue cannot use, under
  either dispatcher: a capacity-aware one holds such a workload in the manager until a healthy GPU
  frees anywhere, a built-in one admits it in a worker where it then waits Pending.  How many failed
  GPUs sit outside pods depends on which pods the same failures hit and when those pods end, which
  differs from run to run; the 1-GPU p95 follows those GPU-hours (the last column of F, and the
  correlation under it): in seed 1 capacity had 47 of them against all-at-once's 19 (+16 min), in
  seed 5 14 against 35 (-9 min).  B and C (3 clusters) follow the same rule: capacity 38 against 31
  GPU-h in B (1-GPU p95 106 vs 95 min), 35 against 41 in C (101 vs 103).  The p95 also sits inside
  that stretch's queue, where the wait climbs steeply with the rank (p95 about 90-107 min, p99 4.2 h),
  so a few dozen jobs more or less in the stretch move it by many minutes.  Multi-GPU: 1-3 s at p50
  and p95 for both; p99 2.2-2.5 h, capacity minus all-at-once +5, +1, +18, -5 and 0 min: the same
  spread, both signs.
- **Incremental** equals all-at-once with 3 clusters (its first round names 3 workers).  With 6 (D)
  it creates the fewest copies (48k vs 68k) but every workload tries worker-1..3 first and reaches
  worker-4..6 only 5 minutes later: 1-GPU p50 5 min, multi-GPU p99 9.3 h vs 2.3 h, and twice the
  unplaceable dispatches.
- **API churn.**  All-at-once creates one copy per worker per workload and deletes all but one.  The
  capacity dispatcher as shipped (`max_nominations: 0`: every worker where the pods fit) still names
  every worker with room, so it creates 10-14 % fewer copies under load (B, C, E; 14 % with 6
  clusters) and almost as many on an idle fleet (A).
- **What this suggests for the controller**: capacity-aware dispatch costs single-GPU jobs nothing
  measurable on six workers (F: equal without failures, the same p95 on average over five seeds); what
  would shorten the 1-GPU tail of a full fleet with failures is quota that follows healthy capacity,
  which is Kueue's quota in the manager, not the dispatcher's choice.  A small `max_nominations`
  default (e.g. 2) would cut churn further.  The model's simplifications:
  docs/multicluster.md, "Simulation".
"""


def run_case(case: Case, trace: str, dispatchers: Sequence[str] = DISPATCHERS,
             ) -> tuple[dict[str, dict[str, Any]], dict[str, float], int, list[int]]:
    sizes = split_nodes(case.nodes, case.clusters)
    window = load_window(trace, START, HOURS, case.seed, max(sizes) * 8)
    cfg = FleetConfig(nodes=case.nodes, clusters=case.clusters, gpu_failure_rate=case.rate, seed=case.seed)
    out, took = {}, {}
    for d in dispatchers:
        t0 = time.perf_counter()
        s = FleetSim(window.jobs, HOURS * 3600.0, d, cfg)
        s.run()
        s.check()
        took[d] = time.perf_counter() - t0
        out[d] = s.metrics.summary()
        print(f"{case.title[:2]} {d}: {took[d]:.1f}s", file=sys.stderr)
    return out, took, len(window.jobs), sizes


def _no_pod(s: dict[str, Any]) -> float:
    return float(s["failed_gpu_hours_quota_wait"]) + float(s["free_gpu_hours_quota_wait"])


def seed_section(case_d: dict[str, dict[str, Any]], trace: str) -> list[str]:
    """Case D over several seeds and without failures: per run the waits per class, the hours jobs
    queued for manager quota and the GPU-hours no pod held meanwhile; then per seed the difference."""
    runs: list[tuple[int, float, str, dict[str, Any]]] = []
    for seed in SEEDS:
        if seed == SEED_CASE.seed:
            got = {d: case_d[d] for d in SEED_DISPATCHERS}
        else:
            got = run_case(Case(f"F{seed}", SEED_CASE.nodes, SEED_CASE.clusters, SEED_CASE.rate, seed), trace,
                           SEED_DISPATCHERS)[0]
        runs += [(seed, SEED_CASE.rate, d, got[d]) for d in SEED_DISPATCHERS]
    control = run_case(Case("F0", SEED_CASE.nodes, SEED_CASE.clusters, 0.0, SEED_CASE.seed), trace, SEED_DISPATCHERS)[0]
    runs += [(SEED_CASE.seed, 0.0, d, control[d]) for d in SEED_DISPATCHERS]
    header = ["seed", "failures/GPU/day", "dispatcher", *(f"wait {c} p50/p95/p99" for c in CLASSES), "1-gpu mean",
              "queued for quota (h)", "GPU-h held by no pod meanwhile: failed + healthy"]
    rows = [[str(seed), f"{rate:g}", d, *(waits_text(s, c) for c in CLASSES), f"{s['wait_1-gpu_mean_s']:.0f}s",
             f"{s['quota_wait_hours']:.1f}",
             f"{_no_pod(s):.1f} = {s['failed_gpu_hours_quota_wait']:.1f} + {s['free_gpu_hours_quota_wait']:.1f}"]
            for seed, rate, d, s in runs]
    failing = [(seed, d, s) for seed, rate, d, s in runs if rate > 0]
    by = {(seed, d): s for seed, d, s in failing}

    def diff(key: str, scale: float) -> list[float]:
        return [(by[(x, CAPACITY)][key] - by[(x, ALL_AT_ONCE)][key]) / scale for x in SEEDS]

    p95 = diff("wait_1-gpu_p95_s", 60.0)
    mean = diff("wait_1-gpu_mean_s", 1.0)
    p99_mgpu = diff("wait_multi-gpu_p99_s", 60.0)
    nopod = [_no_pod(by[(x, CAPACITY)]) - _no_pod(by[(x, ALL_AT_ONCE)]) for x in SEEDS]
    xs, ys = [_no_pod(s) for _, _, s in failing], [s["wait_1-gpu_p95_s"] for _, _, s in failing]
    r = f"{float(np.corrcoef(xs, ys)[0, 1]):.2f}" if np.std(xs) > 0 and np.std(ys) > 0 else "n/a (no spread)"
    avg = {d: float(np.mean([by[(x, d)]["wait_1-gpu_p95_s"] for x in SEEDS])) / 60.0 for d in SEED_DISPATCHERS}

    def signed(xs: list[float], fmt: str) -> str:
        return ", ".join(f"{x:+{fmt}}" for x in xs)

    cmd = (f"queuepilot simulate --clusters {SEED_CASE.clusters} --nodes {SEED_CASE.nodes} --start {START} "
           f"--hours {HOURS:g} --gpu-failure-rate {SEED_CASE.rate:g} --seed N --dispatchers "
           + ",".join(SEED_DISPATCHERS))
    return [
        f"## F. Case D ({SEED_CASE.nodes} nodes, {SEED_CASE.clusters} clusters) across seeds, and without failures",
        "",
        f"`{cmd}` for N in {', '.join(map(str, SEEDS))} (seed {SEED_CASE.seed} is case D), and with "
        f"`--gpu-failure-rate 0 --seed {SEED_CASE.seed}`.  The seed changes the GPU failures, ties and "
        "utilisation draws, not the jobs' arrivals, sizes or run times.  `queued for quota`: hours in which some job waited for quota in the "
        "manager; `GPU-h held by no pod`: in those hours, GPUs that no pod held, failed (the pod on a GPU that "
        "failed ended; repair pending) + healthy.",
        "",
        markdown(header, rows),
        "",
        f"Capacity minus all-at-once, per seed {', '.join(map(str, SEEDS))}: 1-gpu p95 {signed(p95, '.0f')} min "
        f"(mean over seeds: all-at-once {avg[ALL_AT_ONCE]:.0f} min, capacity {avg[CAPACITY]:.0f} min); "
        f"1-gpu mean wait {signed(mean, '.0f')} s; multi-gpu p99 {signed(p99_mgpu, '.0f')} min; GPU-h held by no "
        f"pod while jobs queued {signed(nopod, '.1f')}.  Correlation of that GPU-h with the 1-gpu p95 over "
        f"the {len(failing)} runs with failures: r = {r}.",
        "",
    ]


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "multicluster.md"))
    p.add_argument("--trace", default=str(default_trace()))
    args = p.parse_args(argv)
    parts = [
        "# Multi-cluster dispatch: Kueue's built-in dispatchers vs queuepilot's capacity-aware one",
        "",
        f"Generated by `benchmarks/fleet.py` on {datetime.now(UTC):%Y-%m-%d}.  Philly trace, {HOURS:g} h from "
        f"{START}, one trace split over N worker clusters of 8-GPU nodes (model and metrics: "
        "docs/multicluster.md, \"Simulation\").  Wait = submission -> the workload's pods bound in a worker "
        "(p50/p95/p99; jobs still waiting at the end count with their wait so far).  Classes: `1-gpu`, "
        "`multi-gpu` (one pod, 2-8 GPUs), `multi-pod` (> 8 GPUs: a gang of 8-GPU pods).  "
        "`unplaceable (GPU-h)`: dispatches a worker admitted by quota whose pods could not be placed, and "
        "the GPU-hours of quota they held while Pending.  `remote created/deleted`: copies MultiKueue "
        "created in workers and deleted without running (the copy of the finished job is not counted).  "
        "`util of alloc`: used / allocated GPU-seconds; `alloc share`: allocated / all GPU-seconds.",
        "",
        "Case A is the single-cluster simulator's default size (896 GPUs); this week then leaves the "
        "fleet mostly idle, so cases B-F use 88 nodes (704 GPUs) where queues form.",
        "",
    ]
    case_d: dict[str, dict[str, Any]] = {}
    for case in CASES:
        summaries, took, jobs, sizes = run_case(case, args.trace)
        if case == SEED_CASE:
            case_d = summaries
        header, rows = table_rows(summaries)
        cmd = (f"queuepilot simulate --clusters {case.clusters} --nodes {case.nodes} --start {START} "
               f"--hours {HOURS:g} --gpu-failure-rate {case.rate:g} --seed {case.seed}")
        fails = summaries["capacity"]["gpu_failures"]
        decisions = summaries["capacity"]["dispatch_decisions"]
        parts += [
            f"## {case.title}",
            "",
            f"`{cmd}` (or `.venv/bin/python -m simulator.fleet_cli` with the same flags): {jobs} jobs, "
            f"clusters of {'/'.join(map(str, sizes))} nodes; {fails} GPU failures (the same in every run); "
            "the capacity dispatcher's decisions "
            + ", ".join(f"{k} {v:,}" for k, v in decisions.items()) + "; hours in which jobs queued for "
            "manager quota, and the GPU-hours no pod held meanwhile (failed + healthy): "
            + ", ".join(f"{d} {s['quota_wait_hours']:.1f} h, {_no_pod(s):.1f} = {s['failed_gpu_hours_quota_wait']:.1f}"
                        f" + {s['free_gpu_hours_quota_wait']:.1f}" for d, s in summaries.items())
            + "; seconds per dispatcher: " + ", ".join(f"{d} {took[d]:.1f}" for d in DISPATCHERS) + ".",
            "",
            markdown(header, rows),
            "",
        ]
    parts += seed_section(case_d, args.trace)
    parts.append(READING)
    Path(args.out).write_text("\n".join(parts))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
