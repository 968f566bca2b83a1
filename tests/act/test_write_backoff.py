"""Per-object backoff after refused writes, through the real kubernetes-asyncio client against the
fake API server: a refused write is not repeated on every pass, a first 409 is retried at once and
repeated 409s are paced, 429 waits
for Retry-After, a streak of failures gives one Warning Event, and the backoff gauge follows."""

from __future__ import annotations

import itertools
import logging
import random

from autoscaler.act.guard import WRITES_FAILING, BackoffPolicy
from autoscaler.act.kube_writer import KubeWriter
from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core import reasons as R
from tests.controller.harness import FreshGpus
from tests.decisions import kube_world as k
from tests.support.eventually import eventually

T0 = 100_000.0


def base_world(world) -> None:
    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.local_queue("lq-a", "team-a", "cq-a"),
              k.admission_check(), k.node("n0"), k.workload("w"))
    world.reserve("w", "cq-a", {"main": "a100"}, T0)


def writer(ctx, kube_client, seed: int = 7, **policy) -> KubeWriter:
    ctx.writer = KubeWriter(kube_client, ctx.counters, controller_name=k.CONTROLLER, field_manager="queuepilot",
                            backoff=BackoffPolicy(**policy), rng=random.Random(seed))
    return ctx.writer


def requests(fake_api, resource: str, method: str) -> list:
    return [r for r in fake_api.requests if r.resource == resource and r.method == method]


def value(ctx, name: str, labels: dict | None = None) -> float:
    return ctx.registry.get_sample_value(name, labels or {}) or 0.0


def warnings(fake_api, name: str) -> list:
    return [e for e in fake_api.list("v1", "Event", "team-a")
            if e["reason"] == WRITES_FAILING and e["involvedObject"]["name"] == name]


async def test_a_refused_status_write_is_not_retried_on_every_pass(fake_api, world, make_ctx, kube_client):
    """422 on every status write while passes run once a second for 5 minutes: without backoff that
    is 300 GET+PATCH pairs; with it, a handful, spaced further and further apart."""
    base_world(world)
    ctx = make_ctx()
    writer(ctx, kube_client)
    rec = AdmissionReconciler(ctx)
    fake_api.fail_next(10_000, status=422, path_contains="/workloads/w/status", method="PATCH")
    fake_api.clear_requests()
    times: list[float] = []
    for i in range(300):
        before = len(requests(fake_api, "workloads/status", "PATCH"))
        await rec.reconcile(world.snapshot(T0 + 1 + i), T0 + 1 + i)
        if len(requests(fake_api, "workloads/status", "PATCH")) > before:
            times.append(float(i))
        assert [o.result for _, o in rec.outcomes] == ["error" if times and times[-1] == i else "skipped"]
    patches = requests(fake_api, "workloads/status", "PATCH")
    assert 4 <= len(patches) <= 6, times
    assert len(requests(fake_api, "workloads", "GET")) == len(patches)  # no fresh read while held back
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(later >= earlier for earlier, later in itertools.pairwise(gaps)), gaps  # growing
    assert 5 <= gaps[0] <= 10  # refused: 10 s, less up to half at random
    assert value(ctx, "queuepilot_write_errors_total", {"resource": "workloads/status", "kind": "invalid"}) \
        == len(patches)
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 1
    assert rec.ledger.reservations == {}  # a decision that was not written promises nothing
    await rec.events.drain()
    failing = warnings(fake_api, "w")
    assert len(failing) == 1 and failing[0]["type"] == "Warning"  # once per streak, not per failure
    assert "3 failures in a row" in failing[0]["message"] and "422" in failing[0]["message"]
    await rec.close()


async def test_the_streak_ends_with_a_success_after_the_backoff(fake_api, world, make_ctx, kube_client):
    base_world(world)
    ctx = make_ctx()
    writer(ctx, kube_client, refused_base=4.0, jitter=0.0)  # 4 s, 8 s, 16 s: no randomness
    rec = AdmissionReconciler(ctx)
    fake_api.fail_next(3, status=403, path_contains="/workloads/w/status", method="PATCH")
    fake_api.clear_requests()
    attempts = []
    for t in range(0, 40):
        before = len(requests(fake_api, "workloads/status", "PATCH"))
        await rec.reconcile(world.snapshot(T0 + t), T0 + t)
        if len(requests(fake_api, "workloads/status", "PATCH")) > before:
            attempts.append(t)
        if world.check_entry("w")["state"] == "Ready":
            break
    assert attempts == [0, 4, 12, 28]  # held back 4, 8, 16 s; the fourth write goes through
    assert world.check_entry("w")["state"] == "Ready"
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 0
    assert value(ctx, "queuepilot_write_errors_total", {"resource": "workloads/status", "kind": "forbidden"}) == 3
    assert value(ctx, "queuepilot_writes_total", {"resource": "workloads/status", "verb": "patch"}) == 1
    await rec.events.drain()
    assert len(warnings(fake_api, "w")) == 1
    await rec.close()


