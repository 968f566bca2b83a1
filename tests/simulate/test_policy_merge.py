"""benchmarks/policy.py --merge: one matrix from several runs of the script over the same window; a run
two sources hold must agree on every number both report, else the merge refuses."""

from __future__ import annotations

import json

import pytest

from benchmarks import policy
from tests.simulate.policy_records import record, source


def K(model: str, seed: int, rate: float, label: str, resume: float = 0.25, start: str = "2017-10-03",
      hours: float = 720.0) -> tuple:
    """A run's key at the simulator's defaults but what is named."""
    return (start, hours, model, seed, rate, label, 2.0, resume, None, 0.2, 0.1, 0.5)


def test_disjoint_sources_give_their_union_with_each_runs_commit() -> None:
    a = source("aaa", [record("serving", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "ray-idle")])
    b = source("bbb", [record("grounded", 2, 0.05, "static"), record("grounded", 1, 0.01, "queuepilot", stall=True)])
    data = policy.merge([("a.json", a), ("b.json", b)], "merge a b")
    keys = [policy.run_key(r) for r in data["runs"]]
    # matrix order: window, model, seed, rate, resume share, then the simulator's policy order
    assert keys == [K("grounded", 1, 0.01, "queuepilot+stall"), K("grounded", 1, 0.01, "ray-idle"),
                    K("grounded", 2, 0.05, "static"), K("serving", 1, 0.01, "ray-idle")]
    commits = {policy.run_key(r): r["commit"] for r in data["runs"]}
    assert commits[K("grounded", 2, 0.05, "static")] == "bbb"
    assert commits[K("serving", 1, 0.01, "ray-idle")] == "aaa"
    meta = data["meta"]
    assert meta["models"] == ["grounded", "serving"] and meta["seeds"] == [1, 2] and meta["rates"] == [0.01, 0.05]
    assert meta["stall_models"] == ["grounded"] and meta["policies"] == ["queuepilot", "static", "ray-idle"]
    assert meta["commit"] == "aaa, bbb" and meta["wall_s"] == 120.0 and meta["run_cpu_s_sum"] == 36.0
    assert [(s["file"], s["runs"], s["kept"]) for s in meta["merged_from"]] == [("a.json", 2, 2), ("b.json", 2, 2)]


def test_a_run_both_hold_is_kept_once_and_a_number_only_one_reports_is_taken() -> None:
    old = source("old", [record("grounded", 1, 0.01, "ray-idle", idle=5.0)])
    new = source("new", [record("grounded", 1, 0.01, "ray-idle", idle=5.0, actors_killed=3),
                         record("grounded", 1, 0.01, "static", idle=9.0)])
    data = policy.merge([("old.json", old), ("new.json", new)], "merge")
    [ray] = [r for r in data["runs"] if r["policy"] == "ray-idle"]
    assert ray["summary"] == {"idle_gpu_hours_controllable": 5.0, "actors_killed": 3}
    assert ray["commit"] == "old"
    assert [(s["runs"], s["kept"]) for s in data["meta"]["merged_from"]] == [(1, 1), (2, 1)]


def test_sources_that_disagree_on_a_run_are_refused_with_the_first_difference() -> None:
    a = source("aaa", [record("grounded", 1, 0.01, "ray-idle", by={"empty": 1.0, "stalled": 2.0})])
    b = source("bbb", [record("grounded", 1, 0.01, "ray-idle", by={"empty": 1.0, "stalled": 2.5})])
    with pytest.raises(ValueError, match=r"b\.json and a\.json disagree on \('2017-10-03', 720\.0, 'grounded', 1, "
                                         r"0\.01, 'ray-idle', 2\.0, 0\.25, None, 0\.2, 0\.1, 0\.5\): by\.stalled: 2\.0 against 2\.5"):
        policy.merge([("a.json", a), ("b.json", b)], "merge")


def test_another_window_is_refused() -> None:
    a = source("aaa", [record("grounded", 1, 0.01, "ray-idle")])
    b = source("bbb", [record("grounded", 2, 0.01, "ray-idle")], hours=168.0)
    with pytest.raises(ValueError, match=r"b\.json ran another window"):
        policy.merge([("a.json", a), ("b.json", b)], "merge")


