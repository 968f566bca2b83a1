"""How long the admission check lets a workload wait for GPUs with its quota before Retry.

A workload whose pods do not fit the free healthy GPUs stays ``Pending`` with its quota reserved for
``admission.capacity_wait`` from its reservation (default 30 min), then gets ``Retry`` (Kueue evicts it,
gives the quota back and requeues it after the backoff).  A longer wait keeps a whole-node pod's place
while nodes empty out; it also holds quota that other workloads of the ClusterQueue or cohort could use.
This runs the simulator (the controller's own reconcilers) with ``queuepilot`` once per wait in
``--waits`` on each week of ``--weeks`` (the quick page's week and the four held-out weeks of the policy
page), and ``kueue-quota`` (no check) once per week as the yardstick; writes ``results/capacity_wait.md``,
``capacity_wait.json`` and ``capacity_wait.png``.

    python benchmarks/capacity_wait.py                         # 5 weeks, waits 0,10m,30m,2h (make bench-full)
    python benchmarks/capacity_wait.py --weeks 2017-11-30 --waits 0,30m
    python benchmarks/capacity_wait.py --render-only           # re-render from capacity_wait.json

Each run is one ``queuepilot simulate --policies queuepilot --capacity-wait D`` (or ``--policies
kueue-quota``) with the same window, model, seed and failure rate.  Numbers are reported, never asserted.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from autoscaler.core.policy.admission import AdmissionConfig  # noqa: E402
from autoscaler.core.policy.config import parse_duration  # noqa: E402
from benchmarks.policy_matrix import Task, sim_config  # noqa: E402
from benchmarks.policy_targets import TARGETS, Target  # noqa: E402
from benchmarks.sim_runs import provenance, publish, run_engine, run_pool, window_parser  # noqa: E402

BASELINE = "kueue-quota"
POLICY = "queuepilot"
DEFAULT_WEEKS = ("2017-10-03", "2017-09-26", "2017-11-02", "2017-11-09", "2017-11-30")
DEFAULT_WAITS = ("0", "10m", "30m", "2h")
# the policy page's admission targets (#42), judged the same way: gang, then the other classes
WAIT_TARGETS: tuple[Target, ...] = tuple(t for k in ("gang_wait", "other_wait") for t in TARGETS if t.key == k)
CLASSES = ("single_pod", "gang", "ray_task")


def run_one(args: tuple[str, float | None, str, str, float, str, int, float]) -> dict[str, Any]:
    """One run in a pool worker: ``policy`` on the week from ``start`` at ``wait`` (None: the baseline)."""
    policy, wait, trace, start, hours, model, seed, rate = args
    # the policy page's configuration of the run (``sim_config``), the wait set
    cfg = replace(sim_config(Task(model, seed, rate, policy, start=start, hours=hours)), capacity_wait_s=wait)
    eng, cpu_s = run_engine(policy, cfg, trace, start, hours, model)
    return {"policy": policy, "start": start, "wait_s": wait, "summary": eng.metrics.summary(), "cpu_s": cpu_s}


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}x"


def _dur(s: float) -> str:
    if s == 0:
        return "0 (Retry at once)"
    return f"{s / 3600:g} h" if s >= 3600 else f"{s / 60:g} min"


def ratios(run: Mapping[str, Any], base: Mapping[str, Any]) -> dict[str, tuple[float | None, float | None]]:
    """Per class, (p95, p99) wait as a multiple of the baseline's on the same week."""
    s = run["summary"]
    return {c: (_ratio(s["wait_p95_s_by_class"][c], base["wait_p95_s_by_class"][c]),
                _ratio(s["wait_p99_s_by_class"][c], base["wait_p99_s_by_class"][c])) for c in CLASSES}


def meets(run: Mapping[str, Any], base: Mapping[str, Any]) -> tuple[bool, bool]:
    """(gang target met, other classes target met), as the policy page judges them."""
    gang, other = ((v := t.value(run["summary"], {BASELINE: base})) is not None and t.meets(v) for t in WAIT_TARGETS)
    return gang, other


