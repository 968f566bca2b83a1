"""``workers_needed`` packs runs of identical bundles: same answer as bundle-by-bundle first-fit
decreasing, and a count of thousands is one run."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.scaling import decide_scaling, workers_needed
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker

KEYS = ("GPU", "CPU")


def reference_ffd(bundles, cap) -> int:
    """Bundle by bundle: sorted by needs, largest first (STRICT_SPREAD first among equals), each into
    the first worker with room (STRICT_SPREAD: a new worker)."""
    keys = [k for k in cap if cap[k] > 0]
    items = [(shape, spread) for shape, spread, n in bundles for _ in range(n)]
    items.sort(key=lambda b: (tuple(-b[0].get(k, 0.0) for k in keys), not b[1]))
    bins: list[dict[str, float]] = []
    for shape, spread in items:
        for b in ([] if spread else bins):
            if all(shape.get(k, 0.0) <= b[k] + 1e-9 for k in keys):
                for k in keys:
                    b[k] -= shape.get(k, 0.0)
                break
        else:
            bins.append({k: cap[k] - shape.get(k, 0.0) for k in keys})
    return len(bins)


shapes = st.fixed_dictionaries({"GPU": st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 8.0]),
                                "CPU": st.sampled_from([0.0, 1.0, 4.0, 16.0])})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(shapes, st.booleans(), st.integers(0, 12)), max_size=6),
       st.sampled_from([{"GPU": 8.0, "CPU": 32.0}, {"GPU": 4.0}, {"GPU": 1.0, "CPU": 8.0}]))
def test_same_as_bundle_by_bundle_first_fit_decreasing(bundles, cap):
    bundles = [(s, sp, n) for s, sp, n in bundles if all(s.get(k, 0.0) <= cap.get(k, math.inf) for k in KEYS)]
    got = workers_needed(bundles, cap)
    assert got == reference_ffd(bundles, cap)
    # the 2-tuple form (one bundle per entry) gives the same
    assert workers_needed([(s, sp) for s, sp, n in bundles for _ in range(n)], cap) == got
    # never fewer workers than the resources need, never more than one per bundle
    total = sum(n for _, _, n in bundles)
    assert got <= total
    for k in cap:
        assert got >= math.ceil(sum(s.get(k, 0.0) * n for s, _, n in bundles) / cap[k] - 1e-9)


def test_thousands_of_identical_tasks_are_one_run():
    assert workers_needed([({"GPU": 1.0}, False, 4000)], {"GPU": 8.0, "CPU": 64.0}) == 500
    assert workers_needed([({"GPU": 1.0}, True, 4000)], {"GPU": 8.0}) == 4000
    assert workers_needed([({"GPU": 1.0}, False, 10**9)], {"GPU": 1.0}) == 10**9


def test_scaler_counts_every_pending_bundle():
    rc = ray_cluster([group(workers=[worker("w0")], hi=10_000)], demand=[gpu_demand(1, count=4000)])
    (d,) = decide_scaling(snapshot(ray=[rc]), rc, ScalingDefaults(), {}, NOW).decisions
    assert d.pending_gpus == 4000 and "4000 pending Ray bundle(s)" in d.message and "need 4000 worker(s)" in d.message
