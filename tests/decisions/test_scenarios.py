"""Scenarios through the fake API server with the real kubernetes-asyncio client.

The test plays Kueue and KubeRay (tests/decisions/kube_world.py); the reconcilers are the
controller's own, fed with snapshots built by the controller's views + build_snapshot.
"""

from __future__ import annotations

from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core import reasons as R
from tests.controller.harness import FreshGpus
from tests.decisions import kube_world as k
from tests.decisions.scenarios import T0, assert_rbac, base_world, events, sample
from tests.support.eventually import eventually


async def test_gpu_fails_between_two_admissions(fake_api, world, make_ctx):
    base_world(world)
    ctx = make_ctx(settings={"admission": {"capacity_wait": "5m"}})
    rec = AdmissionReconciler(ctx)
    world.add(k.workload("w1"), k.workload("w2"))
    world.reserve("w1", "cq-a", {"main": "a100"}, T0)
    await rec.reconcile(world.snapshot(T0 + 1), T0 + 1)
    e1 = world.check_entry("w1")
    assert e1["state"] == "Ready" and "8 healthy GPUs reserved" in e1["message"]
    assert world.kueue_react(T0 + 2) == [("w1", "admitted")]
    # XID 79 on GPU 3 of n1 before the second workload gets quota; w1's pods are not running yet
    world.unhealthy.add(("n1", 3))
    world.reserve("w2", "cq-a", {"main": "a100"}, T0 + 3)
    # within the capacity wait: the entry stays Pending, with quota, and says why (written once)
    await rec.reconcile(world.snapshot(T0 + 4), T0 + 4)
    e2 = world.check_entry("w2")
    assert e2["state"] == "Pending" and "not enough free healthy GPUs; waiting with quota reserved" in e2["message"]
    assert world.kueue_react(T0 + 5) == []
    fake_api.clear_requests()
    await rec.reconcile(world.snapshot(T0 + 60), T0 + 60)  # the same wait: no request at all
    assert not [r for r in fake_api.requests if r.resource == "workloads"]
    # the wait is over and the GPU still failed: Retry, the quota goes back to Kueue
    await rec.reconcile(world.snapshot(T0 + 303), T0 + 303)
    e2 = world.check_entry("w2")
    assert e2["state"] == "Retry" and e2["requeueAfterSeconds"] == 30
    assert "largest free healthy blocks: 7" in e2["message"] and "8 promised" in e2["message"]
    assert world.kueue_react(T0 + 304) == [("w2", "evicted")]
    w2 = world.get("Workload", "w2")
    assert world.check_entry("w2")["state"] == "Pending" and "admission" not in w2["status"]
    # our write was a server-side apply with our field manager, on the status subresource only
    managers = {m["manager"]: m for m in w2["metadata"].get("managedFields", [])}
    assert k.CONTROLLER in managers and managers[k.CONTROLLER]["subresource"] == "status"
    # no further write to the evicted workload (Kueue #3322/#3543)
    fake_api.clear_requests()
    await rec.reconcile(world.snapshot(T0 + 305), T0 + 305)
    assert not [r for r in fake_api.requests if r.resource == "workloads" and r.verb == "patch"]
    reg = ctx.registry
    assert sample(reg, "queuepilot_admission_decisions_total",
                  {"cluster_queue": "cq-a", "state": "Retry", "reason": R.INSUFFICIENT_GPUS, "mode": "live"}) == 1
    assert sample(reg, "queuepilot_admission_decisions_total",
                  {"cluster_queue": "cq-a", "state": "Ready", "reason": R.CAPACITY_CONFIRMED, "mode": "live"}) == 1
    await rec.events.drain()
    evs = events(fake_api)
    assert ("w1", "Normal", R.CAPACITY_CONFIRMED) in [e[:3] for e in evs]
    w2_events = [e for e in evs if e[0] == "w2"]
    assert [e[1:3] for e in w2_events] == [("Warning", R.INSUFFICIENT_GPUS)] * len(w2_events)
    assert any("Pending: " in e[3] for e in w2_events) and any("Retry: " in e[3] for e in w2_events)
    assert_rbac(fake_api)
    await rec.close()


