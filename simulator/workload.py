"""Workloads for the simulator: the Philly trace (window, VC -> team mapping) and a synthetic generator.

Every job becomes one of two things (docs/simulation.md, "Workload model"):

- a **Ray task** on its team's long-lived RayCluster when it asks for 1 GPU (93 % of Philly jobs):
  it works for ``duration`` seconds, then its actor may linger, holding the worker's GPU at 0 % for
  an *idle tail* (``idle_tail``: notebooks, idle actors: the "allocated is not used" case);
- a **RayJob** (an ephemeral RayCluster, one Kueue Workload) when it asks for 2 or more GPUs: pods of
  at most 8 GPUs each, running for ``duration`` seconds.

What the GPUs do over a job's run is the utilization model's (``simulator/utilization.py``,
``util_model=``, default ``grounded``; docs/simulation.md, "Utilization").  Under ``grounded`` and
``serving`` a task's idle tail is the stalled end of its trace duration (``duration + idle_tail`` is
the trace's duration); under ``scattered`` (the original model) it is added after it.

Statistics (docs/simulation.md, "Workload model", gives the sources): GPU-count mix and per-size
log-normal durations from Philly (3.1, 3.2), diurnal/weekly batched Poisson arrivals (3.4).
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from simulator.utilization import (
    DEFAULT_MODEL,
    SCATTERED,
    SEGMENT_S,
    Profile,
    ScatteredProfile,
    UtilModel,
    draw_tail,
    draw_util,
    get_model,
    scattered_idle,
)

TASK = "task"
RAYJOB = "rayjob"

# Philly virtual cluster (hashed id) -> team.  The four VCs with most jobs get a team each; the long
# tail of smaller VCs shares one team.  Stated in docs/simulation.md.
VC_TEAMS: dict[str, str] = {
    "6214e9": "team-a",
    "6c71a0": "team-b",
    "b436b2": "team-c",
    "11cb48": "team-d",
}
OTHER_TEAM = "team-e"
TEAMS: tuple[str, ...] = ("team-a", "team-b", "team-c", "team-d", "team-e")

MAX_GPUS_PER_POD = 8


def team_of(vc: str) -> str:
    return VC_TEAMS.get(vc, OTHER_TEAM)


@dataclass(slots=True)
class Job:
    """One trace job. ``submit`` is seconds since the window start; ``duration`` is busy run time
    (a RayJob: its whole run; a Ray task: its work, before any idle tail).

    ``util_at(t)`` / ``phase_at(t)``: ``t`` seconds into the job's run (0 = the task bound to its
    worker, or the RayJob's entrypoint started).  A job built without a profile (tests, old callers)
    follows the ``scattered`` model with its ``util``."""

    id: int
    team: str
    submit: float
    duration: float
    gpus: int
    util: float  # mean utilization 0-1 over the work (scattered: the busy level); Ray tasks run at it
    idle_tail: float = 0.0  # Ray task: seconds its actor holds the GPU idle after the work
    profile: Profile | None = None  # the utilization model's per-job profile

    @property
    def kind(self) -> str:
        return TASK if self.gpus == 1 else RAYJOB

    @property
    def pods(self) -> int:
        return max(1, math.ceil(self.gpus / MAX_GPUS_PER_POD))

    @property
    def gpus_per_pod(self) -> int:
        return max(1, math.ceil(self.gpus / self.pods))

    @property
    def allocation(self) -> float:
        """Seconds the job holds its GPUs once running: work plus a task's idle tail."""
        return self.duration + self.idle_tail

    @property
    def stall_start(self) -> float | None:
        """Seconds into the run at which the job's long idle run starts (0 %), None if it has none."""
        if self.profile is not None:
            return self.profile.stall_start
        return self.duration if self.idle_tail > 0 else None

    @property
    def stall_end(self) -> float | None:
        """Where the long idle run ends when it is a pause the job resumes from; None for a final stall
        (0 % until ``allocation``: ending the job there loses no work) or no stall."""
        return getattr(self.profile, "stall_end", None) if self.profile is not None else None

    def util_at(self, t_running: float) -> float:
        """GPU utilization (0-1) ``t_running`` seconds into the job's run (pure, deterministic)."""
        if self.profile is not None:
            return self.profile.util_at(t_running)
        if self.idle_tail > 0 and t_running >= self.duration:
            return 0.0
        return 0.0 if scattered_idle(self.id, int(t_running // SEGMENT_S)) else self.util

    def phase_at(self, t_running: float) -> str:
        """``starting`` / ``active`` / ``in_job_idle`` / ``stalled`` at ``t_running`` (see util_at)."""
        if self.profile is not None:
            return self.profile.phase_at(t_running)
        if self.idle_tail > 0 and t_running >= self.duration:
            return "stalled"
        return "in_job_idle" if scattered_idle(self.id, int(t_running // SEGMENT_S)) else "active"

    def at(self, t_running: float) -> tuple[str, float, float]:
        """``(phase_at, util_at, the next time its utilization or phase may change)`` at ``t_running``."""
        if self.profile is not None:
            return self.profile.at(t_running)
        nxt = (math.floor(t_running / SEGMENT_S) + 1) * SEGMENT_S
        if self.idle_tail > 0 and t_running >= self.duration:
            return "stalled", 0.0, nxt
        if scattered_idle(self.id, int(t_running // SEGMENT_S)):
            return "in_job_idle", 0.0, nxt
        return "active", self.util, nxt


# --------------------------------------------------------------------------------------- Philly
@dataclass(frozen=True, slots=True)
class TraceWindow:
    jobs: tuple[Job, ...]
    start: datetime
    hours: float
    dropped_too_large: int  # jobs asking more GPUs than the simulated cluster has
    trace_range: tuple[datetime | None, datetime | None] = (None, None)  # first and last submission in the file


def parse_start(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _util_rng(seed: int, model: UtilModel) -> random.Random | None:
    """The utilization draws' own stream (None: share the generator's, as ``scattered`` always did).
    Keeping them apart makes the jobs themselves the same under ``grounded`` and ``serving``."""
    return None if model is SCATTERED else random.Random(f"queuepilot-util/{model.name}/{seed}")


def load_philly(path: Path, start: datetime, hours: float, seed: int, max_gpus: int,
                util_model: str | UtilModel = DEFAULT_MODEL) -> TraceWindow:
    """Jobs of ``philly.csv`` submitted in [start, start + hours), sorted by submit time; their
    utilization drawn by ``util_model`` (a name in ``simulator.utilization.MODELS`` or a model)."""
    model = get_model(util_model)
    end = start + timedelta(hours=hours)
    rows: list[tuple[datetime, float, int, str]] = []
    first: datetime | None = None
    last: datetime | None = None
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = {"timestamp", "duration", "num_gpus", "cluster"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: not a Philly trace CSV, missing columns {sorted(missing)}")
        for lineno, r in enumerate(reader, start=2):
            try:
                ts = datetime.fromisoformat(r["timestamp"])
                dur = float(r["duration"])
                gpus = int(float(r["num_gpus"]))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{path}:{lineno}: bad row {r!r}: {e}") from e
            first = ts if first is None or ts < first else first
            last = ts if last is None or ts > last else last
            if start <= ts < end and gpus > 0 and dur > 0:
                rows.append((ts, dur, gpus, r["cluster"]))
    rows.sort(key=lambda x: (x[0], x[3], x[1], x[2]))
    rng = random.Random(seed)
    urng = _util_rng(seed, model) or rng
    jobs: list[Job] = []
    dropped = 0
    for ts, dur, gpus, vc in rows:
        u = model.draw(urng, len(jobs), dur, gpus)
        if model is SCATTERED and gpus != 1:
            draw_tail(rng, dur)  # the original loader drew (and dropped) a tail for every row: same stream
        if gpus > max_gpus:
            dropped += 1
            continue
        jobs.append(Job(len(jobs), team_of(vc), (ts - start).total_seconds(), u.work_s, gpus, u.util,
                        u.idle_tail, u.profile))
    return TraceWindow(tuple(jobs), start, hours, dropped, (first, last))


# ------------------------------------------------------------------------------------ synthetic
# Philly GPU-count mix (% of jobs in the published trace analysis), the rare sizes folded in.
GPU_MIX: tuple[tuple[int, float], ...] = ((1, 93.17), (2, 2.21), (4, 2.27), (8, 2.00), (16, 0.25), (32, 0.10))
# Per-size log-normal durations (median s, sigma of ln) fitted to the Philly trace.
DURATION_LOGNORMAL: dict[int, tuple[float, float]] = {
    1: (1117.0, 1.97), 2: (367.0, 3.80), 4: (367.0, 3.80), 8: (23683.0, 2.79), 16: (21137.0, 3.21),
    32: (21137.0, 3.21),
}
MAX_DURATION_S = 7 * 86400.0
# Hour-of-day multiplier (peak/trough ~2.6; trough 02:00-09:00, peaks 10-11 and 14-17, section 3.4)
HOURLY: tuple[float, ...] = (
    0.9, 0.7, 0.5, 0.45, 0.45, 0.45, 0.5, 0.55, 0.7, 0.9, 1.15, 1.2,
    1.0, 1.05, 1.15, 1.2, 1.2, 1.15, 1.05, 1.0, 0.95, 0.95, 0.95, 0.9,
)
WEEKEND_FACTOR = 0.5
BATCH_MEAN = 4.0  # geometric batch size (sweeps), CV >> 1


@dataclass(frozen=True, slots=True)
class SyntheticParams:
    jobs_per_hour: float = 40.0  # mean over the week
    teams: tuple[str, ...] = TEAMS
    team_weights: tuple[float, ...] = (0.45, 0.2, 0.15, 0.1, 0.1)
    gpu_mix: tuple[tuple[int, float], ...] = GPU_MIX  # (GPUs per job, weight)


def synthetic(hours: float, seed: int, max_gpus: int, params: SyntheticParams | None = None,
              util_model: str | UtilModel = DEFAULT_MODEL) -> TraceWindow:
    """A non-homogeneous Poisson process over batches (thinning), each batch one team and size;
    utilization drawn by ``util_model``.  Under ``scattered`` its draws share the arrival stream (the
    original generator), so its jobs differ from the other models' (which share theirs)."""
    p = params or SyntheticParams()
    model = get_model(util_model)
    rng = random.Random(seed)
    urng = _util_rng(seed, model)
    mean_mult = sum(HOURLY) / 24 * (5 + 2 * WEEKEND_FACTOR) / 7
    peak_batch_rate = p.jobs_per_hour / BATCH_MEAN / mean_mult * max(HOURLY) / 3600.0
    sizes = [s for s, _ in p.gpu_mix if s <= max_gpus]
    weights = [w for s, w in p.gpu_mix if s <= max_gpus]
    jobs: list[Job] = []
    t = 0.0
    horizon = hours * 3600.0
    while True:
        t += rng.expovariate(peak_batch_rate)
        if t >= horizon:
            break
        hour = int(t // 3600) % 24
        day = int(t // 86400) % 7
        rate_mult = HOURLY[hour] * (WEEKEND_FACTOR if day >= 5 else 1.0)
        if rng.random() > rate_mult / max(HOURLY):
            continue
        team = rng.choices(p.teams, p.team_weights)[0]
        gpus = rng.choices(sizes, weights)[0]
        n = 1
        while rng.random() > 1.0 / BATCH_MEAN:
            n += 1
        for k in range(n):
            med, sigma = DURATION_LOGNORMAL[gpus]
            dur = min(MAX_DURATION_S, max(1.0, rng.lognormvariate(math.log(med), sigma)))
            if urng is None:  # scattered: the original draws, in the original order
                util = draw_util(rng)
                tail = draw_tail(rng, dur) if gpus == 1 else 0.0
                jobs.append(Job(len(jobs), team, t + 2.0 * k, round(dur, 1), gpus, util, tail,
                                ScatteredProfile(len(jobs), util, round(dur, 1), tail)))
                continue
            u = model.draw(urng, len(jobs), round(dur, 1), gpus)
            jobs.append(Job(len(jobs), team, t + 2.0 * k, u.work_s, gpus, u.util, u.idle_tail, u.profile))
    return TraceWindow(tuple(jobs), datetime(2024, 1, 1), hours, 0)


def team_gpu_shares(jobs: Iterable[Job], teams: tuple[str, ...] = TEAMS) -> dict[str, float]:
    """Each team's share of the window's GPU-time (sets nominal quotas); every team gets at least 2 %."""
    total = dict.fromkeys(teams, 0.0)
    for j in jobs:
        total[j.team] = total.get(j.team, 0.0) + j.gpus * (j.duration + j.idle_tail)
    s = sum(total.values()) or 1.0
    raw = {t: max(0.02, v / s) for t, v in total.items()}
    norm = sum(raw.values())
    return {t: v / norm for t, v in raw.items()}
