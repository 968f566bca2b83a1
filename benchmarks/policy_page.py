"""The policy page (``benchmarks/results/policy.md``, ``policy-quick.md``): markdown generated from the run
records of ``benchmarks/policy.py``, every sentence from the numbers.  Pure: ``render`` takes the page's
data (its meta and runs) and returns the text.

Sections: what the page covers; what the scaler alone achieves; the targets (issue #42's, then #11's kept)
with a met / not-met line each and why; the decomposition of every gain (ray-idle -> queuepilot ->
+ idle-actor reclaim -> + stall handling, the reaper beside); the targets on each held-out week; each
configuration against ray-idle; one table per model; the worker-cap sweep, the reclaim budget, the Helios
shape check and the plots.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from benchmarks import reclaim_budget as budget_sweep
from benchmarks.policy_matrix import (
    AXES,
    BASELINE,
    CALIBRATION,
    DEFAULT_CAP,
    DEFAULT_RESUME,
    QUOTA,
    REAPER,
    default_axes,
)
from benchmarks.policy_targets import (
    CLASSES,
    GROUPS,
    IDLE_CLASSES,
    TARGETS,
    WAIT_TOLERANCE,
    Scenario,
    Target,
    Verdict,
    delivered_gpu_hours,
    evaluate_targets,
    get,
    label_order,
    pair_runs,
    primary,
    ratio,
    reclaimed,
    scenario_of,
    target,
    wait,
)

Run = Mapping[str, Any]
# the decomposition's chain: each step adds one part to the one before it
CHAIN = (("ray-idle", "Ray's autoscaler"), ("queuepilot", "the scaler alone"),
         ("queuepilot-reclaim", "+ idle-actor reclaim"), ("queuepilot-reclaim+stall", "+ stall handling"))


# ------------------------------------------------------------------------------------ formatting
def fmt(v: float | None, spec: str = ",.0f") -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    out = format(v, spec)
    if out.startswith("-") and not out.strip("-+0.,%"):
        out = ("+" if "+" in spec else "") + out[1:]  # a value that rounds to zero is not negative
    return out


def pct(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "n/a"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v * 100:.{digits}f} %"


def stats(values: Sequence[float | None]) -> tuple[float | None, float | None, float | None]:
    """(mean, min, max) of ``values``; all None when one is missing."""
    vals = [v for v in values if v is not None]
    if not vals or len(vals) != len(values):
        return None, None, None
    if any(math.isinf(v) for v in vals):
        return (math.inf if max(vals) > 0 else -math.inf), min(vals), max(vals)
    return float(np.mean(vals)), min(vals), max(vals)


def span(values: Sequence[float | None], f: Callable[[float | None], str]) -> str:
    mean, lo, hi = stats(values)
    if mean is None:
        return "n/a"
    if len(values) == 1 or lo == hi:
        return f(mean)
    return f"{f(mean)} ({f(lo)}-{f(hi)})"


def mean_key(rows: Sequence[Mapping[str, Any]], key: str) -> float | None:
    return stats([get(s, key) for s in rows])[0]


def change(a: float | None, b: float | None) -> str:
    """``a`` against ``b`` in words: "12 % less", "3 % more"."""
    if a is None or b is None or b == 0:
        return "n/a"
    x = 1 - a / b
    return f"{x:.0%} less" if x >= 0 else f"{-x:.0%} more"


def rel(v: float | None) -> str:
    return "n/a" if v is None else ("inf" if math.isinf(v) else f"{(v - 1) * 100:+.0f} %")


def scenario_name(s: Scenario, *, resume: bool = False) -> str:
    """How a line names a scenario of the page's window: the model, and the resume share where it is not
    the default (always with ``resume``)."""
    out = f"`{s.model}`"
    if resume or s.resume != DEFAULT_RESUME:
        out += f" at resume share {s.resume:g}"
    return out


def swept_resume(runs: Iterable[Run]) -> set[str]:
    """The models with runs at more than one resume share: their lines name the share."""
    seen: dict[str, set[float]] = {}
    for r in runs:
        seen.setdefault(r["model"], set()).add(float(r.get("resume", DEFAULT_RESUME)))
    return {m for m, v in seen.items() if len(v) > 1}


def in_window(runs: Iterable[Run], start: str, hours: float) -> list[Run]:
    return [r for r in runs if r["start"] == start and float(r["hours"]) == float(hours)]


def row_label(r: Run) -> str:
    return r["label"] + (f" (resume {float(r['resume']):g})" if float(r["resume"]) != DEFAULT_RESUME else "")


def labels(runs: Iterable[Run]) -> list[str]:
    return sorted({r["label"] for r in runs}, key=label_order)


def scenarios(runs: Iterable[Run]) -> list[Scenario]:
    return sorted({scenario_of(r) for r in runs}, key=Scenario.order)


# ------------------------------------------------------------------------------------ target text
def limit_text(t: Target) -> str:
    if t.unit.startswith("x"):
        return f"{'>=' if t.higher_is_better else '<='} {t.limit:g}x"
    if t.unit == "of delivered":
        return f"<= {t.limit:.0%}"
    return f"{t.limit:g}"


def _x(v: float | None, spec: str) -> str:
    """A ratio with its "x" (none on inf, n/a)."""
    out = fmt(v, spec)
    return out if out in ("inf", "-inf", "n/a") else out + "x"


def word(v: Verdict) -> str:
    return "not measured" if v.met is None else ("met" if v.met else "not met")


def vdetail(v: Verdict, t: Target) -> str:
    if v.met is None:
        if v.missing:
            return "no " + ", ".join(v.missing) + " run to compare with"
        return "no run to compare with" if v.runs == 0 else "the simulator does not report this number"
    if t.unit == "of delivered":
        worst, mean = pct(v.worst, 2), pct(v.mean, 2)
    elif t.unit.startswith("x"):
        worst, mean = _x(v.worst, ".3f"), _x(v.mean, ".3f")
    else:
        worst, mean = fmt(v.worst, "g"), fmt(v.mean, ".1f")
    infinite = any(x is not None and math.isinf(x) for x in (v.worst, v.mean))
    note = f" ({t.inf_note})" if infinite and t.inf_note else ""
    return f"{v.runs_met}/{v.runs} runs; worst {worst}, mean {mean}{note}"


def short(v: Verdict | None, t: Target) -> str:
    """A verdict in a table cell: met / NOT MET and its worst value."""
    if v is None:
        return "not run"
    if v.met is None:
        return "n/a"
    val = pct(v.worst, 2) if t.unit == "of delivered" else (
        _x(v.worst, ".2f") if t.unit.startswith("x") else fmt(v.worst, "g"))
    return f"met {val}" if v.met else f"**NOT MET** {val}"


def _pairs_of(runs: Sequence[Run], t: Target, scn: Scenario, config: str
              ) -> tuple[list[Mapping[str, Any]], dict[str, list[Mapping[str, Any]]]]:
    """The summaries behind a verdict: the configuration's, and each yardstick's on the same worlds."""
    pairs = pair_runs(runs, t.yardsticks).get((scn, config)) or []
    q = [p[0]["summary"] for p in pairs]
    ys = {y: [p[1][y]["summary"] for p in pairs] for y in (pairs[0][1] if pairs else {})}
    return q, ys


def reclaimed_controllable(s: Mapping[str, Any], ray: Mapping[str, Any]) -> float | None:
    a, b = get(ray, "idle_gpu_hours_controllable"), get(s, "idle_gpu_hours_controllable")
    return None if a is None or b is None else a - b


def idle_by_class(rows: Sequence[Mapping[str, Any]]) -> str:
    parts = [(v, c) for c in IDLE_CLASSES if (v := mean_key(rows, f"idle_gpu_hours_by_class.{c}")) is not None]
    if not parts:
        return "no breakdown by class reported"
    return ", ".join(f"{c} {v:,.0f}" for v, c in sorted(parts, reverse=True))


def _waits_over(q: Sequence[Mapping[str, Any]], y: Sequence[Mapping[str, Any]], classes: Sequence[str],
                limit: float) -> str:
    parts = []
    for cls in classes:
        for quant in ("p95", "p99"):
            a, b = stats([wait(s, quant, cls) for s in q])[0], stats([wait(s, quant, cls) for s in y])[0]
            x = ratio(a, b)
            if x is not None and x > limit + 1e-9:
                parts.append(f"{cls} {quant} {fmt(a)} s vs {fmt(b)} s")
    return "; ".join(parts) if parts else "none on the mean (single runs only)"


def numbers(t: Target, q: Sequence[Mapping[str, Any]], ys: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The numbers behind a target's value, as means over the paired runs: what a reader needs to see why."""
    kq, rp, ri = ys.get(QUOTA, ()), ys.get(REAPER, ()), ys.get(BASELINE, ())
    k = t.key
    if k == "unplaceable":
        return (f"{fmt(mean_key(q, 'unplaceable_admissions'), ',.1f')} admitted-but-unplaceable workloads per run"
                + (f" (kueue-quota: {fmt(mean_key(kq, 'unplaceable_admissions'), ',.1f')})" if kq else ""))
    if k == "gang_wait":
        return (f"gang p95 {fmt(mean_key(q, 'wait_p95_s_by_class.gang'))} s, p99 "
                f"{fmt(mean_key(q, 'wait_p99_s_by_class.gang'))} s against kueue-quota's "
                f"{fmt(mean_key(kq, 'wait_p95_s_by_class.gang'))} s, {fmt(mean_key(kq, 'wait_p99_s_by_class.gang'))} s")
    if k == "other_wait":
        return "over the limit: " + _waits_over(q, kq, ("ray_task", "single_pod"), t.limit)
    if k == "wait_tails":
        return "over the limit: " + _waits_over(q, ri, CLASSES, t.limit)
    if k == "stall_killed":
        return (f"killed {fmt(mean_key(q, 'killed_gpu_hours'), ',.1f')} GPU-h against the reaper's "
                f"{fmt(mean_key(rp, 'killed_gpu_hours'), ',.1f')}; {fmt(mean_key(q, 'deactivated_workloads'), ',.1f')} "
                f"workloads deactivated, {fmt(mean_key(q, 'resubmitted_workloads'), ',.1f')} of them with work left "
                f"(the reaper: {fmt(mean_key(rp, 'deactivated_workloads'), ',.1f')}, "
                f"{fmt(mean_key(rp, 'resubmitted_workloads'), ',.1f')})")
    if k == "stall_reclaimed":
        rq = stats([reclaimed(a, b) for a, b in zip(q, ri, strict=False)])[0]
        rr = stats([reclaimed(a, b) for a, b in zip(rp, ri, strict=False)])[0]
        cq = stats([reclaimed_controllable(a, b) for a, b in zip(q, ri, strict=False)])[0]
        cr = stats([reclaimed_controllable(a, b) for a, b in zip(rp, ri, strict=False)])[0]
        return (f"{fmt(rq)} idle GPU-h reclaimed against ray-idle, the reaper {fmt(rr)} (of the controllable idle: "
                f"{fmt(cq)} and {fmt(cr)}); stalled GPU-h left "
                f"{fmt(mean_key(q, 'idle_gpu_hours_by_class.stalled'))} (the reaper: "
                f"{fmt(mean_key(rp, 'idle_gpu_hours_by_class.stalled'))})")
    if k == "stall_delivered":
        dq, dr = stats([delivered_gpu_hours(s) for s in q])[0], stats([delivered_gpu_hours(s) for s in rp])[0]
        return (f"delivered {fmt(dq)} GPU-h against the reaper's {fmt(dr)} (killed {fmt(mean_key(q, 'killed_gpu_hours'))} "
                f"vs {fmt(mean_key(rp, 'killed_gpu_hours'))}, total idle {fmt(mean_key(q, 'idle_gpu_hours'))} vs "
                f"{fmt(mean_key(rp, 'idle_gpu_hours'))}, completed jobs {fmt(mean_key(q, 'completed_jobs'))} vs "
                f"{fmt(mean_key(rp, 'completed_jobs'))})")
    if k == "total_idle":
        return (f"total idle {fmt(mean_key(q, 'idle_gpu_hours'))} GPU-h against ray-idle's "
                f"{fmt(mean_key(ri, 'idle_gpu_hours'))}; by class: {idle_by_class(q)}")
    if k == "killed_work":
        return (f"killed {fmt(mean_key(q, 'killed_gpu_hours'), ',.1f')} GPU-h of "
                f"{fmt(stats([delivered_gpu_hours(s) for s in q])[0])} delivered; "
                f"{fmt(mean_key(q, 'deactivated_workloads'), ',.1f')} workloads deactivated, "
                f"{fmt(mean_key(q, 'tasks_killed'), ',.0f')} Ray tasks killed")
    if k == "controllable_idle":
        return (f"controllable idle {fmt(mean_key(q, 'idle_gpu_hours_controllable'))} GPU-h against ray-idle's "
                f"{fmt(mean_key(ri, 'idle_gpu_hours_controllable'))}; idle by class (in_job is not controllable): {idle_by_class(q)}")
    if k == "scale_down_after_up":
        return (f"{fmt(mean_key(q, 'scale_downs_after_up_300s'), ',.1f')} scale-downs within 300 s of a scale-up "
                f"out of {fmt(mean_key(q, 'scale_events'))} scale events")
    if k == "bound":
        return (f"controllable idle {fmt(mean_key(q, 'idle_gpu_hours_controllable'))} GPU-h against a lower bound "
                f"of {fmt(mean_key(q, 'lower_bound_idle_gpu_hours'))}; idle by class (in_job is not controllable): {idle_by_class(q)}")
    return ""


