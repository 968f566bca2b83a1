"""Node scoring beside the admission check: what the scheduler's choice of node does to the waits the check
is judged on.

The policy page's admission targets compare ``queuepilot`` (the GPU-capacity AdmissionCheck) with
``kueue-quota`` (Kueue's quota alone, the same scaler) on a cluster whose scheduler scores nodes the
kube-scheduler default way (``NodeResourcesFit`` ``LeastAllocated``: the emptiest node, ``--placement
spread``), so 1-GPU Ray workers spread over the nodes and a whole-node pod or a gang finds no free node.  A
user can configure the other scoring today (``MostAllocated``, a scheduler profile: ``--placement pack``).
This page runs both policies under both scorings on the page's week and the four held-out weeks, so the
check's gain is read beside the gain a scheduler setting gives, and what is left of it there.

Each run is one ``queuepilot simulate --policies P --placement S --hours 168 --start W`` (the controller's own
reconcilers, grounded, seed 1, failure rate 0.01, the simulator's defaults otherwise: the same worlds as the
policy page's runs under ``spread``).  Writes ``results/placement.md``, ``placement.json`` and
``placement.png``.  Numbers are reported, never asserted.

    python benchmarks/placement.py                     # 5 weeks x 2 policies x 2 scorings (20 runs)
    python benchmarks/placement.py --weeks 2017-10-03 --render-only
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.policy_matrix import HELD_OUT, QUOTA, START, WEEK_H, Task, sim_config  # noqa: E402
from benchmarks.policy_targets import WAIT_TOLERANCE, get, worst_wait_ratio  # noqa: E402
from benchmarks.sim_runs import provenance, publish, run_engine, run_pool, window_parser  # noqa: E402
from simulator.cluster import PACK, PLACEMENTS, SPREAD  # noqa: E402

CHECK = "queuepilot"
POLICIES = (QUOTA, CHECK)
MODEL = "grounded"
WEEKS = (START, *HELD_OUT)
GANG_LIMIT = 0.8  # the admission target: gang p95 and p99 <= 0.8x kueue-quota's (policy_targets)
NO_WAIT_S = 60.0  # a yardstick whose gangs wait at most this (p99) leaves the check no gang wait to cut
SCORING = {SPREAD: "LeastAllocated (default)", PACK: "MostAllocated"}


def run_one(args: tuple[str, str, str, float, int, float, str]) -> dict[str, Any]:
    """One run in a pool worker: ``policy`` under node scoring ``placement`` on the week from ``start``."""
    policy, placement, start, hours, seed, rate, trace = args
    cfg = replace(sim_config(Task(MODEL, seed, rate, policy, start=start, hours=hours)), placement=placement)
    eng, cpu_s = run_engine(policy, cfg, trace, start, hours, MODEL)
    return {"policy": policy, "placement": placement, "start": start, "summary": eng.metrics.summary(),
            "cpu_s": cpu_s}


def plan(weeks: Sequence[str]) -> list[tuple[str, str, str]]:
    """(policy, placement, week) of every run."""
    return [(p, s, w) for w in weeks for s in PLACEMENTS for p in POLICIES]


def find(runs: Sequence[Mapping[str, Any]], policy: str, placement: str, week: str) -> Mapping[str, Any] | None:
    return next((r["summary"] for r in runs
                 if (r["policy"], r["placement"], r["start"]) == (policy, placement, week)), None)


def _s(v: float | None) -> str:
    return "n/a" if v is None else f"{v:,.0f}"


def _x(v: float | None) -> str:
    if v is None:
        return "n/a"
    if v >= 100:
        return f"{v:,.0f}x"
    return "<0.01x" if 0 < v < 0.005 else f"{v:.2f}x"


def week_rows(runs: Sequence[Mapping[str, Any]], week: str) -> list[str]:
    out = ["| policy | node scoring | single_pod p95 / p99 s | gang p95 / p99 s | ray_task p95 s | admitted but "
           "unplaceable | their quota GPU-h held | waitForPodsReady evictions | total idle GPU-h | delivered GPU-h |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for placement in PLACEMENTS:
        for policy in POLICIES:
            s = find(runs, policy, placement, week)
            if s is None:
                continue
            w95, w99 = s["wait_p95_s_by_class"], s["wait_p99_s_by_class"]
            out.append(f"| {policy} | {SCORING[placement]} | {_s(w95['single_pod'])} / {_s(w99['single_pod'])} | "
                       f"{_s(w95['gang'])} / {_s(w99['gang'])} | {_s(w95['ray_task'])} | "
                       f"{_s(get(s, 'unplaceable_admissions'))} | {_s(get(s, 'unplaceable_gpu_hours'))} | "
                       f"{_s(get(s, 'pods_ready_evictions'))} | {_s(get(s, 'idle_gpu_hours'))} | "
                       f"{_s(get(s, 'delivered_gpu_hours'))} |")
    return out


def _worst(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None, classes: Sequence[str]) -> float | None:
    return None if a is None or b is None else worst_wait_ratio(a, b, classes)


def comparison(runs: Sequence[Mapping[str, Any]], week: str) -> dict[str, float | None]:
    """The ratios the page reads on one week (each the worse of p95 and p99): the check against kueue-quota
    under each scoring, and the check under the default scoring against kueue-quota under MostAllocated."""
    cs, qs = find(runs, CHECK, SPREAD, week), find(runs, QUOTA, SPREAD, week)
    cp, qp = find(runs, CHECK, PACK, week), find(runs, QUOTA, PACK, week)
    out: dict[str, float | None] = {}
    for key, a, b in (("spread", cs, qs), ("pack", cp, qp), ("check_vs_packed_quota", cs, qp)):
        out[f"{key}_gang"] = _worst(a, b, ("gang",))
        out[f"{key}_other"] = _worst(a, b, ("ray_task", "single_pod"))
    for key, y in (("spread", qs), ("pack", qp)):
        tails = [get(y, f"wait_{q}_s_by_class.gang") for q in ("p95", "p99")] if y is not None else []
        out[f"{key}_quota_gang_tail"] = None if not tails or None in tails else max(t for t in tails if t is not None)
    out["packed_quota_unplaceable"] = None if qp is None else get(qp, "unplaceable_admissions")
    out["packed_quota_gang_vs_spread"] = _worst(qp, qs, ("gang",))
    return out


def _delivered_ratio(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> float | None:
    x, y = (None if a is None else get(a, "delivered_gpu_hours")), (None if b is None else get(b, "delivered_gpu_hours"))
    return None if x is None or not y else x / y


def met(c: Mapping[str, float | None], key: str) -> str:
    """The admission targets' verdict under one scoring: met, not met, or no gang wait to cut (the
    yardstick's gangs waited at most ``NO_WAIT_S``: a ratio there says nothing of the check)."""
    gang, other, tail = c[f"{key}_gang"], c[f"{key}_other"], c[f"{key}_quota_gang_tail"]
    if gang is None or other is None:
        return "n/a"
    if tail is not None and tail <= NO_WAIT_S and other <= WAIT_TOLERANCE:
        return "no gang wait to cut"
    return "met" if gang <= GANG_LIMIT and other <= WAIT_TOLERANCE else "not met"


