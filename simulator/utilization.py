"""GPU utilization models: what a job's GPUs do over its run (docs/simulation.md, "Utilization").

The Philly trace has no utilization column, so the simulator draws it.  A model draws, once per job
and from a ``random.Random`` handed in (deterministic by seed; no global RNG, no clock), a
``JobUtil``: the constant level an engine that ignores phases uses, how the trace's duration splits
into work and (for a Ray task) the idle tail its actor holds, and a profile.  A profile is a pure
function of time since the job started running, with its phase boundaries precomputed, so
``util_at`` / ``phase_at`` are a few comparisons and one integer hash.

Models (``MODELS``; ``get_model(name)``):

- ``grounded`` (default): fitted to the published per-sample distributions of Philly (AcmeTrace
  utilization CDFs: AcmeTrace util_gpu_philly.pkl, NSDI'24): a start-up phase at 0 % (image pull, data loading),
  an active phase whose 5-minute segments take Beta-spread levels around the job's mean with some
  segments idle inside the job (evaluation, checkpointing, input stalls), and for a fraction of
  jobs a stalled tail at 0 % (hung job, notebook left open, actor holding a GPU) that lasts until
  the trace says the job ends.
- ``serving``: an inference-like mix fitted to the PAI (AntMan) CDF: low per-job levels (median of
  samples ~4 %), many idle segments (no requests).
- ``scattered``: the simulator's first model, kept as a stress case: a Beta(1.0, 0.45) level, a
  RayJob's 5-minute segments idle with probability 1/3 by a hash of (job id, segment), and after
  each Ray task an exponential idle-actor tail *added* to the trace's duration.

Phases: ``starting``, ``active``, ``in_job_idle``, ``stalled`` (``PHASES``).  For a Ray task the
idle tail is its ``stalled`` phase under every model; under ``grounded`` and ``serving`` it is carved
out of the trace's duration (work until the stall starts, then the actor holds the GPU at 0 % until
the trace's end), under ``scattered`` it is added after it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Final, Protocol

STARTING: Final = "starting"
ACTIVE: Final = "active"
IN_JOB_IDLE: Final = "in_job_idle"
STALLED: Final = "stalled"
PHASES: tuple[str, ...] = (STARTING, ACTIVE, IN_JOB_IDLE, STALLED)

SEGMENT_S: Final = 300.0  # a job's utilization is constant within a 5-minute segment of its run

# ------------------------------------------------------------------------------ scattered
RAYJOB_IDLE_SHARE = 1 / 3  # share of a RayJob's segments at 0 %
SCATTERED_BETA = (1.0, 0.45)
TAIL_MEAN_FACTOR = 0.5  # idle tail mean = factor x busy duration (tail/(busy+tail) ~ 1/3)
TAIL_MAX_S = 4 * 3600.0


def draw_util(rng: random.Random) -> float:
    """Scattered's busy level: Beta(1.0, 0.45), clamped to [0.05, 1]."""
    return min(1.0, max(0.05, rng.betavariate(*SCATTERED_BETA)))


def draw_tail(rng: random.Random, duration: float) -> float:
    """Scattered's idle-actor tail: exponential, mean 0.5 x the task's duration, at most 4 h."""
    return min(TAIL_MAX_S, rng.expovariate(1.0 / max(1.0, TAIL_MEAN_FACTOR * duration)))


def scattered_idle(job_id: int, seg: int) -> bool:
    """Scattered: is segment ``seg`` of job ``job_id`` idle (the original hash, bit for bit)."""
    h = ((job_id * 2654435761) ^ (seg * 40503 + 0x9E3779B9)) & 0xFFFFFFFF
    h = (h * 2246822519) & 0xFFFFFFFF
    return (h / 4294967296.0) < RAYJOB_IDLE_SHARE


# ----------------------------------------------------------------------------- interface
class Profile(Protocol):
    """A job's utilization over its run; ``t`` is seconds since it started running."""

    @property
    def stall_start(self) -> float | None: ...

    def util_at(self, t: float) -> float: ...

    def phase_at(self, t: float) -> str: ...

    def next_change(self, t: float) -> float: ...

    def at(self, t: float) -> tuple[str, float, float]:
        """``(phase_at(t), util_at(t), next_change(t))`` at once (the ledger asks all three)."""
        ...


