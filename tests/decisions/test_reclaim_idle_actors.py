"""Opt-in idle-actor reclaim: workers whose Ray actors/tasks leave the GPU idle may go, only when on,
only after the full reclaim window; while pending Ray demand could use them they stay, or with
reclaim-replace on are replaced (deleted by name, replicas kept so that fresh workers are launched for
the queue)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import policy_from_annotations
from autoscaler.core.policy.config import ScalingDefaults, scaling_defaults
from autoscaler.core.policy.scaling import GroupHistory, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker, workload

ON = {"queuepilot.io/reclaim-idle-actors": "true"}
REPLACE = {**ON, "queuepilot.io/reclaim-replace": "true"}
D = ScalingDefaults()
LONG_AGO = NOW - 3600


def hist(since: dict[str, float]) -> dict[str, GroupHistory]:
    return {"gpu": GroupHistory(idle_since=frozen_map(since))}


def decide(rc, history, defaults=D, others=()):
    (d,) = decide_scaling(snapshot(ray=[rc], workloads=others), rc, defaults, history, NOW).decisions
    return d


def _cluster(annotations=ON, workers=None, **kw):
    # (busy at 50 %: the utilization floor ceil(2 x 0.25 / 0.7) = 1 lets one of the two go)
    ws = workers or [worker("busy", util=0.5, busy=True), worker("actor", util=0.0, busy=True, running=0)]
    return ray_cluster([group(workers=ws)], annotations=annotations, **kw)


def test_off_by_default_an_idle_actor_keeps_its_worker():
    d = decide(_cluster(annotations={}), hist({"actor": LONG_AGO}))
    assert (d.direction, d.reason, d.workers_to_delete) == ("hold", R.WITHIN_TARGET, ())


def test_annotation_reclaims_the_worker_held_by_an_idle_actor():
    d = decide(_cluster(), hist({"actor": LONG_AGO}))
    assert (d.direction, d.reason, d.desired, d.write) == ("down", R.IDLE_ACTORS_RECLAIMED, 1, "replicas")
    assert d.workers_to_delete == ("actor",)
    assert "their actors are killed" in d.message and "actor" in d.message


def test_config_key_turns_it_on_for_every_cluster():
    defaults = scaling_defaults({"scaling": {"reclaim_idle_actors": True}})
    d = decide(_cluster(annotations={}), hist({"actor": LONG_AGO}), defaults=defaults)
    assert (d.reason, d.workers_to_delete) == (R.IDLE_ACTORS_RECLAIMED, ("actor",))
    # the annotation can turn it off again for one cluster
    d = decide(_cluster(annotations={"queuepilot.io/reclaim-idle-actors": "false"}), hist({"actor": LONG_AGO}),
               defaults=defaults)
    assert d.workers_to_delete == ()


@pytest.mark.parametrize("value", ["yes", "1", ""])
def test_malformed_annotation_warns_and_keeps_the_default(value):
    policy, warnings = policy_from_annotations({"queuepilot.io/reclaim-idle-actors": value}, D)
    assert policy.reclaim_idle_actors is False
    assert len(warnings) == 1 and "reclaim-idle-actors" in warnings[0]


def test_config_rejects_a_non_boolean():
    with pytest.raises(ValueError, match="reclaim_idle_actors"):
        scaling_defaults({"scaling": {"reclaim_idle_actors": "maybe"}})


def test_needs_the_full_reclaim_window():
    d = decide(_cluster(), hist({"actor": NOW - D.reclaim_window_seconds + 30}))
    assert d.workers_to_delete == ()
    d = decide(_cluster(), {})  # first seen now: the timer starts
    assert d.workers_to_delete == ()


def test_queue_pressure_does_not_shorten_the_actor_window():
    """Under pressure a worker without Ray work goes after the pressured window; one held by an idle
    actor still needs the full idle window."""
    others = [replace(workload("q", ns="team-b", cq="cq-b", quota_reserved=False), created_at=NOW - 3600)]
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0), worker("free", util=0.0, busy=False)]
    since = NOW - D.pressured_idle_window_seconds - 10
    d = decide(_cluster(workers=ws), hist({"actor": since, "free": since}), others=others)
    assert (d.reason, d.workers_to_delete) == (R.IDLE_WORKERS_QUEUE_PRESSURE, ("free",))
    d = decide(_cluster(workers=ws), hist({"actor": LONG_AGO, "free": since}), others=others)
    assert d.reason == R.IDLE_ACTORS_RECLAIMED and set(d.workers_to_delete) == {"actor", "free"}


def test_while_pending_demand_could_use_the_worker_it_is_replaced():
    # one pending 1-GPU task, absorbed by a starting worker: no scale-up; the actor-held worker is
    # deleted by name with replicas kept, so a fresh worker takes its place; the starting one stays
    ws = [worker("busy", util=0.8), worker("actor", util=0.0, busy=True, running=0), worker("new", phase="Pending", ready=False)]
    d = decide(_cluster(annotations=REPLACE, workers=ws, demand=[gpu_demand(1)]), hist({"actor": LONG_AGO}))
    assert (d.reason, d.desired, d.current, d.write) == (R.IDLE_WORKERS_REPLACED, 3, 3, "replicas")
    assert d.workers_to_delete == ("actor",) and d.reclaimed == ("actor",)
    assert "which are killed" in d.message and "fresh ones for the queued work" in d.message
    # reclaim-replace off (the default): it stays while the task queues; reclaim off: nothing is replaced
    d = decide(_cluster(workers=ws, demand=[gpu_demand(1)]), hist({"actor": LONG_AGO}))
    assert d.workers_to_delete == () and d.direction == "hold" and "kept while Ray demand" in d.message
    d = decide(_cluster(annotations={}, workers=ws, demand=[gpu_demand(1)]), hist({"actor": LONG_AGO}))
    assert d.workers_to_delete == () and d.direction == "hold"


def test_demand_no_worker_of_the_group_can_hold_does_not_block_it():
    for demand in (gpu_demand(1, infeasible=True), gpu_demand(8), gpu_demand(1, group="other")):
        d = decide(_cluster(demand=[demand]), hist({"actor": LONG_AGO}))
        assert d.workers_to_delete == ("actor",), demand


@pytest.mark.parametrize(("w", "why"), [
    (worker("actor", util=0.2, busy=True, running=0), "GPU in use"),
    (worker("actor", util=None, busy=True, running=0), "utilization unknown"),
    (worker("actor", util=0.0, busy=None, running=0), "Ray's view unknown"),
    (worker("actor", util=0.0, busy=True, ready=False, running=0), "not ready"),
    (worker("actor", util=0.0, busy=True, running=1), "a task runs on it (an idle stretch inside the task)"),
    (worker("actor", util=0.0, busy=True, running=None), "Ray did not say what runs on it"),
])
def test_never_without_proof_of_idleness(w, why):
    d = decide(_cluster(workers=[worker("busy", util=0.8), w]), hist({"actor": LONG_AGO}))
    assert d.workers_to_delete == (), why


def test_not_with_the_in_tree_autoscaler():
    """With Ray's autoscaler on, queuepilot cannot name the pod, so an actor-held worker never counts."""
    d = decide(_cluster(in_tree=True), hist({"actor": LONG_AGO}))
    assert d.direction == "hold" and d.write == "none"