def summary_rows(runs: Sequence[Mapping[str, Any]], weeks: Sequence[str]) -> list[str]:
    out = ["| week | check / kueue-quota, LeastAllocated: gang, other classes | admission target | check / "
           "kueue-quota, MostAllocated: gang, other | admission target | kueue-quota MostAllocated / LeastAllocated: "
           "gang | check (LeastAllocated) / kueue-quota (MostAllocated): gang, other |",
           "|---|---:|---|---:|---|---:|---:|"]
    for w in weeks:
        c = comparison(runs, w)
        out.append(f"| {w} | {_x(c['spread_gang'])}, {_x(c['spread_other'])} | {met(c, 'spread')} "
                   f"| {_x(c['pack_gang'])}, {_x(c['pack_other'])} | {met(c, 'pack')} | "
                   f"{_x(c['packed_quota_gang_vs_spread'])} | "
                   f"{_x(c['check_vs_packed_quota_gang'])}, {_x(c['check_vs_packed_quota_other'])} |")
    return out


def reading(runs: Sequence[Mapping[str, Any]], weeks: Sequence[str]) -> list[str]:
    """What the numbers say, counted from them."""
    cs = [comparison(runs, w) for w in weeks]
    n = len(weeks)
    spread_met = sum(met(c, "spread") == "met" for c in cs)
    pack_met = sum(met(c, "pack") == "met" for c in cs)
    pack_none = sum(met(c, "pack") == "no gang wait to cut" for c in cs)
    unplaceable = [c["packed_quota_unplaceable"] for c in cs if c["packed_quota_unplaceable"] is not None]
    beats = sum(1 for c in cs if c["check_vs_packed_quota_gang"] is not None and c["check_vs_packed_quota_gang"] < 1)
    packed = [t for c in cs if (t := c["pack_quota_gang_tail"]) is not None]
    spread = [t for c in cs if (t := c["spread_quota_gang_tail"]) is not None]
    delivered = [d for w in weeks for p in POLICIES
                 if (d := _delivered_ratio(find(runs, p, PACK, w), find(runs, p, SPREAD, w))) is not None]
    lines = [
        f"- Under the default scoring the check meets the admission targets (gang <= {GANG_LIMIT:g}x and the other "
        f"classes <= {WAIT_TOLERANCE:g}x kueue-quota's) on {spread_met} of {n} weeks; under MostAllocated on "
        f"{pack_met} of {n}; on {pack_none} of {n} there is no gang wait to cut under MostAllocated (kueue-quota's "
        f"gangs waited at most {NO_WAIT_S:g} s, p95 and p99) and the check is no worse on the other classes.",
        f"- kueue-quota under MostAllocated admits {_s(sum(unplaceable)) if unplaceable else 'n/a'} unplaceable "
        f"workloads over the {len(unplaceable)} weeks; its gang wait tail (the worse of p95 and p99) is "
        + (f"at most {_s(max(packed))} s there" if packed else "n/a")
        + (f", against {_s(min(spread))}-{_s(max(spread))} s under the default scoring." if spread else "."),
        "- Delivered GPU-hours under MostAllocated against the default scoring, both policies: "
        + (f"{min(delivered):.2f}x-{max(delivered):.2f}x over the {len(delivered)} pairs of runs." if delivered else "n/a."),
        f"- The check under the default scoring has a shorter gang wait tail than kueue-quota under MostAllocated on "
        f"{beats} of {n} weeks: "
        + ("where the scheduler can be configured to bin-pack, that setting does what the check's gang gain does "
           "here." if beats == 0 else "the check keeps a gain there."),
    ]
    return lines


