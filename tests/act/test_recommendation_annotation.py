"""The right-sizing reconciler through the real kubernetes-asyncio client against the fake API server:
the ``queuepilot.io/recommendation`` annotation appears (as JSON) on an opted-in RayCluster only when the
controller-wide switch is on, is not rewritten while nothing changes materially, overwrites a value a
tenant corrupted; one ``RecommendationChanged`` Event per material change; a malformed opt-in is off
with one ``MalformedAnnotation`` Event; dry-run writes nothing."""

from __future__ import annotations

import json
import random

import pytest

from autoscaler.act.guard import BackoffPolicy
from autoscaler.act.kube_writer import KubeWriter
from autoscaler.controller.recommend import RecommendationReconciler
from autoscaler.core.policy.rightsizing import RightsizingPolicy
from autoscaler.core.reasons import RECOMMENDATION_CHANGED
from tests.decisions import kube_world as k

T0 = 100_000.0
STEP = 300.0
POLICY = RightsizingPolicy(min_history_s=600.0, min_observations=3)
KEY = "queuepilot.io/recommendation"
OPT_IN = {"queuepilot.io/annotate-recommendation": "true"}


def setup_world(world, name: str = "rc", annotations: dict | None = None, pods: int = 3) -> None:
    """A 3-worker, 1-GPU-per-worker RayCluster (min 0, max 8) of which only the first worker is busy."""
    if not world.api.list("v1", "Node"):
        world.add(k.node("n0", gpus=8))
    world.add(k.ray_cluster(name, replicas=pods, lo=0, hi=8, gpus=1, annotations=annotations))
    for i in range(pods):
        world.add(k.worker_pod(name, f"{name}-w{i}", node_name="n0", gpus=1))
        world.gpu_util[("team-a", f"{name}-w{i}")] = 0.9 if i == 0 else 0.0


def make(make_ctx, client, *, annotate: bool = True, dry_run: bool = False):
    ctx = make_ctx(dry_run=dry_run, settings={"recommendations": {"annotate": annotate}})
    writer = KubeWriter(client, ctx.counters, controller_name=k.CONTROLLER, field_manager="queuepilot",
                        dry_run=dry_run, backoff=BackoffPolicy(), rng=random.Random(1))
    return ctx, RecommendationReconciler(ctx, writer, policy=POLICY, step_s=STEP)


def patches(fake_api) -> list:
    return [r for r in fake_api.requests if r.resource == "rayclusters" and r.method == "PATCH"]


def events(fake_api, reason: str) -> list[dict]:
    return [e for e in fake_api.list("v1", "Event") if e.get("reason") == reason]


async def run(rec, world, steps: int, start: int = 0) -> None:
    for i in range(start, start + steps):
        now = T0 + STEP * i
        await rec.reconcile(world.snapshot(now), now)
    if rec.events is not None:
        await rec.events.drain()


