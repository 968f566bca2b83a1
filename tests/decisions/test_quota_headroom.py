"""Quota headroom with cohort borrowing: ``admittable_gpus`` tables, its agreement with the simulated
Kueue's admission rule, and the scaler using it for elastic Kueue clusters."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.quota import admittable_gpus, cohort_totals
from autoscaler.core.policy.scaling import decide_scaling
from autoscaler.core.snapshot import ClusterQueueState, frozen_map
from simulator.kueue import SimClusterQueue, SimKueue
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker


def cq(name: str, nominal: float, used: float, cohort: str | None = "c", limit: float | None = None,
       flavor: str = "a100") -> ClusterQueueState:
    return ClusterQueueState(name, cohort=cohort, nominal_gpus=frozen_map({flavor: nominal}),
                             borrowing_limit_gpus=frozen_map({flavor: limit}) if limit is not None else frozen_map(),
                             used_gpus=frozen_map({flavor: used}))


def headroom(queues: list[ClusterQueueState], name: str = "a", flavor: str = "a100") -> tuple[float, float]:
    qs = {q.name: q for q in queues}
    return admittable_gpus(qs[name], flavor, cohort_totals(qs))


@pytest.mark.parametrize(("queues", "expected"), [
    # no cohort: own nominal - own usage only, whatever other queues have free
    ([cq("a", 8, 6, cohort=None), cq("b", 16, 0, cohort=None)], (2, 0)),
    # own quota exhausted, no cohort: nothing
    ([cq("a", 8, 8, cohort=None)], (0, 0)),
    # cohort: own 2 free + 16 unused in b (borrowing unlimited)
    ([cq("a", 8, 6), cq("b", 16, 0)], (18, 16)),
    # cohort, other queues partly used: 2 + (16 - 10) + (4 - 4)
    ([cq("a", 8, 6), cq("b", 16, 10), cq("c", 4, 4)], (8, 6)),
    # borrowing limit 4 caps the borrowed part: 2 + 4
    ([cq("a", 8, 6, limit=4), cq("b", 16, 0)], (6, 4)),
    # borrowing limit 0: own quota only
    ([cq("a", 8, 6, limit=0), cq("b", 16, 0)], (2, 0)),
    # already borrowing 3 (usage 11 of 8) with limit 4: one more
    ([cq("a", 8, 11, limit=4), cq("b", 16, 5)], (1, 1)),
    # another queue already borrows b's unused quota: only what is still unused in the cohort
    ([cq("a", 8, 8), cq("b", 16, 4), cq("c", 4, 14)], (2, 2)),
    # others have borrowed a's own unused quota: a's own 4 still count (given back / reclaimed)
    ([cq("a", 8, 4), cq("b", 8, 12)], (4, 0)),
    # a queue in another cohort lends nothing
    ([cq("a", 8, 8), cq("b", 16, 0, cohort="other")], (0, 0)),
])
def test_admittable_gpus_table(queues, expected):
    assert headroom(queues) == expected


def test_admittable_gpus_is_per_flavor():
    a = ClusterQueueState("a", cohort="c", nominal_gpus=frozen_map({"a100": 8, "h100": 4}),
                          used_gpus=frozen_map({"a100": 8, "h100": 1}))
    b = ClusterQueueState("b", cohort="c", nominal_gpus=frozen_map({"a100": 0, "h100": 8}),
                          used_gpus=frozen_map({"h100": 2}))
    assert headroom([a, b], flavor="a100") == (0, 0)
    assert headroom([a, b], flavor="h100") == (9, 6)
    assert headroom([a, b], flavor="l4") == (0, 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 16), st.integers(0, 24), st.none() | st.integers(0, 8),
                          st.sampled_from(["c", "c", "d"])), min_size=1, max_size=5))
def test_admittable_gpus_agrees_with_the_simulated_kueue_admission_rule(rows):
    """The borrowable part is exactly the largest request the simulator's Kueue model admits now; the
    answer never falls below the queue's own unused nominal quota."""
    sim = SimKueue([SimClusterQueue(f"q{i}", cohort, {"a100": float(n)},
                                    {"a100": None if lim is None else float(lim)}, {"a100": float(u)})
                    for i, (n, u, lim, cohort) in enumerate(rows)])
    states = {q.name: ClusterQueueState(q.name, cohort=q.cohort, nominal_gpus=frozen_map(q.nominal),
                                        borrowing_limit_gpus=frozen_map(q.borrowing_limit),
                                        used_gpus=frozen_map(q.usage)) for q in sim.cqs.values()}
    totals = cohort_totals(states)
    for name, state in states.items():
        total, borrowed = admittable_gpus(state, "a100", totals)
        own = max(0.0, state.nominal_gpus["a100"] - state.used_gpus["a100"])
        assert total == max(own, sim.headroom(name, "a100"))
        g = int(sim.headroom(name, "a100"))
        if g > 0:
            assert sim.fits(name, "a100", g)
        assert not sim.fits(name, "a100", g + 1)
        assert 0 <= borrowed <= total and (borrowed == 0 or total > own)


def _elastic(demand: int, replicas: int = 2):
    return ray_cluster([group(workers=[worker(f"w{i}") for i in range(replicas)], hi=40)], cq="a",
                       demand=[gpu_demand(1, count=demand)], labels={"kueue.x-k8s.io/queue-name": "lq"},
                       annotations={"kueue.x-k8s.io/elastic-job": "true"})


def test_scale_up_borrows_from_the_cohort():
    rc = _elastic(demand=10)  # (the default step limit allows +4 in one pass)
    snap = snapshot(ray=[rc], cqs=[cq("a", 4, 4), cq("b", 16, 13)])  # own quota used up; 3 borrowable
    (d,) = decide_scaling(snap, rc, ScalingDefaults(), {}, NOW).decisions
    assert (d.direction, d.reason, d.desired) == ("up", R.QUOTA_HEADROOM_LIMIT, 2 + 3)
    assert "3 borrowed from cohort c" in d.message
    assert any("beyond quota headroom" in s for s in d.infeasible)


def test_scale_up_within_borrowable_quota_is_not_limited():
    rc = _elastic(demand=3)
    snap = snapshot(ray=[rc], cqs=[cq("a", 4, 4), cq("b", 16, 10)])  # own quota used up; 6 borrowable
    (d,) = decide_scaling(snap, rc, ScalingDefaults(), {}, NOW).decisions
    assert (d.reason, d.desired, d.infeasible) == (R.PENDING_DEMAND, 5, ())


def test_scale_up_respects_the_borrowing_limit():
    rc = _elastic(demand=10)
    snap = snapshot(ray=[rc], cqs=[cq("a", 4, 2, limit=1), cq("b", 16, 0)])
    (d,) = decide_scaling(snap, rc, ScalingDefaults(), {}, NOW).decisions
    assert (d.reason, d.desired) == (R.QUOTA_HEADROOM_LIMIT, 2 + 3)


def test_in_tree_max_is_capped_at_borrowable_headroom():
    rc = ray_cluster([group(workers=[worker("w0"), worker("w1")], hi=40)], cq="a", in_tree=True,
                     labels={"kueue.x-k8s.io/queue-name": "lq"}, annotations={"kueue.x-k8s.io/elastic-job": "true"})
    snap = snapshot(ray=[rc], cqs=[cq("a", 4, 2), cq("b", 8, 5)])
    (d,) = decide_scaling(snap, rc, ScalingDefaults(), {}, NOW).decisions
    assert (d.write, d.new_max) == ("min_max", 2 + 2 + 3)
