"""The edges against the fake API server: SSA of our entry only, guards on a fresh read, 409s,
content types, Events that never block, malformed annotations."""

from __future__ import annotations

from autoscaler.act.events import EventSink, ObjectRef
from autoscaler.act.guard import WriteGuard
from autoscaler.act.raycluster_patch import patch_group, patch_ops
from autoscaler.act.workload_status import write_check_state
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core import reasons as R
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.scaling import GroupDecision
from tests.decisions import kube_world as k

T0 = 100_000.0


def decision(world, name="w", state="Ready", message="8 healthy GPUs reserved", requeue=None) -> AdmissionDecision:
    w = world.get("Workload", name)
    return AdmissionDecision(workload=f"team-a/{name}", namespace="team-a", name=name, uid=w["metadata"]["uid"],
                             resource_version=w["metadata"]["resourceVersion"], cluster_queue="cq-a", check=k.CHECK,
                             state=state, reason="X", message=message, requeue_after_seconds=requeue)


def setup(world, other_check=True):
    world.add(k.workload("w"))
    world.reserve("w", "cq-a", {"main": "a100"}, T0)
    if other_check:  # a second check, owned by Kueue's field manager: our apply must leave it alone
        w = world.get("Workload", "w")
        w["status"]["admissionChecks"].append({"name": "zz-other", "state": "Pending", "message": "",
                                               "lastTransitionTime": k.ts(T0)})
        world.api.update_status(w)


async def test_apply_writes_only_our_entry(fake_api, world, kube_client):
    setup(world)
    fake_api.clear_requests()
    out = await write_check_state(kube_client, decision(world, state="Retry", message="no room", requeue=60),
                                  field_manager=k.CONTROLLER, now=T0 + 5)
    assert out.result == "written"
    entries = {c["name"]: c for c in world.get("Workload", "w")["status"]["admissionChecks"]}
    assert entries["zz-other"]["state"] == "Pending"
    assert entries[k.CHECK]["state"] == "Retry" and entries[k.CHECK]["requeueAfterSeconds"] == 60
    assert entries[k.CHECK]["lastTransitionTime"] == k.ts(T0 + 5)
    patches = [r for r in fake_api.requests if r.method == "PATCH"]
    assert [(r.resource, r.content_type) for r in patches] == [("workloads/status", "application/apply-patch+yaml")]
    assert "fieldManager=queuepilot.io/gpu-capacity" in patches[0].query and "force=True" in patches[0].query
    # the same decision again changes nothing: no write
    fake_api.clear_requests()
    out = await write_check_state(kube_client, decision(world, state="Retry", message="no room", requeue=60),
                                  field_manager=k.CONTROLLER, now=T0 + 6)
    assert out.result in ("skipped", "unchanged")  # Retry is no longer Pending -> guarded
    assert not [r for r in fake_api.requests if r.method == "PATCH"]


async def test_guards_on_the_fresh_read(fake_api, world, kube_client):
    setup(world, other_check=False)
    d = decision(world)
    # Kueue evicts the workload after our snapshot: the fresh read sees it, we do not write
    w = world.get("Workload", "w")
    w["status"]["conditions"].append(k.cond("Evicted", True, T0 + 1, "Preempted"))
    world.api.update_status(w)
    fake_api.clear_requests()
    out = await write_check_state(kube_client, d, field_manager=k.CONTROLLER, now=T0 + 2)
    assert (out.result, out.detail) == ("skipped", "evicted")
    assert not [r for r in fake_api.requests if r.method == "PATCH"]


async def test_conflict_rereads_and_retries(fake_api, world, kube_client, make_ctx):
    setup(world, other_check=False)
    ctx = make_ctx()
    fake_api.fail_next(1, status=409, path_contains="/status", method="PATCH")
    out = await write_check_state(kube_client, decision(world), field_manager=k.CONTROLLER, now=T0 + 1,
                                  write_guard=WriteGuard(ctx.counters))
    assert (out.result, out.attempts) == ("written", 2)
    assert world.check_entry("w")["state"] == "Ready"
    gets = [r for r in fake_api.requests if r.method == "GET" and r.resource == "workloads"]
    assert len(gets) == 2  # a fresh read before each attempt


