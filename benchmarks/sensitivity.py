"""Sensitivity of the stall targets: queuepilot's stall handling against the reaper over the held-out weeks,
one assumption moved at a time.

The stall targets (``policy_targets``: killed GPU-hours <= 0.33x the reaper's, idle reclaimed against
ray-idle >= 0.9x the reaper's, delivered >= the reaper's; and against ray-idle killed <= 1 % of delivered,
total idle <= 0.7x under grounded) rest on parameters no trace records.  This sweeps each around the
simulator's defaults, on every held-out week (``policy_matrix.HELD_OUT``: weeks the utilization models were
not calibrated on), for ``queuepilot-reclaim+stall`` against ``reaper``, ``ray-idle`` as the yardstick:

- the **stall share** (the share of jobs with one long idle run; the model refitted so its share of GPU-time
  at 0 % stays the published one: ``--stall-share``), as multiples of the model's fitted share;
- the **resume share** (the share of long idle runs that are pauses the job resumes from), 0 to 0.75;
- the **worker cap** (a team RayCluster's maxReplicas / its nominal quota), 1, 2, 4;
- what Ray shows of a long idle run, which decides what Ray-aware detection can do: the **pause-invisible
  share** (pauses during which nothing runs or waits on the cluster) and the **hang share** (final stalls
  during which a task still runs);
- the **reactivate share** (owners who bring a deactivated workload back by reactivating its Workload, whose
  history then holds a second deactivation, rather than by creating the job anew), 0, 0.5, 1.
  Only stall handling reads these three: ray-idle and the reaper run once at the defaults and stand for every
  value of them.

Writes ``results/sensitivity.md`` (per knob: where each target holds and where it breaks, week by week, and
the means behind it), ``sensitivity.json`` and ``sensitivity_<knob>.png`` (killed GPU-hours, idle reclaimed
and delivered GPU-hours against the knob, mean over the weeks with min-max bars, the targets' lines).

    python benchmarks/sensitivity.py                       # every knob, every held-out week (make bench-full)
    python benchmarks/sensitivity.py --plan                # its runs and their wall time, from policy-quick.json
    python benchmarks/sensitivity.py --knobs resume --weeks 2017-11-02 --hours 24   # a short check
    python benchmarks/sensitivity.py --render-only
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from benchmarks import policy  # noqa: E402
from benchmarks.policy_matrix import (  # noqa: E402
    BASELINE,
    DEFAULT_CAP,
    DEFAULT_HANG,
    DEFAULT_PAUSE_INVISIBLE,
    DEFAULT_REACTIVATE,
    DEFAULT_RESUME,
    HELD_OUT,
    RATE,
    REAPER,
    WEEK_H,
    Task,
)
from benchmarks.policy_page import fmt, pct, stats  # noqa: E402
from benchmarks.policy_targets import (  # noqa: E402
    Target,
    Verdict,
    delivered_gpu_hours,
    evaluate_targets,
    get,
    reclaimed,
    target,
    yardstick_key,
)
from simulator.inputs import default_trace  # noqa: E402
from simulator.utilization import MODELS as UTIL_MODELS  # noqa: E402
from simulator.utilization import PhasedModel  # noqa: E402

RESULTS = REPO / "benchmarks" / "results"
CONFIG = "queuepilot-reclaim+stall"  # queuepilot as deployed to cut waste: both opt-ins on
LABELS = (CONFIG, REAPER, BASELINE)
COMMAND = "python benchmarks/sensitivity.py"
# knob -> (what it is, default values swept, the value at the simulator's default)
KNOBS: dict[str, tuple[str, tuple[float, ...], float]] = {
    "stall_share": ("stall share (x the model's fitted share of jobs with a long idle run)", (0.5, 1.0, 1.5), 1.0),
    "resume": ("resume share (long idle runs that are pauses)", (0.0, 0.25, 0.5, 0.75), DEFAULT_RESUME),
    "cap": ("worker cap (maxReplicas / nominal quota)", (1.0, 2.0, 4.0), DEFAULT_CAP),
    "pause_invisible": ("pause-invisible share (pauses Ray shows nothing of)", (0.0, 0.2, 0.5), DEFAULT_PAUSE_INVISIBLE),
    "hang": ("hang share (final stalls with a task still running)", (0.0, 0.1, 0.3), DEFAULT_HANG),
    "reactivate": ("reactivate share (owners who reactivate, not recreate)", (0.0, 0.5, 1.0), DEFAULT_REACTIVATE),
}
RAY_VIEW = ("pause_invisible", "hang", "reactivate")  # only stall handling reads them
# the targets judged at every point (the stall targets at every resume share, not only 0.25 and 0.5)
TARGET_KEYS = ("stall_killed", "stall_reclaimed", "stall_delivered", "killed_work", "total_idle")


def targets() -> list[Target]:
    return [replace(target(k), resumes=None) for k in TARGET_KEYS]


def fitted_share(model: str) -> float | None:
    m = UTIL_MODELS.get(model)
    return m.stall_p if isinstance(m, PhasedModel) else None


def task_at(model: str, week: str, seed: int, rate: float, hours: float, label: str, knob: str | None = None,
            value: float | None = None) -> Task:
    """The run of ``label`` on one week with ``knob`` at ``value`` (the simulator's defaults otherwise)."""
    pol, stall = label.removesuffix("+stall"), label.endswith("+stall")
    kw: dict[str, Any] = {}
    if knob == "stall_share" and value is not None and value != 1.0:
        base = fitted_share(model)
        if base is None:
            raise ValueError(f"{model} has no stall share to sweep")
        kw["stall_share"] = round(base * value, 6)
    elif knob is not None and knob != "stall_share" and value is not None:
        kw[knob] = value
    return Task(model, seed, rate, pol, stall, start=week, hours=hours, **kw)


def _task(r: Mapping[str, Any]) -> Task:
    """The run a record is of (a record written before a field existed has the simulator's default there)."""
    rec = {**policy.RECORD_DEFAULTS, **r}
    return Task(**{k: rec[k] for k in Task.__dataclass_fields__})


def build(weeks: Sequence[str], models: Sequence[str], seed: int, rate: float, hours: float,
          sweeps: Mapping[str, Sequence[float]]) -> list[Task]:
    """The centre (every label at the defaults) on every week and model, and each knob's other values: all
    three labels, but only stall handling's run for the knobs only it reads."""
    tasks = []
    for week in weeks:
        for model in models:
            tasks += [task_at(model, week, seed, rate, hours, lab) for lab in LABELS]
            for knob, values in sweeps.items():
                if knob == "stall_share" and fitted_share(model) is None:
                    continue
                for v in values:
                    for lab in (LABELS[:1] if knob in RAY_VIEW else LABELS):
                        tasks.append(task_at(model, week, seed, rate, hours, lab, knob, v))
    return list(dict.fromkeys(tasks))


def point_of(r: Mapping[str, Any]) -> tuple[str, float] | None:
    """Which (knob, value) a record is off the defaults at (None: the centre); the stall share as a multiple
    of the model's fitted share."""
    if r.get("stall_share") is not None:
        base = fitted_share(r["model"]) or 1.0
        return ("stall_share", round(float(r["stall_share"]) / base, 3))
    for knob in ("resume", "cap", "pause_invisible", "hang", "reactivate"):
        if float(r.get(knob, KNOBS[knob][2])) != KNOBS[knob][2]:
            return (knob, float(r[knob]))
    return None


def at_point(runs: Sequence[Mapping[str, Any]], knob: str, value: float) -> list[Mapping[str, Any]]:
    """The runs that make up one point of a knob's sweep: those off the defaults at (knob, value), or the
    centre's at the default value; for a knob only stall handling reads, the centre's yardsticks too."""
    center = value == KNOBS[knob][2]
    out = []
    for r in runs:
        p = point_of(r)
        if (center and p is None) or p == (knob, round(value, 3) if knob == "stall_share" else value):
            out.append(r)
        elif knob in RAY_VIEW and p is None and r["label"] != CONFIG:
            out.append(r)
    return out


# --------------------------------------------------------------------------------------- reading
def verdicts_at(runs: Sequence[Mapping[str, Any]], knob: str, value: float) -> list[Verdict]:
    rs = at_point(runs, knob, value)
    return [v for v in evaluate_targets(rs, targets()) if v.config == CONFIG]


def weekly(runs: Sequence[Mapping[str, Any]], knob: str, value: float, model: str
           ) -> dict[str, dict[str, float | None]]:
    """Per week: the numbers the plots show (killed, reclaimed against ray-idle, delivered) for each label."""
    rs = [r for r in at_point(runs, knob, value) if r["model"] == model]
    base = {yardstick_key(r): r["summary"] for r in rs if r["label"] == BASELINE}
    out: dict[str, dict[str, float | None]] = {}
    for r in rs:
        ray = base.get(yardstick_key(r))
        s = r["summary"]
        row = out.setdefault(r["start"], {})
        row[f"{r['label']} killed"] = get(s, "killed_gpu_hours")
        row[f"{r['label']} delivered"] = delivered_gpu_hours(s)
        row[f"{r['label']} reclaimed"] = reclaimed(s, ray) if ray is not None else None
    return out


def _value_text(v: float | None, t: Target) -> str:
    if t.unit == "of delivered":
        return pct(v, 2)
    out = fmt(v, ".2f")
    return out if out in ("inf", "-inf", "n/a") else out + "x"


def knob_section(runs: Sequence[Mapping[str, Any]], knob: str, values: Sequence[float], model: str,
                 weeks: Sequence[str]) -> list[str]:
    name = KNOBS[knob][0]
    ts = [t for t in targets() if t.models is None or model in t.models]
    head = ["value", *(f"{t.key} ({'>=' if t.higher_is_better else '<='} "
                       f"{t.limit:.0%})" if t.unit == "of delivered" else
                       f"{t.key} ({'>=' if t.higher_is_better else '<='} {t.limit:g}x)" for t in ts),
            "killed GPU-h (reaper)", "reclaimed GPU-h (reaper)", "delivered GPU-h (reaper)"]
    lines = [f"### {name} (`{model}`)", "", "| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    holds: dict[str, list[str]] = {t.key: [] for t in ts}
    breaks: dict[str, list[str]] = {t.key: [] for t in ts}
    for v in values:
        vs = [x for x in verdicts_at(runs, knob, v) if x.model == model]
        label = _point_text(knob, v, model)
        cells = [label]
        for t in ts:
            mine = [x for x in vs if x.target == t.key and x.met is not None]
            met = sum(1 for x in mine if x.met)
            if not mine:
                cells.append("n/a")
                continue
            worst_vals = [x.worst for x in mine if x.worst is not None]
            worst = (min(worst_vals) if t.higher_is_better else max(worst_vals)) if worst_vals else None
            cells.append(f"{met}/{len(mine)} weeks (worst {_value_text(worst, t)})")
            if met == len(mine):
                holds[t.key].append(label)
            else:
                bad = ", ".join(f"{x.scenario.start} {_value_text(x.worst, t)}" for x in mine if not x.met)
                breaks[t.key].append(f"{label} ({bad})")
        wk = weekly(runs, knob, v, model)
        for what in ("killed", "reclaimed", "delivered"):
            a = stats([row.get(f"{CONFIG} {what}") for row in wk.values()])[0] if wk else None
            b = stats([row.get(f"{REAPER} {what}") for row in wk.values()])[0] if wk else None
            cells.append(f"{fmt(a, ',.0f')} ({fmt(b, ',.0f')})")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"Where each target holds on every week ({len(weeks)}) and where it breaks:", ""]
    for t in ts:
        lines.append(f"- **{t.key}** ({t.text}): holds at {', '.join(holds[t.key]) or 'no value'}"
                     + (f"; breaks at {'; '.join(breaks[t.key])}" if breaks[t.key] else "") + ".")
    return [*lines, ""]


def _point_text(knob: str, value: float, model: str) -> str:
    if knob == "stall_share":
        base = fitted_share(model)
        return f"{value:g}x ({base * value:.3g})" if base is not None else f"{value:g}x"
    return f"{value:g}" + (" (default)" if value == KNOBS[knob][2] else "")


def _rerun_text(meta: Mapping[str, Any]) -> list[str]:
    """What a ``--rerun`` page took from the page before it, and how that was checked."""
    rr = meta.get("rerun")
    if not rr:
        return []
    return [f"Only the runs of {', '.join(f'`{lab}`' for lab in rr['labels'])} ran here (`--rerun`); the "
            f"{rr['reused']} runs of the other labels are the page's of git {rr['from_commit']} ({rr['from_date']}), "
            f"their decisions unchanged since: their {rr['checked']} runs at the defaults on {rr['check_week']}, rerun "
            "here, agree on every number (the script refuses otherwise). The wall and CPU times are this run's."]


def render(data: Mapping[str, Any]) -> str:
    meta, runs = data["meta"], data["runs"]
    sweeps = meta["sweeps"]
    lines = ["# Sensitivity of the stall targets (held-out weeks)", "",
             f"Generated {meta['date']} by `{meta['command']}`, git {meta['commit']}"
             + (" with uncommitted changes in the working tree" if meta.get("dirty") else "") + ".",
             f"Machine: {meta['machine']}, {meta['cores']} cores, {meta['python']}; {meta['processes']} worker processes. "
             f"Wall time {meta['wall_s'] / 60:.1f} min for {len(runs) - (meta.get('rerun') or {}).get('reused', 0)} "
             "runs (measured); summed run CPU seconds "
             f"{meta['run_cpu_s_sum']:,.0f} s.", *_rerun_text(meta), "",
             f"**What this page covers**: the Philly weeks {', '.join(meta['weeks'])} ({meta['hours']:g} h each, outside "
             "the window the utilization models were calibrated on), under "
             f"{', '.join(f'`{m}`' for m in meta['models'])}, seed {meta['seed']}, GPU failure rate {meta['rate']:g}; "
             f"`{CONFIG}` (queuepilot with idle-actor reclaim and stall handling) against `{REAPER}` (ray-idle + the "
             f"GPU-idle rule), `{BASELINE}` the yardstick of what is reclaimed. One knob moves at a time, the others at "
             "the simulator's defaults (stall share the model's own, resume share "
             f"{DEFAULT_RESUME:g}, worker cap {DEFAULT_CAP:g}, pause-invisible share {DEFAULT_PAUSE_INVISIBLE:g}, hang "
             f"share {DEFAULT_HANG:g}, reactivate share {DEFAULT_REACTIVATE:g}); ray-idle and the reaper read neither "
             "Ray's view of a stall nor a Workload's history, so their runs at the defaults stand for every value of "
             "those three. Knobs swept: "
             + "; ".join(f"{KNOBS[k][0]}: {', '.join(f'{v:g}' for v in vs)}" for k, vs in sweeps.items()) + ".",
             "",
             "Each cell: on how many weeks the target holds at that value, and the worst week's value; then the "
             f"means over the weeks of `{CONFIG}`'s killed GPU-hours, idle GPU-hours reclaimed against ray-idle and "
             "delivered GPU-hours, the reaper's in brackets. The stall targets are judged here at every resume "
             "share (the policy page judges them at 0.25 and 0.5). Every run: `queuepilot simulate --start WEEK "
             f"--hours {meta['hours']:g} --util-model M --seed {meta['seed']} --policies P [--stall-reclaim] "
             "[--stall-share F] [--stall-resume-share F] [--worker-cap-factor F] [--pause-invisible-share F] "
             "[--hang-share F] [--reactivate-share F]`.", ""]
    for model in meta["models"]:
        for knob, values in sweeps.items():
            if knob == "stall_share" and fitted_share(model) is None:
                continue
            lines += knob_section(runs, knob, values, model, meta["weeks"])
    lines += ["## Plots", ""]
    lines += [f"- `{meta['name']}_{knob}.png`: {KNOBS[knob][0]}: killed GPU-hours, idle GPU-hours reclaimed against "
              "ray-idle and delivered GPU-hours for each policy, mean over the weeks, bars min-max; dashed: the "
              "target's line from the reaper's mean (0.33x its killed, 0.9x its reclaimed, its delivered)."
              for knob in sweeps]
    return "\n".join(lines) + "\n"


def plot(path: Path, runs: Sequence[Mapping[str, Any]], knob: str, values: Sequence[float], model: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    lines = {"killed": 0.33, "reclaimed": 0.9, "delivered": 1.0}
    for ax, what in zip(axes, ("killed", "reclaimed", "delivered"), strict=True):
        for lab in LABELS:
            if lab == BASELINE and what == "reclaimed":
                continue
            means, lo, hi = [], [], []
            for v in values:
                wk = weekly(runs, knob, v, model)
                m, a, b = stats([row.get(f"{lab} {what}") for row in wk.values()]) if wk else (None, None, None)
                means.append(float("nan") if m is None else m)
                lo.append(0.0 if m is None or a is None else m - a)
                hi.append(0.0 if m is None or b is None else b - m)
            ax.errorbar(values, means, yerr=[lo, hi], marker="o", capsize=3, label=lab)
            if lab == REAPER:
                ax.plot(values, [x * lines[what] for x in means], linestyle="--", color="grey",
                        label=f"target ({lines[what]:g}x reaper)")
        ax.set_xlabel(KNOBS[knob][0], fontsize=8)
        ax.set_ylabel(f"{what} GPU-h", fontsize=8)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{model}: mean over the held-out weeks, bars min-max", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ------------------------------------------------------------------------------------------ main
def build_parser() -> argparse.ArgumentParser:
    csv_f, csv_s = policy._csv(float), policy._csv(str)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", default=str(default_trace()))
    p.add_argument("--weeks", type=csv_s, default=list(HELD_OUT), help=f"week starts (default {','.join(HELD_OUT)})")
    p.add_argument("--hours", type=float, default=WEEK_H, help="each window's length (default %(default)g)")
    p.add_argument("--models", type=csv_s, default=["grounded"], help="utilization models (default grounded)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rate", type=float, default=RATE)
    p.add_argument("--knobs", type=csv_s, default=list(KNOBS), help=f"which to sweep (default {','.join(KNOBS)})")
    for knob, (_, values, _) in KNOBS.items():
        p.add_argument(f"--{knob.replace('_', '-')}-values", dest=knob, type=csv_f, default=list(values),
                       help=f"default {','.join(f'{v:g}' for v in values)}")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes")
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="sensitivity")
    p.add_argument("--render-only", action="store_true", help="re-render NAME.md and the plots from NAME.json")
    p.add_argument("--plan", action="store_true", help="print the runs and their expected wall time, run nothing")
    p.add_argument("--costs-from", default=None,
                   help="a policy*.json or sensitivity*.json whose runs' CPU seconds estimate each run "
                        "(default NAME.json, else results/policy-quick.json)")
    p.add_argument("--rerun", type=csv_s, default=None, metavar="LABELS",
                   help="run only the runs of these labels, and the other labels' runs at the defaults on the first "
                        "week as a check; take the other runs from NAME.json, refused where a checked run differs "
                        "(a change that moves only these labels' decisions)")
    p.add_argument("--no-progress", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    unknown = [k for k in args.knobs if k not in KNOBS]
    if unknown:
        raise SystemExit(f"unknown knobs {unknown} (known: {', '.join(KNOBS)})")
    sweeps = {k: list(getattr(args, k)) for k in args.knobs}
    out = Path(args.out)
    json_path = out / f"{args.name}.json"
    tasks = build(args.weeks, args.models, args.seed, args.rate, args.hours, sweeps)
    costs_from = Path(args.costs_from) if args.costs_from else (
        json_path if json_path.exists() else RESULTS / "policy-quick.json")
    prev = policy.previous_costs(costs_from)
    reused: list[dict[str, Any]] = []
    checks: list[Task] = []
    if args.rerun:
        old = json.loads(json_path.read_text())
        old_runs = {_task(r): r for r in old["runs"]}
        checks = [task_at(m, args.weeks[0], args.seed, args.rate, args.hours, lab) for m in args.models
                  for lab in LABELS if lab not in args.rerun]
        missing = [t for t in tasks if t.label not in args.rerun and t not in old_runs]
        if missing:
            raise SystemExit(f"--rerun: {json_path} lacks {len(missing)} runs of the others (first: {missing[0]})")
        reused = [{**old_runs[t], "commit": old["meta"]["commit"]} for t in tasks
                  if t.label not in args.rerun and t not in checks]
        tasks = [t for t in tasks if t.label in args.rerun or t in checks]
    if args.plan:
        cost = {t: policy.estimate(t, prev) for t in tasks}
        print(f"{len(tasks)} runs of {args.hours:g} h ({len(args.weeks)} weeks x {len(args.models)} models; knobs "
              f"{', '.join(sweeps)}): summed run CPU seconds ~{sum(cost.values()):,.0f} s; wall on {args.jobs} "
              f"processes ~{policy.pack(cost.values(), args.jobs) / 60:.1f} min (costs from {costs_from})")
        return 0
    out.mkdir(parents=True, exist_ok=True)
    if args.render_only:
        data = json.loads(json_path.read_text())
    else:
        commit = policy._git("rev-parse", "--short", "HEAD") or "?"
        dirty = bool(policy._git("status", "--porcelain", "--", "simulator", "autoscaler", "benchmarks"))
        t0 = time.perf_counter()
        # the checks first: a --rerun whose other labels moved is refused before the long part runs
        records = policy.run_matrix(checks, args.trace, args.jobs, lambda t: False, prev,
                                    progress=not args.no_progress, title="sensitivity checks") if checks else []
        for r in records:
            t = _task(r)
            mine, theirs = r["summary"], old_runs[t]["summary"]
            differs = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
            if differs:
                raise SystemExit(f"--rerun: {t.label} on {t.start} now differs from {json_path} ({differs[0]}: "
                                 f"{theirs[differs[0]]} -> {mine[differs[0]]}): rerun every label")
        records += policy.run_matrix([t for t in tasks if t not in checks], args.trace, args.jobs, lambda t: False,
                                     prev, progress=not args.no_progress, title="sensitivity")
        wall = time.perf_counter() - t0
        cpu = sum(r["cpu_s"] for r in records)  # this run's (not the reused runs')
        order = {t: i for i, t in enumerate(build(args.weeks, args.models, args.seed, args.rate, args.hours, sweeps))}
        if args.rerun:  # each record names the commit it ran at
            records = [{**r, "commit": commit} for r in records] + reused
        records.sort(key=lambda r: order[_task(r)])
        data = {"meta": {"command": " ".join([COMMAND, *argv]), "date": f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
                         "commit": commit, "dirty": dirty, "machine": policy._machine(),
                         "python": f"{platform.python_implementation()} {platform.python_version()}",
                         "cores": os.cpu_count(), "processes": args.jobs, "wall_s": round(wall, 1),
                         "run_cpu_s_sum": round(cpu, 1), "trace": args.trace,
                         "weeks": list(args.weeks), "hours": args.hours, "models": list(args.models),
                         "seed": args.seed, "rate": args.rate, "sweeps": sweeps, "name": args.name},
                "runs": records}
        if args.rerun:
            data["meta"]["rerun"] = {"labels": list(args.rerun), "reused": len(reused), "checked": len(checks),
                                     "from_commit": old["meta"]["commit"], "from_date": old["meta"]["date"],
                                     "check_week": args.weeks[0]}
        json_path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    for knob, values in data["meta"]["sweeps"].items():
        for model in data["meta"]["models"]:
            if knob == "stall_share" and fitted_share(model) is None:
                continue
            suffix = "" if len(data["meta"]["models"]) == 1 else f"-{model}"
            plot(out / f"{args.name}_{knob}{suffix}.png", data["runs"], knob, values, model)
    (out / f"{args.name}.md").write_text(render(data))
    print(f"wrote {out / (args.name + '.md')} ({len(data['runs'])} runs)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