def render(data: Mapping[str, Any]) -> str:
    meta, runs = data["meta"], data["runs"]
    weeks = meta["weeks"]
    lines = [
        "# Node scoring beside the admission check",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}; "
        f"{len(runs)} runs, {meta['cpu_s']:,.0f} CPU-s, {meta['wall_s'] / 60:.1f} min on {meta['jobs']} processes.",
        "",
        f"Philly trace, {meta['hours']:g} h from each week's start ({', '.join(weeks)}; the first is the policy "
        f"page's week, the others its held-out weeks), `{MODEL}`, seed {meta['seed']}, GPU failure rate "
        f"{meta['rate']:g} per GPU per day, the simulator's defaults otherwise. `{CHECK}`: Kueue and queuepilot's "
        f"AdmissionCheck; `{QUOTA}`: Kueue's quota alone (with `waitForPodsReady`); the same scaler in both. "
        "*Node scoring*: where the scheduler puts a pod among the nodes it fits on: `LeastAllocated` (the "
        "kube-scheduler default, `--placement spread`: the emptiest node) or `MostAllocated` (a scheduler profile "
        "a user can configure today, `--placement pack`: the fullest node that fits). Waits are from the "
        "workload's creation to its pods bound (a Ray task's: to its start on a worker).",
        "",
        "## What the numbers say",
        "",
        *reading(runs, weeks),
        "",
        "## The admission targets per week",
        "",
        "Each ratio is the worse of p95 and p99; *other classes*: the worst of ray_task and single_pod.",
        "",
        *summary_rows(runs, weeks),
        "",
    ]
    for w in weeks:
        lines += [f"## Week from {w}", "", *week_rows(runs, w), ""]
    lines += ["`placement.png`: gang and single_pod p99 wait per week, the four runs side by side (the MostAllocated "
              "bars are the 1-s waits).", ""]
    return "\n".join(lines)


def plot(path: Path, data: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs, weeks = data["runs"], data["meta"]["weeks"]
    fig, axes = plt.subplots(1, 2, figsize=(11.0, 4.0))
    width = 0.2
    for ax, cls in zip(axes, ("gang", "single_pod"), strict=True):
        for i, (placement, policy) in enumerate((p, q) for p in PLACEMENTS for q in POLICIES):
            ys = [((find(runs, policy, placement, w) or {}).get("wait_p99_s_by_class") or {}).get(cls, 0.0) / 3600
                  for w in weeks]
            ax.bar([k + (i - 1.5) * width for k in range(len(weeks))], ys, width,
                   label=f"{policy}, {SCORING[placement].split(' ')[0]}")
        ax.set_xticks(range(len(weeks)), weeks, fontsize=7)
        ax.set_ylabel(f"{cls} p99 wait (h)", fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("wait tails by node scoring, Philly weeks, grounded", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "placement")
    p.set_defaults(hours=WEEK_H)
    p.add_argument("--weeks", type=lambda t: [w.strip() for w in t.split(",") if w.strip()], default=list(WEEKS),
                   help="comma-separated week starts (default: the policy page's week and its held-out weeks)")
    args = p.parse_args(argv)

    def run() -> dict[str, Any]:
        packed = [(*t, args.hours, args.seed, args.rate, args.trace) for t in plan(args.weeks)]
        meta = provenance("placement.py", argv)
        t0 = time.perf_counter()
        runs = run_pool(run_one, packed, "node scoring", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "weeks": args.weeks, "seed": args.seed, "rate": args.rate,
                         "jobs": args.jobs, "cpu_s": sum(r["cpu_s"] for r in runs),
                         "wall_s": round(time.perf_counter() - t0, 1)},
                "runs": runs}

    return publish(args, run, plot, render)


if __name__ == "__main__":
    raise SystemExit(main())
