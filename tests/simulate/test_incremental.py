"""The simulator's incremental structures change nothing: at every step of a run the snapshot's inputs
(the world's views, the GPU reading by changed node, Ray's status by changed worker), a baseline's
worker views, the accounting ledger and the reserved-workload index give what a fresh computation
gives."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from simulator.baselines import WorkerView
from simulator.engine import Engine, SimConfig
from simulator.kueue import RESERVED
from simulator.metrics import IDLE_CLASSES, IDLE_UTIL
from simulator.ray import SimRayCluster, SimWorker, WorkerViews
from simulator.snapshot import SimSnapshotBuilder
from simulator.workload import Job, SyntheticParams, synthetic

TEAMS = ("team-a", "team-b", "team-c")


def _engine(policy: str, hours: float = 8.0, *, stall_reclaim: bool = False) -> Engine:
    params = SyntheticParams(jobs_per_hour=20.0, teams=TEAMS, team_weights=(0.5, 0.3, 0.2))
    jobs = synthetic(hours, 5, 48, params).jobs
    cfg = SimConfig(nodes=5, teams=TEAMS, gpu_failure_rate=0.5, repair_mean_s=3600.0, seed=4,
                    stall_reclaim=stall_reclaim)
    return Engine(jobs, hours * 3600.0, policy, cfg)


def _fresh_usage(e: Engine) -> tuple[int, float, int, dict[str, int]]:
    """``usage_classes`` without caches: every worker and RayJob looked at now (allocated, used, idle,
    idle by class)."""
    allocated = sum(len(v) for v in e.cluster.pod_gpus.values())
    used, idle = 0.0, 0
    classes = dict.fromkeys(IDLE_CLASSES, 0)
    for rc in e.rays.values():
        for wk in rc.workers.values():
            u = wk.util(e.now)
            used += u
            idle += u < IDLE_UTIL
            if not wk.ready(e.now):
                classes["starting"] += 1
            elif wk.task is None:
                classes["empty"] += 1
            elif e.now >= wk.busy_until:
                classes["idle_actor"] += 1
            elif u < IDLE_UTIL:
                ph = wk.task.phase_at(e.now - wk.started())
                classes[{"stalled": "stalled", "starting": "starting"}.get(ph, "in_job")] += 1
    for name, start in e.run_start.items():
        w = e.workloads.get(name)
        if w is None:
            continue
        t = e.now - start - e.cfg.rayjob_startup_s
        u = w.job.util_at(t) if t >= 0 else 0.0
        used += u * w.gpus
        if u < IDLE_UTIL:
            idle += w.gpus
            ph = w.job.phase_at(t) if t >= 0 else "starting"
            classes[{"stalled": "stalled", "starting": "starting"}.get(ph, "in_job")] += w.gpus
    return allocated, used, idle, classes


def _fresh_pod_util(e: Engine) -> dict[str, float]:
    """The GPU signal without the ledger: each bound pod's utilization now (a Ray worker's task, a
    RayJob's pods' job; 0 while it starts)."""
    util = {f"{rc.namespace}/{wk.name}": wk.util(e.now) for rc in e.rays.values() for wk in rc.workers.values()}
    for name, start in e.run_start.items():
        w = e.workloads.get(name)
        if w is not None:
            t = e.now - start - e.cfg.rayjob_startup_s
            u = w.job.util_at(t) if t >= 0 else 0.0
            util.update({f"{w.namespace}/{w.name}-{i}": u for i in range(w.job.pods)})
    return util


@pytest.mark.parametrize(("policy", "stall"), [("queuepilot-reclaim", False), ("hpa", False), ("kueue-quota", False),
                                               ("ray-idle", False), ("queuepilot-reclaim", True)])
def test_incremental_views_equal_fresh_ones_throughout_a_run(policy: str, stall: bool) -> None:
    """Every incremental structure against a fresh one, off the control interval."""
    e = _engine(policy, stall_reclaim=stall)

    async def go() -> int:
        e.start()
        checked = 0
        t = 0.0
        while t < e.window_s:
            t += 47.0  # off the control interval: read between ticks too
            await e.advance(t)
            snap = e.snapshot(e.now)
            fresh = SimSnapshotBuilder(e, e.cluster, e.kueue, e.policy.with_check, _fresh_pod_util(e))
            want = fresh.build(e.now)
            # the AdmissionCheck's resourceVersion counts the builder's own history
            assert snap == replace(want, admission_checks=snap.admission_checks)
            for team, rc in e.rays.items():  # a baseline's worker views, as built fresh
                fresh_views = tuple(
                    WorkerView(w.name, w.ready(e.now), w.ray_busy(), w.busy(e.now), w.util(e.now),
                               None if w.task is not None else w.idle_since)
                    for w in sorted(rc.workers.values(), key=lambda x: x.name))
                assert e.group_view(team, e.now).workers == fresh_views
            allocated, used, idle, classes = _fresh_usage(e)
            a2, u2, cls2, _ = e.usage_classes()
            assert (a2, sum(cls2.values()), cls2) == (allocated, idle, classes)
            assert e.usage_now()[::2] == (allocated, idle)
            assert u2 == pytest.approx(used, rel=1e-12, abs=1e-9)  # summed incrementally
            assert e.kueue.any_reserved() == any(w.state == RESERVED for w in e.workloads.values())
            checked += 1
        return checked

    assert asyncio.run(go()) > 500
    assert e.metrics.jobs_completed > 0


def test_worker_views_look_again_only_at_touched_and_flipped_workers() -> None:
    """``WorkerViews`` by hand: the views are in pod-name order and equal a fresh look at every worker;
    a worker is looked at again only when touched or when its ready/busy state flips with time (at
    that time, not before); a gone worker leaves; with nothing changed the tuple is the same object."""
    rc = SimRayCluster("team-a", "cq-team-a", "a100", 0, 8, 0, 90.0)
    looked: list[str] = []

    def view(w: SimWorker, now: float) -> tuple[str, bool, bool, int]:
        looked.append(w.name)
        return (w.name, w.ready(now), w.busy(now), w.generation)

    def fresh(now: float) -> tuple[tuple[str, bool, bool, int], ...]:
        return tuple((w.name, w.ready(now), w.busy(now), w.generation) for w in sorted(rc.workers.values(), key=lambda x: x.name))

    for name, ready_at in (("w-2", 90.0), ("w-1", 50.0)):
        rc.workers[name] = SimWorker(name, 0.0, ready_at)
    views = WorkerViews(rc, view)
    first = views.at(0.0)
    assert first == fresh(0.0) and [v[0] for v in first] == ["w-1", "w-2"] and sorted(looked) == ["w-1", "w-2"]
    looked.clear()
    assert views.at(49.0) is first and not looked  # nothing touched, no flip due yet
    assert views.at(50.0) == fresh(50.0) and looked == ["w-1"]  # w-1 turns ready at 50 s
    looked.clear()
    w2 = rc.workers["w-2"]
    w2.task = Job(1, "team-a", 0.0, 100.0, 1, 0.5)
    w2.busy_until, w2.generation = 200.0, 1
    rc.touch("w-2")  # bound to a task (ready at 90 s, busy until 200 s)
    assert views.at(60.0) == fresh(60.0) and looked == ["w-2"]
    looked.clear()
    assert views.at(90.0) == fresh(90.0) and looked == ["w-2"]  # ready
    looked.clear()
    kept = views.at(199.0)
    assert kept == fresh(199.0) and not looked
    assert views.at(200.0) == fresh(200.0) and looked == ["w-2"]  # its work ends: busy flips
    looked.clear()
    del rc.workers["w-1"]
    rc.touch("w-1")
    rc.workers["w-0"] = SimWorker("w-0", 300.0, 390.0)
    rc.touch("w-0")
    assert views.at(300.0) == fresh(300.0) and [v[0] for v in views.at(300.0)] == ["w-0", "w-2"]
    assert sorted(looked) == ["w-0"]  # the gone one is dropped without a look


def test_one_pass_event_per_time() -> None:
    """Requesting a pass for a time that already has one queued adds no second event."""
    e = _engine("queuepilot", 1.0)
    e.now = 10.0
    e.request_pass(20.0)
    e.request_pass(15.0)  # earlier: queued as well
    e._pass_at = None  # as after the pass at 15 s ran...
    e._pass_queued.discard(15.0)
    e.request_pass(20.0)  # ...and it asks again for the one at 20 s, which is still queued
    passes = sorted(ev.t for ev in e.heap if ev.kind == "pass")
    assert passes == [15.0, 20.0]