async def _fragmented(world, ctx) -> AdmissionReconciler:
    """Four nodes whose free blocks are 8, 8, 6, 3 (other tenants' pods), a workload of 3 pods x 8 GPUs
    reserved at T0 and decided once at T0 + 1."""
    base_world(world, nodes=("n0", "n1", "n2", "n3"))
    world.add(k.pod("busy-2", "team-b", "n2", 2), k.pod("busy-3", "team-b", "n3", 5))
    world.add(k.workload("big", pod_sets=(("main", 3, 8),)))
    world.reserve("big", "cq-a", {"main": "a100"}, T0)
    rec = AdmissionReconciler(ctx)
    await rec.reconcile(world.snapshot(T0 + 1), T0 + 1)
    return rec


async def test_fragmented_flavor_then_room(fake_api, world, make_ctx):
    rec = await _fragmented(world, make_ctx())
    e = world.check_entry("big")
    assert e["state"] == "Pending"
    assert e["message"] == ("needs 3 pods x 8 GPUs (main) on flavor a100; no free block fits; waiting with quota "
                            "reserved for up to 1800s from its reservation, then Retry")
    assert world.kueue_react(T0 + 2) == []  # Kueue keeps its quota reserved
    # the 2-GPU pod finishes; the next pass finds three free 8-GPU blocks: Ready, no eviction, no requeue
    fake_api.delete("v1", "Pod", "busy-2", "team-b")
    await rec.reconcile(world.snapshot(T0 + 41), T0 + 41)
    assert world.check_entry("big")["state"] == "Ready"
    assert world.kueue_react(T0 + 42) == [("big", "admitted")]
    assert rec.history == {}
    assert_rbac(fake_api)
    await rec.close()


async def test_fragmented_flavor_retries_at_once_without_a_capacity_wait(fake_api, world, make_ctx):
    rec = await _fragmented(world, make_ctx(settings={"admission": {"capacity_wait": 0}}))
    e = world.check_entry("big")
    assert e["state"] == "Retry"
    assert "needs 3 pods x 8 GPUs (main) on flavor a100; largest free healthy blocks: 8, 8, 6, 3" in e["message"]
    world.kueue_react(T0 + 2)
    # the 2-GPU pod finishes; Kueue requeues after the backoff and reserves again
    fake_api.delete("v1", "Pod", "busy-2", "team-b")
    world.reserve("big", "cq-a", {"main": "a100"}, T0 + 40)
    await rec.reconcile(world.snapshot(T0 + 41), T0 + 41)
    assert world.check_entry("big")["state"] == "Ready"
    assert world.check_entry("big")["retryCount"] == 1  # Kueue's field, untouched by our apply
    assert world.kueue_react(T0 + 42) == [("big", "admitted")]
    assert_rbac(fake_api)
    await rec.close()


async def test_pytorchjob_master_worker_and_a_rejection(fake_api, world, make_ctx):
    base_world(world, nodes=("n0", "n1", "n2"))
    world.add(k.workload("pytorchjob-ok", pod_sets=(("master", 1, 8), ("worker", 2, 8)), owner=("PyTorchJob", "ok")),
              k.workload("pytorchjob-huge", pod_sets=(("master", 1, 8), ("worker", 2, 16)), owner=("PyTorchJob", "huge")))
    world.reserve("pytorchjob-ok", "cq-a", {"master": "a100", "worker": "a100"}, T0)
    world.reserve("pytorchjob-huge", "cq-a", {"master": "a100", "worker": "a100"}, T0 + 1)
    rec = AdmissionReconciler(make_ctx())
    await rec.reconcile(world.snapshot(T0 + 2), T0 + 2)
    assert world.check_entry("pytorchjob-ok")["state"] == "Ready"
    huge = world.check_entry("pytorchjob-huge")
    assert huge["state"] == "Rejected" and "16 GPUs per pod" in huge["message"]
    did = dict(world.kueue_react(T0 + 3))
    assert did == {"pytorchjob-ok": "admitted", "pytorchjob-huge": "deactivated"}
    assert world.get("Workload", "pytorchjob-huge")["spec"]["active"] is False
    assert rec.ledger.promised_by_flavor() == {"a100": 24}
    await rec.close()