async def test_429_waits_for_retry_after(fake_api, world, make_ctx, kube_client):
    base_world(world)
    ctx = make_ctx()
    writer(ctx, kube_client)
    rec = AdmissionReconciler(ctx)
    fake_api.fail_next(1, status=429, retry_after=30, path_contains="/workloads/w/status", method="PATCH")
    fake_api.clear_requests()
    await rec.reconcile(world.snapshot(T0), T0)
    assert [o.result for _, o in rec.outcomes] == ["error"]
    for t in range(1, 30):
        await rec.reconcile(world.snapshot(T0 + t), T0 + t)
    assert len(requests(fake_api, "workloads/status", "PATCH")) == 1  # nothing before Retry-After
    for t in range(30, 34):
        await rec.reconcile(world.snapshot(T0 + t), T0 + t)
    assert world.check_entry("w")["state"] == "Ready"  # within 10 % jitter past it
    assert value(ctx, "queuepilot_write_errors_total", {"resource": "workloads/status", "kind": "throttled"}) == 1
    await rec.close()


async def test_a_first_conflict_is_retried_at_once_and_repeated_conflicts_are_backed_off(
        fake_api, world, make_ctx, kube_client):
    base_world(world)
    ctx = make_ctx()
    writer(ctx, kube_client)
    rec = AdmissionReconciler(ctx)
    fake_api.fail_next(1, status=409, path_contains="/workloads/w/status", method="PATCH")
    await rec.reconcile(world.snapshot(T0), T0)  # one conflict: read fresh, written at once
    assert [(o.result, o.attempts) for _, o in rec.outcomes] == [("written", 2)]
    assert world.check_entry("w")["state"] == "Ready"
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 0

    world.add(k.node("n1"), k.workload("w2"))  # (room for it beside w)
    world.reserve("w2", "cq-a", {"main": "a100"}, T0)
    fake_api.fail_next(3, status=409, path_contains="/workloads/w2/status", method="PATCH")
    await rec.reconcile(world.snapshot(T0 + 1), T0 + 1)  # two conflicts in a row: held back
    assert [(o.result, o.attempts) for _, o in rec.outcomes] == [("conflict", 2)]
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 1
    await rec.reconcile(world.snapshot(T0 + 1.1), T0 + 1.1)  # within the backoff: nothing requested
    assert [(o.result, o.detail) for _, o in rec.outcomes] == [("skipped", "backoff")]
    await rec.reconcile(world.snapshot(T0 + 2), T0 + 2)  # the third conflict: held back longer
    assert [o.result for _, o in rec.outcomes] == ["conflict"]
    await rec.reconcile(world.snapshot(T0 + 4), T0 + 4)
    assert world.check_entry("w2")["state"] == "Ready"
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 0
    await rec.close()


async def test_a_status_write_that_meets_409_forever_is_paced_and_logged_once(
        fake_api, world, make_ctx, kube_client, caplog):
    """409 on every status write while passes run six times a second for 63 s: without pacing that
    was 375 GET+PATCH pairs (all logged nowhere); now a handful, further and further apart."""
    base_world(world)
    ctx = make_ctx()
    writer(ctx, kube_client)
    rec = AdmissionReconciler(ctx)
    refusal = fake_api.refuse_writes(409, resource="workloads/status", name="w")
    fake_api.clear_requests()
    caplog.set_level(logging.INFO, logger="autoscaler.act.guard")
    patched_at: list[float] = []
    for i in range(375):  # a pass every 0.168 s of the injected clock: 63 s
        now = T0 + i * 0.168
        before = len(requests(fake_api, "workloads/status", "PATCH"))
        await rec.reconcile(world.snapshot(now), now)
        if len(requests(fake_api, "workloads/status", "PATCH")) > before:
            patched_at.append(now - T0)
    patches = requests(fake_api, "workloads/status", "PATCH")
    gets = [r for r in fake_api.requests if r.resource == "workloads" and r.method == "GET"]
    assert len(patches) <= 14 and len(gets) == len(patches)
    gaps = [b - a for a, b in itertools.pairwise(patched_at)]
    assert gaps[-1] >= 15.0  # the delay doubled up to its cap (30 s, cut by up to half at random)
    assert value(ctx, "queuepilot_write_errors_total", {"resource": "workloads/status", "kind": "conflict"}) == \
        len(patches)
    started = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(started) == 1 and "409 Conflict 2 times in a row" in started[0]
    refusal.cancel()
    now = T0 + 63 + 31
    await rec.reconcile(world.snapshot(now), now)
    assert world.check_entry("w")["state"] == "Ready"
    ended = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any(f"after {len(patches)} conflicts in a row" in m for m in ended)
    await rec.close()


