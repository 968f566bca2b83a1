"""The scaling history keeps its objects when nothing changed, and still equals a fresh computation.

``GroupHistory.pruned`` returns the very history when no entry is old enough to drop, and
``decide_scaling`` keeps last pass's idle-timer map when the timers are the same; these checks
compare both shortcuts with the plain filter / a fresh decision from an equal, newly built history.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.scaling import RECLAIM_BUDGET_PERIOD, GroupHistory, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, group, ray_cluster, snapshot, worker

D = ScalingDefaults()
KEEP_REC = max(D.scale_up.stabilization_window_seconds, D.scale_down.stabilization_window_seconds)
KEEP_EV = max(D.scale_up.longest_period, D.scale_down.longest_period)

ages = st.floats(min_value=0, max_value=2 * RECLAIM_BUDGET_PERIOD, allow_nan=False)
entries = st.lists(st.tuples(ages, st.integers(-5, 5)), max_size=8)  # any order, as a hand-built history may be


def filtered(h: GroupHistory) -> GroupHistory:
    """``pruned`` as a plain filter of every entry (what it computed before the shortcut)."""
    return GroupHistory(
        recommendations=tuple((t, r) for t, r in h.recommendations if NOW - t < KEEP_REC),
        scale_events=tuple((t, d) for t, d in h.scale_events if NOW - t < KEEP_EV),
        idle_since=h.idle_since, user_max=h.user_max, written_max=h.written_max, last_launch=h.last_launch,
        reclaims=tuple(t for t in h.reclaims if NOW - t < RECLAIM_BUDGET_PERIOD),
    )


@given(entries, entries, st.lists(ages, max_size=6))
def test_pruned_equals_the_plain_filter(recs, events, reclaims):
    h = GroupHistory(recommendations=tuple((NOW - a, r) for a, r in recs),
                     scale_events=tuple((NOW - a, d) for a, d in events),
                     reclaims=tuple(NOW - a for a in reclaims))
    assert h.pruned(D, NOW) == filtered(h)


def test_pruned_keeps_the_history_when_nothing_expired():
    h = GroupHistory(recommendations=((NOW - 30, 2), (NOW - 60, 3)), reclaims=(NOW - 100,))
    assert h.pruned(D, NOW) is h
    old = GroupHistory(recommendations=((NOW - 30, 2), (NOW - KEEP_REC, 3)))
    assert old.pruned(D, NOW) is not old
    assert old.pruned(D, NOW).recommendations == ((NOW - 30, 2),)


def test_same_idle_timers_give_the_same_decision_as_a_fresh_history():
    # one idle worker, seen idle since 10 s ago: the window (90 s) has not passed, so the timer stays
    rc = ray_cluster(groups=[group(replicas=2, workers=[worker("w0", util=0.0, busy=False), worker("w1", util=0.9)])])
    snap = snapshot(ray=[rc])
    kept = GroupHistory(idle_since=frozen_map({"w0": NOW - 10}))
    fresh = GroupHistory(idle_since=frozen_map({"w0": NOW - 10}))
    a = decide_scaling(snap, rc, D, {"gpu": kept}, NOW)
    b = decide_scaling(snap, rc, D, {"gpu": fresh}, NOW)
    assert a.decisions == b.decisions
    assert a.history == b.history
    assert dict(a.history["gpu"].idle_since) == {"w0": NOW - 10}
    assert a.history["gpu"].idle_since is kept.idle_since  # the same timers: last pass's map


def test_the_parsed_policy_of_a_cluster_equals_a_fresh_parse():
    from dataclasses import replace

    from autoscaler.core.policy.annotations import policy_from_annotations
    from autoscaler.core.policy.scaling import _cluster_policy

    notes = {"queuepilot.io/autoscale": "true", "queuepilot.io/idle-window": "4m", "queuepilot.io/nonsense": "x"}
    other = replace(D, down_after_up_seconds=D.down_after_up_seconds + 60)
    for defaults in (D, other, D):  # a cached parse must not serve other defaults
        assert _cluster_policy(frozen_map(notes), defaults) == policy_from_annotations(notes, defaults)
    changed = {**notes, "queuepilot.io/idle-window": "7m"}
    assert _cluster_policy(frozen_map(changed), D) == policy_from_annotations(changed, D)
    assert _cluster_policy(frozen_map(changed), D)[0].idle_window_seconds == 420
    odd = {"queuepilot.io/idle-window": 60}  # not a string: parsed every time, as before
    assert _cluster_policy(odd, D) == policy_from_annotations(odd, D)