# -------------------------------------------------------------------------------- scaler alone
def scaler_alone_section(runs: Sequence[Run], verdicts: Sequence[Verdict]) -> list[str]:
    """Plain queuepilot (the admission check and the scaler, no opt-in) against ray-idle and kueue-quota,
    per model, and which targets it meets by itself."""
    lines = ["Plain `queuepilot`: the admission check and the scaler, no opt-in (no idle-actor reclaim, no "
             "stall handling), against `ray-idle` (Ray's autoscaler, the check kept) and `kueue-quota` (the same "
             "scaler, no check); means over the paired runs.", ""]
    found = False
    for scn in scenarios(runs):
        if scn.resume != DEFAULT_RESUME:
            continue
        pairs = pair_runs(runs, (BASELINE,)).get((scn, "queuepilot")) or []
        if not pairs:
            continue
        found = True
        q = [p[0]["summary"] for p in pairs]
        r = [p[1][BASELINE]["summary"] for p in pairs]
        kq = [p[1][QUOTA]["summary"] for p in pair_runs(runs, (QUOTA,)).get((scn, "queuepilot")) or []]
        waits = []
        for cls in CLASSES:
            for quant in ("p95", "p99"):
                waits.append(f"{cls} {quant} {rel(ratio(mean_key(q, f'wait_{quant}_s_by_class.{cls}'), mean_key(r, f'wait_{quant}_s_by_class.{cls}')))}")
        mine = [v for v in verdicts if v.scenario == scn and v.config == "queuepilot" and v.met is not None]
        met = [v.target for v in mine if v.met]
        missed = [f"{v.target} ({_value(v.worst, target(v.target))})" for v in mine if not v.met]
        adm = ""
        if kq:
            adm = (f"; against kueue-quota: {fmt(mean_key(q, 'unplaceable_admissions'), ',.1f')} unplaceable "
                   f"admissions vs {fmt(mean_key(kq, 'unplaceable_admissions'), ',.1f')}, gang p95 "
                   f"{fmt(mean_key(q, 'wait_p95_s_by_class.gang'))} s vs {fmt(mean_key(kq, 'wait_p95_s_by_class.gang'))} s")
        lines.append(
            f"- {scenario_name(scn)}: controllable idle {fmt(mean_key(q, 'idle_gpu_hours_controllable'))} GPU-h against "
            f"ray-idle's {fmt(mean_key(r, 'idle_gpu_hours_controllable'))} "
            f"({change(mean_key(q, 'idle_gpu_hours_controllable'), mean_key(r, 'idle_gpu_hours_controllable'))}), "
            f"total idle {fmt(mean_key(q, 'idle_gpu_hours'))} against {fmt(mean_key(r, 'idle_gpu_hours'))} "
            f"({change(mean_key(q, 'idle_gpu_hours'), mean_key(r, 'idle_gpu_hours'))}); killed "
            f"{fmt(mean_key(q, 'killed_gpu_hours'), ',.1f')} GPU-h; waits against ray-idle: {', '.join(waits)}{adm}. "
            f"Of the targets judged for it, it meets {', '.join(met) if met else 'none'}"
            + (f"; it misses {', '.join(missed)}" if missed else "") + ".")
    return lines if found else ["No plain `queuepilot` run paired with `ray-idle` on this page."]


