"""Empty workers after the short idle window, reclaim of idle GPUs while work queues (grace period,
hourly budget per RayCluster), and the down-after-up rule: hand-built snapshots, pure decisions."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import policy_from_annotations
from autoscaler.core.policy.config import ScalingDefaults, scaling_defaults
from autoscaler.core.policy.scaling import GroupHistory, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker

D = ScalingDefaults()
ON = {"queuepilot.io/reclaim-idle-actors": "true"}
REPLACE = {**ON, "queuepilot.io/reclaim-replace": "true"}
LONG_AGO = NOW - 3600


def decide(rc, history):
    return decide_scaling(snapshot(ray=[rc]), rc, D, history, NOW)


def one(result):
    (d,) = result.decisions
    return d


def idle(*pods, since=LONG_AGO, **kw):
    return {"gpu": GroupHistory(idle_since=frozen_map(dict.fromkeys(pods, since)), **kw)}


# ------------------------------------------------------------------------------------- empty workers
def test_the_empty_window_defaults_to_ninety_seconds():
    assert 60 <= D.idle_window_seconds <= 120
    assert D.pressured_idle_window_seconds <= D.idle_window_seconds
    assert D.down_after_up_seconds == 300


@pytest.mark.parametrize(("empty_for", "gone"), [(0, False), (D.idle_window_seconds - 1, False),
                                                 (D.idle_window_seconds, True), (3600, True)])
def test_an_empty_worker_goes_after_the_idle_window(empty_for, gone):
    # (busy at 50 %: the utilization floor ceil(2 x 0.25 / 0.7) = 1 lets the empty one go)
    ws = [worker("busy", util=0.5), worker("empty", util=0.0, busy=False)]
    rc = ray_cluster([group(workers=ws)])
    d = one(decide(rc, idle("empty", since=NOW - empty_for)))
    assert d.workers_to_delete == (("empty",) if gone else ())
    assert (d.desired, d.reason) == ((1, R.IDLE_WORKERS) if gone else (2, R.WITHIN_TARGET))


def test_an_empty_worker_goes_however_hot_the_busy_ones_run_unless_spares_are_asked_for():
    ws = [worker("hot", util=0.95), worker("empty", util=0.0, busy=False)]
    d = one(decide(ray_cluster([group(workers=ws)]), idle("empty")))
    assert (d.reason, d.workers_to_delete) == (R.IDLE_WORKERS, ("empty",))
    spare = ray_cluster([group(workers=ws)], annotations={"queuepilot.io/keep-spare-for-target": "true"})
    d = one(decide(spare, idle("empty")))
    assert (d.reason, d.workers_to_delete) == (R.KEPT_FOR_UTILIZATION_TARGET, ())


def test_stabilization_smooths_recommendations_not_empty_worker_removal():
    """Recommendations of 2 in the last 300 s would hold a scale-down; an empty worker still goes."""
    ws = [worker("busy", util=0.5), worker("empty", util=0.0, busy=False)]
    h = idle("empty", recommendations=((NOW - 60, 2), (NOW - 30, 2)))
    d = one(decide(ray_cluster([group(workers=ws)]), h))
    assert (d.desired, d.workers_to_delete, d.write) == (1, ("empty",), "replicas")


@pytest.mark.parametrize(("launched_ago", "held"), [(10, True), (299, True), (300, False), (3000, False)])
def test_no_scale_down_within_down_after_up_of_a_launch(launched_ago, held):
    ws = [worker("busy", util=0.5), worker("empty", util=0.0, busy=False)]
    h = idle("empty", last_launch=NOW - launched_ago)
    d = one(decide(ray_cluster([group(workers=ws)]), h))
    if held:
        assert (d.direction, d.reason, d.write, d.workers_to_delete) == ("hold", R.RECENT_SCALE_UP, "none", ())
        assert "no scale-down for 300s after a launch" in d.message
    else:
        assert (d.direction, d.workers_to_delete) == ("down", ("empty",))


def test_a_scale_up_records_the_launch_and_the_hold_follows_it():
    ws = [worker("busy", util=0.9)]
    r = decide(ray_cluster([group(workers=ws)], demand=[gpu_demand(1)]), {})
    d = one(r)
    assert (d.direction, d.desired) == ("up", 2)
    assert r.history["gpu"].last_launch == NOW
    # the new worker came up and sat empty for its idle window: it stays until 300 s after the launch
    ws2 = [worker("busy", util=0.5), worker("new", util=0.0, busy=False)]
    for dt, kept in ((D.idle_window_seconds + 1, True), (D.down_after_up_seconds, False)):
        t = NOW + dt
        rc = ray_cluster([group(workers=ws2)], now=t)
        h = {"gpu": replace(r.history["gpu"], idle_since=frozen_map({"new": NOW}))}
        d2 = one(decide_scaling(snapshot(ray=[rc], now=t), rc, D, h, t))
        assert (d2.workers_to_delete == ()) is kept, dt


def test_rollback_forgets_the_launch_and_the_reclaims():
    old = GroupHistory(last_launch=NOW - 1000, reclaims=(NOW - 100,))
    new = replace(old, last_launch=NOW, reclaims=(NOW - 100, NOW), scale_events=((NOW, 1),))
    back = new.rollback(old)
    assert (back.last_launch, back.reclaims, back.scale_events) == (NOW - 1000, (NOW - 100,), ())


def test_a_starting_worker_is_never_removed():
    ws = [worker("busy", util=0.9), worker("new", util=0.0, busy=False, phase="Pending", ready=False),
          worker("boot", util=0.0, busy=False, ready=False)]
    d = one(decide(ray_cluster([group(workers=ws)], annotations=ON), idle("new", "boot")))
    assert d.workers_to_delete == ()


# -------------------------------------------------------------------------- reclaim while work queues
def _queued(workers, annotations=REPLACE, hi=2, **kw):
    return ray_cluster([group(workers=workers, hi=hi)], annotations=annotations, demand=[gpu_demand(1)], **kw)


def test_by_default_an_idle_actor_worker_stays_while_the_queue_waits():
    """reclaim-replace off (the default): at maxReplicas with the team's task queued, the actor-held
    worker stays (a replacement would be a new pod where the scheduler puts it); the message says it
    was kept, nothing counts against the budget; once the queue is served it goes."""
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    r = decide(_queued(ws, annotations=ON), idle("actor"))
    d = one(r)
    assert (d.reason, d.desired, d.write, d.workers_to_delete, d.reclaimed) == (R.AT_MAX_REPLICAS, 2, "none", (), ())
    assert "1 idle worker(s) kept while Ray demand for the group queues (reclaim-replace off)" in d.message
    assert r.history["gpu"].reclaims == () and r.history["gpu"].last_launch is None
    d = one(decide(ray_cluster([group(workers=ws, hi=2)], annotations=ON), r.history))
    assert (d.reason, d.desired, d.reclaimed) == (R.IDLE_ACTORS_RECLAIMED, 1, ("actor",))
    # a starting worker absorbs the queue (no scale-up): the hold says why the idle one stays
    ws3 = [*ws, worker("new", phase="Pending", ready=False)]
    d = one(decide(ray_cluster([group(workers=ws3, hi=3)], annotations=ON, demand=[gpu_demand(1)]), idle("actor")))
    assert (d.direction, d.workers_to_delete) == ("hold", ()) and "kept while Ray demand" in d.message


def test_at_max_replicas_an_idle_actor_worker_is_replaced_for_the_queue():
    """reclaim-replace on: the team's tasks queue at maxReplicas while an actor holds a GPU at 0 %: the
    worker is deleted by name, replicas stay at max, so KubeRay launches a fresh worker that takes the
    queued task."""
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    r = decide(_queued(ws), idle("actor"))
    d = one(r)
    assert (d.reason, d.current, d.desired, d.write) == (R.IDLE_WORKERS_REPLACED, 2, 2, "replicas")
    assert d.workers_to_delete == ("actor",) and d.reclaimed == ("actor",)
    assert "replace 2 -> 2" in d.message and "killed" in d.message
    assert r.history["gpu"].last_launch == NOW and r.history["gpu"].reclaims == (NOW,)


def test_below_max_the_replacement_comes_with_the_scale_up():
    ws = [worker("busy", util=0.8), worker("empty", util=0.01, busy=False)]
    rc = ray_cluster([group(workers=ws, hi=4)], annotations=REPLACE, demand=[gpu_demand(1, count=2)])
    d = one(decide(rc, idle("empty")))
    assert (d.reason, d.direction, d.desired) == (R.IDLE_WORKERS_REPLACED, "up", 4)
    assert d.workers_to_delete == ("empty",) and d.reclaimed == ()  # nothing ran on it: no work killed


def test_replacement_needs_the_reclaim_window_and_the_grace_period():
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    d = one(decide(_queued(ws), idle("actor", since=NOW - D.reclaim_window_seconds + 1)))
    assert d.workers_to_delete == ()
    young = [worker("busy", util=0.8), replace(worker("actor", util=0.0, busy=True, running=0), created_at=NOW - 300)]
    d = one(decide(_queued(young), idle("actor")))
    assert d.workers_to_delete == ()  # 300 s old: inside the 600 s grace period (start-up)
    old = [worker("busy", util=0.8), replace(worker("actor", util=0.0, busy=True, running=0), created_at=NOW - 601)]
    assert one(decide(_queued(old), idle("actor"))).workers_to_delete == ("actor",)


@pytest.mark.parametrize("w", [worker("x", util=0.06, busy=True, running=0), worker("x", util=None, busy=True, running=0),
                               worker("x", util=0.0, busy=None, running=0),
                               worker("x", util=0.0, busy=True, ready=False, running=0),
                               worker("x", util=0.0, busy=True, running=1),  # a task in an idle stretch
                               worker("x", util=0.0, busy=True)])  # Ray did not say what runs
def test_replacement_needs_proof_of_an_idle_gpu(w):
    d = one(decide(_queued([worker("busy", util=0.8), w]), idle("x")))
    assert d.workers_to_delete == ()


def test_replacement_waits_for_the_down_after_up_hold():
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    d = one(decide(_queued(ws), idle("actor", last_launch=NOW - 120)))
    assert d.workers_to_delete == () and "down-after-up" in d.message


def test_the_budget_is_per_cluster_per_hour():
    ws = [worker("busy", util=0.8)] + [worker(f"a{i}", util=0.0, busy=True, running=0) for i in range(3)]
    rc = ray_cluster([group(workers=ws, hi=4)], annotations={**REPLACE, "queuepilot.io/reclaim-budget": "2"},
                     demand=[gpu_demand(1)])
    r = decide(rc, idle("a0", "a1", "a2"))
    d = one(r)
    assert len(d.workers_to_delete) == 2 and "reclaim budget of 2/h used" in d.message
    # an hour's budget spent (two reclaims 30 min ago): nothing more; after the hour, again
    spent = idle("a0", "a1", "a2", reclaims=(NOW - 1800, NOW - 1800))
    assert one(decide(rc, spent)).workers_to_delete == ()
    aged = idle("a0", "a1", "a2", reclaims=(NOW - 3601, NOW - 3601))
    assert len(one(decide(rc, aged)).workers_to_delete) == 2


def test_the_budget_is_shared_by_the_groups_of_a_cluster():
    a = group("a", workers=[worker("a-busy", util=0.8), worker("a-act", util=0.0, busy=True, running=0)], hi=2)
    b = group("b", workers=[worker("b-busy", util=0.8), worker("b-act", util=0.0, busy=True, running=0)], hi=2)
    rc = ray_cluster([a, b], annotations={**REPLACE, "queuepilot.io/reclaim-budget": "1"},
                     demand=[gpu_demand(1, group="a"), gpu_demand(1, group="b")])
    hist = {"a": GroupHistory(idle_since=frozen_map({"a-act": LONG_AGO})),
            "b": GroupHistory(idle_since=frozen_map({"b-act": LONG_AGO}))}
    da, db = decide(rc, hist).decisions
    assert (da.workers_to_delete, db.workers_to_delete) == (("a-act",), ())


def test_without_demand_the_budget_limits_idle_actor_scale_downs_too():
    ws = [worker("busy", util=0.5)] + [worker(f"a{i}", util=0.0, busy=True, running=0) for i in range(3)]
    rc = ray_cluster([group(workers=ws)], annotations={**ON, "queuepilot.io/reclaim-budget": "1",
                                                       "queuepilot.io/target-gpu-utilization": "0.9"})
    d = one(decide(rc, idle("a0", "a1", "a2")))
    assert d.reason == R.IDLE_ACTORS_RECLAIMED and len(d.reclaimed) == 1 and "budget" in d.message


def test_the_in_tree_autoscaler_and_multi_host_groups_are_never_replaced():
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    d = one(decide(_queued(ws, in_tree=True), idle("actor")))
    assert d.workers_to_delete == () and d.reason != R.IDLE_WORKERS_REPLACED
    rc = ray_cluster([group(workers=ws, hi=2, hosts=2)], annotations=REPLACE, demand=[gpu_demand(1)])
    assert one(decide(rc, idle("actor"))).workers_to_delete == ()


# ------------------------------------------------------------------------------------ knobs, parsing
@pytest.mark.parametrize(("key", "value", "field", "expected"), [
    ("reclaim-window", "5m", "reclaim_window_seconds", 300.0),
    ("reclaim-grace", "0", "reclaim_grace_seconds", 0.0),
    ("reclaim-budget", "12", "reclaim_budget_per_hour", 12),
    ("reclaim-budget", "0", "reclaim_budget_per_hour", 0),
    ("down-after-up", "10m", "down_after_up_seconds", 600.0),
    ("keep-spare-for-target", "true", "keep_spare_for_target", True),
    ("reclaim-replace", "true", "reclaim_replace", True),
])
def test_annotations_set_the_knobs(key, value, field, expected):
    policy, warnings = policy_from_annotations({"queuepilot.io/" + key: value}, D)
    assert warnings == () and getattr(policy, field) == expected


@pytest.mark.parametrize(("key", "value"), [
    ("reclaim-window", "nan"), ("reclaim-window", "-5m"), ("reclaim-window", "31d"),
    ("reclaim-grace", "soon"), ("reclaim-budget", "-1"), ("reclaim-budget", "1001"), ("reclaim-budget", "2.5"),
    ("reclaim-budget", "9" * 40), ("reclaim-budget", "lots"), ("down-after-up", "2h"), ("down-after-up", "inf"),
    ("keep-spare-for-target", "yes"), ("reclaim-replace", "1"),
])
def test_malformed_annotations_warn_and_keep_the_default(key, value):
    policy, warnings = policy_from_annotations({"queuepilot.io/" + key: value}, D)
    assert policy == D
    assert len(warnings) == 1 and f"queuepilot.io/{key}" in warnings[0] and "ignored" in warnings[0]


def test_config_keys_and_their_errors():
    s = scaling_defaults({"scaling": {"reclaim_window": "2m", "reclaim_grace": "1m", "reclaim_budget_per_hour": 3,
                                      "down_after_up": "4m", "idle_window": "60s", "pressured_idle_window": "30s",
                                      "reclaim_replace": True}})
    assert (s.reclaim_window_seconds, s.reclaim_grace_seconds, s.reclaim_budget_per_hour, s.down_after_up_seconds,
            s.idle_window_seconds, s.reclaim_replace) == (120.0, 60.0, 3, 240.0, 60.0, True)
    assert ScalingDefaults().reclaim_replace is False
    for bad in ({"reclaim_budget_per_hour": -1}, {"reclaim_budget_per_hour": "x"}, {"reclaim_budget_per_hour": True},
                {"reclaim_window": "nan"}, {"down_after_up": "2h"}, {"reclaim_grace": -3}, {"reclaim_replace": "yes"}):
        with pytest.raises(ValueError, match=r"scaling"):
            scaling_defaults({"scaling": bad})


def test_no_replacement_while_replicas_asked_for_have_no_pod():
    """KubeRay could not make the pods already asked for (quota, no free GPU): deleting a worker now
    might leave the group with one worker fewer, so nothing is replaced."""
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    rc = ray_cluster([group(workers=ws, hi=3, replicas=3)], annotations=REPLACE, demand=[gpu_demand(1)])
    d = one(decide(rc, idle("actor")))
    assert d.workers_to_delete == () and d.reason != R.IDLE_WORKERS_REPLACED


def test_idle_gpus_count_the_workers_being_replaced():
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0)]
    assert one(decide(_queued(ws), idle("actor"))).idle_gpus == 1
