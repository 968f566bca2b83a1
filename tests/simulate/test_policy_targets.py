"""benchmarks/policy.py: the targets are a pure function of the run records; each target is met at
its boundary and missed just past it, and the page says so."""

from __future__ import annotations

import math
from typing import Any

import pytest

from benchmarks import policy

RAY = {
    "idle_gpu_hours_controllable": 1000.0, "idle_gpu_hours": 2000.0, "allocated_gpu_hours": 50000.0,
    "killed_gpu_hours": 0.0, "unplaceable_admissions": 0, "scale_downs_after_up_300s": 0,
    "lower_bound_idle_gpu_hours": 200.0,
    "idle_gpu_hours_by_class": {"empty": 300.0, "starting": 50.0, "idle_actor": 400.0, "stalled": 250.0,
                                "in_job": 1000.0},
    "wait_p95_s_by_class": {"ray_task": 100.0, "workload": 1000.0},
    "wait_p99_s_by_class": {"ray_task": 500.0, "workload": 5000.0},
}


def qp_meeting_all() -> dict[str, Any]:
    """A queuepilot summary exactly at every limit against RAY."""
    return {
        "idle_gpu_hours_controllable": 300.0,  # 1.5x the bound (200) and 30 % of ray-idle's (<= 40 %)
        "idle_gpu_hours": 1400.0,  # 70 % of ray-idle's
        "allocated_gpu_hours": 51900.0,
        "killed_gpu_hours": 500.0,  # 1 % of delivered (no delivered_gpu_hours: 51,900 - 1,400 - 500)
        "unplaceable_admissions": 0, "scale_downs_after_up_300s": 0, "lower_bound_idle_gpu_hours": 200.0,
        "idle_gpu_hours_by_class": {"empty": 100.0, "starting": 50.0, "idle_actor": 100.0, "stalled": 50.0,
                                    "in_job": 1100.0},
        "wait_p95_s_by_class": {"ray_task": 102.0, "workload": 1000.0},  # +2 %
        "wait_p99_s_by_class": {"ray_task": 500.0, "workload": 5100.0},  # +2 %
    }