@dataclass(frozen=True, slots=True)
class JobUtil:
    """One job's draw.  ``work_s`` becomes ``Job.duration`` (a Ray task's busy time), ``idle_tail``
    the seconds its actor then holds the GPU at 0 %; ``util`` is the mean level over the work (what
    an engine that reads one constant level per task should use)."""

    util: float
    work_s: float
    idle_tail: float
    profile: Profile


@dataclass(frozen=True, slots=True)
class ScatteredProfile:
    """The original model: constant ``level`` with segments idle by ``scattered_idle``; a Ray task's
    idle tail ``[work_s, work_s + tail)`` is stalled.  RayJobs have no tail (``tail`` 0)."""

    job_id: int
    level: float
    work_s: float
    tail: float

    @property
    def stall_start(self) -> float | None:
        return self.work_s if self.tail > 0 else None

    def util_at(self, t: float) -> float:
        if self.tail > 0 and t >= self.work_s:
            return 0.0
        return 0.0 if scattered_idle(self.job_id, int(t // SEGMENT_S)) else self.level

    def phase_at(self, t: float) -> str:
        if self.tail > 0 and t >= self.work_s:
            return STALLED
        return IN_JOB_IDLE if scattered_idle(self.job_id, int(t // SEGMENT_S)) else ACTIVE

    def next_change(self, t: float) -> float:
        nxt = (math.floor(t / SEGMENT_S) + 1) * SEGMENT_S
        if self.tail > 0 and t >= self.work_s:
            return self.work_s + self.tail if t < self.work_s + self.tail else math.inf
        return min(nxt, self.work_s) if self.tail > 0 else nxt

    def at(self, t: float) -> tuple[str, float, float]:
        if self.tail > 0 and t >= self.work_s:
            return STALLED, 0.0, self.work_s + self.tail if t < self.work_s + self.tail else math.inf
        nxt = (math.floor(t / SEGMENT_S) + 1) * SEGMENT_S
        if self.tail > 0:
            nxt = min(nxt, self.work_s)
        if scattered_idle(self.job_id, int(t // SEGMENT_S)):
            return IN_JOB_IDLE, 0.0, nxt
        return ACTIVE, self.level, nxt


@dataclass(frozen=True, slots=True)
class PhasedProfile:
    """``[0, start_end)`` starting at ``start_util``; then 5-minute segments (counted from 0), each
    idle with probability ``idle_p`` or at one of ``levels`` (picked by a hash of ``key`` and the
    segment); from ``stall_start`` (if any) stalled at 0 %: to ``end`` (a final stall), or to
    ``stall_end`` (a pause, after which the job works again until ``end``).  Outside ``[0, end)`` the job
    is not running: ``starting`` before 0 (an engine's own start-up), ``stalled`` (0 %) from ``end``."""

    key: int
    end: float
    start_end: float
    start_util: float
    stall_start: float | None
    idle_p: float
    levels: tuple[float, ...]
    stall_end: float | None = None  # a pause's end (None: the stall is final)
    stop: float = field(default=0.0, init=False, repr=False, compare=False)  # the active phase's end

    def __post_init__(self) -> None:
        object.__setattr__(self, "stop", self.end if self.stall_start is None else min(self.end, self.stall_start))

    def util_at(self, t: float) -> float:
        return self.at(t)[1]

    def phase_at(self, t: float) -> str:
        return self.at(t)[0]

    def next_change(self, t: float) -> float:
        """The next time after ``t`` at which util or phase may change (``inf``: never again)."""
        return self.at(t)[2]

    def at(self, t: float) -> tuple[str, float, float]:
        """``(phase_at(t), util_at(t), next_change(t))``, worked out once (the ledger asks it at every change)."""
        if t < self.start_end:
            return STARTING, self.start_util, self.start_end
        stop = self.stop
        if t >= stop:
            resume = self.stall_end
            if resume is None or t >= self.end:
                return STALLED, 0.0, math.inf
            if t < resume:
                return STALLED, 0.0, resume  # a pause: the job works again at its end
            stop = self.end
        nxt = min(stop, (math.floor(t / SEGMENT_S) + 1) * SEGMENT_S)
        # the segment's draw, a uniform in [0, 1) from (job key, segment): two rounds of
        # multiply-xorshift, 32 bits (written out here: the ledger asks it at every change)
        h = (self.key ^ (int(t // SEGMENT_S) * 0x9E3779B1)) & 0xFFFFFFFF
        h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
        h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
        u = (h ^ (h >> 16)) / 4294967296.0
        idle_p = self.idle_p
        if u < idle_p:
            return IN_JOB_IDLE, 0.0, nxt
        levels = self.levels
        k = int((u - idle_p) / (1.0 - idle_p) * len(levels))
        return ACTIVE, levels[min(k, len(levels) - 1)], nxt

    def mean_util(self, t0: float, t1: float) -> float:
        """Time-mean of ``util_at`` over ``[t0, t1)`` (exact, segment by segment)."""
        if t1 <= t0:
            return self.at(t0)[1]
        acc = 0.0
        t = t0
        while t < t1:
            _, u, nc = self.at(t)
            nxt = min(t1, nc)
            acc += u * (nxt - t)
            t = nxt
        return acc / (t1 - t0)


class UtilModel(Protocol):
    name: str

    def draw(self, rng: random.Random, job_id: int, duration: float, gpus: int) -> JobUtil:
        """The job's utilization; ``duration`` is the trace's (the whole allocation)."""
        ...


# ------------------------------------------------------------------------------- models
class ScatteredModel:
    """The original model (stress case).  Draws exactly what the first ``workload.py`` drew, in the
    same order: the level, then (Ray tasks only) the tail."""

    name = "scattered"

    def draw(self, rng: random.Random, job_id: int, duration: float, gpus: int) -> JobUtil:
        util = draw_util(rng)
        tail = draw_tail(rng, duration) if gpus == 1 else 0.0
        return JobUtil(util, duration, tail, ScatteredProfile(job_id, util, duration, tail))


@dataclass(frozen=True, slots=True)
class PhasedParams:
    """Parameters of a phased model; docs/simulation.md gives each one's value and source."""

    start_median_s: float  # start-up (image pull, data loading) length: log-normal median
    start_sigma: float  # ... and sigma of its log
    start_max_frac: float  # start-up takes at most this share of the job's duration
    stall_p: float  # probability that a job ends in a stalled tail
    stall_frac: tuple[float, float]  # the tail's share of the job's duration: uniform in this range
    idle_p_mean: float  # mean share of a job's active-phase segments idle (Beta-distributed per job)
    idle_p_conc: float  # concentration (a + b) of that per-job Beta
    level_kind: str  # "beta": job mean ~ Beta(a, b); "lognormal": job median ~ LogNormal
    level_a: float  # beta: a; lognormal: median
    level_b: float  # beta: b; lognormal: sigma of the log across jobs
    spread: float  # beta: concentration of segment levels around the job mean; lognormal: sigma within a job
    n_levels: int = 8  # distinct segment levels drawn per job
    min_level: float = 0.01  # an active segment is never below this


GROUNDED = PhasedParams(
    start_median_s=120.0, start_sigma=0.8, start_max_frac=0.25,
    stall_p=0.37, stall_frac=(0.1, 0.9),
    idle_p_mean=0.16, idle_p_conc=4.0,
    level_kind="beta", level_a=1.0, level_b=0.45, spread=16.0,
)
SERVING = PhasedParams(
    start_median_s=120.0, start_sigma=0.8, start_max_frac=0.25,
    stall_p=0.15, stall_frac=(0.1, 0.9),
    idle_p_mean=0.31, idle_p_conc=4.0,
    level_kind="lognormal", level_a=0.11, level_b=1.0, spread=0.64,
)


# the share of long idle runs that are pauses the job resumes from (``--stall-resume-share``); no trace
# records it: docs/simulation.md, "Stall structure", argues the default and the page sweeps it
DEFAULT_RESUME_SHARE = 0.25


def refit_idle_share(params: PhasedParams, stall_share: float) -> float:
    """The mean idle share of active segments (``idle_p_mean``) that keeps the fleet's expected share of
    GPU-time at 0 % where ``params`` put it when a share ``stall_share`` of jobs has a long idle run
    instead of ``params.stall_p``.  Per unit of a job's time after its start-up, the expected time at 0 %
    is ``s m + (1 - s m) q`` (``s`` the stall share, ``m`` the mean stalled share of the job, ``q`` the
    idle share of the rest: independent draws, so the GPU-time weighting leaves it as is); this solves it
    for ``q`` at the new ``s``.  ValueError where that would take ``q`` out of (0.01, 0.9) (the stalls alone
    would put more than the published share at 0 %, or nearly none of it)."""
    if not 0.0 <= stall_share <= 1.0:
        raise ValueError(f"the stall share must be in [0, 1], not {stall_share!r}")
    m = sum(params.stall_frac) / 2.0
    zero = params.stall_p * m + (1.0 - params.stall_p * m) * params.idle_p_mean
    q = (zero - stall_share * m) / (1.0 - stall_share * m)
    if not 0.01 <= q <= 0.9:
        lo = max(0.0, (zero - 0.9) / (m * (1 - 0.9)))
        hi = (zero - 0.01) / (m * (1.0 - 0.01))
        raise ValueError(f"a stall share of {stall_share:g} cannot keep the fitted share of GPU-time at 0 % "
                         f"({zero:.1%}): choose one from {lo:.2f} to {hi:.2f}")
    return q


class PhasedModel:
    """``grounded`` and ``serving``: start-up, active (with idle segments), an optional long idle run:
    a stalled tail, or, for a share ``resume_share`` of the jobs that have one, a pause of the same
    length at a uniform place within the run, after which the job works again (docs/simulation.md,
    "Stall structure")."""

    def __init__(self, name: str, params: PhasedParams, resume_share: float = 0.0,
                 stall_share: float | None = None) -> None:
        if not 0.0 <= resume_share <= 1.0:
            raise ValueError(f"the stall resume share must be in [0, 1], not {resume_share!r}")
        self.name = name
        self.params = params
        self.resume_share = resume_share
        # None (or the parameters' own ``stall_p``): the model as fitted, draw for draw
        self.stall_share = None if stall_share is None or stall_share == params.stall_p else stall_share
        self._refit_idle_p = refit_idle_share(params, self.stall_share) if self.stall_share is not None else None

    def with_resume_share(self, share: float) -> PhasedModel:
        """The same model with ``share`` of its long idle runs pauses that resume."""
        return PhasedModel(self.name, self.params, share, self.stall_share)

    def with_stall_share(self, share: float) -> PhasedModel:
        """The same model with ``share`` of its jobs holding one long idle run (``stall_p``; ``--stall-share``),
        refitted so that the fleet's share of GPU-time at 0 % stays the published one the model was fitted to
        (``refit_idle_share``): an equally good fit with another stall structure.  The run's random stream is
        drawn as the fitted model draws it; which jobs stall is the same uniform against the new share (a
        larger share stalls the same jobs and more), and what the new share changes of a job is drawn from
        the job's own stream, so the share moves no other job's draws.  ValueError where no fit can hold."""
        return PhasedModel(self.name, self.params, self.resume_share, share)

    @property
    def stall_p(self) -> float:
        """The share of jobs with a long idle run (the parameters' own unless ``with_stall_share`` set it)."""
        return self.params.stall_p if self.stall_share is None else self.stall_share

    def _level(self, rng: random.Random, mean: float) -> float:
        p = self.params
        if p.level_kind == "beta":
            k = p.spread
            x = rng.betavariate(max(1e-3, mean * k), max(1e-3, (1.0 - mean) * k))
        else:
            x = mean * math.exp(rng.gauss(0.0, p.spread))
        return min(1.0, max(p.min_level, x))

    def draw(self, rng: random.Random, job_id: int, duration: float, gpus: int) -> JobUtil:
        p = self.params
        end = max(0.0, duration)
        start = min(p.start_max_frac * end, rng.lognormvariate(math.log(p.start_median_s), p.start_sigma))
        stall: float | None = None
        u_stall = rng.random()
        frac: float | None = None
        if u_stall < p.stall_p:
            frac = rng.uniform(*p.stall_frac)
        a = p.idle_p_mean * p.idle_p_conc
        idle_p = rng.betavariate(a, p.idle_p_conc - a)
        if p.level_kind == "beta":
            mean = rng.betavariate(p.level_a, p.level_b)
        else:
            mean = p.level_a * math.exp(rng.gauss(0.0, p.level_b))
        levels = tuple(self._level(rng, mean) for _ in range(p.n_levels))
        key = rng.getrandbits(32)
        if self.stall_share is not None and self._refit_idle_p is not None:
            # another stall share: the same uniform decides (monotone in the share); a stall the fitted
            # model had no length for, and the refitted idle share, from the job's own stream (the
            # pause below uses key * 2 + 1)
            own_stall = random.Random(key * 2)
            frac = (frac if frac is not None else own_stall.uniform(*p.stall_frac)) if u_stall < self.stall_share else None
            a = self._refit_idle_p * p.idle_p_conc
            idle_p = own_stall.betavariate(a, p.idle_p_conc - a)
        if frac is not None:
            stall = start + (1.0 - frac) * (end - start)
        resume: float | None = None
        if stall is not None and self.resume_share > 0.0:
            # whether the long idle run is a pause, and where, from the job's own stream (so the share moves
            # no other job's draws): a pause of the stall's length, placed uniformly between the start-up and
            # the end
            own = random.Random(key * 2 + 1)
            if own.random() < self.resume_share:
                length = end - stall
                stall = start + own.random() * max(0.0, end - start - length)
                resume = stall + length
        prof = PhasedProfile(key, end, start, 0.0, stall, min(idle_p, 0.999), levels, resume)
        if resume is not None:  # a pause inside the run: the task (or the RayJob) works to its end
            return JobUtil(prof.mean_util(0.0, end), end, 0.0, prof)
        if gpus == 1:  # a Ray task: works until the stall, then its actor holds the GPU idle
            work = end if stall is None else stall
            return JobUtil(prof.mean_util(0.0, work), work, end - work, prof)
        return JobUtil(prof.mean_util(0.0, end if stall is None else stall), end, 0.0, prof)


SCATTERED = ScatteredModel()
MODELS: dict[str, UtilModel] = {
    "grounded": PhasedModel("grounded", GROUNDED, DEFAULT_RESUME_SHARE),
    "scattered": SCATTERED,
    "serving": PhasedModel("serving", SERVING, DEFAULT_RESUME_SHARE),
}
DEFAULT_MODEL = "grounded"


def get_model(name: str | UtilModel) -> UtilModel:
    """The model called ``name`` (a model passes through); ValueError naming the choices otherwise."""
    if not isinstance(name, str):
        return name
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown utilization model {name!r}; choose one of {', '.join(sorted(MODELS))}") from None


# --------------------------------------------------------------------------- fleet samples
@dataclass(frozen=True, slots=True)
class FleetSamples:
    """Per-GPU utilization samples of a fleet: one every ``step_s`` of each job's allocated time
    (run start to ``allocation``), each weighted by the job's GPUs; ``job`` indexes the job."""

    util: tuple[float, ...]
    weight: tuple[float, ...]
    phase: tuple[str, ...]
    job: tuple[int, ...]


class _HasProfile(Protocol):
    gpus: int

    @property
    def allocation(self) -> float: ...

    def util_at(self, t: float) -> float: ...

    def phase_at(self, t: float) -> str: ...

    @property
    def profile(self) -> Profile | None: ...


def fleet_samples(jobs: list[_HasProfile], step_s: float = 60.0) -> FleetSamples:
    """Sample at t = 0, step, 2 step, ... < allocation, piece by piece (util is constant between a
    profile's ``next_change`` points, so each piece is evaluated once and weighted by its sample count)."""
    util: list[float] = []
    weight: list[float] = []
    phase: list[str] = []
    job: list[int] = []
    for i, j in enumerate(jobs):
        end = j.allocation
        prof = j.profile
        t = 0.0
        while t < end:
            nxt = min(end, prof.next_change(t)) if prof is not None else min(end, (math.floor(t / SEGMENT_S) + 1) * SEGMENT_S)
            n = math.ceil(nxt / step_s) - math.ceil(t / step_s)  # samples k * step in [t, nxt)
            if n > 0:
                util.append(j.util_at(t))
                weight.append(float(n * j.gpus))
                phase.append(j.phase_at(t))
                job.append(i)
            t = nxt
    return FleetSamples(tuple(util), tuple(weight), tuple(phase), tuple(job))
