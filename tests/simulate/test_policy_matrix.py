"""benchmarks/policy.py: the two matrices the Makefile runs (the whole one, `make bench-full`; the quick one,
`make bench`), what a page says it covers, and the plan it prints from a run's costs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks import policy
from tests.simulate.policy_records import record, source


def _axes(*argv: str) -> dict[str, Any]:
    return policy.axes(policy.build_parser().parse_args(list(argv)))


def test_the_default_matrices_run_one_failure_rate_and_more_can_be_asked() -> None:
    full, quick = _axes(), _axes("--quick")
    assert full["rates"] == quick["rates"] == [0.01]
    assert (full["hours"], full["seeds"], full["caps"]) == (720.0, [1, 2, 3], [1.0, 2.0, 4.0])
    assert (quick["hours"], quick["seeds"], quick["caps"]) == (168.0, [1], [])  # no cap sweep
    for key in ("models", "policies", "stall_models", "cap_policies"):  # the rest as the whole matrix
        assert quick[key] == full[key], key
    assert _axes("--quick", "--caps", "1,4")["caps"] == [1.0, 4.0]
    two = _axes("--quick", "--rates", "0.01,0.05", "--caps", "1,2,4")
    assert two["rates"] == [0.01, 0.05]
    tasks = policy.matrix(two)
    assert {t.rate for t in tasks} == {0.01, 0.05}
    assert len(tasks) == 2 * len([t for t in policy.matrix(quick) if t.cap == policy.DEFAULT_CAP]) + \
        len([t for t in tasks if t.cap != policy.DEFAULT_CAP])  # the cap sweep runs at the first rate only


def _page(axes: dict[str, Any], **meta: Any) -> str:
    runs = [record("grounded", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "queuepilot")]
    data = source("aaa", runs, hours=axes["hours"], wall_s=754.0)
    data["meta"].update(axes, quick=False, **meta)
    return policy.render(data, None, "policy")


def test_the_whole_matrix_page_names_its_make_target_and_the_wall_time_it_took() -> None:
    page = _page(_axes())
    assert "(`make bench-full` runs it)" in page
    assert "Wall time 12.6 min for 2 runs (measured)" in page
    assert "**What this page covers**: the whole matrix (`make bench-full`), 2 runs of 720 h each" in page
    assert "Against the whole matrix" not in page
    assert "target" not in page.split("## Summary")[0]  # no time target, only the time taken


def test_the_quick_page_says_exactly_what_it_leaves_out_of_the_whole_matrix() -> None:
    page = _page(_axes("--quick"))
    assert "(`make bench` runs it)" in page
    assert "**What this page covers**: the quick matrix (`make bench`)" in page
    assert ("Against the whole matrix ([policy.md](policy.md), `make bench-full`): window 168 h here, 720 h there; "
            "seeds 1 here, 1, 2, 3 there; worker-cap factors none here, 1, 2, 4 there.") in page
    assert "nominal quota. Policies:" in page and "swept below" not in page  # no cap sweep to point to


def test_a_partial_matrix_is_neither_and_lists_every_axis_it_changes() -> None:
    page = _page(_axes("--models", "grounded", "--rates", "0.01,0.05", "--caps", ""))
    assert "runs it)" not in page
    assert "a partial matrix (neither `make bench` nor `make bench-full`)" in page
    assert "models grounded here, grounded, scattered, serving there" in page
    assert "failure rates 0.01, 0.05 here, 0.01 there" in page
    assert "worker-cap factors none here, 1, 2, 4 there" in page
    assert "`+stall` runs under grounded here, grounded, serving there" in page


def test_the_plan_counts_the_runs_and_packs_their_costs_onto_the_processes(tmp_path: Path, capsys) -> None:
    # every (model, label) of the quick matrix at 0.5 CPU s per simulated hour, but ray-idle's at 1.0
    labels = {(t.model, t.label) for t in policy.matrix(_axes("--quick"))}
    costs = source("ccc", [record(m, 1, 0.01, lab.removesuffix("+stall"), stall=lab.endswith("+stall"))
                           for m, lab in sorted(labels)], hours=100.0)
    for r in costs["runs"]:
        r["cpu_s"] = 100.0 if r["policy"] == "ray-idle" else 50.0
    path = tmp_path / "costs.json"
    path.write_text(json.dumps(costs))
    assert policy.main(["--quick", "--plan", "--costs-from", str(path), "--jobs", "2", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    # 3 models x 7 policies, and the two queuepilot policies +stall under grounded and serving
    assert "25 runs of 168 h: 21 = 3 models x 1 seeds x 1 failure rates x 7 policies; 4 +stall; 0 worker-cap sweep" in out
    # ray-idle: 3 runs of 168 s; the other 22 runs 84 s each: 2,352 s in all, 1,176 s a process
    assert "summed run seconds ~2,352 s, the longest run ~168 s; wall on 2 processes ~19.6 min" in out