# ------------------------------------------------------------------------------------- targets
def targets_section(runs: Sequence[Run], verdicts: Sequence[Verdict] | None = None) -> list[str]:
    """Every target with a line per scenario: the stated configuration's verdict, the others after it; then
    what is not met, and why, from the numbers."""
    verdicts = evaluate_targets(runs) if verdicts is None else verdicts
    scns = scenarios(runs)
    lines = ["A target is **met** for a scenario (model, resume share) when it holds in every paired run there "
             "(every seed and failure rate), each run against its yardstick's run on the same trace window, seed "
             "and failure rate. The stated configuration is the first of the target's order that ran: "
             "`queuepilot` for the admission targets (it differs from `kueue-quota` by the check alone), "
             "`queuepilot-reclaim+stall` (both opt-ins on) for the others, else the one with the most opt-ins; "
             "the other configurations follow on the same line. \"No worse\" on a wait is within "
             f"{WAIT_TOLERANCE:g}x (a 2 % tolerance).", ""]
    missed = [v for t in TARGETS for s in scns if (v := primary(verdicts, t.key, s)) is not None and v.met is False]
    if missed:
        lines.append("**Not met on this page**: " + "; ".join(
            f"{v.target} under {scenario_name(v.scenario, resume=target(v.target).group == 'stall')} "
            f"({v.config})" for v in missed) + " (why: below).")
    else:
        lines.append("**Every target judged on this page is met** by its stated configuration.")
    lines.append("")
    for group, title in GROUPS.items():
        lines += [f"### {title}", ""]
        for t in (t for t in TARGETS if t.group == group):
            lines.append(f"- **{t.text}** (limit {limit_text(t)}):")
            judged = False
            for scn in scns:
                main = primary(verdicts, t.key, scn)
                if main is None:
                    continue
                judged = True
                others = [v for v in verdicts if v.target == t.key and v.scenario == scn and v is not main]
                rest = "; ".join(f"{v.config}: {word(v)} ({vdetail(v, t)})" for v in others)
                lines.append(f"  - {scenario_name(scn, resume=group == 'stall')}: **{word(main).upper()}** by "
                             f"{main.config} ({vdetail(main, t)})" + (f"; {rest}" if rest else ""))
            if not judged:
                lines.append("  - not judged on this page: " + _why_not_judged(t, runs))
        if group == "admission":
            lines += ["", *kueue_quota_report(runs), PLACEMENT_NOTE]
        lines.append("")
    lines += ["### Why", "", *why(runs, verdicts)]
    return lines


def _why_not_judged(t: Target, runs: Sequence[Run]) -> str:
    if t.stall_only and not any(r.get("stall_reclaim") for r in runs):
        return "no run with stall handling"
    if t.models is not None and not any(r["model"] in t.models for r in runs):
        return f"it applies under {', '.join(t.models)}, which did not run"
    return "no queuepilot run it applies to"


# the waits above are measured under one node scoring; the other a user can configure is on its own page
PLACEMENT_NOTE = ("- Every run here scores nodes as the kube-scheduler does by default (`LeastAllocated`: 1-GPU Ray "
                  "workers spread over the nodes and fragment them). [placement.md](placement.md) runs `kueue-quota` "
                  "and `queuepilot` under `MostAllocated` (bin packing) too, a scheduler setting users can configure "
                  "today, on the week from 2017-10-03 and the four held-out weeks.")


