"""Idle-GPU reclaim while work queues, through the fake API server with the real kubernetes-asyncio
client: by default the idle worker stays until the queue is served; with reclaim-replace the named
worker is deleted and KubeRay (played by the test) launches a replacement for the queued task; the grace period, the hourly budget and the down-after-up hold are honoured; dry-run
writes nothing; a malformed annotation is a Warning Event and the default is used."""

from __future__ import annotations

from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core import reasons as R
from autoscaler.core.snapshot import RayDemand, frozen_map
from tests.decisions import kube_world as k
from tests.decisions.scenarios import T0, assert_rbac, base_world, events, sample

ON = {"queuepilot.io/reclaim-idle-actors": "true", "queuepilot.io/reclaim-replace": "true"}
TASK = (RayDemand(kind="task", shape=frozen_map({"GPU": 1.0}), count=1),)
LABELS = {"namespace": "team-a", "raycluster": "rc", "group": "gpu"}


def group_spec(world):
    return world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]


def pods(fake_api):
    return sorted(p["metadata"]["name"] for p in fake_api.list("v1", "Pod", "team-a"))


def rc_patches(fake_api):
    return [r for r in fake_api.requests if r.resource == "rayclusters" and r.verb == "patch"]


def setup(world, annotations, workers=2, hi=2):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=workers, hi=hi, annotations={**ON, **annotations}),
              *(k.worker_pod("rc", f"rc-gpu-{i}") for i in range(workers)))
    world.gpu_util.update({("team-a", "rc-gpu-0"): 0.8})  # rc-gpu-0 busy; the others hold actors at 0 %
    world.ray_busy.update({f"rc-gpu-{i}": True for i in range(workers)})
    world.ray_demand["team-a/rc"] = TASK  # the team's task queues at maxReplicas


async def test_by_default_the_idle_actor_worker_stays_until_the_queue_is_served(fake_api, world, make_ctx):
    setup(world, {"queuepilot.io/reclaim-replace": "false"})
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    for t in (T0, T0 + 310, T0 + 1800):  # past the 300 s reclaim window, the task still queued at max
        await rec.reconcile(world.snapshot(t), t)
    assert not rc_patches(fake_api) and pods(fake_api) == ["rc-gpu-0", "rc-gpu-1"]
    del world.ray_demand["team-a/rc"]  # the queue served
    await rec.reconcile(world.snapshot(T0 + 1810), T0 + 1810)
    g = group_spec(world)
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (1, ["rc-gpu-1"])
    world.kuberay_sync("rc")
    assert pods(fake_api) == ["rc-gpu-0"]
    await rec.events.drain()
    assert [e[2] for e in events(fake_api) if e[2] in (R.IDLE_ACTORS_RECLAIMED, R.IDLE_WORKERS_REPLACED)] == [
        R.IDLE_ACTORS_RECLAIMED]
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**LABELS, "reason": "idle_actor",
                                                                       "mode": "live"}) == 1
    await rec.close()


async def test_an_idle_actor_worker_is_replaced_while_the_teams_task_queues(fake_api, world, make_ctx):
    setup(world, {})
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)  # timers start
    await rec.reconcile(world.snapshot(T0 + 200), T0 + 200)  # inside the 300 s reclaim window
    assert not rc_patches(fake_api)
    await rec.reconcile(world.snapshot(T0 + 310), T0 + 310)
    g = group_spec(world)
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (2, ["rc-gpu-1"])  # replicas kept at max
    world.kuberay_sync("rc")
    assert pods(fake_api) == ["rc-gpu-0", "rc-gpu-worker-new0"]  # deleted by name, a fresh worker launched
    await rec.reconcile(world.snapshot(T0 + 320), T0 + 320)
    g = group_spec(world)
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (2, [])  # our list cleared once the pod went
    await rec.events.drain()
    evs = [e for e in events(fake_api) if e[2] == R.IDLE_WORKERS_REPLACED]
    assert len(evs) == 1 and evs[0][1] == "Normal"
    assert "rc-gpu-1" in evs[0][3] and "killed" in evs[0][3] and "fresh ones for the queued work" in evs[0][3]
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**LABELS, "reason": "idle_actor",
                                                                       "mode": "live"}) == 1
    assert sample(ctx.registry, "queuepilot_scale_decisions_total", {
        **LABELS, "direction": "hold", "reason": R.IDLE_WORKERS_REPLACED, "mode": "live"}) == 1
    assert_rbac(fake_api)
    await rec.close()


