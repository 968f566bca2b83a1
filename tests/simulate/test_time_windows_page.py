"""The time-windows page (benchmarks/time_windows.py): where it puts the window, and that its text
reads the numbers it is given."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from autoscaler.core.policy.schedule import parse_schedule

_SPEC = importlib.util.spec_from_file_location(
    "time_windows_bench", Path(__file__).resolve().parents[2] / "benchmarks" / "time_windows.py")
assert _SPEC is not None and _SPEC.loader is not None
bench = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(bench)


def test_the_quiet_hours_wrap_around_midnight():
    counts = [1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 0, 2]
    assert bench.quietest(counts, 4) == 22  # 22, 23, 0, 1
    assert bench.quietest(counts, 2, busiest=True) == 2
    text = bench.window_text(22, 4, "max=1", "off-peak")
    assert text == "* 22:00-02:00 max=1 name=off-peak"
    assert parse_schedule(text).windows[0].spans[0] == (0, 120)  # Monday 00:00-02:00 (from Sunday night)
    assert bench.window_text(16, 8, "min=2", "peak") == "* 16:00-24:00 min=2 name=peak"


def _run(share, kind, idle, p95, inside_idle, queue):
    waits = {"ray_task": p95, "workload": 1.0}
    summary = {"idle_gpu_hours": idle, "idle_gpu_hours_controllable": idle / 2, "allocated_gpu_hours": 1000.0 + idle,
               "delivered_gpu_hours": 900.0, "jobs_completed": 10, "jobs_submitted": 12,
               "idle_gpu_hours_by_class": {"empty": 1.0, "starting": 2.0, "idle_actor": 3.0, "stalled": 4.0},
               "wait_p50_s_by_class": waits, "wait_p95_s_by_class": waits, "wait_p99_s_by_class": waits}
    part = {"allocated_gpu_hours": 1.0, "idle_gpu_hours": inside_idle, "mean_queue": queue, "samples": 1}
    return {"label": "no window" if share is None else f"{kind}={share:g} x cap", "kind": kind, "share": share,
            "caps": {"team-a": 8}, "schedules": {}, "summary": summary,
            "timeline_split": {"inside": part, "outside": part}, "cpu_s": 1.0}


def test_the_page_reads_its_numbers():
    meta = {"generated": "now", "command": "python benchmarks/time_windows.py", "git": "abc", "machine": "m",
            "cpu_s": 2.0, "wall_s": 1.0, "hours": 168.0, "start": "2017-10-03", "model": "grounded", "seed": 1,
            "rate": 0.01, "window_hours": 8, "quiet_first": 8, "busy_first": 20, "hour_counts": [1] * 24}
    runs = [_run(None, "max", 100.0, 60.0, 40.0, 0.5), _run(0.5, "max", 80.0, 7200.0, 25.0, 9.0),
            _run(0.25, "min", 300.0, 30.0, 200.0, 0.0)]
    page = bench.render({"meta": meta, "runs": runs})
    assert "`* 08:00-16:00 max=N name=off-peak`" in page and "`* 20:00-04:00 min=N name=peak`" in page
    assert "| max=0.5 x cap | 80 (-20 %) |" in page
    assert "**max=0.5 x cap**: idle GPU-hours -20 over the week (-20 %), -15 in the window's hours" in page
    assert "p95 1 min -> 2.0 h" in page and "0.5 -> 9.0" in page
    assert "**min=0.25 x cap**: idle GPU-hours +200 over the week (+200 %)" in page
