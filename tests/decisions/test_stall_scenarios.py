"""The stalled-workload detector through the fake API server with the real kubernetes-asyncio client:
the Warning Event once per stall and the per-ClusterQueue gauge by default; with the opt-in, a merge
patch ``spec.active: false`` validated by Kueue's Workload CRD, pinned to the snapshot's
resourceVersion (a 409 is decided again on the next pass), held back after a failure, and only once
the stall has lasted ``stall.deactivate_after`` (most tests set it to the window; one keeps the 2 h
default); dry-run writes nothing."""

from __future__ import annotations

import json

import pytest

from autoscaler.controller.stall import StallReconciler
from autoscaler.core import reasons as R
from autoscaler.rbac import CONTROLLER_API_CALLS
from tests.decisions import kube_world as k
from tests.decisions.scenarios import T0, base_world, events, sample

WINDOW = 1800.0
# deactivating a stalled Workload needs ``patch`` on kueue.x-k8s.io workloads (the object, not its status)
DEACTIVATE_CALL = ("kueue.x-k8s.io", "workloads", "patch")
# deactivated as soon as it is reported: the delay set to the window
OPT_IN = {"stall": {"deactivate_cluster_queues": ["cq-a"], "deactivate_after": "30m"}}
DELAY = 7200.0  # the default stall.deactivate_after


def admitted_job(world, name="train", pods=2, at=T0 - 100, workload=None):
    """A Job's Workload (``job-<name>``, or ``workload``: a job created again) admitted in cq-a, its pods
    running on n0 with one GPU each (already there for a job created again under the same name)."""
    wl = workload or f"job-{name}"
    world.add(k.workload(wl, pod_sets=(("main", pods, 1),), owner=("Job", name)),
              *(() if workload else (k.pod(f"{name}-{i}x{i}", "team-a", "n0", gpus=1) for i in range(pods))))
    world.reserve(wl, "cq-a", {"main": "a100"}, at)
    w = world.get("Workload", wl)
    w["status"]["admissionChecks"][0]["state"] = "Ready"
    world.api.update_status(w)
    assert world.kueue_react(at) == [(wl, "admitted")]


def workload_patches(fake_api):
    return [r for r in fake_api.requests if r.resource == "workloads" and r.verb == "patch"]


async def test_a_stalled_workload_gets_one_warning_and_the_gauge(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    admitted_job(world, "busy", pods=1)
    world.gpu_util[("team-a", "busy-0x0")] = 0.6
    ctx = make_ctx()
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)  # the timer starts
    await rec.reconcile(world.snapshot(T0 + WINDOW - 1), T0 + WINDOW - 1)
    assert sample(ctx.registry, "queuepilot_stalled_workloads", {"cluster_queue": "cq-a"}) == 0
    for t in (T0 + WINDOW, T0 + WINDOW + 60, T0 + WINDOW + 120):
        await rec.reconcile(world.snapshot(t), t)
    assert sample(ctx.registry, "queuepilot_stalled_workloads", {"cluster_queue": "cq-a"}) == 1
    assert sample(ctx.registry, "queuepilot_stalled_workload_gpus", {"cluster_queue": "cq-a"}) == 2
    assert ctx.registry.get_sample_value("queuepilot_stalled_workloads", {"cluster_queue": "cq-b"}) == 0
    await rec.writer.events.drain()
    evs = [e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD]
    assert len(evs) == 1  # once per stall, not every pass
    name, type_, _, message = evs[0]
    assert (name, type_) == ("job-train", "Warning")
    assert "all 2 GPU(s) under 5%" in message and "cq-a" in message and "30m" in message
    assert not workload_patches(fake_api)  # reporting only by default
    # the job computes again: the gauge drops; a later stall is reported again
    world.gpu_util[("team-a", "train-0x0")] = 0.4
    await rec.reconcile(world.snapshot(T0 + 2000), T0 + 2000)
    assert sample(ctx.registry, "queuepilot_stalled_workloads", {"cluster_queue": "cq-a"}) == 0
    world.gpu_util[("team-a", "train-0x0")] = 0.0
    for t in (T0 + 2100, T0 + 2100 + WINDOW):
        await rec.reconcile(world.snapshot(t), t)
    await rec.writer.events.drain()
    assert len([e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD]) == 2
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
    await rec.close()