def kueue_quota_report(runs: Sequence[Run]) -> list[str]:
    """kueue-quota's failure modes under contention, reported: unplaceable admissions, the GPU-hours of
    quota they held while their pods could not be placed, waitForPodsReady evictions (means per run)."""
    out = []
    for scn in scenarios(runs):
        rs = [r["summary"] for r in runs if r["policy"] == QUOTA and scenario_of(r) == scn]
        if not rs:
            continue
        out.append(f"  - {scenario_name(scn)}: {fmt(mean_key(rs, 'unplaceable_admissions'), ',.1f')} admitted-but-"
                   f"unplaceable workloads, {fmt(mean_key(rs, 'unplaceable_gpu_hours'), ',.1f')} GPU-hours of quota held "
                   f"by them while Pending ({fmt(mean_key(rs, 'unplaceable_hours'), ',.1f')} workload-hours), "
                   f"{fmt(mean_key(rs, 'pods_ready_evictions'), ',.1f')} waitForPodsReady evictions (mean per run, "
                   f"{len(rs)} run{'s' if len(rs) != 1 else ''})")
    if not out:
        return ["- `kueue-quota`'s failure modes: no kueue-quota run on this page."]
    return ["- `kueue-quota`'s failure modes under contention, reported:", *out]


def why(runs: Sequence[Run], verdicts: Sequence[Verdict]) -> list[str]:
    """One paragraph per scenario, generated from the numbers: for each target its stated configuration
    misses, the numbers behind it, and which other configuration meets it."""
    out: list[str] = []
    swept = swept_resume(runs)
    for scn in scenarios(runs):
        judged = [(t, v) for t in TARGETS if (v := primary(verdicts, t.key, scn)) is not None]
        if not judged:
            continue
        met = [t.key for t, v in judged if v.met]
        unmeasured = [t.key for t, v in judged if v.met is None]
        notes = []
        for t, v in judged:
            if v.met is not False:
                continue
            q, ys = _pairs_of(runs, t, scn, v.config)
            note = (f"*{t.key}*: {v.config} ({v.runs - v.runs_met} of {v.runs} runs past the limit, mean "
                    f"{_value(v.mean, t)}, limit {limit_text(t)}): {numbers(t, q, ys)}.")
            alts = [a for a in verdicts if a.target == t.key and a.scenario == scn and a.config != v.config and a.met]
            if alts:
                note += " Met by " + ", ".join(f"{a.config} ({vdetail(a, t)})" for a in alts) + "."
            notes.append(note)
        head = f"**{scenario_name(scn, resume=scn.model in swept)}**: met {', '.join(met) if met else 'none'}"
        if unmeasured:
            head += f"; not measured: {', '.join(unmeasured)}"
        out.append(head + (". Not met: " + " ".join(notes) if notes else ". Every measured target is met."))
        out.append("")
    return out


def _value(v: float | None, t: Target) -> str:
    return pct(v, 2) if t.unit == "of delivered" else (_x(v, ".2f") if t.unit.startswith("x") else fmt(v, "g"))


# ------------------------------------------------------------------------------- decomposition
DECOMP_COLUMNS: tuple[tuple[str, Callable[[Mapping[str, Any]], float | None], Callable[[float | None], str]], ...] = (
    ("controllable idle GPU-h", lambda s: get(s, "idle_gpu_hours_controllable"), fmt),
    ("total idle GPU-h", lambda s: get(s, "idle_gpu_hours"), fmt),
    ("killed GPU-h", lambda s: get(s, "killed_gpu_hours"), lambda v: fmt(v, ",.1f")),
    ("delivered GPU-h", delivered_gpu_hours, fmt),
    ("completed jobs", lambda s: get(s, "completed_jobs"), fmt),
    *((f"{cls} {quant} s", (lambda s, c=cls, qn=quant: wait(s, qn, c)), fmt)
      for cls in CLASSES for quant in ("p95", "p99")),
)


def decomposition_section(runs: Sequence[Run]) -> list[str]:
    """Per model and resume share: ray-idle -> queuepilot -> queuepilot-reclaim -> queuepilot-reclaim+stall,
    the reaper beside, means over seeds; then what each step adds, in GPU-hours and as a share of the whole
    gain against ray-idle."""
    out: list[str] = []
    swept = swept_resume(runs)
    for scn in scenarios(runs):
        rows = {lab: [r["summary"] for r in runs if scenario_of(r) == scn and r["label"] == lab]
                for lab in [c[0] for c in CHAIN] + [REAPER]}
        present = [(lab, name) for lab, name in CHAIN if rows[lab]]
        if len(present) < 2 and not (rows[REAPER] and rows[BASELINE]):
            continue
        n = max(len(v) for v in rows.values())
        out += [f"### {scenario_name(scn, resume=scn.model in swept)} ({n} run{'s' if n != 1 else ''} per row, means)", "",
                "| step | configuration | " + " | ".join(c[0] for c in DECOMP_COLUMNS) + " |",
                "|---|---|" + "---:|" * len(DECOMP_COLUMNS)]
        for lab, name in [*present, *([(REAPER, "beside: ray-idle + the GPU-idle rule")] if rows[REAPER] else [])]:
            cells = [f(stats([fn(s) for s in rows[lab]])[0]) for _, fn, f in DECOMP_COLUMNS]
            out.append(f"| {name} | {lab} | " + " | ".join(cells) + " |")
        out += ["", *_contributions(present, rows), ""]
    return out or ["No run of the chain (ray-idle, queuepilot, queuepilot-reclaim, queuepilot-reclaim+stall) "
                   "on this page."]


