"""How long the stall reclaim waits before it deactivates: the trade of idle GPU-hours for killed work.

Runs the simulator (the controller's own reconcilers) over the Philly month under one utilization
model with every team's ClusterQueue opted in to stall deactivation (``--stall-reclaim``), once per
``stall.deactivate_after`` in ``--delays``, and ``ray-idle`` once as the yardstick; writes
``results/stall_delay.md``, ``stall_delay.json`` and ``stall_delay.png``.  A shorter delay takes back
stalled GPUs sooner and kills more jobs that were only pausing (an evaluation, a checkpoint, an input
stall inside the run); the page shows both, so that the controller's default (2 h) can be judged.

    python benchmarks/stall_delay.py                      # the month, delays 30m,1h,2h,4h (make bench-full)
    python benchmarks/stall_delay.py --hours 168 --delays 30m,2h
    python benchmarks/stall_delay.py --render-only        # re-render from stall_delay.json
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoscaler.core.policy.config import parse_duration  # noqa: E402
from autoscaler.core.policy.stall import StallConfig  # noqa: E402
from benchmarks.sim_runs import provenance, publish, run_engine, run_pool, window_parser  # noqa: E402
from simulator.engine import SimConfig  # noqa: E402

BASELINE = "ray-idle"
POLICY = "queuepilot"
DEFAULT_DELAYS = ("30m", "1h", "2h", "4h")


def run_one(args: tuple[str, float | None, str, str, float, str, int, float]) -> dict[str, Any]:
    """One run in a pool worker: ``policy`` with stall reclaim at ``delay`` (None: the baseline)."""
    policy, delay, trace, start, hours, model, seed, rate = args
    cfg = SimConfig(seed=seed, gpu_failure_rate=rate, stall_reclaim=delay is not None,
                       stall_deactivate_after_s=delay)
    eng, cpu_s = run_engine(policy, cfg, trace, start, hours, model)
    return {"policy": policy, "delay_s": delay, "summary": eng.metrics.summary(), "cpu_s": cpu_s}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _dur(s: float) -> str:
    return f"{s / 3600:g} h" if s >= 3600 else f"{s / 60:g} min"


def render(data: dict[str, Any], name: str = "stall_delay") -> str:
    meta, runs = data["meta"], data["runs"]
    base = next((r["summary"] for r in runs if r["delay_s"] is None), None)
    rows = sorted((r for r in runs if r["delay_s"] is not None), key=lambda r: r["delay_s"])
    default = StallConfig().deactivate_after_seconds
    lines = [
        "# Stall reclaim: how long to wait before deactivating",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}; "
        f"{meta['cpu_s']:,.0f} CPU-s in all.",
        "",
        f"Philly trace, {meta['hours']:g} h from {meta['start']}; utilization model `{meta['model']}`, seed "
        f"{meta['seed']}, GPU failure rate {meta['rate']:g} per GPU per day. `{POLICY}` with every team's "
        "ClusterQueue opted in to stall deactivation (`queuepilot simulate --stall-reclaim "
        "--stall-deactivate-after D`), against `ray-idle` on the same run. The stall report (Event, gauge, "
        "alert) comes at the 30-min stall window (at the delay, for a delay under 30 min); the deactivation "
        "waits for the delay. "
        f"The controller's default delay is {_dur(default)}.",
        "",
        "| deactivate after | controllable idle GPU-h | vs ray-idle | total idle vs ray-idle | stalled GPU-h "
        "| killed GPU-h | killed / delivered | deactivations |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        s = r["summary"]
        c = _ratio(s["idle_gpu_hours_controllable"], base and base["idle_gpu_hours_controllable"])
        t = _ratio(s["idle_gpu_hours"], base and base["idle_gpu_hours"])
        k = _ratio(s["killed_gpu_hours"], s.get("delivered_gpu_hours"))
        mark = " (default)" if r["delay_s"] == default else ""
        lines.append(
            f"| {_dur(r['delay_s'])}{mark} | {s['idle_gpu_hours_controllable']:,.0f} | "
            f"{'n/a' if c is None else f'{c:.0%}'} | {'n/a' if t is None else f'{t:.0%}'} | "
            f"{s['idle_gpu_hours_by_class']['stalled']:,.0f} | {s['killed_gpu_hours']:,.0f} | "
            f"{'n/a' if k is None else f'{k:.2%}'} | {s.get('stall_deactivations', 0):,} |")
    if base is not None:
        lines.append(f"| ray-idle (no stall reclaim) | {base['idle_gpu_hours_controllable']:,.0f} | 100% | 100% | "
                     f"{base['idle_gpu_hours_by_class']['stalled']:,.0f} | {base['killed_gpu_hours']:,.0f} | | |")
    ok = [r["delay_s"] for r in rows
          if (k := _ratio(r["summary"]["killed_gpu_hours"], r["summary"].get("delivered_gpu_hours"))) is not None
          and k <= 0.01]
    verdict = (f"the shortest delay here whose killed work stays within 1 % of delivered GPU-hours is "
               f"{_dur(min(ok))}" + (" (the default)." if min(ok) == default else
                                     f"; the default is {_dur(default)}.") if ok
               else "no delay here keeps killed work within 1 % of delivered GPU-hours.")
    lines += [
        "",
        "Reading: every row deactivates the truly stalled jobs (their work done or hung: no work lost), "
        "later the longer the delay; the killed work comes from jobs whose GPUs all sat idle that long "
        "*inside* their run and would have gone on. Killing a job is irreversible; on this run " + verdict
        + " A platform whose jobs checkpoint can choose a shorter delay.",
        "",
        f"`{name}.png`: killed work against controllable idle, one point per delay.",
        "",
    ]
    return "\n".join(lines)


def plot(path: Path, data: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in data["runs"] if r["delay_s"] is not None), key=lambda r: r["delay_s"])
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    xs = [r["summary"]["idle_gpu_hours_controllable"] for r in rows]
    ys = [r["summary"]["killed_gpu_hours"] for r in rows]
    ax.plot(xs, ys, marker="o")
    for r, x, y in zip(rows, xs, ys, strict=True):
        ax.annotate(_dur(r["delay_s"]), (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    ax.set_xlabel("controllable idle GPU-h (lower is better)", fontsize=8)
    ax.set_ylabel("killed work GPU-h (lower is better)", fontsize=8)
    ax.set_title(f"stall deactivation delay: {data['meta']['model']}, {data['meta']['hours']:g} h", fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "stall_delay")
    p.add_argument("--model", default="grounded")
    p.add_argument("--delays", default=",".join(DEFAULT_DELAYS), help="comma-separated durations")
    args = p.parse_args(argv)
    delays: list[float] = []
    if not args.render_only:
        try:
            delays = [parse_duration(d) for d in args.delays.split(",") if d.strip()]
        except ValueError as e:
            p.error(f"--delays: {e}")

    def run() -> dict[str, Any]:
        tasks = [(BASELINE, None)] + [(POLICY, d) for d in delays]
        packed = [(pol, d, args.trace, args.start, args.hours, args.model, args.seed, args.rate) for pol, d in tasks]
        meta = provenance("stall_delay.py", argv)
        runs = run_pool(run_one, packed, "stall delays", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "start": args.start, "model": args.model, "seed": args.seed,
                         "rate": args.rate, "cpu_s": sum(r["cpu_s"] for r in runs)},
                "runs": runs}

    return publish(args, run, plot, lambda data: render(data, args.name))


if __name__ == "__main__":
    raise SystemExit(main())