def test_the_merged_page_names_every_source(tmp_path) -> None:
    a = source("aaa", [record("grounded", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "queuepilot")])
    b = source("bbb", [record("grounded", 2, 0.01, "ray-idle"), record("grounded", 2, 0.01, "queuepilot")])
    page = policy.render(policy.merge([("a.json", a), ("b.json", b)], "merge a b"), None, "policy")
    assert "Merged " in page and "`merge a b`" in page
    assert "- `a.json`: 2 of its 2 runs kept; git aaa" in page and "- `b.json`: 2 of its 2 runs kept; git bbb" in page
    plain = policy.render(a, None, "policy")
    assert "Merged" not in plain and "Generated date of aaa by `policy.py at aaa`, git aaa." in plain


def test_the_command_line_merge_writes_the_page_and_refuses_in_one_line(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(source("aaa", [record("grounded", 1, 0.01, "ray-idle")])))
    b.write_text(json.dumps(source("bbb", [record("grounded", 1, 0.05, "ray-idle")])))
    (tmp_path / "a_timeline.png").write_bytes(b"png of the reference run")
    out = tmp_path / "out"
    assert policy.main(["--merge", f"{a},{b}", "--out", str(out), "--name", "m"]) == 0
    merged = json.loads((out / "m.json").read_text())
    assert merged["meta"]["rates"] == [0.01, 0.05] and len(merged["runs"]) == 2
    assert (out / "m.md").read_text().startswith("# Policy benchmark")
    assert (out / "m_timeline.png").read_bytes() == b"png of the reference run"
    with pytest.raises(SystemExit, match=r"^policy.py --merge: .*missing\.json"):
        policy.main(["--merge", f"{a},{tmp_path / 'missing.json'}", "--out", str(out), "--name", "m"])


def test_a_merged_page_merged_again_lists_its_sources_with_the_runs_kept() -> None:
    """The page itself (a merge) checked against a later run: its runs are kept, its own sources listed
    in its place with their counts, the later run's held runs compared (and refused on a difference).
    Named after reruns that supersede some of its labels, it gives the rest, and its sources' counts say
    how many of each were kept."""
    a = source("aaa", [record("grounded", 1, 0.01, "ray-idle", idle=5.0)])
    b = source("bbb", [record("grounded", 1, 0.01, "static", idle=9.0)])
    page = policy.merge([("a.json", a), ("b.json", b)], "merge a b")
    later = source("ccc", [record("grounded", 1, 0.01, "static", idle=9.0), record("serving", 1, 0.01, "static")])
    data = policy.merge([("policy.json", page), ("later.json", later)], "merge page later")
    assert [(s["file"], s["commit"], s["runs"], s["kept"]) for s in data["meta"]["merged_from"]] == [
        ("a.json", "aaa", 1, 1), ("b.json", "bbb", 1, 1), ("later.json", "ccc", 2, 1)]
    commits = {policy.run_key(r): r["commit"] for r in data["runs"]}
    assert commits[K("grounded", 1, 0.01, "static")] == "bbb" and commits[K("serving", 1, 0.01, "static")] == "ccc"
    assert data["meta"]["commit"] == "aaa, bbb, ccc" and data["meta"]["wall_s"] == 180.0
    rerun = source("eee", [record("grounded", 1, 0.01, "ray-idle", idle=4.0)])
    data = policy.merge([("rerun.json", rerun), ("policy.json", page)], "merge", supersede=["ray-idle"])
    assert [(s["file"], s["commit"], s["runs"], s["kept"]) for s in data["meta"]["merged_from"]] == [
        ("rerun.json", "eee", 1, 1), ("a.json", "aaa", 1, 0), ("b.json", "bbb", 1, 1)]
    assert {r["label"]: r["summary"]["idle_gpu_hours_controllable"] for r in data["runs"]} == {
        "ray-idle": 4.0, "static": 9.0}
    wrong = source("ddd", [record("grounded", 1, 0.01, "static", idle=9.5)])
    with pytest.raises(ValueError, match=r"wrong\.json and policy\.json disagree"):
        policy.merge([("policy.json", page), ("wrong.json", wrong)], "merge")


