"""benchmarks/run_all.py: what `make bench` (quick) and `make bench-full` run, and the page that says what
ran and how long it took."""

from __future__ import annotations

from benchmarks import run_all


def _scripts(benchmarks) -> list[tuple[str, tuple[str, ...]]]:
    return [(script, extra) for _, script, extra in benchmarks]


def test_the_quick_set_runs_the_quick_matrix_and_no_month_long_sweep() -> None:
    quick = _scripts(run_all.QUICK)
    assert ("policy.py", ("--quick",)) in quick
    assert ("policy.py", ()) not in quick
    assert not {"reclaim_budget.py", "stall_delay.py", "sensitivity.py"} & {s for s, _ in quick}


def test_the_full_set_runs_the_whole_matrix_after_the_sweep_its_page_quotes() -> None:
    full = _scripts(run_all.FULL)
    assert ("policy.py", ()) in full and ("policy.py", ("--quick",)) not in full
    assert full.index(("reclaim_budget.py", ())) < full.index(("policy.py", ()))
    assert ("sensitivity.py", ()) in full and ("sensitivity.py", ()) not in _scripts(run_all.QUICK)
    assert ("placement.py", ()) in full and ("placement.py", ()) not in _scripts(run_all.QUICK)
    for _, script, _ in run_all.FULL:
        assert (run_all.HERE / script).is_file(), script


def test_only_selects_by_name_or_script() -> None:
    assert [b[1] for b in run_all.selected(run_all.FULL, "stall_delay")] == ["stall_delay.py", "stall_delay.py"]
    assert [b[0] for b in run_all.selected(run_all.QUICK, "decision,exporter_bench")] == [
        "exporter scrape/collect/RSS", "decision latency"]
    assert run_all.selected(run_all.QUICK, None) == list(run_all.QUICK)


def test_the_page_lists_each_benchmark_and_the_measured_wall_time() -> None:
    rows = [("decision latency", "python benchmarks/decision_latency.py", "0", 12.34),
            ("policy quality", "python benchmarks/policy.py --quick", "1", 600.0),
            ("gone", "python benchmarks/gone.py", "missing", None)]
    text = run_all.page("make bench", rows, 633.0, "abc1234", "2026-12-07 10:00 UTC")
    assert text.startswith("# `make bench`\n")
    assert "Run 2026-12-07 10:00 UTC at git abc1234" in text
    assert "| decision latency | `python benchmarks/decision_latency.py` | 0 | 12.3 |" in text
    assert "| gone | `python benchmarks/gone.py` | missing | - |" in text
    assert "Wall time 10.6 min (measured) for 3 benchmarks; 2 failed." in text
    ok = run_all.page("make bench", rows[:1], 12.34, "abc1234", "d")
    assert "Wall time 0.2 min (measured) for 1 benchmarks; all exited 0." in ok
