"""Time windows in the simulator: a schedule written on the trace's clock, moved onto the simulated one.

The simulated clock runs from 0 at the trace window's start, and the controller's reconcilers read it
as epoch seconds: 0 is 1970-01-01 00:00 UTC, a Thursday.  A schedule (``queuepilot.io/schedule``
syntax, ``autoscaler.core.policy.schedule``) is written on the trace's own clock, whose times carry no
zone (the Philly trace's zone is unknown): ``on_simulated_clock`` turns its days by whole days so that a
window on the trace's Mondays is in force on the simulated Mondays.  It therefore needs a window start
at midnight and a schedule without ``tz=`` (UTC), and refuses anything else with a ValueError.

``team_schedules`` gives what ``SimConfig.cluster_queue_schedules`` holds: the same schedule for
every team's ClusterQueue (the controller's ``scaling.cluster_queue_schedules``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from autoscaler.core.policy.schedule import UTC_ZONE, Schedule, parse_schedule

EPOCH_WEEKDAY = 3  # 1970-01-01 was a Thursday (Monday = 0)


def on_simulated_clock(text: str, start: datetime) -> str:
    """``text`` (a schedule on the trace's clock) for a simulation whose clock starts at ``start``."""
    schedule = parse_schedule(text)
    if schedule.zone != UTC_ZONE:
        raise ValueError(f"a simulated schedule is on the trace's clock, which has no time zone: drop tz={schedule.zone}")
    if (start.hour, start.minute, start.second, start.microsecond) != (0, 0, 0, 0):
        raise ValueError(f"a schedule needs the simulation to start at midnight, not {start:%H:%M:%S}")
    shift = start.weekday() - EPOCH_WEEKDAY  # trace weekday = simulated weekday + shift
    windows = tuple(replace(w, days=tuple(sorted((d - shift) % 7 for d in w.days)),
                            end_day=None if w.end_day is None else (w.end_day - shift) % 7)
                    for w in schedule.windows)
    return Schedule(windows).text


def team_schedules(teams: Sequence[str], text: str, start: datetime) -> tuple[tuple[str, str], ...]:
    """(ClusterQueue, schedule on the simulated clock) for every team's ClusterQueue ``cq-<team>``."""
    moved = on_simulated_clock(text, start)
    return tuple((f"cq-{t}", moved) for t in teams)