def test_not_for_cpu_only_groups():
    ws = [worker("actor", util=None, busy=True, cpu=0.0), worker("b", util=None, busy=True, cpu=0.9)]
    rc = ray_cluster([group(workers=ws, gpus=0)], annotations=ON)
    d = decide(rc, hist({"actor": LONG_AGO}))
    assert d.workers_to_delete == ()


@st.composite
def _case(draw):
    ws = [worker(f"w{i}", util=draw(st.none() | st.sampled_from([0.0, 0.01, 0.04, 0.05, 0.5])),
                 busy=draw(st.none() | st.booleans()), ready=draw(st.booleans() | st.just(True)),
                 running=draw(st.none() | st.sampled_from([0, 1, 2])))
          for i in range(draw(st.integers(1, 6)))]
    demand = [gpu_demand(draw(st.sampled_from([1, 2])), infeasible=draw(st.booleans()))
              for _ in range(draw(st.integers(0, 2)))]
    on = draw(st.booleans())
    swap = draw(st.booleans())  # reclaim-replace
    rc = ray_cluster([group(workers=ws, gpus=1)], annotations=(REPLACE if swap else ON) if on else {}, demand=demand,
                     in_tree=draw(st.booleans()))
    since = {w.pod: NOW - draw(st.sampled_from([0.0, 60.0, 89.0, 90.0, 299.0, 300.0, 3600.0])) for w in ws}
    return rc, since, on, swap, draw(st.booleans())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_case())
def test_reclaim_properties(case):
    rc, since, on, swap, pressure = case
    others = [replace(workload("q", ns="team-b", cq="cq-b", quota_reserved=False), created_at=NOW - 3600)] \
        if pressure else []
    d = decide(rc, hist(since), others=others)
    by_pod = {w.pod: w for w in rc.groups[0].workers}
    usable = any(not x.infeasible and x.shape["GPU"] <= 1 for x in rc.demand)
    for pod in d.workers_to_delete:
        w = by_pod[pod]
        # only workers whose GPU is known to be under the idle threshold ...
        assert w.gpu_utilization is not None and w.gpu_utilization < D.idle_gpu_utilization
        assert w.ready and w.phase == "Running" and w.ray_busy is not None
        if w.ray_busy:  # ... and with Ray work only when reclaim is on, allowed, and after the full window
            assert on and not rc.in_tree_autoscaler
            assert w.ray_running_tasks == 0  # only idle actors on it: never a running task
            assert NOW - since[pod] >= D.reclaim_window_seconds
            assert d.reason in (R.IDLE_ACTORS_RECLAIMED, R.IDLE_WORKERS_REPLACED)
            assert pod in d.reclaimed
        else:
            assert pod not in d.reclaimed
        if usable and on:  # while the queue could use the group, a worker goes only to be replaced
            assert swap and d.reason == R.IDLE_WORKERS_REPLACED and d.desired >= d.current
            assert NOW - since[pod] >= D.reclaim_window_seconds
    assert len([p for p in d.workers_to_delete if by_pod[p].ray_busy]) <= D.reclaim_budget_per_hour
    if not on:
        assert d.reason not in (R.IDLE_ACTORS_RECLAIMED, R.IDLE_WORKERS_REPLACED) and d.reclaimed == ()