async def test_active_condition_is_kept(fake_api, world, make_ctx):
    world.add(k.admission_check("gpu-capacity", active=None), k.admission_check("theirs", "example.com/x", active=None))
    rec = AdmissionReconciler(make_ctx())
    await rec.reconcile(world.snapshot(T0), T0)
    ours = world.get("AdmissionCheck", "gpu-capacity")
    assert [(c["type"], c["status"]) for c in ours["status"]["conditions"]] == [("Active", "True")]
    assert "status" not in world.get("AdmissionCheck", "theirs") or not world.get("AdmissionCheck", "theirs")["status"]
    fake_api.clear_requests()
    await rec.reconcile(world.snapshot(T0 + 10), T0 + 10)  # already active: no write
    assert not [r for r in fake_api.requests if r.verb == "patch"]
    await rec.close()


async def test_idle_team_scaled_down_while_another_team_waits(fake_api, world, make_ctx):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=3, hi=4),
              *(k.worker_pod("rc", f"rc-gpu-{i}") for i in range(3)),
              k.workload("waiting", ns="team-b", queue="lq-b", created=T0 - 1200))
    world.gpu_util.update({("team-a", "rc-gpu-0"): 0.9})
    world.ray_busy.update({"rc-gpu-1": False, "rc-gpu-2": False})
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)  # idle timers start
    assert world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    await rec.reconcile(world.snapshot(T0 + 150), T0 + 150)  # past the 120 s pressured window
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert g["replicas"] == 1
    assert sorted(g["scaleStrategy"]["workersToDelete"]) == ["rc-gpu-1", "rc-gpu-2"]
    world.kuberay_sync("rc")
    left = sorted(p["metadata"]["name"] for p in fake_api.list("v1", "Pod", "team-a"))
    assert left == ["rc-gpu-0"]  # the busy worker survived
    await rec.reconcile(world.snapshot(T0 + 160), T0 + 160)
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert g["scaleStrategy"]["workersToDelete"] == [] and g["replicas"] == 1  # cleared by us
    assert sample(ctx.registry, "queuepilot_scale_decisions_total", {
        "namespace": "team-a", "raycluster": "rc", "group": "gpu", "direction": "down",
        "reason": R.IDLE_WORKERS_QUEUE_PRESSURE, "mode": "live"}) == 1
    assert ctx.published.idle_gpus[("team-a", "rc", "gpu")] == 0
    await rec.events.drain()
    assert any(e[2] == R.IDLE_WORKERS_QUEUE_PRESSURE and "team-b/waiting" in e[3] for e in events(fake_api))
    assert_rbac(fake_api)
    await rec.close()


async def test_kueue_managed_non_elastic_cluster_left_alone(fake_api, world, make_ctx):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=2, labels={"kueue.x-k8s.io/queue-name": "lq-a"}),
              *(k.worker_pod("rc", f"rc-gpu-{i}") for i in range(2)))
    world.ray_busy.update({"rc-gpu-0": False, "rc-gpu-1": False})
    rec = ScalingReconciler(make_ctx())
    for t in (T0, T0 + 700, T0 + 1400):
        await rec.reconcile(world.snapshot(t), t)
    assert not [r for r in fake_api.requests if r.resource == "rayclusters" and r.verb == "patch"]
    await rec.events.drain()
    evs = [e for e in events(fake_api) if e[0] == "rc"]
    assert [e[1:3] for e in evs] == [("Warning", R.NOT_SCALABLE_UNDER_KUEUE)]  # once, not every pass
    await rec.close()


async def test_ray_autoscaler_writing_the_same_cluster(fake_api, world, make_ctx):
    """Our patch races the in-tree Ray autoscaler: 409, no retry, next pass decides from its write."""
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=3, hi=8, autoscaler=True),
              *(k.worker_pod("rc", f"rc-gpu-{i}") for i in range(3)))
    world.ray_busy.update({"rc-gpu-1": False, "rc-gpu-2": False})
    world.gpu_util.update({("team-a", "rc-gpu-0"): 0.3})
    ctx = make_ctx(settings={"scaling": {"idle_window": "1m", "pressured_idle_window": "1m",
                                         "scale_down": {"stabilization_window": "30s"}}})
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    snap = world.snapshot(T0 + 90)
    # the Ray autoscaler (JSON patch, no precondition) writes between our snapshot and our patch
    fake_api.patch(k.RAY, "RayCluster", "rc", [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2},
        {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy", "value": {"workersToDelete": ["rc-gpu-2"]}},
    ], namespace="team-a", content_type="application/json-patch+json")
    await rec.reconcile(snap, T0 + 90)
    assert [o.result for _, o in rec.outcomes] == ["conflict"]
    assert sample(ctx.registry, "queuepilot_write_errors_total", {"resource": "rayclusters", "kind": "conflict"}) == 1
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["maxReplicas"]) == (2, 8)  # the autoscaler's write stands
    world.kuberay_sync("rc")
    await rec.reconcile(world.snapshot(T0 + 100), T0 + 100)
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    # in-tree autoscaler on: we only lowered maxReplicas (to shed the remaining idle worker), never replicas
    assert g["replicas"] == 2 and g["maxReplicas"] == 1
    assert g["scaleStrategy"]["workersToDelete"] == ["rc-gpu-2"]  # the autoscaler's list is its own
    assert [o.result for _, o in rec.outcomes] == ["written"]
    assert_rbac(fake_api)
    await rec.close()