def test_runs_at_another_resume_share_or_on_a_held_out_week_are_runs_of_their_own() -> None:
    a = source("aaa", [record("grounded", 1, 0.01, "reaper", idle=5.0),
                       record("grounded", 1, 0.01, "reaper", idle=6.0, resume=0.5)])
    b = source("bbb", [record("grounded", 1, 0.01, "reaper", idle=7.0, start="2017-11-02", hours=168.0),
                       record("grounded", 1, 0.01, "reaper", idle=6.0, resume=0.5)])
    data = policy.merge([("a.json", a), ("b.json", b)], "merge")
    assert [policy.run_key(r) for r in data["runs"]] == [
        K("grounded", 1, 0.01, "reaper"), K("grounded", 1, 0.01, "reaper", resume=0.5),
        K("grounded", 1, 0.01, "reaper", start="2017-11-02", hours=168.0)]
    assert data["meta"]["resumes"] == [0.5] and data["meta"]["held_out"] == ["2017-11-02"]
    # the axes a page compares with the whole matrix's: no cap sweep (every run at the default), weeks of 168 h
    assert data["meta"]["caps"] == [] and data["meta"]["held_out_hours"] == 168.0
    assert data["meta"]["resume_labels"] == ["reaper"]


def test_a_superseded_label_is_taken_from_the_first_source_and_the_rest_still_checked() -> None:
    """A configuration rerun after its decisions changed replaces the page's runs of it; every other run
    both hold must still agree."""
    new = source("new", [record("grounded", 1, 0.01, "queuepilot", stall=True, idle=3.0),
                         record("grounded", 1, 0.01, "queuepilot", idle=7.0)])
    page = source("old", [record("grounded", 1, 0.01, "queuepilot", stall=True, idle=4.0),
                          record("grounded", 1, 0.01, "queuepilot", idle=7.0),
                          record("grounded", 1, 0.01, "ray-idle", idle=8.0)])
    with pytest.raises(ValueError, match="disagree"):
        policy.merge([("new.json", new), ("policy.json", page)], "merge")
    data = policy.merge([("new.json", new), ("policy.json", page)], "merge", supersede=["queuepilot+stall"])
    got = {r["label"]: (r["summary"]["idle_gpu_hours_controllable"], r["commit"]) for r in data["runs"]}
    assert got == {"queuepilot+stall": (3.0, "new"), "queuepilot": (7.0, "new"), "ray-idle": (8.0, "old")}
    assert [(s["file"], s["runs"], s["kept"]) for s in data["meta"]["merged_from"]] == [
        ("new.json", 2, 2), ("policy.json", 3, 1)]
    assert data["meta"]["superseded"] == ["queuepilot+stall"]
    assert "Runs labelled `queuepilot+stall` are the first source's" in policy.render(data, None, "policy")
    # a run the superseding label does not name still refuses on a difference
    other = source("new", [record("grounded", 1, 0.01, "ray-idle", idle=8.5)])
    with pytest.raises(ValueError, match=r"policy\.json and new\.json disagree"):
        policy.merge([("new.json", other), ("policy.json", page)], "merge", supersede=["queuepilot+stall"])


def test_a_merge_keeps_the_plots_of_the_source_that_ran_the_reference_runs(tmp_path) -> None:
    """A rerun of a few configurations, named first, must not replace the page's reference plots (every
    policy's run) with its own (one policy's)."""
    few = source("new", [record("grounded", 1, 0.01, "queuepilot-reclaim"),
                         record("grounded", 1, 0.01, "queuepilot", stall=True)])
    page = source("old", [record("grounded", 1, 0.01, p) for p in ("queuepilot", "queuepilot-reclaim", "ray-idle")])
    paths = []
    for name, data in (("few", few), ("page", page)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(data))
        (tmp_path / f"{name}_timeline.png").write_bytes(f"{name}'s plot".encode())
        paths.append(path)
    assert policy.plot_source(paths) == paths[1]
    out = tmp_path / "out"
    assert policy.main(["--merge", ",".join(map(str, paths)), "--supersede", "queuepilot+stall", "--out", str(out),
                        "--name", "m"]) == 0
    assert (out / "m_timeline.png").read_bytes() == b"page's plot"
