"""Utilization models (simulator/utilization.py): determinism, phases vs values, the grounded fit,
the scattered model equal to the original, and the model name check."""

from __future__ import annotations

import hashlib
import math
import random
from datetime import datetime

import pytest

from simulator.utilization import (
    MODELS,
    PHASES,
    SEGMENT_S,
    STALLED,
    fleet_samples,
    get_model,
)
from simulator.workload import Job, load_philly, synthetic

# Computed with the original workload.py (before utilization.py existed) by hashing each job's
# (id, team, submit, duration, gpus, util, idle_tail) and util_at at fixed times inside its work,
# and every RayJob's util_at at 40 times, also past its end.
LEGACY_PHILLY = ("23bdec58657e4274894afc56fb315c27d71d5c8caf5be10dffe84e319195bc41",
                 "92d47fb1a1d29c5b4703c6c2fe172b8eab22b451e47e9db146fbe2027737adca")
LEGACY_SYNTHETIC = ("0252b3d1a5193295b9ea3ec49d9377d52a997be3ea3e72015d0c2175f0a7f081",
                    "408454c5b70355c5185dca186423e42eb1fe6cb4f8447a15b1b77fa849d8a568")
TIMES = (0.0, 1.0, 299.9, 300.0, 1234.5, 3600.0, 86399.0)


def _digest(jobs: tuple[Job, ...]) -> str:
    h = hashlib.sha256()
    for j in jobs:
        h.update(repr((j.id, j.team, j.submit, j.duration, j.gpus, j.util, j.idle_tail)).encode())
        for t in TIMES:
            if t < j.duration:
                h.update(repr(j.util_at(t)).encode())
    return h.hexdigest()


def _digest_rayjobs(jobs: tuple[Job, ...]) -> str:
    h = hashlib.sha256()
    for j in jobs:
        if j.gpus > 1:
            for k in range(40):
                h.update(repr(j.util_at(k * 150.0 + 7.0)).encode())
    return h.hexdigest()


def test_scattered_is_the_original_model(shared_dir):
    path = shared_dir / "traces" / "philly-pollux" / "philly.csv"
    w = load_philly(path, datetime(2017, 10, 3), 12.0, 1, 896, util_model="scattered")
    assert len(w.jobs) == 138
    assert (_digest(w.jobs), _digest_rayjobs(w.jobs)) == LEGACY_PHILLY
    rj = w.jobs[19]  # spot values printed by the original code
    assert (rj.gpus, rj.duration, rj.util) == (16, 45025.0, 0.8692762424367693)
    assert [rj.util_at(t) for t in (0.0, 300.0, 600.0, 900.0, 1200.0)] == [rj.util, rj.util, 0.0, rj.util, 0.0]
    assert (w.jobs[0].util, w.jobs[0].idle_tail) == (0.6812892806697893, 23.57802762878589)
    s = synthetic(48.0, 3, 64, util_model="scattered")
    assert len(s.jobs) == 2347
    assert (_digest(s.jobs), _digest_rayjobs(s.jobs)) == LEGACY_SYNTHETIC


def test_a_job_without_profile_follows_scattered():
    bare = Job(19, "team-a", 0.0, 45025.0, 16, 0.87)
    prof = get_model("scattered").draw(random.Random(0), 19, 45025.0, 16).profile
    for t in (0.0, 300.0, 600.0, 900.0, 1200.0, 40000.0):
        assert bare.util_at(t) in (0.0, 0.87)
        assert (bare.util_at(t) == 0.0) == (prof.util_at(t) == 0.0) == (bare.phase_at(t) == "in_job_idle")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_seed_same_jobs_other_seed_other_utilization(name):
    a = synthetic(24.0, 7, 64, util_model=name).jobs
    b = synthetic(24.0, 7, 64, util_model=name).jobs
    c = synthetic(24.0, 8, 64, util_model=name).jobs
    key = [(j.duration, j.idle_tail, j.util, j.stall_start, [j.util_at(t) for t in range(0, 7200, 450)]) for j in a]
    assert key == [(j.duration, j.idle_tail, j.util, j.stall_start, [j.util_at(t) for t in range(0, 7200, 450)])
                   for j in b]
    assert [j.util for j in a[:50]] != [j.util for j in c[:50]]