async def test_opted_in_the_workload_is_deactivated_so_kueue_releases_its_quota(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings=OPT_IN)
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    before = world.get("Workload", "job-train")
    await rec.reconcile(world.snapshot(T0 + WINDOW), T0 + WINDOW)
    assert [o.result for _, o in rec.outcomes] == ["written"]
    # the owner is remembered (stall.remember_owners): a job created again under its name is held
    (owner,) = rec.owners.items()
    assert owner == ("team-a/Job/train", T0 + WINDOW)
    after = world.get("Workload", "job-train")
    assert after["spec"]["active"] is False  # accepted by the Workload CRD's schema
    assert after["spec"]["podSets"] == before["spec"]["podSets"]  # nothing else touched
    assert after["status"]["conditions"] == before["status"]["conditions"]  # Kueue's conditions are Kueue's
    (patch,) = workload_patches(fake_api)
    assert patch.method == "PATCH" and "status" not in patch.path
    assert sample(ctx.registry, "queuepilot_stall_deactivations_total", {"cluster_queue": "cq-a", "mode": "live"}) == 1
    assert sample(ctx.registry, "queuepilot_writes_total", {"resource": "workloads", "verb": "patch"}) == 1
    # the next pass sees spec.active false: no second write
    await rec.reconcile(world.snapshot(T0 + WINDOW + 30), T0 + WINDOW + 30)
    assert len(workload_patches(fake_api)) == 1
    await rec.writer.events.drain()
    reasons = sorted((e[1], e[2]) for e in events(fake_api) if e[0] == "job-train")
    assert reasons == [("Warning", R.STALLED_WORKLOAD), ("Warning", R.STALLED_WORKLOAD_DEACTIVATED)]
    text = next(e[3] for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD_DEACTIVATED)
    assert "spec.active: false" in text and "releases its quota" in text and "spec.active: true" in text
    assert "every GPU idle for 30m" in text  # how long
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS | {DEACTIVATE_CALL}
    await rec.close()


async def test_a_workload_changed_since_the_snapshot_is_decided_again(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings=OPT_IN)
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    snap = world.snapshot(T0 + WINDOW)
    w = world.get("Workload", "job-train")  # Kueue writes its status between our snapshot and our patch
    w["status"]["conditions"][0]["message"] = "changed"
    world.api.update_status(w)
    await rec.reconcile(snap, T0 + WINDOW)
    assert [o.result for _, o in rec.outcomes] == ["conflict"] and not rec.owners  # not deactivated: not remembered
    assert world.get("Workload", "job-train")["spec"].get("active", True) is True
    await rec.reconcile(world.snapshot(T0 + WINDOW + 10), T0 + WINDOW + 10)
    assert [o.result for _, o in rec.outcomes] == ["written"]
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    await rec.close()


async def test_a_failing_write_is_backed_off_then_retried(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings=OPT_IN)
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    fake_api.fail_next(1, status=500, path_contains="/workloads/job-train", method="PATCH")
    t = T0 + WINDOW
    await rec.reconcile(world.snapshot(t), t)
    assert [o.result for _, o in rec.outcomes] == ["error"]
    await rec.reconcile(world.snapshot(t + 0.1), t + 0.1)  # inside the backoff: no request
    assert [(o.result, o.detail) for _, o in rec.outcomes] == [("skipped", "backoff")]
    assert len(workload_patches(fake_api)) == 1
    await rec.reconcile(world.snapshot(t + 120), t + 120)
    assert [o.result for _, o in rec.outcomes] == ["written"]
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    assert sample(ctx.registry, "queuepilot_write_errors_total", {"resource": "workloads", "kind": "server"}) == 1
    await rec.close()