async def test_written_on_an_opted_in_cluster_once_with_the_expected_json(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", OPT_IN)
    setup_world(world, "other")  # did not opt in
    ctx, rec = make(make_ctx, kube_client)
    await run(rec, world, 2)
    assert patches(fake_api) == []  # withheld (too little history): nothing yet
    await run(rec, world, 1, start=2)
    (req,) = patches(fake_api)
    assert req.name == "rc" and req.content_type.startswith("application/merge-patch+json")
    ann = world.get("RayCluster", "rc")["metadata"]["annotations"]
    assert ann["queuepilot.io/autoscale"] == "true"  # the merge patch left the others alone
    data = json.loads(ann[KEY])
    assert set(data) == {"computed_at", "groups"} and data["computed_at"].endswith("Z")
    (g,) = data["groups"]
    assert g == {"group": "gpu", "gpus_per_worker": 1, "recommended_gpus_per_worker": 1,
                 "recommended_min_replicas": 1, "recommended_max_replicas": 2,
                 "idle_gpu_hours": g["idle_gpu_hours"], "reason": "Recommended"}
    assert isinstance(g["idle_gpu_hours"], float) and g["idle_gpu_hours"] > 0
    assert ann[KEY] == json.dumps(data, sort_keys=True, separators=(",", ":"))  # small and deterministic
    assert KEY not in world.get("RayCluster", "other")["metadata"]["annotations"]
    # nothing changes materially: not rewritten
    await run(rec, world, 4, start=3)
    assert len(patches(fake_api)) == 1
    # the gauges are fed by this reconciler alone
    assert {r.key.raycluster for r in ctx.published.recommendations} == {"rc", "other"}
    await rec.close()


async def test_switch_off_writes_nothing(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", OPT_IN)
    _, rec = make(make_ctx, kube_client, annotate=False)
    await run(rec, world, 5)
    assert patches(fake_api) == []
    assert len(events(fake_api, RECOMMENDATION_CHANGED)) == 1  # the Event does not need the opt-in
    await rec.close()


@pytest.mark.parametrize("bad", [
    "not json", "[]", '{"groups": [{"group": "gpu"}]', '{"computed_at": "x", "groups": 7}',
    '{"computed_at":"x","groups":[{"group":"gpu","gpus_per_worker":true}]}',
    '{"computed_at":"x","groups":[{"gpus_per_worker":1,"group":"gpu","idle_gpu_hours":"NaN","reason":"Recommended",'
    '"recommended_gpus_per_worker":1,"recommended_max_replicas":2,"recommended_min_replicas":1}]}',
    "[" * 100_000,
])
async def test_a_corrupted_value_is_overwritten(fake_api, world, make_ctx, kube_client, bad):
    setup_world(world, "rc", {**OPT_IN, KEY: bad})
    _, rec = make(make_ctx, kube_client)
    await run(rec, world, 4)
    value = world.get("RayCluster", "rc")["metadata"]["annotations"][KEY]
    assert value != bad and json.loads(value)["groups"][0]["recommended_max_replicas"] == 2
    assert len(patches(fake_api)) == 1
    await rec.close()


async def test_one_event_per_material_change(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", OPT_IN)
    _, rec = make(make_ctx, kube_client)
    await run(rec, world, 6)
    (ev,) = events(fake_api, RECOMMENDATION_CHANGED)
    assert ev["type"] == "Normal" and ev["involvedObject"]["name"] == "rc"
    assert "1-2 replicas" in ev["message"]
    # two workers busy from now on: once the recommended max moves, one more Event and one rewrite
    world.gpu_util[("team-a", "rc-w1")] = 0.9
    i = 6
    while rec.feed.history.recommend(POLICY)[0].recommended_max_replicas != 3:
        assert len(events(fake_api, RECOMMENDATION_CHANGED)) == 1 and len(patches(fake_api)) == 1
        await run(rec, world, 1, start=i)
        i += 1
        assert i < 60, "the busy p95 never moved"
    evs = events(fake_api, RECOMMENDATION_CHANGED)
    assert len(evs) == 2 and any("1-3 replicas" in e["message"] for e in evs), [e["message"] for e in evs]
    assert len(patches(fake_api)) == 2
    data = json.loads(world.get("RayCluster", "rc")["metadata"]["annotations"][KEY])
    assert data["groups"][0]["recommended_max_replicas"] == 3
    await run(rec, world, 1, start=i)  # the saved hours grow a little: no news
    assert len(events(fake_api, RECOMMENDATION_CHANGED)) == 2 and len(patches(fake_api)) == 2
    await rec.close()


async def test_a_malformed_opt_in_is_off_and_reported_once(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", {"queuepilot.io/annotate-recommendation": "yes please"})
    _, rec = make(make_ctx, kube_client)
    await run(rec, world, 5)
    assert patches(fake_api) == []
    (ev,) = events(fake_api, "MalformedAnnotation")
    assert ev["type"] == "Warning" and "annotate-recommendation" in ev["message"]
    await rec.close()


async def test_dry_run_writes_nothing(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", OPT_IN)
    _, rec = make(make_ctx, kube_client, dry_run=True)
    await run(rec, world, 5)
    assert patches(fake_api) == []
    assert [o.result for _, o in rec.outcomes] in ([], ["dry_run"])
    assert KEY not in world.get("RayCluster", "rc")["metadata"]["annotations"]
    writer = KubeWriter(kube_client, None, controller_name=k.CONTROLLER, field_manager="queuepilot", dry_run=True)
    assert (await writer.annotate_raycluster("team-a", "rc", KEY, "{}", T0)).result == "dry_run"
    assert patches(fake_api) == []
    await writer.close()
    await rec.close()


async def test_the_annotation_is_pinned_to_the_resource_version_it_was_decided_on(
        fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", OPT_IN)
    setup_world(world, "rc2", OPT_IN)
    _, rec = make(make_ctx, kube_client)
    await run(rec, world, 2)
    now = T0 + STEP * 2
    snap = world.snapshot(now)  # the decision is made on this
    # meanwhile the tenant opts rc out, and KubeRay updates rc2 (its labels move its resourceVersion)
    rc = world.get("RayCluster", "rc")
    del rc["metadata"]["annotations"]["queuepilot.io/annotate-recommendation"]
    fake_api.replace(rc)
    rc2 = world.get("RayCluster", "rc2")
    rc2["metadata"]["labels"] = {"touched": "yes"}
    fake_api.replace(rc2)
    await rec.reconcile(snap, now)
    assert sorted((key, o.result) for key, o in rec.outcomes) == [("team-a/rc", "conflict"), ("team-a/rc2", "conflict")]
    assert KEY not in world.get("RayCluster", "rc")["metadata"]["annotations"]  # never written on the opted-out one
    # the next pass (not the next 5-minute step) decides again on the fresh objects
    await rec.reconcile(world.snapshot(now + 1), now + 1)
    assert [(key, o.result) for key, o in rec.outcomes] == [("team-a/rc2", "written")]
    assert KEY not in world.get("RayCluster", "rc")["metadata"]["annotations"]
    assert KEY in world.get("RayCluster", "rc2")["metadata"]["annotations"]
    await rec.reconcile(world.snapshot(now + 2), now + 2)
    assert rec.outcomes == []  # nothing left to write again


async def test_what_is_kept_per_raycluster_goes_with_it(fake_api, world, make_ctx, kube_client):
    setup_world(world, "rc", {"queuepilot.io/annotate-recommendation": "maybe"})  # malformed: warned once
    _, rec = make(make_ctx, kube_client)
    await run(rec, world, 1)
    assert set(rec._warned) == {"team-a/rc"}
    fake_api.delete(k.RAY, "RayCluster", "rc", "team-a")
    await run(rec, world, 1, start=1)
    assert rec._warned == {}