def patches(fake_api, resource):
    return [r for r in fake_api.requests if r.resource == resource and r.method in ("PATCH", "PUT", "POST")]


async def test_dry_run_is_a_shadow_kueue_admits_as_without_us(fake_api, world, make_ctx):
    """--dry-run: the check is set Active, every check Ready at once with the live decision in its
    message, a Normal Event per decision, counters with mode=dry_run, and no RayCluster write."""
    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.local_queue("lq-a", "team-a", "cq-a"),
              k.admission_check(active=None), k.node("n0"), k.node("n1"),
              k.ray_cluster("rc", replicas=1), k.worker_pod("rc", "rc-gpu-0", node_name="n1"),  # free: 8, 7
              k.workload("w1"), k.workload("w2"), k.workload("huge", pod_sets=(("main", 1, 16),)))
    world.reserve("w1", "cq-a", {"main": "a100"}, T0)
    world.reserve("w2", "cq-a", {"main": "a100"}, T0 + 1)
    world.reserve("huge", "cq-a", {"main": "a100"}, T0 + 2)
    world.ray_demand["team-a/rc"] = (k.RayDemand(kind="task", shape=k.frozen_map({"GPU": 1.0}), count=2),)
    ctx = make_ctx(dry_run=True, settings={"admission": {"capacity_wait": 0}})
    adm, scale, stall, _recommend = build_reconcilers(ctx)
    assert stall.writer is scale.writer
    assert adm.events is scale.events
    for r in (adm, scale):
        await r.reconcile(world.snapshot(T0 + 3), T0 + 3)
    # Kueue keeps admitting: the check is Active and every workload's check is Ready
    ac = world.get("AdmissionCheck", k.CHECK)
    assert [(c["type"], c["status"]) for c in ac["status"]["conditions"]] == [("Active", "True")]
    entries = {n: world.check_entry(n) for n in ("w1", "w2", "huge")}
    assert {n: e["state"] for n, e in entries.items()} == {"w1": "Ready", "w2": "Ready", "huge": "Ready"}
    assert entries["w1"]["message"].startswith("dry-run: would Ready: 8 healthy GPUs reserved")
    assert entries["w2"]["message"] == ("dry-run: would Retry: needs 1 pod x 8 GPUs (main) on flavor a100; "
                                        "largest free healthy blocks: 7 (7 free, 8 promised, 0 unhealthy); "
                                        "retry in 30s")
    assert entries["huge"]["message"].startswith("dry-run: would Rejected: ")
    assert "requeueAfterSeconds" not in entries["w2"]
    assert sorted(world.kueue_react(T0 + 4)) == [("huge", "admitted"), ("w1", "admitted"), ("w2", "admitted")]
    # no RayCluster write; the would-be scale-up is an Event, a line and a counter
    assert patches(fake_api, "rayclusters") == []
    assert world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert [o.result for _, o in scale.outcomes] == ["dry_run"]
    await adm.events.drain()
    evs = events(fake_api)
    wl_events = sorted(e for e in evs if e[0] in ("w1", "w2", "huge"))
    assert [(e[0], e[1], e[2]) for e in wl_events] == [
        ("huge", "Normal", R.POD_LARGER_THAN_NODE), ("w1", "Normal", R.CAPACITY_CONFIRMED),
        ("w2", "Normal", R.INSUFFICIENT_GPUS)]
    assert all(e[3] == f"{k.CHECK}: {entries[e[0]]['message']}" for e in wl_events)
    rc_events = [e for e in evs if e[0] == "rc"]
    assert [(e[1], e[2]) for e in rc_events] == [("Normal", R.PENDING_DEMAND)]
    assert rc_events[0][3].startswith("group gpu: would scale up 1->3 (dry-run): ")
    reg = ctx.registry
    for state, reason in (("Ready", R.CAPACITY_CONFIRMED), ("Retry", R.INSUFFICIENT_GPUS),
                          ("Rejected", R.POD_LARGER_THAN_NODE)):
        labels = {"cluster_queue": "cq-a", "state": state, "reason": reason}
        assert sample(reg, "queuepilot_admission_decisions_total", {**labels, "mode": "dry_run"}) == 1
        assert sample(reg, "queuepilot_admission_decisions_total", {**labels, "mode": "live"}) == 0
    scale_labels = {"namespace": "team-a", "raycluster": "rc", "group": "gpu", "direction": "up",
                    "reason": R.PENDING_DEMAND}
    assert sample(reg, "queuepilot_scale_decisions_total", {**scale_labels, "mode": "dry_run"}) == 1
    assert any(line.startswith("(dry-run) team-a/w2 [cq-a] would Retry") for line in ctx.published.last_decisions)
    assert any(line.startswith("(dry-run) team-a/rc/gpu would scale up 1->3") for line in ctx.published.last_decisions)
    # the ledger holds only what the live controller would have promised (w1), not the forced Readies
    assert ctx.published.reserved_gpus == {"a100": 8}
    # the would-be scale-up comes back every pass (nothing changed): reported once, never written
    fake_api.clear_requests()
    await scale.reconcile(world.snapshot(T0 + 10), T0 + 10)
    assert patches(fake_api, "rayclusters") == []
    assert sample(reg, "queuepilot_scale_decisions_total", {**scale_labels, "mode": "dry_run"}) == 1
    await scale.events.drain()
    assert len([e for e in events(fake_api) if e[0] == "rc"]) == 1
    assert_rbac(fake_api)
    await adm.close()


