"""``KubeWriter.deactivate_workload`` through the real kubernetes-asyncio client against the fake API
server: the merge patch sets only ``spec.active``; dry-run and a writer without a client send
nothing; a refused write is backed off per object and shows in the backoff gauge; a deleted
Workload is ``gone`` without backoff."""

from __future__ import annotations

import random

from autoscaler.act.guard import BackoffPolicy
from autoscaler.act.kube_writer import KubeWriter
from autoscaler.act.workload_deactivate import deactivation_patch
from autoscaler.core.policy.stall import StalledWorkload
from tests.decisions import kube_world as k

T0 = 100_000.0


def stalled(world, name: str = "w") -> StalledWorkload:
    w = world.get("Workload", name)
    md = w["metadata"]
    return StalledWorkload(namespace="team-a", name=name, uid=md["uid"], resource_version=md["resourceVersion"],
                           cluster_queue="cq-a", owner_kind="Job", owner_name=name, gpus=8, stalled_for=1800.0,
                           new=True, deactivate=True, reason="StalledWorkloadDeactivated", message="stalled")


def make_writer(ctx, client, dry_run: bool = False) -> KubeWriter:
    return KubeWriter(client, ctx.counters, controller_name=k.CONTROLLER, field_manager="queuepilot",
                      dry_run=dry_run, backoff=BackoffPolicy(), rng=random.Random(3))


def patches(fake_api) -> list:
    return [r for r in fake_api.requests if r.resource == "workloads" and r.method == "PATCH"]


def test_the_patch_is_spec_active_false_pinned_to_the_version():
    s = StalledWorkload("ns", "w", "u", "42", "cq", "Job", "w", 1, 1.0, True, True, "r", "m")
    assert deactivation_patch(s) == {"metadata": {"resourceVersion": "42"}, "spec": {"active": False}}


async def test_written_once_and_nothing_in_dry_run(fake_api, world, make_ctx, kube_client):
    world.add(k.workload("w"))
    ctx = make_ctx()
    s = stalled(world)
    assert (await make_writer(ctx, kube_client, dry_run=True).deactivate_workload(s, T0)).result == "dry_run"
    assert (await make_writer(ctx, None).deactivate_workload(s, T0)).result == "dry_run"
    assert not patches(fake_api) and world.get("Workload", "w")["spec"].get("active", True) is True
    out = await make_writer(ctx, kube_client).deactivate_workload(s, T0)
    assert out.result == "written" and world.get("Workload", "w")["spec"]["active"] is False
    (req,) = patches(fake_api)
    assert req.verb == "patch" and req.group == "kueue.x-k8s.io"


async def test_refused_is_backed_off_and_gone_is_not(fake_api, world, make_ctx, kube_client):
    world.add(k.workload("w"), k.workload("x"))
    ctx = make_ctx()
    writer = make_writer(ctx, kube_client)
    rule = fake_api.refuse_writes(403, resource="workloads", name="w")
    s = stalled(world)
    assert (await writer.deactivate_workload(s, T0)).result == "error"
    assert ctx.registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "workloads"}) == 1
    out = await writer.deactivate_workload(s, T0 + 1)
    assert (out.result, out.detail) == ("skipped", "backoff") and len(patches(fake_api)) == 1
    rule.cancel()
    assert (await writer.deactivate_workload(stalled(world), T0 + 700)).result == "written"
    assert ctx.registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "workloads"}) == 0
    gone = stalled(world, "x")
    fake_api.delete(k.KUEUE, "Workload", "x", "team-a")
    out = await writer.deactivate_workload(gone, T0 + 701)
    assert (out.result, out.detail) == ("skipped", "gone")
    await writer.close()
