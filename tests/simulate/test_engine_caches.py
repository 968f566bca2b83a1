"""The engine's caches (snapshot maps, worker views, utilizations, reserved index, pass events) change
nothing: at every step of a run they give what a fresh, uncached computation gives."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from simulator.baselines import WorkerView
from simulator.engine import Engine, SimConfig
from simulator.kueue import RESERVED
from simulator.metrics import IDLE_CLASSES, IDLE_UTIL
from simulator.ray import SimRayCluster, SimWorker, WorkerViews
from simulator.snapshot import SnapshotBuilder
from simulator.workload import Job, SyntheticParams, synthetic

TEAMS = ("team-a", "team-b", "team-c")


def _engine(policy: str, hours: float = 8.0, *, rightsizing: bool = True, stall_reclaim: bool = False) -> Engine:
    params = SyntheticParams(jobs_per_hour=20.0, teams=TEAMS, team_weights=(0.5, 0.3, 0.2))
    jobs = synthetic(hours, 5, 48, params).jobs
    cfg = SimConfig(nodes=5, teams=TEAMS, gpu_failure_rate=0.5, repair_mean_s=3600.0, seed=4, rightsizing=rightsizing,
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
    """The GPU signal without caches: each bound pod's utilization now (a Ray worker's task, a RayJob's
    pods' job; 0 while it starts; 1.0 at or over the stall threshold where the stall detector alone
    reads it, ``Engine.busy_utilization_from``)."""
    util = {f"{rc.namespace}/{wk.name}": wk.util(e.now) for rc in e.rays.values() for wk in rc.workers.values()}
    for name, start in e.run_start.items():
        w = e.workloads.get(name)
        if w is not None:
            t = e.now - start - e.cfg.rayjob_startup_s
            u = w.job.util_at(t) if t >= 0 else 0.0
            if e.busy_utilization_from is not None and u >= e.busy_utilization_from:
                u = 1.0  # where the stall detector alone reads it: busy
            util.update({f"{w.namespace}/{w.name}-{i}": u for i in range(w.job.pods)})
    return util


@pytest.mark.parametrize(("policy", "rightsizing", "stall"), [
    ("queuepilot-reclaim", True, False), ("hpa", True, False), ("kueue-quota", True, False),
    ("hpa", False, False), ("ray-idle", False, False), ("queuepilot-reclaim", False, False), ("queuepilot-reclaim", False, True)])
def test_cached_views_equal_fresh_ones_throughout_a_run(policy: str, rightsizing: bool, stall: bool) -> None:
    """Every cache against a builder with none, off the control interval.  Without the right-sizing
    feed a Ray worker's GPUs carry no utilization on the snapshot, and without the stall detector too
    no GPU does: the nodes, built again only when their pods, health or read utilization change,
    equal fresh ones built so."""
    e = _engine(policy, rightsizing=rightsizing, stall_reclaim=stall)
    assert e.worker_gpu_utilization is rightsizing
    assert e.busy_worker_utilization is (rightsizing or policy == "hpa")
    assert e.snapshot_utilization is (rightsizing or (stall and e.policy.baseline is None))

    def fresh_builder() -> SnapshotBuilder:
        b = SnapshotBuilder(e.cluster, e.kueue, e.policy.with_check,
                            pod_util=_fresh_pod_util(e) if e.snapshot_utilization else None)
        if e.snapshot_utilization and not e.worker_gpu_utilization:
            b.without_utilization(of=e.ray_worker_pod)
        if not e.busy_worker_utilization:
            b.busy_workers_at_mean()
        return b

    async def go() -> int:
        e.start()
        checked = 0
        t = 0.0
        while t < e.window_s:
            t += 47.0  # off the control interval: caches are read between ticks too
            await e.advance(t)
            snap = e.snapshot(e.now)
            fresh = fresh_builder()
            want = fresh.build(e.now, e.workloads.values(), e.rays.values(), e.checks_active)
            # the AdmissionCheck's resourceVersion counts the builder's own history, not a cache
            assert snap == replace(want, admission_checks=snap.admission_checks)
            for team, rc in e.rays.items():  # a baseline's worker views, as built fresh
                fresh_views = tuple(
                    WorkerView(w.name, w.ready(e.now), w.ray_busy(), w.busy(e.now),
                               w.task.util if w.task is not None and w.busy(e.now) and not e.busy_worker_utilization
                               else w.util(e.now),
                               None if w.task is not None else w.idle_since)
                    for w in sorted(rc.workers.values(), key=lambda x: x.name))
                assert e.group_view(team, e.now).workers == fresh_views
            allocated, used, idle, classes = _fresh_usage(e)
            a2, u2, cls2, _ = e.usage_classes()
            assert (a2, sum(cls2.values()), cls2) == (allocated, idle, classes)
            assert e.usage_now()[::2] == (allocated, idle)
            assert u2 == pytest.approx(used, rel=1e-12, abs=1e-9)  # RayJobs are summed incrementally
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
        return tuple((w.name, w.ready(now), w.busy(now), w.generation) for w in rc.workers_by_name())

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


@pytest.mark.parametrize("policy", ["queuepilot-reclaim", "queuepilot", "kueue-quota"])
def test_steady_holds_equal_the_full_decision_ladder_throughout_a_run(policy: str, monkeypatch) -> None:
    """Every group decision of a run whose last pass was a steady hold (``scaling.SteadyHold``) equals
    what the full ladder decides from the same history without it; the shortcut is taken often.  (The
    whole cluster's shortcut is left out here, so that every steady hold is decided by the group's.)"""
    from autoscaler.core.policy import scaling

    monkeypatch.setattr(scaling, "_steady_cluster", lambda *a: None)

    ladder = scaling._decide_group
    seen = {"decisions": 0, "steady": 0}

    def checked(case, h):
        d, h2 = ladder(case, h)
        full_d, full_h = ladder(case, replace(h, steady=None))
        assert d == full_d
        assert h2 == full_h
        seen["decisions"] += 1
        seen["steady"] += d is (h.steady.decision if h.steady is not None else None)
        return d, h2

    monkeypatch.setattr(scaling, "_decide_group", checked)
    e = _engine(policy)
    e.run()
    assert e.metrics.jobs_completed > 0
    assert seen["decisions"] > 1000
    assert seen["steady"] > seen["decisions"] // 4


@pytest.mark.parametrize("policy", ["queuepilot-reclaim", "kueue-quota"])
@pytest.mark.parametrize("rightsizing", [False, True], ids=["as benchmarked", "utilization read"])
def test_steady_clusters_equal_the_full_decision_ladder_throughout_a_run(policy: str, rightsizing: bool,
                                                                         monkeypatch) -> None:
    """Every cluster decided by its groups' steady holds at once (``scaling._steady_cluster``, no
    case per group) gets what the full ladder decides from the same history without them, decisions
    and history; the shortcut is taken often, and not always (demand, idle workers)."""
    from autoscaler.controller import scaling as controller_scaling
    from autoscaler.core.policy import scaling

    decide, shortcut = controller_scaling.decide_scaling, scaling._steady_cluster
    seen = {"clusters": 0, "steady": 0}

    def counted(*a, **kw):
        got = shortcut(*a, **kw)
        seen["steady"] += got is not None
        return got

    def checked(snapshot, cluster, defaults, history, now, **kw):
        got = decide(snapshot, cluster, defaults, history, now, **kw)
        full = decide(snapshot, cluster, defaults, {g: replace(h, steady=None) for g, h in history.items()}, now, **kw)
        assert got.decisions == full.decisions
        assert got.history == full.history
        assert got.warnings == full.warnings
        seen["clusters"] += 1
        return got

    monkeypatch.setattr(scaling, "_steady_cluster", counted)
    monkeypatch.setattr(controller_scaling, "decide_scaling", checked)
    e = _engine(policy, rightsizing=rightsizing)
    e.run()
    assert e.metrics.jobs_completed > 0
    assert seen["clusters"] > 1000
    assert seen["clusters"] // 4 < seen["steady"] < seen["clusters"]


def test_the_stall_memo_changes_no_decision_throughout_a_run(monkeypatch) -> None:
    """Every pass of the stall detector with its ``StallMemo`` (as the controller runs it) decides what
    the same pass decides without one; and the memo was of use (whole attributions and candidate lists
    found unchanged)."""
    from autoscaler.controller import stall as controller_stall
    from autoscaler.core.policy import stall

    decide = controller_stall.decide_stalls
    seen = {"passes": 0, "stalled": 0}

    def checked(snapshot, config, history, now, memo=None):
        assert memo is not None  # (the controller keeps one)
        got = decide(snapshot, config, history, now, memo)
        assert got == decide(snapshot, config, history, now)
        seen["passes"] += 1
        seen["stalled"] += len(got.stalled)
        return got

    work = {"attributed": 0, "nodes": 0}
    attributed, update = stall._attributed, stall.StallMemo._update

    def counted_attributed(node, by_name, ray_pods):
        work["attributed"] += 1
        return attributed(node, by_name, ray_pods)

    def counted_update(self, snapshot, candidates, limit):
        work["nodes"] += len(snapshot.nodes)
        return update(self, snapshot, candidates, limit)

    monkeypatch.setattr(controller_stall, "decide_stalls", checked)
    monkeypatch.setattr(stall, "_attributed", counted_attributed)
    monkeypatch.setattr(stall.StallMemo, "_update", counted_update)
    e = _engine("queuepilot-reclaim", 24.0, rightsizing=False, stall_reclaim=True)
    e.run()
    assert seen["passes"] > 1000 and seen["stalled"] > 0
    # the memo's passes attributed some nodes again (they moved), far from all of them at every pass
    # (the passes without the memo, in ``checked``, attribute every node: counted here too)
    memo_attributed = work["attributed"] - work["nodes"]
    assert 0 < memo_attributed < work["nodes"] // 2, work