async def test_dry_run_reports_the_would_be_deactivation_and_writes_nothing(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(dry_run=True, settings=OPT_IN)
    rec = StallReconciler(ctx)
    for t in (T0, T0 + WINDOW, T0 + WINDOW + 30, T0 + WINDOW + 60):
        await rec.reconcile(world.snapshot(t), t)
    assert not workload_patches(fake_api) and not rec.owners
    assert world.get("Workload", "job-train")["spec"].get("active", True) is True
    assert sample(ctx.registry, "queuepilot_stall_deactivations_total",
                  {"cluster_queue": "cq-a", "mode": "dry_run"}) == 1
    await rec.writer.events.drain()
    evs = [e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD_DEACTIVATED]
    assert len(evs) == 1 and evs[0][1] == "Normal" and "(dry-run) would deactivate" in evs[0][3]
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
    await rec.close()


async def test_a_namespace_opt_in_and_a_stale_gpu_signal(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings={"stall": {"deactivate_namespaces": ["team-a"], "window": "10m", "deactivate_after": "10m"}})
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + 600, gpu_fresh=False), T0 + 600)  # no verdict on stale data
    assert not workload_patches(fake_api) and rec.history == {}
    await rec.reconcile(world.snapshot(T0 + 700), T0 + 700)  # the timer starts over
    await rec.reconcile(world.snapshot(T0 + 1299), T0 + 1299)
    assert not workload_patches(fake_api)
    await rec.reconcile(world.snapshot(T0 + 1300), T0 + 1300)
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    await rec.close()


async def test_with_the_default_delay_a_stall_is_reported_at_the_window_and_deactivated_only_at_2h(
        fake_api, world, make_ctx):
    """Report early, act late: opted in with the default stall.deactivate_after (2 h), a stall that
    ends between the window and the delay is reported but never deactivated; the next stall is timed
    from its own start and deactivated 2 h into it."""
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings={"stall": {"deactivate_cluster_queues": ["cq-a"]}})
    rec = StallReconciler(ctx)
    assert rec.config.deactivate_after_seconds == DELAY
    for t in (T0, T0 + WINDOW, T0 + 3600, T0 + DELAY - 60):
        await rec.reconcile(world.snapshot(t), t)
    assert sample(ctx.registry, "queuepilot_stalled_workloads", {"cluster_queue": "cq-a"}) == 1  # reported
    assert not workload_patches(fake_api)  # not deactivated before the delay
    await rec.writer.events.drain()
    (report,) = [e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD]
    assert "will be deactivated (spec.active: false) at 2h idle" in report[3]
    assert "(in 1h30m), unless a GPU gets busy" in report[3]
    # a GPU gets busy (evaluation over, training goes on): the stall ends before the delay
    world.gpu_util[("team-a", "train-0x0")] = 0.5
    await rec.reconcile(world.snapshot(T0 + DELAY - 30), T0 + DELAY - 30)
    world.gpu_util[("team-a", "train-0x0")] = 0.0
    restart = T0 + DELAY
    for t in (restart, restart + 60, restart + WINDOW, restart + DELAY - 1):
        await rec.reconcile(world.snapshot(t), t)
    assert not workload_patches(fake_api)  # the first stall's due time passed: nothing
    assert world.get("Workload", "job-train")["spec"].get("active", True) is True
    assert sample(ctx.registry, "queuepilot_stall_deactivations_total", {"cluster_queue": "cq-a", "mode": "live"}) == 0
    await rec.reconcile(world.snapshot(restart + DELAY), restart + DELAY)
    assert [o.result for _, o in rec.outcomes] == ["written"]
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    await rec.reconcile(world.snapshot(restart + DELAY + 30), restart + DELAY + 30)
    assert len(workload_patches(fake_api)) == 1  # once per stall
    await rec.writer.events.drain()
    assert len([e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD]) == 2  # each stall reported
    (done,) = [e for e in events(fake_api) if e[2] == R.STALLED_WORKLOAD_DEACTIVATED]
    assert done[1] == "Warning" and "every GPU idle for 2h" in done[3] and "deactivating it" in done[3]
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS | {DEACTIVATE_CALL}
    await rec.close()