async def test_a_refused_raycluster_patch_is_backed_off(fake_api, world, make_ctx, kube_client):
    """A validating policy refuses every patch of the RayCluster (403): the scaler keeps deciding,
    but patches only as the backoff allows, and its history never counts the unwritten change."""
    world.add(k.flavor("a100"), k.node("n0"), k.ray_cluster("rc", replicas=1), k.worker_pod("rc", "rc-gpu-0"))
    world.ray_demand["team-a/rc"] = (k.RayDemand(kind="task", shape=k.frozen_map({"GPU": 1.0}), count=2),)
    ctx = make_ctx()
    writer(ctx, kube_client)
    rec = ScalingReconciler(ctx)
    fake_api.fail_next(10_000, status=403, path_contains="/rayclusters/rc", method="PATCH")
    fake_api.clear_requests()
    for t in range(0, 120):
        await rec.reconcile(world.snapshot(T0 + t), T0 + t)
    patches = requests(fake_api, "rayclusters", "PATCH")
    assert 3 <= len(patches) <= 5  # 120 without backoff
    assert world.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 1
    assert [o.result for _, o in rec.outcomes] in (["skipped"], ["error"])
    assert rec.history["team-a/rc"]["gpu"].scale_events == ()
    assert value(ctx, "queuepilot_objects_in_write_backoff", {"resource": "rayclusters"}) == 1
    await rec.events.drain()
    assert len(warnings(fake_api, "rc")) == 1
    # a scale-up that was never written is not announced as one
    assert not [e for e in fake_api.list("v1", "Event", "team-a") if e["reason"] == R.PENDING_DEMAND]
    await rec.close()


async def test_in_the_real_controller_loop_pod_churn_does_not_repeat_a_refused_write(fake_api, world):
    """The defect as reported: a Workload whose status write is refused (422) while pods churn. Every
    watch event brings a pass; without backoff each pass made a GET + PATCH of that Workload."""
    import asyncio

    from autoscaler.cluster.client import make_api_client
    from autoscaler.controller.config import ControllerConfig
    from autoscaler.controller.loop import Controller

    base_world(world)
    world.add(k.local_queue("lq-b", "team-b", "cq-a"))  # (the churning pods' namespace)
    fake_api.fail_next(10_000, status=422, path_contains="/workloads/w/status", method="PATCH")
    config = ControllerConfig(listen_host="127.0.0.1", listen_port=0, kubeconfig=str(fake_api.kubeconfig_path),
                              resync_seconds=300.0, debounce_seconds=0.02, leader_elect=False, identity="t",
                              gpu_poll_seconds=300.0, ray_poll_seconds=300.0)
    client = await make_api_client(config.kubeconfig)
    controller = Controller(config, client, gpu_signal=FreshGpus(), ray_client=None)
    await controller.start()
    try:
        async with asyncio.timeout(30):
            await eventually(lambda: controller.synced and controller.passes, "the first pass", timeout=30)
            first = controller.passes
            for i in range(40):  # pods come and go on another team's namespace
                world.add(k.pod(f"churn-{i}", "team-b", "n0"))
                await asyncio.sleep(0.03)
                fake_api.delete("v1", "Pod", f"churn-{i}", "team-b")
                await asyncio.sleep(0.03)
            passes = controller.passes - first
    finally:
        await controller.shutdown()
        await client.close()
    assert passes >= 10  # the churn did drive passes
    patches = requests(fake_api, "workloads/status", "PATCH")
    reads = [r for r in fake_api.requests if r.resource == "workloads" and r.method == "GET" and r.name == "w"]
    assert len(patches) == 1 and len(reads) == 1  # refused once, then held back (>= 5 s) for the whole churn
    assert controller.registry.get_sample_value("queuepilot_objects_in_write_backoff",
                                                {"resource": "workloads/status"}) == 1