async def test_the_budget_and_the_down_after_up_hold(fake_api, world, make_ctx):
    setup(world, {"queuepilot.io/reclaim-budget": "1"}, workers=3, hi=3)
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + 310), T0 + 310)
    assert group_spec(world)["scaleStrategy"]["workersToDelete"] == ["rc-gpu-1"]  # one: the hour's budget
    world.kuberay_sync("rc")
    world.ray_busy["rc-gpu-worker-new0"] = True
    world.gpu_util[("team-a", "rc-gpu-worker-new0")] = 0.9  # the fresh worker took the task
    for t in (T0 + 320, T0 + 700, T0 + 2000):
        await rec.reconcile(world.snapshot(t), t)
        assert pods(fake_api) == ["rc-gpu-0", "rc-gpu-2", "rc-gpu-worker-new0"], t
        assert group_spec(world)["scaleStrategy"]["workersToDelete"] == []
    await rec.reconcile(world.snapshot(T0 + 310 + 3600), T0 + 310 + 3600)  # an hour after the first reclaim
    assert group_spec(world)["scaleStrategy"]["workersToDelete"] == ["rc-gpu-2"]
    await rec.events.drain()
    assert any("reclaim budget of 1/h used" in e[3] for e in events(fake_api))
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**LABELS, "reason": "idle_actor",
                                                                       "mode": "live"}) == 2
    await rec.close()


async def test_the_grace_period_protects_a_young_worker(fake_api, world, make_ctx):
    setup(world, {}, workers=1, hi=2)
    young = k.worker_pod("rc", "rc-gpu-young")
    young["metadata"]["creationTimestamp"] = k.ts(T0 - 100)
    world.add(young)
    world.ray_busy["rc-gpu-young"] = True
    fake_api.patch(k.RAY, "RayCluster", "rc", [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                                "value": 2}], namespace="team-a",
                   content_type="application/json-patch+json")
    rec = ScalingReconciler(make_ctx())
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + 400), T0 + 400)  # 500 s old: inside the 600 s grace period
    assert not rc_patches(fake_api)
    await rec.reconcile(world.snapshot(T0 + 510), T0 + 510)
    assert group_spec(world)["scaleStrategy"]["workersToDelete"] == ["rc-gpu-young"]
    await rec.close()


async def test_dry_run_reports_the_replacement_and_writes_nothing(fake_api, world, make_ctx):
    setup(world, {})
    ctx = make_ctx(dry_run=True)
    rec = ScalingReconciler(ctx)
    for t in (T0, T0 + 310, T0 + 320):
        await rec.reconcile(world.snapshot(t), t)
    assert not rc_patches(fake_api)
    assert "scaleStrategy" not in group_spec(world)
    await rec.events.drain()
    evs = [e for e in events(fake_api) if e[2] == R.IDLE_WORKERS_REPLACED]
    assert len(evs) == 1 and "(dry-run)" in evs[0][3]  # once, not every pass
    assert sample(ctx.registry, "queuepilot_reclaimed_workers_total", {**LABELS, "reason": "idle_actor",
                                                                       "mode": "dry_run"}) == 1
    await rec.close()


async def test_a_malformed_budget_is_a_warning_and_the_default_holds(fake_api, world, make_ctx):
    setup(world, {"queuepilot.io/reclaim-budget": "lots", "queuepilot.io/reclaim-window": "-5m"})
    rec = ScalingReconciler(make_ctx())
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + 200), T0 + 200)
    assert not rc_patches(fake_api)  # the default 300 s window, not a negative one
    await rec.reconcile(world.snapshot(T0 + 310), T0 + 310)
    assert group_spec(world)["scaleStrategy"]["workersToDelete"] == ["rc-gpu-1"]
    await rec.events.drain()
    warned = [e for e in events(fake_api) if e[2] == R.MALFORMED_ANNOTATION]
    assert len(warned) == 2 and all(e[1] == "Warning" for e in warned)
    assert any("reclaim-budget" in e[3] and "lots" in e[3] for e in warned)
    await rec.close()


async def test_a_task_in_an_idle_stretch_is_never_replaced(fake_api, world, make_ctx):
    """A worker whose GPU sits at 0 % while Ray says a task runs on it (an evaluation, a checkpoint,
    an input stall inside the task) is not an idle actor: however long, it is neither deleted nor
    named, while the same worker turns reclaimable the pass Ray reports only its idle actor left."""
    setup(world, {})
    world.ray_running["rc-gpu-1"] = 1  # the task still runs, its GPU at 0 %
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    for t in (T0, T0 + 310, T0 + 1800, T0 + 7200):
        await rec.reconcile(world.snapshot(t), t)
    assert not rc_patches(fake_api) and pods(fake_api) == ["rc-gpu-0", "rc-gpu-1"]
    world.ray_running["rc-gpu-1"] = 0  # the task ended; its actor holds the GPU
    await rec.reconcile(world.snapshot(T0 + 7210), T0 + 7210)  # the idle timer starts now
    assert not rc_patches(fake_api)
    await rec.reconcile(world.snapshot(T0 + 7520), T0 + 7520)
    assert group_spec(world)["scaleStrategy"]["workersToDelete"] == ["rc-gpu-1"]
    await rec.close()