def test_grounded_and_serving_see_the_same_jobs():
    g = synthetic(24.0, 7, 64, util_model="grounded").jobs
    s = synthetic(24.0, 7, 64, util_model="serving").jobs
    assert [(j.submit, j.gpus) for j in g] == [(j.submit, j.gpus) for j in s]
    assert [j.allocation for j in g] == pytest.approx([j.allocation for j in s], rel=1e-12)
    assert [j.util for j in g] != [j.util for j in s]


def _drawn_jobs(name: str, seed: int, n: int):
    """``n`` jobs drawn by model ``name`` (durations from 45 s to 11 h, Ray tasks and 8-GPU RayJobs):
    (the trace's duration, the draw, the job)."""
    model = get_model(name)
    rng = random.Random(seed)
    for i in range(n):
        dur = rng.choice((45.0, 600.0, 3600.0, 40000.0))
        gpus = rng.choice((1, 1, 8))
        u = model.draw(rng, i, dur, gpus)
        yield dur, u, Job(i, "team-a", 0.0, u.work_s, gpus, u.util, u.idle_tail, u.profile)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_phases_agree_with_values(name):
    stalled_seen = 0
    for dur, u, job in _drawn_jobs(name, 3, 300):
        gpus = job.gpus
        if name != "scattered":  # grounded / serving: the trace's duration is the whole allocation
            assert job.allocation == pytest.approx(dur)
        if gpus > 1:
            assert job.idle_tail == 0.0
        st = job.stall_start
        resume = job.stall_end  # a pause the job resumes from (--stall-resume-share), else a final stall
        if st is not None:
            assert 0.0 <= st <= job.allocation
            if gpus == 1 and resume is None:  # a Ray task's final stall is its idle tail: the work ends there
                assert st == job.duration and job.idle_tail > 0
            if resume is not None:  # a pause inside the run: the task works to its end, no tail
                assert st < resume <= job.allocation + 1e-6 and job.idle_tail == 0.0
        t = 0.0
        while t < job.allocation:
            ph, v = job.phase_at(t), job.util_at(t)
            assert ph in PHASES and 0.0 <= v <= 1.0
            if ph == STALLED:
                stalled_seen += 1
                assert v == 0.0 and st is not None and t >= st and (resume is None or t < resume)
            elif ph == "in_job_idle":
                assert v == 0.0
            elif ph == "active":
                assert v >= 0.01
            if st is not None and t >= st and (resume is None or t < resume):
                assert ph == STALLED
            nxt = u.profile.next_change(t)
            assert nxt > t
            mid = min(nxt, job.allocation, t + 400.0)
            # constant between change points
            assert job.util_at((t + mid) / 2) == v and job.phase_at((t + mid) / 2) == ph
            t = min(nxt, t + 97.0) if name == "scattered" and gpus == 1 and t < job.duration else nxt
        if gpus == 1 and st is not None and name != "scattered":
            # the task's constant level is its work's time-mean
            assert job.util == pytest.approx(u.profile.mean_util(0.0, job.duration))
    assert stalled_seen > 0


@pytest.mark.parametrize("name", sorted(MODELS))
def test_at_is_the_phase_the_level_and_the_next_change_at_once(name):
    """``Job.at(t)`` (what the ledger asks) is ``(phase_at(t), util_at(t), the profile's next_change(t))``
    at every change point of a job's run, just before and after each, and past its end; a job without a
    profile changes at the next segment boundary."""
    checked = 0
    for _, u, job in _drawn_jobs(name, 11, 200):
        # the same job without a profile: the scattered rule
        bare = Job(job.id, job.team, 0.0, job.duration, job.gpus, job.util, job.idle_tail)
        times = {0.0, job.duration, job.allocation, job.allocation + 5.0}
        t = 0.0
        while t < job.allocation:
            times.update((t, math.nextafter(t, -math.inf) if t > 0 else 0.0, t + 1.0))
            t = u.profile.next_change(t)
        for t in sorted(times):
            assert job.at(t) == (job.phase_at(t), job.util_at(t), u.profile.next_change(t)), (name, job.id, t)
            assert bare.at(t) == (bare.phase_at(t), bare.util_at(t), (math.floor(t / SEGMENT_S) + 1) * SEGMENT_S)
            checked += 1
    assert checked > 1000