def by_week(runs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]]:
    out: dict[str, tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]] = {}
    for start in dict.fromkeys(r["start"] for r in runs):
        base = next((r["summary"] for r in runs if r["start"] == start and r["wait_s"] is None), None)
        rows = sorted((r for r in runs if r["start"] == start and r["wait_s"] is not None), key=lambda r: r["wait_s"])
        out[start] = (base, rows)
    return out


def _wait_cells(s: Mapping[str, Any], c: str, r: tuple[float | None, float | None] | None) -> str:
    cell = f"{s['wait_p95_s_by_class'][c]:,.0f} / {s['wait_p99_s_by_class'][c]:,.0f}"
    return cell + (f" ({_x(r[0])} / {_x(r[1])})" if r is not None else "")


def week_table(base: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]], default: float) -> list[str]:
    out = ["| capacity wait | single_pod p95 / p99 s | gang p95 / p99 s | ray_task p95 / p99 s | Retries "
           "| quota held waiting GPU-h | targets (gang, other) |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for run in rows:
        s = run["summary"]
        r = ratios(run, base) if base is not None else None
        gang, other = meets(run, base) if base is not None else (False, False)
        verdict = "n/a" if base is None else f"{'met' if gang else 'not met'}, {'met' if other else 'not met'}"
        mark = " (default)" if run["wait_s"] == default else ""
        out.append(f"| {_dur(run['wait_s'])}{mark} | "
                   + " | ".join(_wait_cells(s, c, r and r[c]) for c in CLASSES)
                   + f" | {s.get('admission_retries', 0):,} | {s.get('waiting_gpu_hours', 0):,.0f} | {verdict} |")
    if base is not None:
        out.append("| kueue-quota (no check) | " + " | ".join(_wait_cells(base, c, None) for c in CLASSES)
                   + f" | | {base.get('unplaceable_gpu_hours', 0):,.0f} held by admitted-but-unplaceable "
                   f"({base.get('unplaceable_admissions', 0):,} admissions) | |")
    return out


def summary_table(weeks: Mapping[str, tuple[Mapping[str, Any] | None, list[Mapping[str, Any]]]],
                  default: float) -> list[str]:
    """Per wait: on how many weeks each target holds, and the worst week's ratios."""
    waits = sorted({r["wait_s"] for _, rows in weeks.values() for r in rows})
    out = ["| capacity wait | gang target met (weeks) | worst gang p95 / p99 | other classes met (weeks) "
           "| worst single_pod p95 / p99 | worst ray_task p95 / p99 |",
           "|---|---:|---:|---:|---:|---:|"]
    for w in waits:
        pairs = [(r, base) for base, rows in weeks.values() if base is not None for r in rows if r["wait_s"] == w]
        if not pairs:
            continue
        rs = [ratios(r, base) for r, base in pairs]
        met = [meets(r, base) for r, base in pairs]

        def worst(c: str, i: int, rs: list[dict[str, tuple[float | None, float | None]]] = rs) -> float | None:
            xs = [x for r in rs if (x := r[c][i]) is not None]
            return max(xs) if xs else None

        mark = " (default)" if w == default else ""
        out.append(f"| {_dur(w)}{mark} | {sum(g for g, _ in met)} of {len(rs)} | "
                   f"{_x(worst('gang', 0))} / {_x(worst('gang', 1))} | {sum(o for _, o in met)} of {len(rs)} | "
                   f"{_x(worst('single_pod', 0))} / {_x(worst('single_pod', 1))} | "
                   f"{_x(worst('ray_task', 0))} / {_x(worst('ray_task', 1))} |")
    return out


def render(data: Mapping[str, Any]) -> str:
    meta, runs = data["meta"], data["runs"]
    default = AdmissionConfig().capacity_wait_seconds
    weeks = by_week(runs)
    lines = [
        "# The admission check's capacity wait: how long a workload waits with its quota before Retry",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}; "
        f"{meta['cpu_s']:,.0f} CPU-s in all.",
        "",
        f"Philly trace, {meta['hours']:g} h from each of {', '.join(weeks)}; utilization model `{meta['model']}`, "
        f"seed {meta['seed']}, GPU failure rate {meta['rate']:g} per GPU per day. `{POLICY}` (the admission "
        "check on every ClusterQueue) with `admission.capacity_wait` set to each wait (`queuepilot simulate "
        f"--policies {POLICY} --capacity-wait D`), against `{BASELINE}` (no check: Kueue's quota alone) on the "
        f"same week. The controller's default is {_dur(default)}; 0 is Retry as soon as the pods do not fit. "
        "Waits are seconds from submission to start per class, the multiple of kueue-quota's in brackets. "
        "*Quota held waiting*: GPU-hours of quota reserved by workloads the check had not admitted yet "
        "(deciding, or waiting for GPUs); kueue-quota's row gives the quota its admitted-but-unplaceable "
        "workloads held, their pods Pending. The targets of the policy page (#42), judged as there: "
        + "; ".join(t.text for t in WAIT_TARGETS) + ". "
        "A p99 over a week's few hundred single-pod RayJobs is the fourth or fifth longest wait: one team's "
        "batch of whole-node pods decides it.",
        "",
        "## Over the weeks",
        "",
        *summary_table(weeks, default),
        "",
    ]
    for start, (base, rows) in weeks.items():
        lines += [f"## {start}", "", *week_table(base, rows, default), ""]
    lines += [f"`capacity_wait.png`: single_pod and gang p99 wait as a multiple of {BASELINE}'s against the "
              "wait, one line per week; the dashed lines are the targets.", ""]
    return "\n".join(lines)