async def test_the_gauge_series_of_a_cluster_queue_go_with_it_and_come_back_with_it(fake_api, world, make_ctx):
    # the gauges are set only when their value moved: a ClusterQueue that goes and comes back must
    # still get its series again, with the value of the pass it is back in
    base_world(world)
    admitted_job(world)  # stalls in cq-a from T0
    ctx = make_ctx()
    rec = StallReconciler(ctx)
    get = ctx.registry.get_sample_value
    await rec.reconcile(world.snapshot(T0), T0)
    assert get("queuepilot_stalled_workloads", {"cluster_queue": "cq-b"}) == 0
    cq_b = world.get("ClusterQueue", "cq-b")
    world.api.delete(cq_b["apiVersion"], "ClusterQueue", "cq-b")
    await rec.reconcile(world.snapshot(T0 + 30), T0 + 30)
    assert get("queuepilot_stalled_workloads", {"cluster_queue": "cq-b"}) is None  # gone with its queue
    assert get("queuepilot_stalled_workload_gpus", {"cluster_queue": "cq-b"}) is None
    world.add(k.cluster_queue("cq-b", {"a100": 64}))
    await rec.reconcile(world.snapshot(T0 + 60), T0 + 60)
    assert get("queuepilot_stalled_workloads", {"cluster_queue": "cq-b"}) == 0  # back, with its value
    assert get("queuepilot_stalled_workload_gpus", {"cluster_queue": "cq-b"}) == 0
    # the stalled job's queue, through the same passes: set when its value moved, kept when it did not
    for t in (T0 + WINDOW, T0 + WINDOW + 30):
        await rec.reconcile(world.snapshot(t), t)
        assert get("queuepilot_stalled_workloads", {"cluster_queue": "cq-a"}) == 1
        assert get("queuepilot_stalled_workload_gpus", {"cluster_queue": "cq-a"}) == 2


STORE = ("default", "qp-stall-owners")  # the owner memory's ConfigMap (--stall-owners-configmap)


async def _deactivate_then_recreate(world, make_ctx, store):
    """A job deactivated by one process; a second process (a restart, another replica) with ``store``
    then meets the job created again under the same name, idle as before: its reconciler."""
    base_world(world)
    admitted_job(world)
    first = make_ctx(settings=OPT_IN)
    first.stall_owners = store
    rec = StallReconciler(first)
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + WINDOW), T0 + WINDOW)
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    await rec.close()
    t = T0 + WINDOW + 300
    admitted_job(world, at=t, workload="job-train-2")  # re-applied: a new Workload, no Kueue history
    ctx = make_ctx(settings=OPT_IN)
    ctx.stall_owners = store
    again = StallReconciler(ctx)
    for now in (t + 10, t + 10 + WINDOW):
        await again.reconcile(world.snapshot(now), now)
    return again


