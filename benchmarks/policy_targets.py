"""The policy page's targets as pure functions of run records (``benchmarks/policy.py``'s JSON).

Each target compares a queuepilot configuration's run with the runs of its yardsticks on the same world
(trace window, model, seed, failure rate, worker cap and stall structure): ``kueue-quota`` for the
admission targets, the ``reaper`` (and ``ray-idle`` for what it reclaims) for the stall targets,
``ray-idle`` for the scaler's; issue #42's first, then those of issue #11 that still hold.  A target is
**met** for a scenario (everything but the seed and failure rate) when it holds in every paired run there;
not measurable when a yardstick did not run or a number is missing.  ``needed_labels`` says which runs a
scenario needs for the targets to be judged (the held-out weeks and the quick matrix run only those).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from benchmarks.policy_matrix import (
    BASELINE,
    DEFAULT_CAP,
    DEFAULT_HANG,
    DEFAULT_PAUSE_INVISIBLE,
    DEFAULT_REACTIVATE,
    DEFAULT_RESUME,
    MODELS,
    QUOTA,
    REAPER,
    STALL_RESUMES,
    START,
    is_queuepilot,
)
from simulator.engine import POLICIES

CLASSES = ("ray_task", "single_pod", "gang")  # the job classes waits are reported by (issue #42)
IDLE_CLASSES = ("empty", "starting", "idle_actor", "stalled", "in_job")
TOLERANCE = 1e-9  # float noise only: a value exactly at the limit meets the target
WAIT_TOLERANCE = 1.02  # "no worse" on a wait percentile: within 2 % (the tolerance kept from issue #11)

# the configuration the page states a target for, first present wins: queuepilot deployed to cut waste, both
# opt-ins on (idle-actor reclaim, stall handling), then with fewer of them
STATED = ("queuepilot-reclaim+stall", "queuepilot-reclaim", "queuepilot+stall", "queuepilot")
# the admission targets are the check's: stated for plain queuepilot, which differs from kueue-quota only
# by the check (the opt-ins free GPUs too, which would be counted as the check's)
ADMISSION_STATED = ("queuepilot", "queuepilot-reclaim", "queuepilot+stall", "queuepilot-reclaim+stall")
CONFIGS = ("queuepilot", "queuepilot+stall", "queuepilot-reclaim", "queuepilot-reclaim+stall")


# ------------------------------------------------------------------------------ reading numbers
def get(summary: Mapping[str, Any], key: str) -> float | None:
    """``summary[key]``, with ``a.b`` for nested keys; None when the simulator does not report it."""
    cur: Any = summary
    for part in key.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return None if cur is None else float(cur)


def delivered_gpu_hours(s: Mapping[str, Any]) -> float | None:
    """The GPU-hours of work the run delivered to jobs: ``delivered_gpu_hours`` when reported, else
    allocated less idle less killed (the simulator's definition) from a record that predates the key."""
    v = get(s, "delivered_gpu_hours")
    if v is not None:
        return v
    alloc, idle, killed = get(s, "allocated_gpu_hours"), get(s, "idle_gpu_hours"), get(s, "killed_gpu_hours")
    if alloc is None or idle is None:
        return None
    return max(0.0, alloc - idle - (killed or 0.0))


def ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    if b == 0:
        return 0.0 if a == 0 else math.inf
    return a / b


def reclaimed(s: Mapping[str, Any], ray: Mapping[str, Any]) -> float | None:
    """Idle GPU-hours a run took back against ray-idle's on the same world (ray-idle's less its own)."""
    a, b = get(ray, "idle_gpu_hours"), get(s, "idle_gpu_hours")
    return None if a is None or b is None else a - b


def share_of(a: float | None, b: float | None) -> float | None:
    """``a / b`` for a quantity the reference ``b`` may have none of (idle reclaimed): where ``b <= 0``,
    ``inf`` when ``a >= b`` (at least as much as the reference) and ``-inf`` otherwise."""
    if a is None or b is None:
        return None
    if b > 0:
        return a / b
    return math.inf if a >= b else -math.inf


def wait(s: Mapping[str, Any], quant: str, cls: str) -> float | None:
    return get(s, f"wait_{quant}_s_by_class.{cls}")


def worst_wait_ratio(q: Mapping[str, Any], y: Mapping[str, Any], classes: Sequence[str]) -> float | None:
    """The largest of ``q``'s p95 and p99 waits over ``y``'s, over ``classes``; None when one is missing."""
    worst: float | None = None
    for quant in ("p95", "p99"):
        for cls in classes:
            x = ratio(wait(q, quant, cls), wait(y, quant, cls))
            if x is None:
                return None
            worst = x if worst is None else max(worst, x)
    return worst


# ------------------------------------------------------------------------------------ scenarios
@dataclass(frozen=True, slots=True)
class Scenario:
    """What a verdict is over: a run's world but its seed and failure rate."""

    start: str
    hours: float
    model: str
    cap: float = DEFAULT_CAP
    resume: float = DEFAULT_RESUME
    stall_share: float | None = None
    pause_invisible: float = DEFAULT_PAUSE_INVISIBLE
    hang: float = DEFAULT_HANG
    reactivate: float = DEFAULT_REACTIVATE

    def order(self) -> tuple[Any, ...]:
        m = MODELS.index(self.model) if self.model in MODELS else len(MODELS)
        return (self.start, self.hours, m, self.model, self.cap, self.resume,
                -1.0 if self.stall_share is None else self.stall_share, self.pause_invisible, self.hang,
                self.reactivate)


def scenario_of(r: Mapping[str, Any]) -> Scenario:
    """A record's scenario; a record that predates a field has the default there (the page's start and
    720 h where it names no window: ``policy.normalize`` fills them from its page's meta)."""
    share = r.get("stall_share")
    return Scenario(str(r.get("start", START)), float(r.get("hours", 720.0)), r["model"],
                    float(r.get("cap", DEFAULT_CAP)), float(r.get("resume", DEFAULT_RESUME)),
                    None if share is None else float(share),
                    float(r.get("pause_invisible", DEFAULT_PAUSE_INVISIBLE)), float(r.get("hang", DEFAULT_HANG)),
                    float(r.get("reactivate", DEFAULT_REACTIVATE)))


def yardstick_key(r: Mapping[str, Any]) -> tuple[Any, ...]:
    """Where a yardstick run of ``r``'s world is looked up: the world but what Ray shows of a stall, which
    only stall handling reads (a yardstick at the default shares stands for every share)."""
    s = scenario_of(r)
    return (s.start, s.hours, s.model, s.cap, s.resume, s.stall_share, int(r["seed"]), float(r["rate"]))


def label_order(label: str) -> tuple[int, bool]:
    pol = label.removesuffix("+stall")
    pols = list(POLICIES)
    return (pols.index(pol) if pol in pols else len(pols), label.endswith("+stall"))


Pair = tuple[Mapping[str, Any], dict[str, Mapping[str, Any]]]


def pair_runs(runs: Iterable[Mapping[str, Any]], yardsticks: Sequence[str] = (BASELINE,)
              ) -> dict[tuple[Scenario, str], list[Pair]]:
    """(scenario, queuepilot label) -> [(its run, {yardstick: that yardstick's run on the same world})], a run
    only where every yardstick ran on its world (an empty list: none did)."""
    runs = list(runs)
    index: dict[tuple[str, tuple[Any, ...]], Mapping[str, Any]] = {}
    for r in runs:
        if not r.get("stall_reclaim"):
            index.setdefault((r["policy"], yardstick_key(r)), r)
    out: dict[tuple[Scenario, str], list[Pair]] = {}
    for r in sorted((r for r in runs if is_queuepilot(r["policy"])),
                    key=lambda r: (scenario_of(r).order(), label_order(r["label"]), r["seed"], r["rate"])):
        slot = out.setdefault((scenario_of(r), r["label"]), [])
        ys = {y: index.get((y, yardstick_key(r))) for y in yardsticks}
        if all(v is not None for v in ys.values()):
            slot.append((r, {y: v for y, v in ys.items() if v is not None}))
    return out


def ran(runs: Iterable[Mapping[str, Any]], scenario: Scenario, policy: str) -> bool:
    """Whether ``policy`` (without stall handling) ran on ``scenario`` (any seed)."""
    key = (scenario.start, scenario.hours, scenario.model, scenario.cap, scenario.resume, scenario.stall_share)
    return any(r["policy"] == policy and not r.get("stall_reclaim") and yardstick_key(r)[:6] == key for r in runs)


# ------------------------------------------------------------------------------------- targets
@dataclass(frozen=True)
class Target:
    key: str
    group: str  # "admission", "stall", "ray-idle" (issue #42), "scaler" (issue #11's kept)
    text: str
    limit: float
    value: Callable[[Mapping[str, Any], Mapping[str, Mapping[str, Any]]], float | None]  # (config, yardsticks)
    unit: str  # how the value reads: "x kueue-quota", "of delivered", "workloads", ...
    yardsticks: tuple[str, ...] = (BASELINE,)
    higher_is_better: bool = False
    models: tuple[str, ...] | None = None  # None: every model
    stall_only: bool = False  # judged only for the configurations with stall handling
    resumes: tuple[float, ...] | None = (DEFAULT_RESUME,)  # the resume shares it is judged at (None: every one)
    stated: tuple[str, ...] = STATED
    inf_note: str = ""  # what an infinite value means (a yardstick with none of the quantity)

    def meets(self, v: float) -> bool:
        return v >= self.limit - TOLERANCE if self.higher_is_better else v <= self.limit + TOLERANCE

    def applies(self, scenario: Scenario, label: str) -> bool:
        if self.models is not None and scenario.model not in self.models:
            return False
        if self.resumes is not None and scenario.resume not in self.resumes:
            return False
        return label.endswith("+stall") or not self.stall_only


TARGETS: tuple[Target, ...] = (
    # admission under contention (against kueue-quota: Kueue's quota alone, the same scaler)
    Target("unplaceable", "admission", "0 admitted-but-unplaceable workloads", 0.0,
           lambda q, y: get(q, "unplaceable_admissions"), "workloads", yardsticks=(QUOTA,), stated=ADMISSION_STATED),
    Target("gang_wait", "admission", "gang p95 and p99 wait <= 0.8x kueue-quota's", 0.8,
           lambda q, y: worst_wait_ratio(q, y[QUOTA], ("gang",)), "x kueue-quota (worse of p95, p99)",
           yardsticks=(QUOTA,), stated=ADMISSION_STATED),
    Target("other_wait", "admission", f"ray_task and single_pod p95 and p99 wait <= {WAIT_TOLERANCE:g}x kueue-quota's",
           WAIT_TOLERANCE, lambda q, y: worst_wait_ratio(q, y[QUOTA], ("ray_task", "single_pod")),
           "x kueue-quota (worst class and quantile)", yardsticks=(QUOTA,), stated=ADMISSION_STATED),
    # stall handling against the reaper (ray-idle + the GPU-idle rule), at resume shares 0.25 and 0.5
    Target("stall_killed", "stall", "killed GPU-hours <= 0.33x the reaper's", 0.33,
           lambda q, y: ratio(get(q, "killed_gpu_hours"), get(y[REAPER], "killed_gpu_hours")), "x the reaper's",
           yardsticks=(REAPER,), stall_only=True, resumes=STALL_RESUMES,
           inf_note="inf: the reaper killed nothing and this configuration some"),
    Target("stall_reclaimed", "stall", "idle GPU-hours reclaimed against ray-idle >= 0.9x the reaper's", 0.9,
           lambda q, y: share_of(reclaimed(q, y[BASELINE]), reclaimed(y[REAPER], y[BASELINE])), "x the reaper's",
           yardsticks=(REAPER, BASELINE), higher_is_better=True, stall_only=True, resumes=STALL_RESUMES,
           inf_note="the reaper took back no idle against ray-idle (its kills' reruns can add idle): inf = this "
                    "configuration took back at least as much, -inf = less"),
    Target("stall_delivered", "stall", "delivered GPU-hours >= the reaper's", 1.0,
           lambda q, y: ratio(delivered_gpu_hours(q), delivered_gpu_hours(y[REAPER])), "x the reaper's",
           yardsticks=(REAPER,), higher_is_better=True, stall_only=True, resumes=STALL_RESUMES),
    # against ray-idle (Ray's own autoscaler)
    Target("total_idle", "ray-idle", "total idle GPU-hours <= 0.7x ray-idle's under grounded", 0.70,
           lambda q, y: ratio(get(q, "idle_gpu_hours"), get(y[BASELINE], "idle_gpu_hours")), "x ray-idle",
           models=("grounded",)),
    Target("killed_work", "ray-idle", "killed GPU-hours <= 1 % of delivered", 0.01,
           lambda q, y: ratio(get(q, "killed_gpu_hours"), delivered_gpu_hours(q)), "of delivered", yardsticks=()),
    Target("wait_tails", "ray-idle",
           f"p95 and p99 wait per class (ray_task, single_pod, gang) no worse than ray-idle's (within "
           f"{WAIT_TOLERANCE:g}x)", WAIT_TOLERANCE,
           lambda q, y: worst_wait_ratio(q, y[BASELINE], CLASSES), "x ray-idle (worst class and quantile)"),
    # issue #11's, kept: what the scaler leaves, how close to the bound, no flapping
    Target("controllable_idle", "scaler", "controllable idle GPU-hours <= 40 % of ray-idle's", 0.40,
           lambda q, y: ratio(get(q, "idle_gpu_hours_controllable"), get(y[BASELINE], "idle_gpu_hours_controllable")),
           "x ray-idle"),
    Target("scale_down_after_up", "scaler", "0 scale-downs within 300 s after a scale-up", 0.0,
           lambda q, y: get(q, "scale_downs_after_up_300s"), "scale-downs", yardsticks=()),
    Target("bound", "scaler", "controllable idle within 1.5x of the lower bound", 1.5,
           lambda q, y: ratio(get(q, "idle_gpu_hours_controllable"), get(q, "lower_bound_idle_gpu_hours")),
           "x bound", yardsticks=()),
)
GROUPS = {"admission": "Admission under contention (against `kueue-quota`)",
          "stall": "Stall handling against the `reaper`, at resume shares "
                   + " and ".join(f"{r:g}" for r in STALL_RESUMES),
          "ray-idle": "Against `ray-idle`",
          "scaler": "Kept from issue #11"}


def target(key: str) -> Target:
    return next(t for t in TARGETS if t.key == key)


@dataclass(frozen=True)
class Verdict:
    target: str
    scenario: Scenario
    config: str  # the queuepilot run label judged (e.g. queuepilot, queuepilot-reclaim+stall)
    met: bool | None  # None: not measurable (a yardstick did not run, or a number is not reported)
    runs: int  # paired runs (seeds x failure rates)
    runs_met: int
    worst: float | None  # the worst value over those runs (the largest; the smallest where higher is better)
    mean: float | None
    limit: float
    missing: tuple[str, ...] = ()  # yardsticks that did not run on the scenario

    @property
    def model(self) -> str:
        return self.scenario.model


def _mean(vals: Sequence[float]) -> float | None:
    if all(math.isfinite(v) for v in vals):
        return sum(vals) / len(vals)
    infs = {math.copysign(1.0, v) for v in vals if math.isinf(v)}
    return math.inf * infs.pop() if len(infs) == 1 else None


def evaluate_targets(runs: Iterable[Mapping[str, Any]], targets: Sequence[Target] = TARGETS) -> list[Verdict]:
    """Each target, per scenario, per queuepilot configuration that ran there and that it applies to: met
    when it holds on every paired run (every seed and failure rate) of that scenario."""
    runs = list(runs)
    verdicts = []
    for t in targets:
        paired = pair_runs(runs, t.yardsticks)
        for (scn, label), pairs in paired.items():
            if not t.applies(scn, label):
                continue
            values = [t.value(q["summary"], {y: b["summary"] for y, b in ys.items()}) for q, ys in pairs]
            if not values or any(v is None for v in values):
                missing = tuple(y for y in t.yardsticks if not ran(runs, scn, y)) if not values else ()
                verdicts.append(Verdict(t.key, scn, label, None, len(values), 0, None, None, t.limit, missing))
                continue
            vals = [float(v) for v in values if v is not None]
            ok = sum(t.meets(v) for v in vals)
            worst = min(vals) if t.higher_is_better else max(vals)
            verdicts.append(Verdict(t.key, scn, label, ok == len(vals), len(vals), ok, worst, _mean(vals), t.limit))
    return verdicts


def primary(verdicts: Sequence[Verdict], key: str, scenario: Scenario) -> Verdict | None:
    """The verdict the page states for (target, scenario): the first configuration of the target's
    ``stated`` order that was judged there, else the first judged."""
    cands = [v for v in verdicts if v.target == key and v.scenario == scenario]
    order = target(key).stated if any(t.key == key for t in TARGETS) else STATED
    for name in order:
        for v in cands:
            if v.config == name:
                return v
    return cands[0] if cands else None


def needed_labels(model: str, resume: float, with_stall: bool, targets: Sequence[Target] = TARGETS) -> list[str]:
    """The runs a scenario needs for every target that applies there to be judged for its stated
    configuration: each target's yardsticks and the first configuration of its ``stated`` order that can
    run there (``with_stall``: the model has long idle runs, so the ``+stall`` configurations run)."""
    configs = [c for c in CONFIGS if with_stall or not c.endswith("+stall")]
    scn = Scenario(START, 0.0, model, resume=resume)
    out: list[str] = []
    for t in targets:
        cands = [c for c in configs if t.applies(scn, c)]
        if not cands:
            continue
        out += [*t.yardsticks, next(c for c in t.stated if c in cands)]
    return sorted(dict.fromkeys(out), key=label_order)