def plot(path: Path, data: Mapping[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    weeks = by_week(data["runs"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.0))
    gang, other = WAIT_TARGETS
    for ax, (cls, target) in zip(axes, (("single_pod", other.limit), ("gang", gang.limit)), strict=True):
        for start, (base, rows) in weeks.items():
            if base is None or not rows:
                continue
            xs = [r["wait_s"] / 60 for r in rows]
            ys = [ratios(r, base)[cls][1] for r in rows]
            ax.plot(xs, [float("nan") if y is None else y for y in ys], marker="o", label=start)
        ax.axhline(target, linestyle="--", color="grey", linewidth=1)
        ax.set_xscale("symlog", linthresh=10)
        ax.set_xlabel("capacity wait, minutes", fontsize=8)
        ax.set_ylabel(f"{cls} p99 wait / {BASELINE}'s (lower is better)", fontsize=8)
        ax.set_title(cls, fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "capacity_wait")
    p.set_defaults(hours=168.0)
    p.add_argument("--model", default="grounded")
    p.add_argument("--weeks", default=",".join(DEFAULT_WEEKS), help="comma-separated window starts")
    p.add_argument("--waits", default=",".join(DEFAULT_WAITS), help="comma-separated durations (0: Retry at once)")
    args = p.parse_args(argv)
    weeks = [w.strip() for w in args.weeks.split(",") if w.strip()]
    waits: list[float] = []
    if not args.render_only:
        try:
            waits = [parse_duration(d) for d in args.waits.split(",") if d.strip()]
        except ValueError as e:
            p.error(f"--waits: {e}")

    def run() -> dict[str, Any]:
        tasks = [(BASELINE, None, w) for w in weeks] + [(POLICY, d, w) for w in weeks for d in waits]
        packed = [(pol, d, args.trace, w, args.hours, args.model, args.seed, args.rate) for pol, d, w in tasks]
        meta = provenance("capacity_wait.py", argv)
        runs = run_pool(run_one, packed, "capacity waits", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "model": args.model, "seed": args.seed, "rate": args.rate,
                         "cpu_s": sum(r["cpu_s"] for r in runs)},
                "runs": runs}

    return publish(args, run, plot, render)


if __name__ == "__main__":
    raise SystemExit(main())