def runs(qp: dict[str, Any], *, label: str = "queuepilot", model: str = "grounded", seeds=(1,),
         ray: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    out = []
    for seed in seeds:
        stall = label.endswith("+stall")
        for pol, summ, st in ((label.removesuffix("+stall"), qp, stall), ("ray-idle", ray or RAY, False)):
            out.append({"model": model, "seed": seed, "rate": 0.01, "policy": pol, "stall_reclaim": st,
                        "cap": policy.DEFAULT_CAP, "label": policy.run_label(pol, st), "summary": summ, "secs": 1.0})
    return out


def verdict(vs, key: str, config: str = "queuepilot", model: str = "grounded"):
    [v] = [v for v in vs if v.target == key and v.config == config and v.model == model]
    return v


def test_every_target_met_exactly_at_its_limit() -> None:
    vs = policy.evaluate_targets(runs(qp_meeting_all()) + runs(qp_meeting_all(), label="queuepilot+stall"))
    for key in ("controllable_idle", "wait_tails", "killed_work", "unplaceable", "scale_down_after_up", "bound"):
        v = verdict(vs, key)
        assert v.met is True, key
        assert v.runs == v.runs_met == 1
    assert verdict(vs, "total_idle", "queuepilot+stall").met is True
    assert verdict(vs, "wait_tails").worst == pytest.approx(1.02)
    assert verdict(vs, "bound").worst == pytest.approx(1.5)


@pytest.mark.parametrize(("key", "path", "value"), [
    ("controllable_idle", ("idle_gpu_hours_controllable",), 401.0),  # bound 200: 2.0x -> bound missed too
    ("wait_tails", ("wait_p95_s_by_class", "ray_task"), 102.1),
    ("wait_tails", ("wait_p99_s_by_class", "workload"), 5101.0),
    ("killed_work", ("killed_gpu_hours",), 500.1),
    ("unplaceable", ("unplaceable_admissions",), 1),
    ("scale_down_after_up", ("scale_downs_after_up_300s",), 1),
    ("bound", ("lower_bound_idle_gpu_hours",), 199.0),
])
def test_each_target_missed_just_past_its_limit(key: str, path: tuple[str, ...], value: float) -> None:
    qp = qp_meeting_all()
    slot = qp
    for part in path[:-1]:
        slot[part] = dict(slot[part])
        slot = slot[part]
    slot[path[-1]] = value
    vs = policy.evaluate_targets(runs(qp))
    assert verdict(vs, key).met is False
    missed = {v.target for v in vs if v.met is False}
    expected = {key, "bound"} if key == "controllable_idle" else {key}
    assert missed == expected


def test_total_idle_judged_only_with_stall_reclaim_under_grounded() -> None:
    qp = qp_meeting_all() | {"idle_gpu_hours": 1401.0}
    vs = policy.evaluate_targets(runs(qp) + runs(qp, label="queuepilot+stall")
                                 + runs(qp, model="serving") + runs(qp, label="queuepilot+stall", model="serving"))
    total = [v for v in vs if v.target == "total_idle"]
    assert [(v.model, v.config, v.met) for v in total] == [("grounded", "queuepilot+stall", False)]


def test_met_only_when_every_seed_meets_it() -> None:
    good, bad = qp_meeting_all(), qp_meeting_all() | {"unplaceable_admissions": 2}
    rs = runs(good, seeds=(1, 2)) + [r for r in runs(bad, seeds=(3,))]
    v = verdict(policy.evaluate_targets(rs), "unplaceable")
    assert (v.met, v.runs, v.runs_met, v.worst) == (False, 3, 2, 2.0)


def test_missing_numbers_and_missing_baseline_are_not_measured() -> None:
    qp = {k: v for k, v in qp_meeting_all().items() if k != "lower_bound_idle_gpu_hours"}
    vs = policy.evaluate_targets(runs(qp))
    assert verdict(vs, "bound").met is None
    assert verdict(vs, "controllable_idle").met is True
    lonely = [r for r in runs(qp_meeting_all()) if r["policy"] != "ray-idle"]
    v = verdict(policy.evaluate_targets(lonely), "controllable_idle")
    assert (v.met, v.runs) == (None, 0)


def test_zero_baseline_ratio() -> None:
    assert policy.ratio(0.0, 0.0) == 0.0
    assert math.isinf(policy.ratio(1.0, 0.0))


def test_page_states_verdicts_and_why_from_numbers() -> None:
    """The page states each target for the configuration with the most opt-ins that ran (here
    queuepilot-reclaim, which misses one target); plain queuepilot, which meets it, follows."""
    qp = qp_meeting_all() | {"scale_downs_after_up_300s": 3}
    rs = runs(qp_meeting_all()) + runs(qp, label="queuepilot-reclaim")
    lines = "\n".join(policy.targets_section(rs, ["grounded"]))
    assert "`grounded`: **NOT MET** by queuepilot-reclaim (0/1 runs; worst 3" in lines
    assert "queuepilot: met (1/1 runs; worst 0" in lines
    assert "`grounded`: **MET** by queuepilot-reclaim (1/1 runs; worst 1.020x" in lines
    assert "*scale_down_after_up*: queuepilot-reclaim (1 of 1 runs over the limit): up to 3 scale-downs" in lines


def test_the_stated_configuration_has_the_most_opt_ins() -> None:
    rs = (runs(qp_meeting_all()) + runs(qp_meeting_all(), label="queuepilot+stall")
          + runs(qp_meeting_all(), label="queuepilot-reclaim+stall"))
    verdicts = policy.evaluate_targets(rs)
    assert policy.primary(verdicts, "controllable_idle", "grounded").config == "queuepilot-reclaim+stall"
    only = policy.evaluate_targets(runs(qp_meeting_all()) + runs(qp_meeting_all(), label="queuepilot+stall"))
    assert policy.primary(only, "wait_tails", "grounded").config == "queuepilot+stall"


def test_delivered_is_the_reported_key_else_allocated_less_idle_and_killed() -> None:
    assert policy.delivered_gpu_hours({"delivered_gpu_hours": 7.0, "allocated_gpu_hours": 100.0}) == 7.0
    old = {"allocated_gpu_hours": 100.0, "idle_gpu_hours": 30.0, "killed_gpu_hours": 5.0}
    assert policy.delivered_gpu_hours(old) == 65.0
    assert policy.delivered_gpu_hours({"allocated_gpu_hours": 100.0}) is None


def test_cap_sweep_plot_is_drawn_only_with_a_sweep(tmp_path) -> None:
    base = runs(qp_meeting_all())
    assert policy.plot_cap_sweep(tmp_path / "none.png", base) is False
    assert not (tmp_path / "none.png").exists()
    swept = base + [dict(r, cap=c) for r in base for c in (1.0, 4.0)]
    assert policy.plot_cap_sweep(tmp_path / "sweep.png", swept) is True
    assert (tmp_path / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _sweep(start: str = "2017-10-03", hours: float = 720.0, seed: int = 1, rate: float = 0.01) -> dict[str, Any]:
    def s(ctrl: float) -> dict[str, Any]:
        return {**RAY, "idle_gpu_hours_controllable": ctrl, "actors_killed": 10}

    runs = [{"policy": "ray-idle", "model": "scattered", "budget": None, "stall_reclaim": False, "clusters": 5,
             "summary": s(1000.0)}]
    runs += [{"policy": "queuepilot-reclaim", "model": "scattered", "budget": b, "stall_reclaim": False,
              "clusters": 5, "summary": s(c)} for b, c in ((4, 700.0), (64, 350.0))]
    return {"meta": {"start": start, "hours": hours, "seed": seed, "rate": rate, "models": ["scattered"],
                     "budgets": [4, 64], "git": "abc"}, "runs": runs}


def test_the_budget_section_quotes_the_sweep_only_on_the_same_window() -> None:
    meta = {"start": "2017-10-03", "hours": 720.0, "ref": ["grounded", 1, 0.01]}
    text = "\n".join(policy.budget_section(_sweep(), meta))
    assert "- `scattered`: the smallest budget here within 40% of ray-idle's controllable idle is 64 (35%)" in text
    assert "git abc" in text
    other = "\n".join(policy.budget_section(_sweep(seed=2), meta))
    assert "ran on another window" in other and "smallest budget" not in other
    assert "No reclaim budget sweep" in policy.budget_section(None, meta)[0]
