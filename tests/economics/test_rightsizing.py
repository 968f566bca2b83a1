"""The right-sizing recommender on hand-built histories whose right answer follows from how they are built."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.policy import rightsizing as rs
from autoscaler.core.policy.rightsizing import (
    DecayingHistogram,
    GroupKey,
    GroupObservation,
    PodObservation,
    RightsizingPolicy,
    WorkerObservation,
)

KEY = GroupKey("team-a", "rc", "gpu-workers")
HOUR = 3600.0
STEP = 300.0


def history(hours: float, workers_at, gpus: int = 8, active=lambda t, i: 4) -> list[GroupObservation]:
    """``workers_at(t)`` workers of ``gpus`` GPUs each at every 5-minute step, ``active(t, i)`` of them active."""
    out = []
    for n in range(int(hours * HOUR / STEP)):
        t = n * STEP
        ws = tuple(WorkerObservation(f"w{i}", gpus, active(t, i)) for i in range(workers_at(t)))
        out.append(GroupObservation(t, STEP, ws))
    return out


# ------------------------------------------------------------------------------------- histogram
def test_histogram_percentiles_follow_the_weights():
    h = DecayingHistogram(half_life_s=1e12)  # no decay in practice
    for v, n in ((1, 50), (2, 40), (5, 10)):
        for _ in range(n):
            h.add(v, 0.0)
    assert (h.percentile(0.5), h.percentile(0.9), h.percentile(0.91), h.percentile(1.0)) == (1, 2, 5, 5)


def test_histogram_halves_weights_per_half_life():
    h = DecayingHistogram(half_life_s=HOUR)
    h.add(1, 0.0)
    h.add(2, HOUR)  # weighs twice as much as the value one half-life older
    assert h.percentile(1 / 3) == 1
    assert h.percentile(1 / 3 + 0.01) == 2


@given(st.lists(st.tuples(st.integers(0, 16), st.floats(0, 1e7)), min_size=1, max_size=60), st.floats(0, 1))
@settings(max_examples=200, deadline=None)
def test_histogram_percentile_is_an_observed_value_and_monotone(samples, p):
    h = DecayingHistogram(half_life_s=86400)
    for v, t in sorted(samples, key=lambda s: s[1]):
        h.add(v, t)
    values = {v for v, _ in samples}
    assert h.percentile(p) in values
    assert h.percentile(1.0) == max(values)
    assert h.percentile(0.0) == min(values)
    assert h.percentile(p) <= h.percentile(min(1.0, p + 0.1))


def test_histogram_survives_long_spans():
    h = DecayingHistogram(half_life_s=60)
    for n in range(5000):
        h.add(n % 3, n * 60.0)
    assert math.isfinite(h.total) and h.percentile(1.0) == 2


# ------------------------------------------------------------------------------------ groups
def test_workers_using_four_of_eight_gpus_get_four():
    obs = history(48, lambda t: 3, gpus=8, active=lambda t, i: 4)
    r = rs.recommend_group(KEY, obs, RightsizingPolicy(), current_min_replicas=3, current_max_replicas=3)
    assert r.reason == rs.RECOMMENDED
    assert (r.gpus_per_worker, r.recommended_gpus_per_worker) == (8, 4)
    assert (r.recommended_min_replicas, r.recommended_max_replicas) == (3, math.ceil(3 * 1.15))
    # every instant: 3 workers x 4 idle GPUs; the recommendation holds 3 x 4 -> all of it saved
    span_h = len(obs) * STEP / HOUR
    assert r.observed_idle_gpu_hours == pytest.approx(3 * 4 * span_h)
    assert r.saved_gpu_hours == pytest.approx(3 * 4 * span_h)


def test_gpus_round_up_to_an_allowed_size_and_never_exceed_the_current():
    obs = history(48, lambda t: 2, gpus=8, active=lambda t, i: 3)
    assert rs.recommend_group(KEY, obs, RightsizingPolicy()).recommended_gpus_per_worker == 4
    obs = history(48, lambda t: 2, gpus=6, active=lambda t, i: 5)
    assert rs.recommend_group(KEY, obs, RightsizingPolicy()).recommended_gpus_per_worker == 6


def test_rare_full_use_keeps_all_gpus():
    # one worker uses all 8 GPUs once in two days: with the default (the largest ever seen) nothing shrinks
    obs = history(48, lambda t: 2, gpus=8, active=lambda t, i: 8 if (t == 24 * HOUR and i == 0) else 2)
    r = rs.recommend_group(KEY, obs, RightsizingPolicy())
    assert r.recommended_gpus_per_worker == 8


def test_replicas_follow_busy_workers_idle_at_night():
    # 6 workers present all the time; 6 busy by day (8:00-20:00), 1 busy at night
    def active(t, i):
        day = 8 <= (t / HOUR) % 24 < 20
        return 2 if (day or i == 0) else 0

    obs = history(72, lambda t: 6, gpus=2, active=active)
    r = rs.recommend_group(KEY, obs, RightsizingPolicy(), current_min_replicas=6, current_max_replicas=6)
    assert r.reason == rs.RECOMMENDED
    assert r.recommended_gpus_per_worker == 2
    assert r.recommended_min_replicas == 1  # p5 of busy workers
    assert r.recommended_max_replicas == math.ceil(6 * 1.15)
    # saved: at night 5 idle workers x 2 GPUs beyond the 1 busy worker the group would keep
    night_steps = sum(1 for o in obs if o.busy_workers == 1)
    assert r.saved_gpu_hours == pytest.approx(night_steps * STEP / HOUR * 5 * 2)


def test_right_sized_group_says_so():
    obs = history(48, lambda t: 4, gpus=4, active=lambda t, i: 4)
    r = rs.recommend_group(KEY, obs, RightsizingPolicy(), current_min_replicas=4, current_max_replicas=5)
    assert r.reason == rs.ALREADY_RIGHT_SIZED
    assert r.saved_gpu_hours == 0


@pytest.mark.parametrize(
    ("obs", "reason"),
    [
        ([], rs.NO_DATA),
        (history(48, lambda t: 0), rs.NO_DATA),
        (history(48, lambda t: 2, gpus=0, active=lambda t, i: 0), rs.NO_GPUS),
        (history(6, lambda t: 2), rs.INSUFFICIENT_HISTORY),
    ],
)
def test_withheld_with_a_reason(obs, reason):
    r = rs.recommend_group(KEY, obs, RightsizingPolicy())
    assert r.reason == reason and r.withheld
    assert r.recommended_gpus_per_worker is None and r.recommended_max_replicas is None
    assert r.message


def test_too_few_observations_is_insufficient_even_over_a_long_span():
    obs = [GroupObservation(t * 10 * HOUR, STEP, (WorkerObservation("w", 8, 1),)) for t in range(5)]
    assert rs.recommend_group(KEY, obs, RightsizingPolicy()).reason == rs.INSUFFICIENT_HISTORY


worker_st = st.builds(
    lambda gpus, frac: WorkerObservation("w", gpus, int(gpus * frac)),
    st.integers(0, 8), st.floats(0, 1),
)


@given(st.lists(st.lists(worker_st, max_size=6), min_size=13, max_size=40))
@settings(max_examples=150, deadline=None)
def test_invariants_on_random_histories(instants):
    obs = [GroupObservation(n * 2 * HOUR, 2 * HOUR, tuple(ws)) for n, ws in enumerate(instants)]
    r = rs.recommend_group(KEY, obs, RightsizingPolicy())
    idle = sum((o.held_gpus - o.active_gpus) * o.duration_s for o in obs) / HOUR
    assert r.observed_idle_gpu_hours == pytest.approx(idle)
    if r.withheld:
        return
    most_active = max(min(w.active_gpus, w.gpus) for o in obs for w in o.workers)
    assert max(1, most_active) <= r.recommended_gpus_per_worker <= r.gpus_per_worker
    assert 0 <= r.recommended_min_replicas <= r.recommended_max_replicas
    assert r.recommended_max_replicas >= max(1, r.recommended_min_replicas)
    assert 0 <= r.saved_gpu_hours <= idle + 1e-9


# ----------------------------------------------------------------------------------- job kinds
def test_job_kind_p95_of_active_gpus():
    # 100 instants; pods request 8 GPUs, keep 2 active 95 % of the time and 8 active 5 % of it
    obs = [PodObservation(n * STEP * 3, STEP * 3, "p", 8, 8 if n % 20 == 0 else 2) for n in range(100)]
    r = rs.recommend_job_kind("team-b", "PyTorchJob", obs, RightsizingPolicy(half_life_s=1e12))
    assert (r.requested_gpus_per_pod, r.active_gpus_per_pod, r.recommended_gpus_per_pod) == (8, 2, 2)
    assert r.reason == rs.RECOMMENDED


def test_job_kind_withheld():
    pol = RightsizingPolicy()
    assert rs.recommend_job_kind("n", "Job", [], pol).reason == rs.NO_DATA
    short = [PodObservation(n * 60.0, 60.0, "p", 4, 1) for n in range(30)]
    r = rs.recommend_job_kind("n", "Job", short, pol)
    assert r.reason == rs.INSUFFICIENT_HISTORY and r.recommended_gpus_per_pod is None and r.active_gpus_per_pod == 1


def test_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="gpus_percentile"):
        RightsizingPolicy(gpus_percentile=1.5)
    with pytest.raises(ValueError, match="half_life"):
        RightsizingPolicy(half_life_s=0)


# ------------------------------------------------------------------------------------ gauges
def test_recommendation_series_numbers_and_withheld_reason():
    good = rs.recommend_group(KEY, history(48, lambda t: 3), RightsizingPolicy())
    short = rs.recommend_group(GroupKey("team-b", "rc2", "g"), history(2, lambda t: 1), RightsizingPolicy())
    series = rs.recommendation_series([good, short])
    labels = {"namespace": "team-a", "raycluster": "rc", "group": "gpu-workers"}
    assert series["queuepilot_recommendation_gpus_per_worker"] == [(labels, 4.0)]
    assert series["queuepilot_recommendation_min_replicas"] == [(labels, float(good.recommended_min_replicas))]
    assert series["queuepilot_recommendation_saved_gpu_seconds"] == [(labels, pytest.approx(good.saved_gpu_hours * 3600))]
    assert series["queuepilot_recommendation_withheld"] == [(
        {"namespace": "team-b", "raycluster": "rc2", "group": "g", "reason": rs.INSUFFICIENT_HISTORY}, 1.0,
    )]
