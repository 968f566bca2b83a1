"""queuepilot simulate: run policies over a trace window and report the numbers (JSON + plots).

Examples::

    queuepilot simulate --trace ../shared/traces/philly-pollux/philly.csv --start 2017-10-03 --hours 720 \\
        --policies queuepilot,ray-idle,kueue-quota --gpu-failure-rate 0.02 --seed 1 --json out.json --out out/
    queuepilot simulate --trace synthetic --hours 48 --policies all
    queuepilot simulate --hours 168 --policies queuepilot,ray-idle --util-model grounded --stall-reclaim
    queuepilot simulate --clusters 3 --nodes 88 --hours 168 --gpu-failure-rate 0.05 \
        --dispatchers all-at-once,incremental,capacity

``--stall-reclaim`` opts every team's ClusterQueue in to the controller's stall reclaim (config
``stall.deactivate_cluster_queues``) under the queuepilot policies: a workload whose GPUs all sit under
5 % for the stall window is deactivated (``spec.active: false``) and Kueue releases its quota.
``--clusters N`` runs the multi-cluster (MultiKueue dispatcher) simulation instead (simulator/fleet_cli.py).

Every flag can also be set as QUEUEPILOT_<FLAG> (e.g. QUEUEPILOT_SEED=3; on/off flags take
1/true/yes/on or 0/false/no/off).  Bad input is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.core.policy.config import MAX_RECLAIM_BUDGET, AdmissionConfig, ScalingDefaults, parse_duration
from autoscaler.core.policy.stall import MIN_WINDOW_SECONDS, StallConfig
from servicekit.argtypes import count, positive_seconds
from servicekit.cli import Parser
from servicekit.envflags import EnvError, apply_env
from simulator.cluster import PLACEMENTS
from simulator.engine import POLICIES, Engine, SimConfig
from simulator.inputs import (
    DEFAULT_START,
    check_writable,
    default_trace,
    duration,
    load_window,
    non_negative_rate,
    positive_factor,
    positive_hours,
    share,
    stall_share_of,
)
from simulator.schedule_clock import team_schedules
from simulator.utilization import DEFAULT_MODEL, DEFAULT_RESUME_SHARE, MODELS
from simulator.workload import TraceWindow

log = logging.getLogger("queuepilot.simulate")


def stall_delay(text: str) -> float:
    """``--stall-deactivate-after``: a duration (90s, 30m, 2h) of at least the 1-min stall floor."""
    try:
        s = parse_duration(text)
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not MIN_WINDOW_SECONDS <= s <= 30 * 86400:
        raise argparse.ArgumentTypeError(f"must be a duration from {MIN_WINDOW_SECONDS:g}s to 30 days, got {text!r}")
    return s


REMOVED_POLICIES: dict[str, str] = {  # name -> why it is gone (the CLI still names it)
    "oracle": "it was no bound (queuepilot with --stall-reclaim left less controllable idle than it on the "
              "same run); lower_bound_idle_gpu_hours in the JSON is the offline lower bound",
}


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="queuepilot simulate", description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", default=str(default_trace()),
                   help="a Philly-format CSV (timestamp,duration,num_gpus,gpu_time,cluster) or 'synthetic'")
    p.add_argument("--start", default=DEFAULT_START,
                   help="window start (ISO date/time in the trace's clock; ignored for synthetic)")
    p.add_argument("--hours", type=positive_hours, default=24.0, help="window length in hours")
    p.add_argument("--policies", default=",".join(POLICIES),
                   help=f"comma-separated, or 'all': {', '.join(POLICIES)}")
    p.add_argument("--gpu-failure-rate", type=non_negative_rate, default=SimConfig().gpu_failure_rate,
                   help="injected GPU failures per GPU per day (repaired after ~6 h)")
    p.add_argument("--seed", type=int, default=0, help="seed of everything random")
    p.add_argument("--nodes", type=count(1, 100_000), default=SimConfig().nodes, help="8-GPU nodes")
    p.add_argument("--control-interval", type=positive_seconds, default=SimConfig().control_interval_s,
                   help="seconds between scaling decisions (the controller's resync)")
    p.add_argument("--json", default=None, help="write the per-policy results here (default: stdout)")
    p.add_argument("--out", default=None, help="write timelines (CSV) and plots (PNG) into this directory")
    p.add_argument("--util-model", choices=sorted(MODELS), default=DEFAULT_MODEL,
                   help="how each job's GPU utilization moves over its run (docs/simulation.md, 'Utilization')")
    p.add_argument("--stall-reclaim", action="store_true", default=False,
                   help="queuepilot policies: deactivate stalled workloads (every ClusterQueue opted in)")
    p.add_argument("--stall-deactivate-after", type=stall_delay, default=None, metavar="DURATION",
                   help="with --stall-reclaim: deactivate after every GPU was idle this long (the controller's "
                        "stall.deactivate_after; default its 2h; under 30m it shortens the stall window too)")
    p.add_argument("--worker-cap-factor", type=positive_factor, default=SimConfig().ray_max_quota_factor,
                   help="a team RayCluster's maxReplicas = its nominal GPU quota x this (the per-team cap)")
    p.add_argument("--reclaim-budget", type=count(0, MAX_RECLAIM_BUDGET), default=None, metavar="N",
                   help="queuepilot-reclaim: the most workers reclaimed per RayCluster in any hour (the controller's "
                        f"scaling.reclaim_budget_per_hour, or the queuepilot.io/reclaim-budget annotation; default its "
                        f"{ScalingDefaults().reclaim_budget_per_hour})")
    p.add_argument("--reclaim-replace", action="store_true",
                   help="queuepilot-reclaim: replace idle workers while the team's Ray demand queues (the "
                        "controller's scaling.reclaim_replace, or the queuepilot.io/reclaim-replace annotation; "
                        "off by default)")
    p.add_argument("--capacity-wait", type=duration, default=None, metavar="DURATION",
                   help="policies with the admission check: how long a workload whose GPUs are not free waits "
                        "Pending with its quota before Retry (the controller's admission.capacity_wait; default "
                        f"its {AdmissionConfig().capacity_wait_seconds / 60:g}m; 0: Retry at once)")
    p.add_argument("--schedule", default=None, metavar="TEXT",
                   help="queuepilot policies: time windows for every team's ClusterQueue (scaling."
                        "cluster_queue_schedules; queuepilot.io/schedule syntax, on the trace's clock, no tz=)")
    p.add_argument("--stall-resume-share", type=share, default=DEFAULT_RESUME_SHARE, metavar="F",
                   help="the share of long idle runs that are pauses the job resumes from (the rest are final "
                        "stalls; docs/simulation.md, 'Stall structure')")
    p.add_argument("--stall-share", type=share, default=None, metavar="F",
                   help="grounded, serving: the share of jobs with one long idle run (default the model's own: "
                        "0.37 grounded, 0.15 serving), the model refitted so its share of GPU-time at 0 %% stays "
                        "the published one (docs/simulation.md, 'Stall structure')")
    p.add_argument("--resubmit-after", type=duration, default=SimConfig().resubmit_after_s, metavar="DURATION",
                   help="a running workload deactivated with work left is submitted again by its owner this long "
                        "after, to run from scratch")
    p.add_argument("--reactivate-share", type=share, default=SimConfig().reactivate_share, metavar="F",
                   help="the share of owners who bring a deactivated workload back by reactivating its Workload "
                        "(Kueue then keeps the deactivation in its schedulingStats), not by creating the job anew")
    p.add_argument("--placement", choices=PLACEMENTS, default=SimConfig().placement,
                   help="the scheduler's node choice: spread (kube-scheduler's default, LeastAllocated) or pack")
    p.add_argument("--pods-ready-timeout", type=duration, default=SimConfig().pods_ready_timeout_s,
                   metavar="DURATION", help="Kueue's waitForPodsReady.timeout: an admitted workload whose pods "
                                            "are not running by then is evicted and queued again (0: not configured)")
    p.add_argument("--pause-invisible-share", type=share, default=SimConfig().pause_invisible_share, metavar="F",
                   help="the share of pauses during which Ray shows nothing running or waiting")
    p.add_argument("--hang-share", type=share, default=SimConfig().hang_share, metavar="F",
                   help="the share of final stalls during which Ray shows a task still running (hung)")
    p.add_argument("--no-progress", action="store_true", default=False, help="no progress bar")
    p.add_argument("--quiet", action="store_true", default=False,
                   help="no decision lines and no progress bar on stderr; the tables and the verdicts stay")
    return p


def parse_policies(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(POLICIES)
    gone = [n for n in names if n in REMOVED_POLICIES]
    if gone:
        raise ValueError(f"policy {gone[0]!r} was removed: {REMOVED_POLICIES[gone[0]]}")
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise ValueError(f"unknown policies {unknown} (known: {', '.join(POLICIES)})")
    return names


def results(engines: dict[str, Engine], meta: dict[str, Any],
            recommendations: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    out = {"meta": meta, "policies": {name: e.metrics.summary() for name, e in engines.items()}}
    for name, recs in (recommendations or {}).items():
        out["policies"][name]["recommendations"] = recs
    return out


# ------------------------------------------------------------------ right-sizing over the run
def recommendation_rows(recs: list[Any]) -> list[dict[str, Any]]:
    """The ``recommendations`` of one policy in the --json output: one object per worker group, as the
    ``queuepilot.io/recommendation`` annotation has it, with ``namespace`` and ``raycluster``;
    ``idle_gpu_hours``: the idle GPU-hours the recommendation would have saved over its history."""
    from autoscaler.core.policy.rightsizing import entry_of

    rows = []
    for r in recs:
        row = {"namespace": r.key.namespace, "raycluster": r.key.raycluster, **entry_of(r).as_json()}
        row["idle_gpu_hours"] = round(r.saved_gpu_hours, 3)
        rows.append(row)
    return rows


def run_recommending(jobs: Any, window_s: float, policies: list[str], cfg: SimConfig,
                     progress_factory: Any = None) -> tuple[dict[str, Engine], dict[str, list[dict[str, Any]]]]:
    """Run each policy; per policy, the right-sizing recommendations the controller's own
    ``RecommendationReconciler`` published in the engine at the end of the run (``recommendation_rows``)."""
    engines: dict[str, Engine] = {}
    rows: dict[str, list[dict[str, Any]]] = {}
    for name in policies:
        prog = progress_factory(name) if progress_factory else None
        eng = Engine(jobs, window_s, name, cfg, prog)
        eng.run()
        engines[name] = eng
        rows[name] = recommendation_rows(list(eng.context.published.recommendations))
    return engines, rows


def main(argv: list[str] | None = None) -> int:
    argv_list = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--clusters" or a.startswith("--clusters=") for a in argv_list):
        from simulator.fleet_cli import main as fleet_main

        return fleet_main(argv_list)
    parser = build_parser()
    try:
        apply_env(parser)
    except EnvError as e:
        parser.error(str(e))
    args = parser.parse_args(argv_list)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, format="%(message)s")
    try:
        policies = parse_policies(args.policies)
        if args.out:
            check_writable(Path(args.out), directory=True)
        if args.json:
            check_writable(Path(args.json), directory=False)
        cfg = replace(SimConfig(), nodes=args.nodes, gpu_failure_rate=args.gpu_failure_rate, seed=args.seed,
                      control_interval_s=args.control_interval, stall_reclaim=args.stall_reclaim,
                      ray_max_quota_factor=args.worker_cap_factor,
                      stall_deactivate_after_s=args.stall_deactivate_after,
                      reclaim_budget_per_hour=args.reclaim_budget, reclaim_replace=args.reclaim_replace,
                      resubmit_after_s=args.resubmit_after,
                      capacity_wait_s=args.capacity_wait,
                      placement=args.placement, pods_ready_timeout_s=args.pods_ready_timeout or None,
                      pause_invisible_share=args.pause_invisible_share, hang_share=args.hang_share,
                      reactivate_share=args.reactivate_share)
        window = load_window(args.trace, args.start, args.hours, args.seed, cfg.nodes * cfg.gpus_per_node,
                             util_model=args.util_model, resume_share=args.stall_resume_share,
                             stall_share=args.stall_share)
        if args.schedule is not None:
            cfg = replace(cfg, cluster_queue_schedules=team_schedules(cfg.teams, args.schedule, window.start))
    except (ValueError, FileNotFoundError) as e:
        print(f"queuepilot simulate: {e}", file=sys.stderr)
        return 2
    window_s = args.hours * 3600.0
    print(f"{len(window.jobs)} jobs ({window.dropped_too_large} larger than the cluster dropped), "
          f"{cfg.nodes} nodes x {cfg.gpus_per_node} GPUs, {args.hours:g} h, seed {args.seed}", file=sys.stderr)
    t0 = time.perf_counter()
    engines, recommendations = _run(window, window_s, policies, cfg, progress=not (args.no_progress or args.quiet))
    elapsed = time.perf_counter() - t0
    meta = {
        "trace": args.trace, "start": args.start if args.trace != "synthetic" else None, "hours": args.hours,
        "seed": args.seed, "gpu_failure_rate": args.gpu_failure_rate, "nodes": cfg.nodes,
        "gpus_per_node": cfg.gpus_per_node, "jobs": len(window.jobs), "dropped_too_large": window.dropped_too_large,
        "control_interval_s": cfg.control_interval_s, "util_model": args.util_model,
        "stall_reclaim": args.stall_reclaim, "worker_cap_factor": cfg.ray_max_quota_factor,
        "stall_deactivate_after_s": (StallConfig().deactivate_after_seconds if cfg.stall_deactivate_after_s is None
                                     else cfg.stall_deactivate_after_s),
        "reclaim_budget_per_hour": (ScalingDefaults().reclaim_budget_per_hour if cfg.reclaim_budget_per_hour is None
                                    else cfg.reclaim_budget_per_hour), "command": "queuepilot simulate " + " ".join(argv_list),
        "reclaim_replace": cfg.reclaim_replace,
        "stall_resume_share": args.stall_resume_share, "resubmit_after_s": cfg.resubmit_after_s,
        "stall_share": stall_share_of(args.util_model, args.stall_share),
        "placement": cfg.placement, "pods_ready_timeout_s": cfg.pods_ready_timeout_s,
        "pause_invisible_share": cfg.pause_invisible_share, "hang_share": cfg.hang_share,
        "reactivate_share": cfg.reactivate_share,
        "capacity_wait_s": (AdmissionConfig().capacity_wait_seconds if cfg.capacity_wait_s is None
                            else cfg.capacity_wait_s),
    }
    out = results(engines, meta, recommendations)
    text = json.dumps(out, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    else:
        print(text)
    if args.out:
        from simulator.report import write_outputs

        write_outputs(Path(args.out), engines)
    from simulator.report import accounting_table, recommendations_table, verdict_lines

    print(accounting_table(out["policies"]), file=sys.stderr)
    print(recommendations_table(recommendations), file=sys.stderr)
    print(f"simulated {len(policies)} policies in {elapsed:.1f}s", file=sys.stderr)
    for line in verdict_lines(out["policies"]):
        print(line, file=sys.stderr)
    return 0


def _run(window: TraceWindow, window_s: float, policies: list[str], cfg: SimConfig,
         progress: bool) -> tuple[dict[str, Engine], dict[str, list[dict[str, Any]]]]:
    if not progress:
        return run_recommending(window.jobs, window_s, policies, cfg)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description:<12}"), BarColumn(), TextColumn("{task.fields[sim]}"),
                  TimeElapsedColumn(), transient=False, redirect_stdout=False) as bar:
        tasks = {p: bar.add_task(p, total=window_s, sim="") for p in policies}

        def factory(name: str):
            def update(t: float) -> None:
                bar.update(tasks[name], completed=t, sim=f"{t / 3600:,.0f}/{window_s / 3600:,.0f} h")

            return update

        return run_recommending(window.jobs, window_s, policies, cfg, factory)
