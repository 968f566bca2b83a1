"""benchmarks/policy.py: the two matrices the Makefile runs (the whole one, `make bench-full`; the quick one,
`make bench`), the held-out runs the targets need, what a page says it covers, and the plan it prints from a
run's costs."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import policy
from benchmarks import policy_matrix as pm
from benchmarks import policy_page as page
from benchmarks.policy_targets import needed_labels
from tests.simulate.policy_records import record, source


def _axes(*argv: str) -> dict[str, Any]:
    return policy.axes(policy.build_parser().parse_args(list(argv)))


def _kinds(tasks) -> Counter:
    return Counter((t.start, t.model, t.resume, t.label) for t in tasks)


def test_the_whole_matrix_is_the_month_with_what_the_targets_need_and_the_held_out_weeks() -> None:
    full = _axes()
    assert (full["hours"], full["seeds"], full["rates"], full["caps"]) == (720.0, [1], [0.01], [])
    assert full["held_out"] == ["2017-09-26", "2017-11-02", "2017-11-09", "2017-11-30"]
    tasks = policy.matrix(full)
    month = [t for t in tasks if t.start == "2017-10-03"]
    held = [t for t in tasks if t.start != "2017-10-03"]
    assert all(t.hours == 720.0 for t in month) and all(t.hours == 168.0 and t.seed == 1 for t in held)
    # every policy under every model, seed 1 (the held-out weeks are the replication)
    assert {(t.model, t.label) for t in month if not t.stall_reclaim and t.resume == 0.25} == {
        (m, p) for m in ("grounded", "scattered", "serving") for p in policy.POLICIES}
    assert {t.seed for t in tasks} == {1}
    # stall handling under the stall models, both queuepilot policies; at resume 0.5 what the stall targets compare
    half = {(t.model, t.label) for t in month if t.resume == 0.5}
    assert half == {(m, lab) for m in ("grounded", "serving")
                    for lab in ("ray-idle", "reaper", "queuepilot+stall", "queuepilot-reclaim+stall")}
    assert not [t for t in month if t.model == "scattered" and (t.stall_reclaim or t.resume != 0.25)]
    assert len(month) == 15 + 9 + 4 + 8
    # each held-out week: per model the runs the targets need there (policy_targets.needed_labels)
    per_week = Counter(t.start for t in held)
    assert per_week == {w: 20 for w in pm.HELD_OUT}
    week = {(t.model, t.resume, t.label) for t in held if t.start == "2017-11-02"}
    assert {lab for m, r, lab in week if (m, r) == ("scattered", 0.25)} == {
        "queuepilot", "queuepilot-reclaim", "ray-idle", "kueue-quota"}
    assert {lab for m, r, lab in week if (m, r) == ("serving", 0.5)} == {"ray-idle", "reaper", "queuepilot-reclaim+stall"}
    assert len(tasks) == len(set(tasks)) == 116
    # more seeds: the target policies at each, the other baselines at the first only
    three = policy.matrix(_axes("--seeds", "1,2,3", "--held-out", ""))
    assert sorted(t.seed for t in three if (t.model, t.label, t.resume) == ("serving", "reaper", 0.25)) == [1, 2, 3]
    assert [t.seed for t in three if (t.model, t.label) == ("serving", "keda")] == [1]


def test_the_quick_matrix_is_one_week_under_grounded_with_the_runs_its_targets_need() -> None:
    quick = _axes("--quick")
    assert (quick["hours"], quick["models"], quick["seeds"], quick["held_out"]) == (168.0, ["grounded"], [1], [])
    tasks = policy.matrix(quick)
    need = {(r, lab) for r in (0.25, 0.5) for lab in needed_labels("grounded", r, True)}
    assert {(t.resume, t.label) for t in tasks} == need
    assert len(tasks) == 8 and all(t.hours == 168.0 and t.seed == 1 for t in tasks)


def test_every_axis_has_its_flag() -> None:
    ax = _axes("--quick", "--models", "grounded,serving", "--rates", "0.01,0.05", "--held-out", "2017-11-02",
               "--held-out-hours", "24", "--resumes", "", "--caps", "1,4")
    tasks = policy.matrix(ax)
    assert {t.rate for t in tasks if t.start == "2017-10-03"} == {0.01, 0.05}
    assert not [t for t in tasks if t.resume != 0.25]
    held = [t for t in tasks if t.start == "2017-11-02"]
    assert held and all(t.hours == 24.0 and t.rate == 0.01 for t in held)  # the first rate only
    assert {(t.policy, t.cap) for t in tasks if t.cap != pm.DEFAULT_CAP} == {
        (p, c) for p in ("queuepilot", "ray-idle") for c in (1.0, 4.0)}


def _page(axes: dict[str, Any], **meta: Any) -> str:
    runs = [record("grounded", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "queuepilot")]
    data = source("aaa", runs, hours=axes["hours"], wall_s=754.0)
    data["meta"].update(axes, quick=False, **meta)
    return page.render(policy.normalize(data), None, "policy")


def test_the_whole_matrix_page_names_its_make_target_and_the_wall_time_it_took() -> None:
    text = _page(_axes())
    assert "(`make bench-full` runs it)" in text
    assert "Wall time 12.6 min for 2 runs (measured)" in text
    assert ("**What this page covers**: the whole matrix (`make bench-full`), 2 runs: 720 h from 2017-10-03 under "
            "grounded, scattered, serving, and the held-out weeks 2017-09-26, 2017-11-02, 2017-11-09, 2017-11-30.") in text
    assert "Against the whole matrix" not in text


def test_the_quick_page_says_exactly_what_it_leaves_out_of_the_whole_matrix() -> None:
    text = _page(_axes("--quick"))
    assert "(`make bench` runs it)" in text
    assert "**What this page covers**: the quick matrix (`make bench`)" in text
    assert ("Against the whole matrix ([policy.md](policy.md), `make bench-full`): window 168 h here, 720 h there; "
            "models grounded here, grounded, scattered, serving there; policies at every seed queuepilot, ray-idle, "
            "kueue-quota, reaper here, queuepilot, queuepilot-reclaim, ray-idle, kueue-quota, reaper there; baselines at the first seed only none here, static, hpa, keda there; "
            "`+stall` runs under grounded here, grounded, serving there;") in text
    assert "held-out weeks none here, 2017-09-26, 2017-11-02, 2017-11-09, 2017-11-30 there." in text


def test_a_partial_matrix_is_neither() -> None:
    text = _page(_axes("--models", "grounded", "--rates", "0.01,0.05"))
    assert "runs it)" not in text
    assert "a partial matrix (neither `make bench` nor `make bench-full`)" in text
    assert "failure rates 0.01, 0.05 here, 0.01 there" in text


def test_the_plan_counts_the_runs_and_packs_their_costs_onto_the_processes(tmp_path: Path, capsys) -> None:
    # 0.5 CPU s per simulated hour for every (model, label) of the quick matrix, but ray-idle's at 1.0
    labels = {(t.model, t.label) for t in policy.matrix(_axes("--quick"))}
    costs = source("ccc", [record(m, 1, 0.01, lab.removesuffix("+stall"), stall=lab.endswith("+stall"), hours=100.0)
                           for m, lab in sorted(labels)], hours=100.0)
    for r in costs["runs"]:
        r["cpu_s"] = 100.0 if r["policy"] == "ray-idle" else 50.0
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(costs))
    assert policy.main(["--quick", "--plan", "--costs-from", str(path), "--jobs", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "8 runs: 8 of 168 h from the page's start (4 at every seed, 1 +stall, 3 at other resume shares)" in out
    # ray-idle: 2 runs of 168 s; the other 6 runs 84 s each: 840 s in all; packed 168+84+84+84 on each process
    assert "summed run CPU seconds ~840 s, the longest run ~168 s; wall on 2 processes ~7.0 min" in out
    assert policy.pack([3.0, 3.0, 2.0, 2.0, 2.0], 2) == 7.0


def test_a_page_written_before_the_newer_axes_reads_as_the_defaults() -> None:
    old = {"meta": {"start": "2017-10-03", "hours": 720.0, "models": ["grounded"]},
           "runs": [{"model": "grounded", "seed": 1, "rate": 0.01, "policy": "ray-idle", "stall_reclaim": False,
                     "label": "ray-idle", "summary": {}}]}
    data = policy.normalize(old)
    [r] = data["runs"]
    assert (r["start"], r["hours"], r["cap"], r["resume"], r["stall_share"]) == ("2017-10-03", 720.0, 2.0, 0.25, None)
    assert data["meta"]["held_out"] == [] and data["meta"]["held_out_hours"] == 168.0


def test_labels_keep_only_the_runs_of_those_configurations_and_the_page_says_so(tmp_path: Path, capsys) -> None:
    ax = _axes("--models", "grounded")
    every = policy.matrix(ax)
    stall = policy.select(every, ["queuepilot+stall", "queuepilot-reclaim+stall"])
    assert stall and {t.label for t in stall} == {"queuepilot+stall", "queuepilot-reclaim+stall"}
    assert stall == [t for t in every if t.stall_reclaim]  # every +stall run, month and held-out weeks, in order
    assert policy.select(every, None) == every
    try:
        policy.select(every, ["static+stall"])
        raise AssertionError("a label the matrix lacks was taken")
    except SystemExit as e:
        assert "no runs labelled ['static+stall']" in str(e)
    # the whole matrix's axes, but only some of its runs: not the whole matrix
    meta = {**_axes(), "start": "2017-10-03", "labels": ["reaper"]}
    assert page.matrix_kind(meta) is None and page.matrix_kind(_axes()) == "full"
    assert "only the runs labelled `reaper` of a matrix" in page.scope(meta, 3)[0]
