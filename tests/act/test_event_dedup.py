"""Leader handover does not duplicate Events: Events are named after what they say, so the new
leader's create of an Event the old leader already posted answers 409 and is skipped."""

from __future__ import annotations

from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.core import reasons as R
from tests.decisions import kube_world as k

T0 = 100_000.0


def value(ctx, name: str, labels: dict | None = None) -> float:
    return ctx.registry.get_sample_value(name, labels or {}) or 0.0


async def test_a_new_leader_does_not_post_the_same_events_again(fake_api, world, make_ctx):
    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.local_queue("lq-a", "team-a", "cq-a"),
              k.admission_check(), k.node("n0"), k.node("n1"), k.workload("w1"),
              # holds the scaler reports: a Kueue-managed non-elastic cluster, a cluster at its max
              k.ray_cluster("held", replicas=2, labels={"kueue.x-k8s.io/queue-name": "lq-a"}),
              k.ray_cluster("rc", replicas=1, hi=1), k.worker_pod("rc", "rc-gpu-0", node_name="n1"))
    world.ray_demand["team-a/rc"] = (k.RayDemand(kind="task", shape=k.frozen_map({"GPU": 1.0}), count=2),)
    world.reserve("w1", "cq-a", {"main": "a100"}, T0)
    snapshot = world.snapshot(T0 + 1)
    old_ctx, new_ctx = make_ctx(), make_ctx()
    old, new = build_reconcilers(old_ctx), build_reconcilers(new_ctx)
    for r in old:  # the old leader decides and posts ...
        await r.reconcile(snapshot, T0 + 1)
    await old[0].events.drain()
    before = sorted((e["involvedObject"]["name"], e["reason"]) for e in fake_api.list("v1", "Event", "team-a"))
    assert before == [("held", R.NOT_SCALABLE_UNDER_KUEUE), ("rc", R.AT_MAX_REPLICAS),
                      ("w1", R.CAPACITY_CONFIRMED)]
    # ... and is replaced; the new leader starts without memory of what was reported and decides on
    # the same snapshot (its watch has not seen the old leader's status write yet)
    for r in new:
        await r.reconcile(snapshot, T0 + 2)
    await new[0].events.drain()
    after = sorted((e["involvedObject"]["name"], e["reason"]) for e in fake_api.list("v1", "Event", "team-a"))
    assert after == before
    assert [o.detail for _, o in new[0].outcomes] == ["not_pending"]  # the fresh read: already Ready
    assert new[0].events.deduplicated == 2  # the two hold Events
    assert value(new_ctx, "queuepilot_events_deduplicated_total") == 2
    assert value(new_ctx, "queuepilot_write_errors_total", {"resource": "events", "kind": "conflict"}) == 0
    for r in (*old, *new):
        await r.close()


async def test_the_same_reason_on_a_new_decision_is_a_new_event(fake_api, world, make_ctx):
    """Dedup is by content and the Workload's resourceVersion at decision time: a Workload that is
    retried, requeued and retried again with the same words gets a second Event."""
    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.local_queue("lq-a", "team-a", "cq-a"),
              k.admission_check(), k.node("n0"), k.pod("busy", "team-b", "n0", 4), k.workload("w"))
    rec = AdmissionReconciler(make_ctx(settings={"admission": {"capacity_wait": 0}}))  # Retry at once
    world.reserve("w", "cq-a", {"main": "a100"}, T0)
    await rec.reconcile(world.snapshot(T0 + 1), T0 + 1)
    world.kueue_react(T0 + 2)  # evicted, requeued
    world.reserve("w", "cq-a", {"main": "a100"}, T0 + 40)
    await rec.reconcile(world.snapshot(T0 + 41), T0 + 41)
    await rec.events.drain()
    retries = [e for e in fake_api.list("v1", "Event", "team-a") if e["reason"] == R.INSUFFICIENT_GPUS]
    assert len(retries) == 2
    assert len({e["metadata"]["name"] for e in retries}) == 2
    await rec.close()