async def test_the_owner_memory_is_kept_in_its_configmap_across_a_restart(fake_api, world, make_ctx):
    rec = await _deactivate_then_recreate(world, make_ctx, STORE)
    cm = world.api.get("v1", "ConfigMap", STORE[1], STORE[0])
    assert json.loads(cm["data"]["owners.json"]) == {"team-a/Job/train": T0 + WINDOW}
    assert cm["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "queuepilot"
    assert rec.owners == {"team-a/Job/train": T0 + WINDOW}  # read back by the new process
    (s,) = rec.result.stalled
    assert not s.deactivate and "Job train created again after a deactivation" in s.held
    assert world.get("Workload", "job-train-2")["spec"].get("active", True) is True
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
    await rec.close()


async def test_without_the_configmap_a_restart_forgets_and_kills_the_job_again(fake_api, world, make_ctx):
    """The control: memory only (``--stall-owners-configmap ''``), the new process deactivates it."""
    rec = await _deactivate_then_recreate(world, make_ctx, None)
    assert world.get("Workload", "job-train-2")["spec"]["active"] is False
    (s,) = rec.result.stalled
    assert s.deactivate and not s.held
    assert list(rec.owners) == ["team-a/Job/train"] and rec.owners["team-a/Job/train"] > T0 + WINDOW  # anew
    assert not world.api.list("v1", "ConfigMap")
    await rec.close()


async def test_deactivations_wait_until_the_memory_can_be_read(fake_api, world, make_ctx):
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings=OPT_IN)
    ctx.stall_owners = STORE
    rec = StallReconciler(ctx)
    fake_api.fail_next(2, status=500, path_contains="/configmaps/", method="GET")
    await rec.reconcile(world.snapshot(T0), T0)
    await rec.reconcile(world.snapshot(T0 + WINDOW), T0 + WINDOW)  # due, but the memory cannot be read
    assert not workload_patches(fake_api) and rec.result.stalled[0].deactivate
    assert sample(ctx.registry, "queuepilot_write_errors_total", {"resource": "configmaps", "kind": "server"}) == 2
    await rec.reconcile(world.snapshot(T0 + WINDOW + 120), T0 + WINDOW + 120)  # read (none yet): it goes
    assert world.get("Workload", "job-train")["spec"]["active"] is False
    await rec.close()


@pytest.mark.parametrize("text", ['["team-a/Job/train"]', "{not json", '{"team-a/Job/x": "soon", "bad": 1, "a/b/c": 5}'])
async def test_a_malformed_memory_is_counted_and_written_anew(fake_api, world, make_ctx, text):
    base_world(world)
    admitted_job(world)
    world.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STORE[1], "namespace": STORE[0]},
               "data": {"owners.json": text}})
    ctx = make_ctx(settings=OPT_IN)
    ctx.stall_owners = STORE
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)
    assert sample(ctx.registry, "queuepilot_source_errors_total", {"source": "stall_owners", "kind": "malformed"}) == 1
    kept_before = {"a/b/c": 5.0} if text.startswith('{"') else {}
    assert rec.owners == kept_before  # what could be read is kept (and pruned later), the rest left out
    await rec.reconcile(world.snapshot(T0 + WINDOW), T0 + WINDOW)
    cm = world.api.get("v1", "ConfigMap", STORE[1], STORE[0])
    assert "team-a/Job/train" in json.loads(cm["data"]["owners.json"])
    await rec.close()


async def test_what_another_replica_kept_meanwhile_is_merged_and_the_expired_dropped(fake_api, world, make_ctx):
    """During a Lease handover two replicas may both write: the write merges into what it reads, pinned to
    that version, so neither drops the other's owner; an owner older than stall.remember_owners goes."""
    base_world(world)
    admitted_job(world)
    ctx = make_ctx(settings=OPT_IN)
    ctx.stall_owners = STORE
    rec = StallReconciler(ctx)
    await rec.reconcile(world.snapshot(T0), T0)  # read: nothing kept yet
    week = 7 * 86400.0
    world.add({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": STORE[1], "namespace": STORE[0]},
               "data": {"owners.json": json.dumps({"team-b/RayJob/other": T0 + 5, "team-c/Job/old": T0 - week})}})
    # and a write that meets a newer version (409) reads again and merges again
    fake_api.fail_next(1, status=409, path_contains="/configmaps/", method="PATCH")
    await rec.reconcile(world.snapshot(T0 + WINDOW), T0 + WINDOW)
    assert [o.result for _, o in rec.outcomes] == ["written"]
    cm = world.api.get("v1", "ConfigMap", STORE[1], STORE[0])
    assert json.loads(cm["data"]["owners.json"]) == {"team-a/Job/train": T0 + WINDOW, "team-b/RayJob/other": T0 + 5}
    applies = [r for r in fake_api.requests if r.resource == "configmaps" and r.method == "PATCH"]
    assert len(applies) == 2 and sample(ctx.registry, "queuepilot_writes_total",
                                        {"resource": "configmaps", "verb": "apply"}) == 1
    await rec.close()