def _share(s, pred) -> tuple[float, float]:
    """Weighted share of samples with ``pred(util)`` and its standard error, treating jobs (not
    samples: a job's samples are correlated) as the independent units (ratio estimator)."""
    per_w: dict[int, float] = {}
    per_x: dict[int, float] = {}
    for u, w, j in zip(s.util, s.weight, s.job, strict=True):
        per_w[j] = per_w.get(j, 0.0) + w
        per_x[j] = per_x.get(j, 0.0) + (w if pred(u) else 0.0)
    tot = sum(per_w.values())
    share = sum(per_x.values()) / tot
    n = len(per_w)
    var = sum((per_x[j] - share * per_w[j]) ** 2 for j in per_w) * n / (n - 1) / tot**2
    return share, math.sqrt(var)


@pytest.mark.parametrize(("name", "zero", "median", "p75"), [
    ("grounded", 0.322, 0.486, 0.92),  # Philly (AcmeTrace CDF)
    ("serving", 0.361, 0.04, 0.14),  # PAI (AcmeTrace CDF, AntMan)
])
def test_fleet_lands_near_the_published_percentiles(name, zero, median, p75):
    """On 2,000 synthetic jobs (1 and 8 GPUs, 1-12 h): the share at 0 % (< 1 %), and the shares at or
    below the published median and p75 (0.5 and 0.75 if the percentiles match).  Tolerance: the
    calibration's few points (0.05) plus 3 standard errors of this sample."""
    model = get_model(name)
    rng = random.Random(11)
    jobs = []
    for i in range(2000):
        gpus = 8 if i % 4 == 0 else 1
        u = model.draw(rng, i, rng.uniform(3600.0, 12 * 3600.0), gpus)
        jobs.append(Job(i, "team-a", 0.0, u.work_s, gpus, u.util, u.idle_tail, u.profile))
    s = fleet_samples(jobs)
    for pred, target in ((lambda u: u < 0.01, zero), (lambda u: u <= median, 0.5), (lambda u: u <= p75, 0.75)):
        share, se = _share(s, pred)
        assert abs(share - target) <= 0.05 + 3 * se, (name, target, share, se)


def test_scattered_is_far_from_serving_targets():
    """The check above can fail: the Philly-like scattered fleet is nowhere near PAI's median."""
    model = get_model("scattered")
    rng = random.Random(11)
    jobs = [Job(i, "t", 0.0, u.work_s, 8, u.util, u.idle_tail, u.profile)
            for i in range(300) for u in [model.draw(rng, i, 7200.0, 8)]]
    share, se = _share(fleet_samples(jobs), lambda u: u <= 0.04)
    assert abs(share - 0.5) > 0.05 + 3 * se


def test_fleet_samples_count_every_minute_of_allocation():
    model = get_model("grounded")
    u = model.draw(random.Random(5), 0, 1234.0, 1)
    job = Job(0, "t", 0.0, u.work_s, 1, u.util, u.idle_tail, u.profile)
    s = fleet_samples([job])
    assert sum(s.weight) == math.ceil(1234.0 / 60.0)  # t = 0, 60, ..., 1200
    # each piece is one value: a segment's samples, never more than a segment's worth
    assert all(w <= SEGMENT_S / 60.0 + 1 for w in s.weight)


def test_bad_model_name_is_a_clear_error(shared_dir):
    with pytest.raises(ValueError, match=r"unknown utilization model 'philly'; choose one of grounded, scattered, serving"):
        get_model("philly")
    with pytest.raises(ValueError, match="unknown utilization model"):
        synthetic(1.0, 1, 8, util_model="nope")
    with pytest.raises(ValueError, match="unknown utilization model"):
        load_philly(shared_dir / "traces" / "philly-pollux" / "philly.csv", datetime(2017, 10, 3), 1.0, 1, 8,
                    util_model="Grounded")