async def test_dry_run_ledger_rebuild_leaves_forced_readies_out(fake_api, world, make_ctx):
    """A new leader in dry-run rebuilds the ledger from Ready checks: the ones a dry-run forced
    (would-be Retry) must not hold GPUs, or later would-be decisions see phantom promises."""
    base_world(world)
    world.add(k.pod("busy", "team-b", "n1", 1), k.workload("w1"), k.workload("w2"), k.workload("w3"))
    world.reserve("w1", "cq-a", {"main": "a100"}, T0)
    world.reserve("w2", "cq-a", {"main": "a100"}, T0 + 1)
    first = AdmissionReconciler(make_ctx(dry_run=True))
    await first.reconcile(world.snapshot(T0 + 2), T0 + 2)
    # the live controller would wait for the GPUs with the quota reserved; the dry-run says so, Ready
    assert world.check_entry("w2")["state"] == "Ready"
    assert world.check_entry("w2")["message"].startswith(
        "dry-run: would leave Pending: needs 1 pod x 8 GPUs (main) on flavor a100; not enough free healthy GPUs")
    world.kueue_react(T0 + 3)
    fake_api.delete("v1", "Pod", "busy", "team-b")  # n1 is all free now
    world.reserve("w3", "cq-a", {"main": "a100"}, T0 + 4)
    second = AdmissionReconciler(make_ctx(dry_run=True))  # leader handover: the ledger is rebuilt
    await second.reconcile(world.snapshot(T0 + 5), T0 + 5)
    # w1's promise (n0) is rebuilt; w2's forced Ready is not, so w3 would get n1
    assert world.check_entry("w3")["message"].startswith("dry-run: would Ready: 8 healthy GPUs reserved (a100: n1 8)")
    assert second.ledger.promised_by_flavor() == {"a100": 16}
    assert set(second.ledger.reservations) == {"team-a/w1", "team-a/w3"}
    await first.close()
    await second.close()