def _means(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    return {name: stats([fn(s) for s in rows])[0] for name, fn, _ in DECOMP_COLUMNS}


def _delta(a: dict[str, float | None], b: dict[str, float | None], key: str) -> float | None:
    x, y = a.get(key), b.get(key)
    return None if x is None or y is None else x - y


def _step_text(m1: dict[str, float | None], m0: dict[str, float | None], base: dict[str, float | None]) -> str:
    parts = []
    for key, unit in (("controllable idle GPU-h", "controllable idle"), ("total idle GPU-h", "total idle")):
        d, b = _delta(m1, m0, key), base.get(key)
        share = f" ({d / b:+.0%} of ray-idle's)" if d is not None and b else ""
        parts.append(f"{unit} {fmt(d, '+,.0f')} GPU-h{share}")
    parts.append(f"killed {fmt(_delta(m1, m0, 'killed GPU-h'), '+,.1f')} GPU-h")
    parts.append(f"delivered {fmt(_delta(m1, m0, 'delivered GPU-h'), '+,.0f')} GPU-h")
    parts.append(f"completed jobs {fmt(_delta(m1, m0, 'completed jobs'), '+,.0f')}")
    moved = []
    for cls in CLASSES:
        for quant in ("p95", "p99"):
            x = ratio(m1.get(f"{cls} {quant} s"), m0.get(f"{cls} {quant} s"))
            if x is not None and abs(x - 1) > WAIT_TOLERANCE - 1:
                moved.append(f"{cls} {quant} {rel(x)}")
    parts.append("waits " + (", ".join(moved) if moved else f"within {WAIT_TOLERANCE - 1:.0%} in every class"))
    return "; ".join(parts)


def _contributions(present: Sequence[tuple[str, str]], rows: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[str]:
    """What each step of the chain adds to the one before it, then all of it against ray-idle with each step's
    share of the controllable idle taken back, then the reaper against ray-idle."""
    means = {lab: _means(rows[lab]) for lab, _ in present}
    base = _means(rows[BASELINE]) if rows[BASELINE] else {}
    chain = [lab for lab, _ in CHAIN]
    out, steps = [], []
    for (l0, _), (l1, n1) in pairwise(present):
        # a step whose configuration did not run is taken together with the next one
        name = " ".join([*(n for _, n in CHAIN[chain.index(l0) + 1:chain.index(l1)]), n1])
        steps.append((name, _delta(means[l1], means[l0], "controllable idle GPU-h")))
        out.append(f"- **{name}** ({l0} -> {l1}): " + _step_text(means[l1], means[l0], base) + ".")
    if len(present) >= 2 and present[0][0] == BASELINE:
        last = present[-1][0]
        total = _delta(means[last], means[BASELINE], "controllable idle GPU-h")
        note = ""
        if total is not None and total < 0 and all(d is not None for _, d in steps):
            shares = [(name, d / total + 0.0) for name, d in steps if d is not None]  # (no "-0%")
            note = "; of the controllable idle taken back, " + ", ".join(f"{n} {x:.0%}" for n, x in shares)
            if any(x < -0.005 for _, x in shares):
                note += " (a negative share: that step added controllable idle)"
        out.append(f"- **all of it** (ray-idle -> {last}): " + _step_text(means[last], base, base) + note + ".")
    if rows[REAPER] and rows[BASELINE]:
        out.append("- **the reaper** (ray-idle -> reaper): " + _step_text(_means(rows[REAPER]), base, base) + ".")
    return out


# ------------------------------------------------------------------------------------ held out
def held_out_section(runs: Sequence[Run]) -> list[str]:
    """The targets on each held-out week, per model: one table (targets x weeks) of the stated
    configuration's verdict and worst value; then where they hold on every week and where not."""
    weeks = sorted({r["start"] for r in runs})
    if not weeks:
        return ["No held-out week on this page (`policy.py --held-out WEEKS`; `make bench-full` runs "
                f"{', '.join(default_axes(quick=False)['held_out'])})."]
    verdicts = evaluate_targets(runs)
    seeds = sorted({int(r["seed"]) for r in runs})
    lines = [f"Weeks of the Philly trace outside the window the utilization models were calibrated on "
             f"({CALIBRATION[1]:g} h from {CALIBRATION[0]}, `benchmarks/utilization_fit.py`): "
             f"{', '.join(weeks)}, {' / '.join(f'{h:g}' for h in sorted({float(r['hours']) for r in runs}))} h each, seed {', '.join(map(str, seeds))}, with the runs the targets "
             "need there (their yardsticks and stated configurations). Each cell: the stated configuration's "
             "verdict and its worst value; the row names the configuration.", ""]
    failing: list[str] = []
    for model in dict.fromkeys(r["model"] for r in sorted(runs, key=lambda r: scenario_of(r).order())):
        rows: list[str] = []
        for t in TARGETS:
            for resume in sorted({float(r["resume"]) for r in runs if r["model"] == model}):
                cells, config = [], None
                for week in weeks:
                    scn = next((scenario_of(r) for r in runs if r["model"] == model and r["start"] == week
                                and float(r["resume"]) == resume and r["cap"] == DEFAULT_CAP), None)
                    v = primary(verdicts, t.key, scn) if scn is not None else None
                    config = config or (v.config if v else None)
                    cells.append(short(v, t))
                    if v is not None and v.met is False:
                        q, ys = _pairs_of(runs, t, scn, v.config) if scn is not None else ([], {})
                        failing.append(f"{t.key} under `{model}`" + (f" at resume {resume:g}" if t.group == "stall" else "")
                                       + f" on {week} ({v.config}: {_value(v.worst, t)}; {numbers(t, q, ys)})")
                if config is None:
                    continue
                name = t.key + (f", resume {resume:g}" if t.group == "stall" else "")
                rows.append(f"| {name} ({limit_text(t)}) | {config} | " + " | ".join(cells) + " |")
        if rows:
            lines += [f"### `{model}`", "", "| target | configuration | " + " | ".join(weeks) + " |",
                      "|---|---|" + "---:|" * len(weeks), *rows, ""]
    held = [t.key for t in TARGETS if not any(f.startswith(t.key + " ") for f in failing)
            and any(v.target == t.key and v.met is not None for v in verdicts)]
    lines.append(f"**Met on every held-out week and model where judged**: {', '.join(held) if held else 'none'}.")
    if failing:
        lines += ["", "**Not met on a held-out week** (the numbers behind each):", ""]
        lines += [f"- {f}" for f in failing]
    return lines


# ------------------------------------------------------------------------------- summary tables
SUMMARY_COLUMNS: tuple[tuple[str, Callable[[Mapping[str, Any], Mapping[str, Any]], float | None],
                             Callable[[float | None], str]], ...] = (
    ("controllable idle vs ray-idle", lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"),
                                                         get(r, "idle_gpu_hours_controllable")), pct),
    ("total idle vs ray-idle", lambda q, r: ratio(get(q, "idle_gpu_hours"), get(r, "idle_gpu_hours")), pct),
    ("killed / delivered", lambda q, r: ratio(get(q, "killed_gpu_hours"), delivered_gpu_hours(q)),
     lambda v: pct(v, 2)),
    ("delivered vs ray-idle", lambda q, r: ratio(delivered_gpu_hours(q), delivered_gpu_hours(r)), lambda v: pct(v, 1)),
    *((f"{cls} {quant} vs ray-idle",
       (lambda q, r, quant=quant, cls=cls: ratio(wait(q, quant, cls), wait(r, quant, cls))), rel)
      for cls in CLASSES for quant in ("p95", "p99")),
    ("controllable idle / bound", lambda q, r: ratio(get(q, "idle_gpu_hours_controllable"),
                                                     get(q, "lower_bound_idle_gpu_hours")), lambda v: fmt(v, ".2f")),
)


def summary_section(runs: Sequence[Run]) -> list[str]:
    paired = pair_runs(runs, (BASELINE,))
    lines = ["Each queuepilot configuration against ray-idle on the same trace window, seed and failure rate: mean "
             "over seeds x failure rates, (min-max) when they differ. Wait columns: the relative change of the "
             "queuepilot run's percentile against ray-idle's (negative = shorter).", ""]
    for scn in scenarios(runs):
        labs = sorted((lab for (s, lab), pairs in paired.items() if s == scn and pairs), key=label_order)
        if not labs:
            continue
        n = len(paired[(scn, labs[0])])
        lines += [f"### {scenario_name(scn)} ({n} paired run{'s' if n != 1 else ''} per configuration)", "",
                  "| configuration | " + " | ".join(c[0] for c in SUMMARY_COLUMNS) + " |",
                  "|---|" + "---:|" * len(SUMMARY_COLUMNS)]
        for lab in labs:
            pairs = paired[(scn, lab)]
            cells = [span([fn(q["summary"], ys[BASELINE]["summary"]) for q, ys in pairs], f)
                     for _, fn, f in SUMMARY_COLUMNS]
            lines.append(f"| {lab} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


COLUMNS: tuple[tuple[str, Callable[[Run], float | None], Callable[[float | None], str], bool], ...] = (
    # (header, value from a run record, format, show min-max over seeds)
    ("controllable idle GPU-h", lambda r: get(r["summary"], "idle_gpu_hours_controllable"), fmt, True),
    ("total idle GPU-h", lambda r: get(r["summary"], "idle_gpu_hours"), fmt, True),
    ("delivered GPU-h", lambda r: delivered_gpu_hours(r["summary"]), fmt, False),
    ("killed GPU-h", lambda r: get(r["summary"], "killed_gpu_hours"), lambda v: fmt(v, ",.1f"), False),
    ("killed / delivered", lambda r: ratio(get(r["summary"], "killed_gpu_hours"), delivered_gpu_hours(r["summary"])),
     lambda v: pct(v, 2), False),
    ("completed jobs", lambda r: get(r["summary"], "completed_jobs"), fmt, False),
    ("deactivated (resubmitted)", lambda r: get(r["summary"], "deactivated_workloads"), fmt, False),
    *((f"{cls} {quant} s", (lambda r, c=cls, qn=quant: wait(r["summary"], qn, c)), fmt, False)
      for cls in CLASSES for quant in ("p95", "p99")),
    ("unplaceable admissions", lambda r: get(r["summary"], "unplaceable_admissions"), lambda v: fmt(v, ".1f"), False),
    ("unplaceable GPU-h", lambda r: get(r["summary"], "unplaceable_gpu_hours"), lambda v: fmt(v, ",.1f"), False),
    ("pods-ready evictions", lambda r: get(r["summary"], "pods_ready_evictions"), lambda v: fmt(v, ".1f"), False),
    ("scale-downs <300 s after up", lambda r: get(r["summary"], "scale_downs_after_up_300s"),
     lambda v: fmt(v, ".1f"), False),
    ("controllable idle / bound", lambda r: ratio(get(r["summary"], "idle_gpu_hours_controllable"),
                                                   get(r["summary"], "lower_bound_idle_gpu_hours")),
     lambda v: fmt(v, ".2f"), False),
    ("sim s", lambda r: float(r["secs"]), fmt, False),
)


def _resubmitted(rs: Sequence[Run]) -> str:
    d = stats([get(r["summary"], "deactivated_workloads") for r in rs])[0]
    s = stats([get(r["summary"], "resubmitted_workloads") for r in rs])[0]
    return f"{fmt(d)} ({fmt(s)})" if d is not None else "n/a"


def model_table(runs: Sequence[Run]) -> list[str]:
    """Rows = run labels (with the resume share where not the default), each cell the mean over seeds
    (min-max where marked)."""
    lines = ["| policy | seeds | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    keys = sorted({(float(r["resume"]), r["label"]) for r in runs}, key=lambda k: (k[0], label_order(k[1])))
    for resume, label in keys:
        rs = [r for r in runs if r["label"] == label and float(r["resume"]) == resume]
        cells = []
        for head, fn, f, rng in COLUMNS:
            if head.startswith("deactivated"):
                cells.append(_resubmitted(rs))
                continue
            vals = [fn(r) for r in rs]
            cells.append(span(vals, f) if rng else f(stats(vals)[0]))
        lines.append(f"| {row_label(rs[0])} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def cap_section(runs: Sequence[Run], ref: tuple[str, int, float]) -> list[str]:
    rows = [r for r in runs if (r["model"], r["seed"], r["rate"]) == ref and not r["stall_reclaim"]
            and float(r["resume"]) == DEFAULT_RESUME]
    caps = sorted({r["cap"] for r in rows})
    swept = {r["policy"] for r in rows if r["cap"] != DEFAULT_CAP}
    if len(caps) < 2:
        return ["Not run here (a single worker cap): [sensitivity.md](sensitivity.md) sweeps it over the held-out "
                "weeks."]
    lines = [f"`{ref[0]}`, seed {ref[1]}, failure rate {ref[2]:g}; a team RayCluster's `maxReplicas` = its nominal "
             f"GPU quota x the factor (`--worker-cap-factor`, `SimConfig.ray_max_quota_factor`; the matrix uses "
             f"{DEFAULT_CAP:g}).", "",
             "| policy | cap factor | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|---:|" + "---:|" * len(COLUMNS)]
    for label in labels([r for r in rows if r["policy"] in swept]):
        for cap in caps:
            for r in rows:
                if r["label"] == label and r["cap"] == cap:
                    cells = [_resubmitted([r]) if h.startswith("deactivated") else f(fn(r)) for h, fn, f, _ in COLUMNS]
                    lines.append(f"| {label} | {cap:g} | " + " | ".join(cells) + " |")
    return lines


def helios_section(runs: Sequence[Run], helios: Mapping[str, float] | None) -> list[str]:
    shaped = [r for r in runs if r.get("shape")]
    if not helios:
        return ["Helios series not found (set QUEUEPILOT_SHARED)."]
    if not shaped:
        return ["No reference run in this matrix."]
    r0 = shaped[0]
    lines = [f"Pending GPUs over time, as a fraction of cluster GPUs (Helios Earth vc6YE, May 2020, 208 GPUs, per "
             f"minute; simulation: `{r0['model']}`, seed {r0['seed']}, failure rate {r0['rate']:g}, every 5 min). "
             "The simulated queue is the policy's own, so the check is of the trace replay's burstiness and "
             "daily cycle, not of a policy's quality.", "",
             "| series | time with pending GPUs | mean pending / GPUs | p95 pending / GPUs | "
             "hour-of-day peak/trough of mean pending | CV |", "|---|---:|---:|---:|---:|---:|"]
    for name, h in [("Helios vc6YE", helios)] + [(f"sim {r['label']}", r["shape"]) for r in shaped]:
        lines.append(f"| {name} | {h['share_minutes_pending']:.1%} | {h['pending_mean_frac']:.3f} | "
                     f"{h['pending_p95_frac']:.3f} | {h['hourly_peak_trough']:.1f} | {h['cv']:.1f} |")
    return lines


def budget_section(sweep: Mapping[str, Any] | None, meta: Mapping[str, Any]) -> list[str]:
    """What the idle-actor reclaim budget sweep (``reclaim_budget.py``) found, when it ran on this page's
    reference window (same start, length, seed and failure rate)."""
    if sweep is None:
        return ["No reclaim budget sweep (`benchmarks/reclaim_budget.py`) in this results folder."]
    sm, ref = sweep["meta"], meta["ref"]
    window = (sm["start"], float(sm["hours"]), int(sm["seed"]), float(sm["rate"]))
    if window != (meta["start"], float(meta["hours"]), int(ref[1]), float(ref[2])):
        return [f"The reclaim budget sweep in [reclaim_budget.md](reclaim_budget.md) ran on another window "
                f"({window[1]:g} h from {window[0]}, seed {window[2]}, rate {window[3]:g}): not compared here."]
    lines = [f"`queuepilot-reclaim` reclaims at most `scaling.reclaim_budget_per_hour` workers per RayCluster in "
             f"any hour (default {budget_sweep.DEFAULT_BUDGET}). [reclaim_budget.md](reclaim_budget.md) runs it at "
             f"budgets {', '.join(str(b) for b in sm['budgets'])} over this page's window ({window[1]:g} h from "
             f"{window[0]}), seed {ref[1]}, failure rate {ref[2]:g} (git {sm['git']}), against ray-idle on the same "
             "run; per model:", ""]
    for model in sm["models"]:
        base = budget_sweep.baseline(sweep["runs"], model)
        for stall in (False, True):
            rows = budget_sweep.series(sweep["runs"], model, stall)
            if rows:
                lines.append(f"- `{model}`{' +stall' if stall else ''}: " + budget_sweep.verdict(rows, base))
    return lines


# ------------------------------------------------------------------------------ scope, provenance
def matrix_kind(meta: Mapping[str, Any]) -> str | None:
    """``"full"`` or ``"quick"`` when a run's axes are exactly those of ``make bench-full`` / ``make bench``
    (``policy.py`` without flags / with ``--quick`` alone), else None (a partial or merged matrix, or one
    whose runs ``--labels`` chose)."""
    if meta.get("labels") is not None:
        return None
    mine = {k: meta.get(k) for k in AXES}
    for kind in ("full", "quick"):
        if mine == default_axes(quick=kind == "quick"):
            return kind
    return None


def _differs(key: str, meta: Mapping[str, Any], full: Mapping[str, Any]) -> bool:
    """Whether a page's axis says something else than the whole matrix's: a list in another order does not,
    nor the cap-sweep policies where neither sweeps the cap."""
    mine, theirs = meta.get(key), full[key]
    if key == "cap_policies" and not meta.get("caps") and not full["caps"]:
        return False
    if isinstance(mine, list) and isinstance(theirs, list):
        return sorted(map(str, mine)) != sorted(map(str, theirs))
    return bool(mine != theirs)


def _axis_text(key: str, value: Any) -> str:
    if key == "hours":
        return f"{float(value):g} h"
    if isinstance(value, list):
        return ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value) or "none"
    return str(value)


def scope(meta: Mapping[str, Any], n_runs: int) -> list[str]:
    """What the page covers, said exactly: which matrix it is, and every axis on which it differs from the
    whole matrix (``make bench-full``, ``policy.md``)."""
    kind = matrix_kind(meta)
    name = {"full": "the whole matrix (`make bench-full`)", "quick": "the quick matrix (`make bench`)"}.get(
        kind or "", "a partial matrix (neither `make bench` nor `make bench-full`)")
    if "merged_from" in meta:
        name = "a merge of several runs of this script"
    elif meta.get("labels") is not None:
        name = "only the runs labelled " + ", ".join(f"`{lab}`" for lab in meta["labels"]) + " of a matrix"
    held = meta.get("held_out") or []
    head = (f"**What this page covers**: {name}, {n_runs} runs: {float(meta['hours']):g} h from {meta['start']} "
            f"under {', '.join(meta.get('models') or [])}"
            + (f", and the held-out weeks {', '.join(held)}" if held else ", no held-out week") + ".")
    if kind == "full":
        return [head]
    full = default_axes(quick=False)
    diffs = [f"{AXES[k]} {_axis_text(k, meta.get(k))} here, {_axis_text(k, full[k])} there" for k in AXES
             if _differs(k, meta, full)]
    if not diffs:
        return [head]
    return [head + " Against the whole matrix ([policy.md](policy.md), `make bench-full`): " + "; ".join(diffs)
            + ". A verdict here rests on fewer runs than there, and a shorter window holds fewer long jobs "
            "and stalls: read it as a check, the whole matrix as the answer."]


def provenance(meta: Mapping[str, Any], n_runs: int) -> list[str]:
    """Who made the page: the command and commit of one run of this script, or each source of a merge;
    the machine, and the wall time the run took (measured)."""
    cost = (f"summed run seconds {meta['run_s_sum']:,.0f} s "
            + (f"({meta['run_cpu_s_sum']:,.0f} CPU s) " if "run_cpu_s_sum" in meta else "")
            + f"(simulation only; trace loading {meta['load_s_sum']:,.0f} s more)")
    dirty = " with uncommitted changes in the working tree" if meta.get("dirty") else ""
    python = f", {meta['python']}" if meta.get("python") else ""
    if "merged_from" not in meta:
        tgt = {"full": "make bench-full", "quick": "make bench"}.get(matrix_kind(meta) or "")
        return [f"Generated {meta['date']} by `{meta['command']}`"
                + (f" (`{tgt}` runs it)" if tgt else "") + f", git {meta['commit']}{dirty}.",
                f"Machine: {meta['machine']}, {meta['cores']} cores{python}; {meta['processes']} worker processes. "
                f"Wall time {meta['wall_s'] / 60:.1f} min for {n_runs} runs (measured); {cost}."]
    lines = [f"Merged {meta['date']} by `{meta['command']}` from {len(meta['merged_from'])} runs of this script over "
             f"the same window{dirty}: each run's numbers are those of the commit it ran at, and a run that more "
             "than one of them holds was checked to agree on every number both report (`merge` refuses otherwise). "
             "`make bench-full` runs the whole matrix in one go instead."
             + (" Runs labelled " + ", ".join(f"`{lab}`" for lab in meta["superseded"]) + " are the first source's "
                "that holds them, rerun because their decisions changed; the later sources' runs of those labels "
                "are dropped unread (`--supersede`)." if meta.get("superseded") else ""), ""]
    for src in meta["merged_from"]:
        wall = f", {float(src['wall_s']) / 60:.1f} min wall on {src['processes']} processes" if src.get("wall_s") else ""
        lines.append(f"- `{src['file']}`: {src['kept']} of its {src['runs']} runs kept; git {src['commit']}, "
                     f"{src['date']}{wall}: `{src['command']}`")
    lines += ["", f"Machine: {meta['machine']}, {meta['cores']} cores{python}. {n_runs} runs; wall time summed over the "
              f"sources {meta['wall_s'] / 60:.1f} min; {cost}."]
    return lines


# ---------------------------------------------------------------------------------------- page
def render(data: Mapping[str, Any], helios: Mapping[str, float] | None, prefix: str,
           sweep: Mapping[str, Any] | None = None) -> str:
    meta = data["meta"]
    runs: list[Run] = data["runs"]
    ref = (meta["ref"][0], int(meta["ref"][1]), float(meta["ref"][2]))
    page = in_window(runs, meta["start"], float(meta["hours"]))
    on_page = {id(r) for r in page}
    held = [r for r in runs if id(r) not in on_page]
    main = [r for r in page if r["cap"] == DEFAULT_CAP]
    models = [m for m in meta["models"] if any(r["model"] == m for r in page)]
    verdicts = evaluate_targets(main)
    resumes = sorted({float(r["resume"]) for r in page})
    lines = [
        "# Policy benchmark (trace-driven simulation, a matrix)",
        "",
        *provenance(meta, len(runs)),
        "",
        *scope(meta, len(runs)),
        "",
        f"Workload: Philly trace (`philly-pollux/philly.csv`), {meta['hours']:g} h from {meta['start']}; utilization "
        f"models {', '.join(f'`{m}`' for m in models)} (calibration: [utilization.md](utilization.md)); seeds "
        f"{', '.join(str(s) for s in meta['seeds'])}; GPU failure rates {', '.join(f'{x:g}' for x in meta['rates'])} "
        f"per GPU per day; cluster {runs[0]['total_gpus'] if runs else '?'} GPUs, contention as the simulator's "
        "default has it (cohort borrowing, 1-GPU Ray workers spread over nodes, multi-pod gangs, waitForPodsReady); "
        f"per-team worker cap {DEFAULT_CAP:g}x the team's nominal quota; share of long idle runs that resume "
        f"(`--stall-resume-share`) {', '.join(f'{x:g}' for x in resumes)}. Policies: {', '.join(meta['policies'])}"
        + (f"; at the first seed only: {', '.join(meta['side_policies'])}" if meta.get("side_policies") else "")
        + f"; `+stall`: the same policy with stall handling on (under {', '.join(meta['stall_models']) or 'no model'}). "
        "Every run is one process: `queuepilot simulate --util-model M --seed S --gpu-failure-rate R "
        f"--hours {meta['hours']:g} --start {meta['start']} --policies P [--stall-reclaim] [--stall-resume-share F] "
        "[--worker-cap-factor F]` gives the same numbers.",
        "",
        "Definitions (docs/simulation.md): *controllable idle* = idle-but-allocated GPU-hours a scaler could have "
        "removed (empty, starting, idle-actor and stalled workers); *total idle* adds the idle segments inside "
        "running jobs; *killed* = GPU-hours of work lost to a removal (a worker deleted mid-task, a workload "
        "deactivated before its final stall: redone from scratch); *delivered* = the GPU-hours of work jobs kept "
        "(allocated less idle less killed); *reclaimed* = ray-idle's total idle less the run's; waits by class: "
        "`ray_task` (1-GPU tasks on a team RayCluster), `single_pod` (a RayJob of one pod), `gang` (several pods); "
        "*bound* = the lower bound of controllable idle GPU-hours on that run.",
        "",
        "## What the scaler alone achieves",
        "",
        *scaler_alone_section(main, verdicts),
        "",
        "## Targets",
        "",
        *targets_section(main, verdicts),
        "## Decomposition: where each gain comes from",
        "",
        "Each step adds one part to the one before it: `ray-idle` (Ray's autoscaler, the admission check kept) -> "
        "`queuepilot` (queuepilot's scaler instead) -> `queuepilot-reclaim` (+ idle-actor reclaim) -> "
        "`queuepilot-reclaim+stall` (+ stall handling on Ray's evidence); the `reaper` (ray-idle + the GPU-idle "
        "rule) beside. Each step's contribution is its row less the row before it; a share of ray-idle's means the "
        "change over ray-idle's own number.",
        "",
        *decomposition_section(main),
        "## Held-out weeks",
        "",
        *held_out_section(held),
        "",
        "How the stall targets move with what no trace records (the stall share, the resume share, the worker cap, "
        "what Ray shows of a stall), on the held-out weeks: [sensitivity.md](sensitivity.md).",
        "",
        "## Each configuration against ray-idle",
        "",
        *summary_section(main),
    ]
    for model in models:
        lines += [f"## `{model}`", ""]
        for rate in meta["rates"]:
            rs = [r for r in main if r["model"] == model and r["rate"] == rate]
            if not rs:
                continue
            seeds = sorted({r["seed"] for r in rs})
            lines += [f"Failure rate {rate:g} per GPU per day; mean over seeds {', '.join(map(str, seeds))} "
                      "(min-max where shown); deactivated: workloads deactivated (those resubmitted with work left).",
                      "", *model_table(rs), ""]
    lines += ["## Per-team worker cap sweep", "", *cap_section(page, ref), "",
              "## Idle-actor reclaim budget", "", *budget_section(sweep, meta), "",
              "## Queue dynamics vs Helios (shape check, reported not asserted)", "", *helios_section(page, helios), "",
              "## Plots", "",
              f"- `{prefix}_controllable_idle.png`: controllable idle GPU-hours per policy, one panel per model, "
              "a bar per failure rate = mean over seeds, error bars = min-max over seeds.",
              f"- `{prefix}_wait_cdf.png`, `{prefix}_idle_gpu_hours.png`, `{prefix}_timeline.png`: the `{ref[0]}` "
              f"seed-{ref[1]} run at failure rate {ref[2]:g}."]
    if len({r["cap"] for r in page}) > 1:
        lines.append(f"- `{prefix}_cap_sweep.png`: the worker-cap sweep above, controllable idle and Ray-task p95 "
                     "wait against the cap factor.")
    return "\n".join(lines) + "\n"

