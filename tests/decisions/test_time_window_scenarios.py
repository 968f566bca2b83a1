"""Time windows through the controller's scaling reconciler against the fake API server: the patch it
writes, the Event that names the window, leaving a window through the idle path, a ClusterQueue's
schedule from the config file, and a malformed schedule reported once."""

from __future__ import annotations

from datetime import UTC, datetime

from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core import reasons as R
from tests.decisions import kube_world as k
from tests.decisions.builders import gpu_demand
from tests.decisions.scenarios import assert_rbac, base_world, events, sample

# Tuesday 2024-06-04 09:00 UTC = 11:00 in Berlin
TUE_0900 = datetime(2024, 6, 4, 9, 0, tzinfo=UTC).timestamp()
OFFICE = "Mon-Fri 08:00-20:00 min=3 name=office; tz=Europe/Berlin"


def group_spec(world, name="rc"):
    return world.get("RayCluster", name)["spec"]["workerGroupSpecs"][0]


async def test_a_min_window_scales_up_and_leaving_it_goes_through_the_idle_path(fake_api, world, make_ctx):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=1, annotations={"queuepilot.io/schedule": OFFICE}),
              k.worker_pod("rc", "rc-gpu-0"))
    world.gpu_util[("team-a", "rc-gpu-0")] = 0.9
    ctx = make_ctx()
    rec = ScalingReconciler(ctx)
    await rec.reconcile(world.snapshot(TUE_0900), TUE_0900)
    assert group_spec(world)["replicas"] == 3
    await rec.events.drain()
    (ev,) = [e for e in events(fake_api) if e[2] == R.SCHEDULED_MIN_REPLICAS]
    assert ev[:2] == ("rc", "Normal")
    assert ('window "office" (RayCluster annotation: Mon-Fri 08:00-20:00 min=3, Europe/Berlin, until Tue 20:00)'
            in ev[3]) and "at least 3 worker(s)" in ev[3]
    assert sample(ctx.registry, "queuepilot_scale_decisions_total", {
        "namespace": "team-a", "raycluster": "rc", "group": "gpu", "direction": "up",
        "reason": R.SCHEDULED_MIN_REPLICAS, "mode": "live"}) == 1
    # KubeRay makes the two workers; nothing runs on them
    world.kuberay_sync("rc")
    for pod in ("rc-gpu-worker-new0", "rc-gpu-worker-new1"):
        world.ray_busy[pod] = False
    # in the window they stay, however idle
    await rec.reconcile(world.snapshot(TUE_0900 + 600), TUE_0900 + 600)
    assert group_spec(world)["replicas"] == 3
    # 20:30 in Berlin: the window is over; the workers idle since 09:10 (longer than the idle window) go,
    # by name, through the idle path: leaving the window removes nothing by itself
    evening = datetime(2024, 6, 4, 18, 30, tzinfo=UTC).timestamp()
    await rec.reconcile(world.snapshot(evening), evening)
    g = group_spec(world)
    assert g["replicas"] == 1
    assert sorted(g["scaleStrategy"]["workersToDelete"]) == ["rc-gpu-worker-new0", "rc-gpu-worker-new1"]
    await rec.events.drain()
    assert any(e[2] == R.IDLE_WORKERS and 'window "' not in e[3] for e in events(fake_api))
    assert_rbac(fake_api)
    await rec.close()


async def test_a_cluster_queue_schedule_caps_the_scale_up_and_the_event_names_it(fake_api, world, make_ctx):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=1, labels={"kueue.x-k8s.io/queue-name": "lq-a"},
                            annotations={"kueue.x-k8s.io/elastic-job": "true"}),
              k.worker_pod("rc", "rc-gpu-0"))
    world.gpu_util[("team-a", "rc-gpu-0")] = 0.9
    world.ray_demand["team-a/rc"] = (gpu_demand(1, count=5),)
    ctx = make_ctx(settings={"scaling": {"cluster_queue_schedules": {
        "cq-a": "Mon-Thu 20:00-08:00 max=2 name=night; Fri 20:00-Mon 08:00 max=2 name=weekend; tz=Europe/Berlin"}}})
    rec = ScalingReconciler(ctx)
    saturday = datetime(2024, 6, 8, 12, 0, tzinfo=UTC).timestamp()
    await rec.reconcile(world.snapshot(saturday), saturday)
    assert group_spec(world)["replicas"] == 2
    await rec.events.drain()
    (ev,) = [e for e in events(fake_api) if e[2] == R.SCHEDULED_MAX_REPLICAS]
    assert 'window "weekend" (ClusterQueue cq-a: Fri 20:00-Mon 08:00 max=2, Europe/Berlin, until Mon 08:00)' in ev[3]
    assert 'infeasible: 4 more replica(s) wanted, time window "weekend" allows at most 2' in ev[3]
    # Monday 10:00 in Berlin: no window; the queue's demand scales up as usual
    monday = datetime(2024, 6, 10, 8, 0, tzinfo=UTC).timestamp()
    world.kuberay_sync("rc")
    for pod in ("rc-gpu-worker-new0",):
        world.gpu_util[("team-a", pod)] = 0.9
    world.ray_demand["team-a/rc"] = (gpu_demand(1, count=4),)
    await rec.reconcile(world.snapshot(monday), monday)
    assert group_spec(world)["replicas"] == 6
    await rec.close()


async def test_a_malformed_schedule_is_one_warning_event(fake_api, world, make_ctx):
    base_world(world)
    world.add(k.ray_cluster("rc", replicas=1, annotations={"queuepilot.io/schedule": "weekdays 9-5 min=2"}),
              k.worker_pod("rc", "rc-gpu-0"))
    world.gpu_util[("team-a", "rc-gpu-0")] = 0.9
    rec = ScalingReconciler(make_ctx())
    for t in (TUE_0900, TUE_0900 + 30):
        await rec.reconcile(world.snapshot(t), t)
    assert group_spec(world)["replicas"] == 1  # nothing changed for it
    await rec.events.drain()
    warnings = [e for e in events(fake_api) if e[2] == R.MALFORMED_ANNOTATION]
    assert len(warnings) == 1 and warnings[0][1] == "Warning"
    assert "queuepilot.io/schedule='weekdays 9-5 min=2' ignored: not a day" in warnings[0][3]
    await rec.close()