async def test_event_driven_in_the_real_controller_loop(fake_api, world):
    """With a 300 s resync, a check that turns Pending is decided from the watch event, not the resync."""
    import asyncio
    import time

    from autoscaler.cluster.client import make_api_client
    from autoscaler.controller.config import ControllerConfig
    from autoscaler.controller.loop import Controller

    base_world(world, nodes=("n0",))
    world.add(k.workload("w1"))
    config = ControllerConfig(listen_host="127.0.0.1", listen_port=0, kubeconfig=str(fake_api.kubeconfig_path),
                              resync_seconds=300.0, debounce_seconds=0.05, leader_elect=False, identity="t",
                              gpu_poll_seconds=300.0, ray_poll_seconds=300.0)
    client = await make_api_client(config.kubeconfig)
    controller = Controller(config, client, gpu_signal=FreshGpus(), ray_client=None)
    await controller.start()
    try:
        async with asyncio.timeout(20):
            await eventually(lambda: controller.synced and controller.passes, "the first pass", timeout=20)
            world.reserve("w1", "cq-a", {"main": "a100"}, time.time())
            # (reserved_gpus is published once the pass's writes are done)
            await eventually(lambda: world.check_entry("w1")["state"] != "Pending" and controller.published.reserved_gpus,
                             "w1 decided and published", timeout=20)
        assert world.check_entry("w1")["state"] == "Ready"
        assert controller.published.reserved_gpus == {"a100": 8}
    finally:
        await controller.shutdown()
        await client.close()
    assert_rbac(fake_api)


async def test_without_an_api_client_nothing_is_written():
    """The demo/simulator may run the reconcilers without a cluster: they decide and publish only."""
    from prometheus_client import CollectorRegistry

    from autoscaler.controller.context import ControllerContext
    from autoscaler.controller.counters import ControllerCounters
    from tests.decisions import builders as b

    registry = CollectorRegistry()
    ctx = ControllerContext(api_client=None, registry=registry, counters=ControllerCounters(registry))
    adm, scale, stall, _recommend = build_reconcilers(ctx)
    assert stall.writer is scale.writer
    snap = b.snapshot([b.node("n0")], [b.workload("w")],
                      ray=[b.ray_cluster([b.group(workers=[b.worker("w0")])], demand=[b.gpu_demand(1)])])
    await adm.reconcile(snap, b.NOW)
    await scale.reconcile(snap, b.NOW)
    assert [(d.state, o.result) for d, o in adm.outcomes] == [("Ready", "dry_run")]
    assert [o.result for _, o in scale.outcomes] == ["dry_run"]
    assert ctx.published.desired_replicas[("team-a", "rc", "gpu")] == 2


async def test_idle_actor_reclaim_names_the_actor_held_worker(fake_api, world, make_ctx):
    """With queuepilot.io/reclaim-idle-actors, the empty worker goes after the short idle window, and
    the worker whose actor keeps the GPU at 0 % for the reclaim window is deleted by name after it;
    the busy worker stays; the Event says so and the killed work is counted."""
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=3, hi=4, annotations={"queuepilot.io/reclaim-idle-actors": "true"}),
              *(k.worker_pod("rc", f"rc-gpu-{i}") for i in range(3)))
    world.gpu_util.update({("team-a", "rc-gpu-0"): 0.5})  # busy; rc-gpu-1: an actor at 0 %; rc-gpu-2: no Ray work
    world.ray_busy.update({"rc-gpu-0": True, "rc-gpu-1": True, "rc-gpu-2": False})
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)  # idle timers start
    await rec.reconcile(world.snapshot(T0 + 60), T0 + 60)  # inside the 90 s idle window
    assert world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 3
    await rec.reconcile(world.snapshot(T0 + 100), T0 + 100)  # the empty worker goes, the actor's stays
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (2, ["rc-gpu-2"])
    world.kuberay_sync("rc")
    await rec.reconcile(world.snapshot(T0 + 310), T0 + 310)  # past the 300 s reclaim window
    g = world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (1, ["rc-gpu-1"])
    await rec.events.drain()
    assert any(e[2] == R.IDLE_ACTORS_RECLAIMED and "rc-gpu-1" in e[3] and "killed" in e[3] for e in events(fake_api))
    labels = {"namespace": "team-a", "raycluster": "rc", "group": "gpu", "mode": "live"}
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**labels, "reason": "idle_actor"}) == 1
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**labels, "reason": "empty"}) == 1
    assert_rbac(fake_api)
    await rec.close()
