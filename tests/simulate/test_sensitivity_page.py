"""benchmarks/sensitivity.py: the sweep's runs (one knob at a time, the yardsticks shared where a knob is only
stall handling's), the targets judged at each point on every week, and the page and plots from the records."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from benchmarks import sensitivity as sens
from tests.simulate.policy_records import RAY, REAPER, qp_meeting_all, record

WEEKS = ("2017-11-02", "2017-11-30")


def test_the_sweep_moves_one_knob_at_a_time_and_runs_the_yardsticks_only_where_they_read_the_knob() -> None:
    tasks = sens.build(sens.HELD_OUT, ["grounded"], 1, 0.01, 168.0, {k: v[1] for k, v in sens.KNOBS.items()})
    per_week = Counter(t.start for t in tasks)
    # centre 3; stall share 0.5x, 1.5x x 3; resume 0, 0.5, 0.75 x 3; cap 1, 4 x 3; pause-invisible, hang,
    # reactivate 2 x 1
    assert per_week == {w: 3 + 6 + 9 + 6 + 2 + 2 + 2 for w in sens.HELD_OUT}
    off = [t for t in tasks if t.pause_invisible != 0.2 or t.hang != 0.1 or t.reactivate != 0.5]
    assert {t.label for t in off} == {"queuepilot-reclaim+stall"}
    shares = sorted({t.stall_share for t in tasks if t.stall_share is not None})
    assert shares == [0.185, 0.555]  # 0.5x and 1.5x grounded's fitted 0.37; 1x is the centre
    assert all(t.hours == 168.0 and t.seed == 1 for t in tasks)
    # serving has a stall share of its own; scattered none, so it gets no stall-share points
    assert not [t for t in sens.build(WEEKS, ["scattered"], 1, 0.01, 168.0, {"stall_share": [0.5]})
                if t.stall_share is not None]


def _run(week: str, label: str, summary: dict[str, Any], **knobs: Any) -> dict[str, Any]:
    pol, stall = label.removesuffix("+stall"), label.endswith("+stall")
    r = record("grounded", 1, 0.01, pol, stall=stall, start=week, hours=168.0, summary=summary)
    r.update(knobs)
    return r


def _records() -> list[dict[str, Any]]:
    """Two weeks at the centre (every target met), at resume 0.5 the second week kills 0.6x the reaper's,
    and at pause-invisible share 1 (stall handling's run only) the first week kills too much."""
    out = []
    for week in WEEKS:
        out += [_run(week, "queuepilot-reclaim+stall", qp_meeting_all()), _run(week, "reaper", REAPER),
                _run(week, "ray-idle", RAY)]
        late = qp_meeting_all() | ({"killed_gpu_hours": 600.0} if week == WEEKS[1] else {})
        out += [_run(week, "queuepilot-reclaim+stall", late, resume=0.5), _run(week, "reaper", REAPER, resume=0.5),
                _run(week, "ray-idle", RAY, resume=0.5)]
    out.append(_run(WEEKS[0], "queuepilot-reclaim+stall", qp_meeting_all() | {"killed_gpu_hours": 400.0},
                    pause_invisible=1.0))
    return out


def test_each_point_is_judged_on_every_week_against_its_own_yardsticks() -> None:
    runs = _records()
    assert sens.point_of(runs[0]) is None and sens.point_of(runs[3]) == ("resume", 0.5)
    centre = sens.verdicts_at(runs, "resume", 0.25)
    assert {(v.target, v.scenario.start) for v in centre if v.met} == {
        (k, w) for k in sens.TARGET_KEYS for w in WEEKS}
    half = {(v.target, v.scenario.start): v.met for v in sens.verdicts_at(runs, "resume", 0.5)}
    assert half[("stall_killed", WEEKS[1])] is False and half[("stall_killed", WEEKS[0])] is True
    # the pause-invisible point pairs stall handling's run with the centre's reaper and ray-idle
    hidden = {(v.target, v.scenario.start): v for v in sens.verdicts_at(runs, "pause_invisible", 1.0)}
    assert set(hidden) == {(k, WEEKS[0]) for k in sens.TARGET_KEYS}
    assert hidden[("stall_killed", WEEKS[0])].met is False and hidden[("stall_killed", WEEKS[0])].worst == 0.4


def test_the_page_says_where_each_target_holds_and_where_it_breaks() -> None:
    runs = _records()
    text = "\n".join(sens.knob_section(runs, "resume", [0.25, 0.5], "grounded", list(WEEKS)))
    assert "| 0.5 | 1/2 weeks (worst 0.60x) | 2/2 weeks (worst 0.90x) |" in text
    assert ("- **stall_killed** (killed GPU-hours <= 0.33x the reaper's): holds at 0.25 (default); breaks at 0.5 "
            "(2017-11-30 0.60x).") in text
    assert "- **stall_delivered** (delivered GPU-hours >= the reaper's): holds at 0.25 (default), 0.5." in text
    # the means behind it: killed (the reaper's), reclaimed against ray-idle (the reaper's), delivered
    assert "| 465 (1,000) | 600 (667) | 33,000 (33,000) |" in text


def test_render_only_writes_the_page_and_a_plot_per_knob(tmp_path) -> None:
    data = {"meta": {"command": "sensitivity.py", "date": "d", "commit": "abc", "dirty": False, "machine": "m",
                     "python": "CPython", "cores": 2, "processes": 2, "wall_s": 60.0, "run_cpu_s_sum": 100.0,
                     "trace": "t", "weeks": list(WEEKS), "hours": 168.0, "models": ["grounded"], "seed": 1,
                     "rate": 0.01, "sweeps": {"resume": [0.25, 0.5], "pause_invisible": [0.2, 1.0]}, "name": "s"},
            "runs": _records()}
    (tmp_path / "s.json").write_text(json.dumps(data))
    assert sens.main(["--render-only", "--out", str(tmp_path), "--name", "s"]) == 0
    text = (tmp_path / "s.md").read_text()
    assert text.startswith("# Sensitivity of the stall targets (held-out weeks)")
    assert "**What this page covers**: the Philly weeks 2017-11-02, 2017-11-30 (168 h each" in text
    assert "### pause-invisible share (pauses Ray shows nothing of) (`grounded`)" in text
    for knob in ("resume", "pause_invisible"):
        assert (tmp_path / f"s_{knob}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _page(tmp_path, runs: list[dict[str, Any]]) -> None:
    data = {"meta": {"command": "sensitivity.py", "date": "then", "commit": "old", "dirty": False, "machine": "m",
                     "python": "CPython", "cores": 2, "processes": 2, "wall_s": 60.0, "run_cpu_s_sum": 100.0,
                     "trace": "t", "weeks": list(WEEKS), "hours": 168.0, "models": ["grounded"], "seed": 1,
                     "rate": 0.01, "sweeps": {"resume": [0.25, 0.5]}, "name": "s"}, "runs": runs}
    (tmp_path / "s.json").write_text(json.dumps(data))


def _fake_runs(monkeypatch, summary_of) -> list[list[str]]:
    """``policy.run_matrix`` answering each task with ``summary_of(task)``; returns what each call ran."""
    calls: list[list[str]] = []

    def run_matrix(tasks, *_a, **_k):
        calls.append([f"{t.label}@{t.start}@{t.resume:g}" for t in tasks])
        out = []
        for t in tasks:
            r = record(t.model, t.seed, t.rate, t.policy, stall=t.stall_reclaim, start=t.start, hours=t.hours,
                       resume=t.resume, summary=summary_of(t))
            out.append({**r, "reactivate": t.reactivate})
        return out
    monkeypatch.setattr(sens.policy, "run_matrix", run_matrix)
    monkeypatch.setattr(sens.policy, "_git", lambda *a: "new" if a[0] == "rev-parse" else "")
    return calls


ARGS = ["--weeks", ",".join(WEEKS), "--knobs", "resume", "--resume-values", "0.25,0.5", "--name", "s",
        "--rerun", "queuepilot-reclaim+stall", "--jobs", "1", "--no-progress"]


def test_rerun_runs_one_label_after_checking_the_others_and_keeps_their_runs(tmp_path, monkeypatch) -> None:
    _page(tmp_path, _records())
    yardstick = {"reaper": REAPER, "ray-idle": RAY}
    calls = _fake_runs(monkeypatch, lambda t: yardstick.get(t.label) or qp_meeting_all() | {"killed_gpu_hours": 111.0})
    assert sens.main([*ARGS, "--out", str(tmp_path)]) == 0
    # the checks first (the others at the defaults on the first week), then the label's runs only
    assert calls == [[f"reaper@{WEEKS[0]}@0.25", f"ray-idle@{WEEKS[0]}@0.25"],
                     [f"queuepilot-reclaim+stall@{w}@{r:g}" for w in WEEKS for r in (0.25, 0.5)]]
    data = json.loads((tmp_path / "s.json").read_text())
    got = {(r["label"], r["start"], r["resume"]): (r["commit"], r["summary"]["killed_gpu_hours"]) for r in data["runs"]}
    assert got[("queuepilot-reclaim+stall", WEEKS[1], 0.5)] == ("new", 111.0)
    assert got[("reaper", WEEKS[1], 0.5)] == ("old", 1000.0) and got[("reaper", WEEKS[0], 0.25)] == ("new", 1000.0)
    assert len(data["runs"]) == 12 and data["meta"]["rerun"]["reused"] == 6
    assert "the 6 runs of the other labels are the page's of git old (then)" in (tmp_path / "s.md").read_text()


def test_rerun_refuses_when_a_checked_run_moved_before_running_the_rest(tmp_path, monkeypatch) -> None:
    _page(tmp_path, _records())
    calls = _fake_runs(monkeypatch, lambda t: {**REAPER, "killed_gpu_hours": 999.0} if t.label == "reaper" else RAY)
    try:
        sens.main([*ARGS, "--out", str(tmp_path)])
        raise AssertionError("a moved yardstick was reused")
    except SystemExit as e:
        assert "reaper on 2017-11-02 now differs" in str(e) and "killed_gpu_hours: 1000.0 -> 999.0" in str(e)
    assert len(calls) == 1  # the long part never ran