async def test_stale_resource_version_is_a_conflict(fake_api, world, kube_client, make_ctx):
    world.add(k.ray_cluster("rc", replicas=3))
    rc = world.get("RayCluster", "rc")
    d = GroupDecision(namespace="team-a", cluster="rc", group="gpu", direction="down", reason=R.IDLE_WORKERS,
                      message="m", current=3, desired=2, min_replicas=0, max_replicas=8, workers_to_delete=("p1",),
                      write="replicas", resource_version=rc["metadata"]["resourceVersion"])
    ops = patch_ops(d)
    assert [o["op"] for o in ops] == ["test", "replace", "add", "add"]
    world.api.patch(k.RAY, "RayCluster", "rc", {"metadata": {"labels": {"x": "y"}}}, namespace="team-a")
    ctx = make_ctx()
    out = await patch_group(kube_client, d, field_manager="queuepilot", now=T0, write_guard=WriteGuard(ctx.counters))
    assert out.result == "conflict"
    assert world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    # with the current resourceVersion it goes through, replicas and workersToDelete in one patch
    fresh = world.get("RayCluster", "rc")["metadata"]["resourceVersion"]
    fake_api.clear_requests()
    from dataclasses import replace
    out = await patch_group(kube_client, replace(d, resource_version=fresh), field_manager="queuepilot", now=T0)
    assert out.result == "written"
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (2, ["p1"])
    assert [(r.content_type, r.resource) for r in fake_api.requests if r.method == "PATCH"] == [
        ("application/json-patch+json", "rayclusters")]


async def test_events_never_block_and_are_truncated(fake_api, world, kube_client, make_ctx):
    world.add(k.ray_cluster("rc"))  # (creates the namespace)
    ctx = make_ctx()
    sink = EventSink(kube_client, ctx.counters)
    ref = ObjectRef(k.RAY, "RayCluster", "team-a", "rc", "uid-rc")
    fake_api.fail_next(1, status=500, path_contains="/events")
    sink.post(ref, "Warning", R.MALFORMED_ANNOTATION, "first", T0)  # fails on the server
    sink.post(ref, "Normal", R.IDLE_WORKERS, "held back", T0 + 0.1)  # the object's Events are backed off: dropped
    sink.post(ref, "Normal", R.IDLE_WORKERS, "x" * 5000, T0 + 5)  # past the backoff (at most 1 s)
    await sink.drain()
    evs = fake_api.list("v1", "Event", "team-a")
    assert [(e["reason"], len(e["message"])) for e in evs] == [(R.IDLE_WORKERS, 1024)]
    assert evs[0]["involvedObject"]["name"] == "rc"
    assert ctx.registry.get_sample_value("queuepilot_write_errors_total",
                                         {"resource": "events", "kind": "server"}) == 1
    assert ctx.registry.get_sample_value("queuepilot_write_errors_total",
                                         {"resource": "events", "kind": "dropped"}) == 1
    await sink.close()


async def test_malformed_annotation_becomes_a_warning_event_once(fake_api, world, make_ctx):
    world.add(k.flavor("a100"), k.node("n0"),
              k.ray_cluster("rc", replicas=1, annotations={"queuepilot.io/scale-up-policy": "Pods:two:60"}),
              k.worker_pod("rc", "rc-gpu-0"))
    rec = ScalingReconciler(make_ctx())
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + 10), T0 + 10)
    await rec.events.drain()
    warnings = [e for e in fake_api.list("v1", "Event", "team-a") if e["reason"] == R.MALFORMED_ANNOTATION]
    assert len(warnings) == 1 and "Pods:two:60" in warnings[0]["message"]
    assert warnings[0]["type"] == "Warning"
    await rec.close()


async def test_a_failed_status_write_is_counted_and_gives_back_the_promise(fake_api, world, make_ctx):
    from autoscaler.controller.admission import AdmissionReconciler

    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 8}), k.local_queue("lq-a", "team-a", "cq-a"),
              k.admission_check(), k.node("n0"))
    setup(world, other_check=False)
    ctx = make_ctx()
    rec = AdmissionReconciler(ctx)
    fake_api.fail_next(1, status=500, path_contains="/status", method="PATCH")
    await rec.reconcile(world.snapshot(T0 + 1), T0 + 1)
    assert [o.result for _, o in rec.outcomes] == ["error"]
    assert world.check_entry("w")["state"] == "Pending"
    assert ctx.registry.get_sample_value("queuepilot_write_errors_total",
                                         {"resource": "workloads/status", "kind": "server"}) == 1
    assert rec.ledger.reservations == {}  # nothing promised that was not written
    assert ctx.registry.get_sample_value("queuepilot_admission_decisions_total",
                                         {"cluster_queue": "cq-a", "state": "Ready",
                                          "reason": R.CAPACITY_CONFIRMED, "mode": "live"}) is None
    await rec.reconcile(world.snapshot(T0 + 2), T0 + 2)  # the next pass succeeds
    assert world.check_entry("w")["state"] == "Ready"
    await rec.close()
