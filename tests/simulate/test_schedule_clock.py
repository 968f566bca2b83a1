"""Time windows in the simulator: a schedule on the trace's clock moved onto the simulated one, and a
run whose team ClusterQueues carry a window (``SimConfig.cluster_queue_schedules``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.schedule import parse_schedule
from simulator.engine import Engine, SimConfig
from simulator.schedule_clock import on_simulated_clock, team_schedules
from simulator.workload import SyntheticParams, synthetic

TEAMS = ("team-a", "team-b")
TEXT = "Mon-Thu 20:00-08:00 max=1 name=night; Fri 20:00-Mon 08:00 max=0 name=weekend; Wed 09:00-12:00 min=2 name=warm"


@pytest.mark.parametrize("start", ["2017-10-03", "2017-10-08", "2017-10-05"])  # a Tuesday, a Sunday, a Thursday
def test_the_same_window_is_in_force_at_the_same_trace_time(start):
    begin = datetime.fromisoformat(start)
    trace, sim = parse_schedule(TEXT), parse_schedule(on_simulated_clock(TEXT, begin))
    for quarter in range(14 * 24 * 4):  # two weeks, every 15 minutes
        t = quarter * 900.0
        wall = begin.replace(tzinfo=UTC).timestamp() + t  # the trace's clock, read as UTC
        a, b = trace.window_at(wall), sim.window_at(t)
        assert (a and (a[0].name, a[0].min_workers, a[0].max_workers)) == \
            (b and (b[0].name, b[0].min_workers, b[0].max_workers)), (start, t)


def test_a_schedule_the_simulator_cannot_place_is_refused():
    with pytest.raises(ValueError, match="no time zone"):
        on_simulated_clock("* 20:00-08:00 max=1; tz=Europe/Berlin", datetime(2017, 10, 3))
    with pytest.raises(ValueError, match="start at midnight"):
        on_simulated_clock("* 20:00-08:00 max=1", datetime(2017, 10, 3, 8, 0))
    with pytest.raises(ValueError, match="DAYS HH:MM-HH:MM"):
        team_schedules(TEAMS, "nights", datetime(2017, 10, 3))
    assert [cq for cq, _ in team_schedules(TEAMS, "* 20:00-08:00 max=1", datetime(2017, 10, 3))] == \
        ["cq-team-a", "cq-team-b"]


def _run(schedules: tuple[tuple[str, str], ...]) -> Engine:
    params = SyntheticParams(jobs_per_hour=20.0, teams=TEAMS, team_weights=(0.5, 0.5))
    jobs = synthetic(4.0, 5, 32, params).jobs
    eng = Engine(jobs, 4 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS, cluster_queue_schedules=schedules))
    eng.run()
    return eng


def test_a_window_bounds_the_simulated_team_clusters():
    # the simulated clock starts on a Thursday at 00:00: a window past the 4 simulated hours with max=0
    closed = _run(tuple((f"cq-{t}", "Thu 00:00-06:00 max=0 name=closed") for t in TEAMS))
    opened = _run(())
    assert all(rc.replicas == 0 and not rc.workers for rc in closed.rays.values())
    assert sum(len(rc.queue) for rc in closed.rays.values()) > 0  # the teams' Ray tasks wait for the window
    assert any(reason == R.SCHEDULED_MAX_REPLICAS and kind == "RayCluster"
               for kind, _, reason in closed.writer.event_counts)
    assert any(rc.workers or rc.replicas for rc in opened.rays.values())  # (the same jobs do start without it)
    assert closed.metrics.jobs_completed < opened.metrics.jobs_completed


def test_simulate_takes_a_schedule_and_refuses_a_bad_one(tmp_path, capsys):
    import json

    from simulator.cli import main

    out = tmp_path / "r.json"
    base = ["--trace", "synthetic", "--hours", "2", "--policies", "queuepilot", "--no-progress", "--nodes", "8"]
    assert main([*base, "--schedule", "* 00:00-24:00 max=0 name=closed", "--json", str(out)]) == 0
    closed = json.loads(out.read_text())["policies"]["queuepilot"]
    assert main([*base, "--json", str(out)]) == 0
    opened = json.loads(out.read_text())["policies"]["queuepilot"]
    assert closed["jobs_completed"] < opened["jobs_completed"]  # no team worker ever started under max=0
    capsys.readouterr()
    assert main([*base, "--schedule", "* 20:00-08:00 max=1; tz=Europe/Berlin"]) == 2
    assert "no time zone" in capsys.readouterr().err
