"""The scaling history keeps its objects when nothing changed, and still equals a fresh computation.

``GroupHistory.pruned`` returns the very history when no entry is old enough to drop, and
``decide_scaling`` keeps last pass's idle-timer map when the timers are the same; these checks
compare both shortcuts with the plain filter / a fresh decision from an equal, newly built history.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.scaling import RECLAIM_BUDGET_PERIOD, GroupHistory, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker, workload

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
    # the very read-only map again (as a snapshot builder hands it out pass after pass): the last
    # parse, but never for other defaults; a plain dict (which its owner may change) is looked into
    same = frozen_map(notes)
    for defaults in (D, D, other, other, D):
        assert _cluster_policy(same, defaults) == policy_from_annotations(notes, defaults)
    mutable = dict(notes)
    assert _cluster_policy(mutable, D)[0].idle_window_seconds == 240
    mutable["queuepilot.io/idle-window"] = "9m"
    assert _cluster_policy(mutable, D)[0].idle_window_seconds == 540


# ------------------------------------------------------------------------------- the steady hold
LATER = NOW + 30


def _full(history):
    """The same history without its steady hold: the decision ladder runs in full."""
    return {g: replace(h, steady=None) for g, h in history.items()}


def _both(rc, history, snap=None, now=LATER, policy=D):
    """(this pass with ``history``, the same pass with the full ladder)."""
    snap = snap or snapshot(ray=[rc], now=now)
    return (decide_scaling(snap, rc, policy, history, now), decide_scaling(snap, rc, policy, _full(history), now))


def _steady_from(workers, policy=D):
    """The first pass over a group of ``workers`` (all replicas have a pod), which must be a steady hold."""
    g = group(replicas=len(workers), workers=workers)
    first = decide_scaling(snapshot(ray=[ray_cluster([g])]), ray_cluster([g]), policy, {}, NOW)
    assert first.history["gpu"].steady is not None  # (a plain hold: no worker idle, nothing queued)
    return g, first


def _steady_first():
    return _steady_from([worker("w0"), worker("w1")])  # both at work, nothing queued


def test_a_steady_hold_is_decided_again_as_the_full_ladder_would():
    busy, first = _steady_first()
    d = first.decisions[0]
    assert (d.direction, d.reason, d.write) == ("hold", R.WITHIN_TARGET, "none")
    assert first.history["gpu"].steady is not None
    # the very group object, and an equal one built anew (as a controller's cache may not keep objects)
    rebuilt = group(replicas=2, workers=[worker("w0"), worker("w1")])
    for g in (busy, rebuilt):
        rc = ray_cluster([g], now=LATER)
        got, full = _both(rc, first.history)
        assert got.decisions[0] is d  # last pass's decision, not the steps run again
        assert got.decisions == full.decisions
        assert got.history == full.history
        assert got.history["gpu"].recommendations[-1] == (LATER, 2)  # recorded as the steps record it


def _waiting_elsewhere():
    # a GPU workload of another ClusterQueue waiting for an hour: queue pressure on every Ray cluster
    return workload("other", ns="team-b", cq="cq-b", reserved_at=None, quota_reserved=False,
                    created=LATER - 3600.0)


CHANGES = {
    "Ray demand arrives": (lambda g: ray_cluster([g], now=LATER, demand=[gpu_demand(1, count=3)]), None,
                           R.PENDING_DEMAND),
    "a worker goes idle": (lambda g: ray_cluster([group(replicas=2, workers=[worker("w0"),
                                                                              worker("w1", util=0.0, busy=False)])],
                                                 now=LATER), None, R.WITHIN_TARGET),
    "another resourceVersion": (lambda g: replace(ray_cluster([g], now=LATER), resource_version="8"), None,
                                R.WITHIN_TARGET),
    "the Ray signal goes stale": (lambda g: ray_cluster([g], now=LATER, ray_age=600.0), None, R.RAY_SIGNAL_STALE),
    "the GPU signal goes stale": (lambda g: ray_cluster([g], now=LATER), {"gpu_age": 600.0}, R.GPU_SIGNAL_STALE),
    "another policy": (lambda g: ray_cluster([g], now=LATER, annotations={"queuepilot.io/idle-window": "4m"}),
                       None, R.WITHIN_TARGET),
    "the cluster is suspended": (lambda g: ray_cluster([g], now=LATER, suspended=True), None, R.CLUSTER_SUSPENDED),
    "replicas below minReplicas": (lambda g: ray_cluster([replace(g, min_replicas=3)], now=LATER), None,
                                   R.BELOW_MIN_REPLICAS),
    "queue pressure": (lambda g: ray_cluster([g], now=LATER), {"workloads": "waiting"}, R.WITHIN_TARGET),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_the_steady_hold_gives_way_to_any_change_it_was_decided_without(change):
    busy, first = _steady_first()
    make, snap_kw, reason = CHANGES[change]
    rc = make(busy)
    kw = dict(snap_kw or {})
    if kw.pop("workloads", None):
        kw["workloads"] = [_waiting_elsewhere()]
    got, full = _both(rc, first.history, snapshot(ray=[rc], now=LATER, **kw))
    assert got.decisions == full.decisions
    assert got.history == full.history
    assert got.decisions[0].reason == reason
    if change in ("Ray demand arrives", "another resourceVersion", "replicas below minReplicas",
                  "the Ray signal goes stale", "the GPU signal goes stale", "the cluster is suspended"):
        assert got.decisions[0] != first.decisions[0]


# the steady hold when only the workers' utilization moved (a live GPU signal moves between any two passes)
RECLAIM = replace(D, reclaim_idle_actors=True)


def _again(first, workers, policy=D, replicas=None):
    rc = ray_cluster([group(replicas=len(workers) if replicas is None else replicas, workers=workers)], now=LATER)
    return _both(rc, first.history, policy=policy)


@pytest.mark.parametrize("policy", [D, RECLAIM], ids=["default", "idle-actor reclaim"])
def test_a_steady_hold_survives_utilization_that_moves_while_no_worker_is_idle(policy):
    # a task at work, an idle actor's GPU in use (e.g. a warm-up), an empty worker whose GPU another
    # process uses, a worker with no GPU reading yet: none idle, and none after the values moved
    before = [worker("w0", util=0.62), worker("w1", util=0.4, busy=True, running=0),
              worker("w2", util=0.3, busy=False), worker("w3", util=None)]
    after = [worker("w0", util=0.97), worker("w1", util=0.08, busy=True, running=0),
             worker("w2", util=0.06, busy=False), worker("w3", util=0.5)]
    _, first = _steady_from(before, policy)
    got, full = _again(first, after, policy)
    assert got.decisions[0] is first.decisions[0]  # the shortcut: last pass's very decision
    assert got.decisions == full.decisions and got.history == full.history
    assert got.history["gpu"].steady.group.workers == tuple(after)  # held for this pass's group now


GIVES_WAY = {
    # (workers before, after, replicas after, policy): only utilization or something the hold reads moved
    "an empty worker's GPU goes under the threshold": (
        [worker("w0"), worker("w1", util=0.3, busy=False)], [worker("w0"), worker("w1", util=0.0, busy=False)],
        None, D),
    "an idle actor's GPU goes under the threshold (reclaim on)": (
        [worker("w0"), worker("w1", util=0.3, busy=True, running=0)],
        [worker("w0"), worker("w1", util=0.01, busy=True, running=0)], None, RECLAIM),
    "a worker is being deleted": (
        [worker("w0"), worker("w1")], [worker("w0"), replace(worker("w1", util=0.5), deleting=True)], None, D),
    "a worker is no longer ready": (
        [worker("w0"), worker("w1")], [worker("w0"), worker("w1", util=0.5, ready=False)], None, D),
    "replicas moved under the same resourceVersion": (
        [worker("w0"), worker("w1")], [worker("w0", util=0.5), worker("w1")], 3, D),
    "another worker": ([worker("w0"), worker("w1")], [worker("w0", util=0.5), worker("w9")], None, D),
}


@pytest.mark.parametrize("change", list(GIVES_WAY))
def test_the_steady_hold_gives_way_when_more_than_utilization_moved_or_a_worker_is_idle(change):
    before, after, replicas, policy = GIVES_WAY[change]
    _, first = _steady_from(before, policy)
    got, full = _again(first, after, policy, replicas)
    assert got.decisions == full.decisions and got.history == full.history
    assert got.decisions[0] is not first.decisions[0]  # the ladder ran
    if "threshold" in change:
        assert set(got.history["gpu"].idle_since) == {"w1"} and got.history["gpu"].steady is None
    if change in ("a worker is being deleted", "replicas moved under the same resourceVersion"):
        assert got.decisions[0] != first.decisions[0]
