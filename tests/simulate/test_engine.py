"""Simulator invariants and Kueue semantics on small runs."""

from __future__ import annotations

import asyncio

import pytest

from simulator.cluster import SimCluster
from simulator.engine import POLICIES, Engine, SimConfig
from simulator.kueue import RESERVED, SimClusterQueue, SimKueue, SimWorkload
from simulator.utilization import PhasedProfile
from simulator.workload import Job, SyntheticParams, synthetic

TEAMS = ("team-a", "team-b", "team-c")


def _small_jobs(hours: float = 12.0, seed: int = 3):
    params = SyntheticParams(jobs_per_hour=14.0, teams=TEAMS, team_weights=(0.5, 0.3, 0.2))
    return synthetic(hours, seed, 48, params).jobs


@pytest.mark.parametrize("policy", POLICIES)
def test_invariants_hold_every_tick(policy):
    """GPUs conserved, nothing runs unadmitted, quota within nominal + borrowing: checked each tick."""
    jobs = _small_jobs()
    cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.5, repair_mean_s=3600.0, check_invariants=True, seed=2)
    e = Engine(jobs, 12 * 3600.0, policy, cfg)
    m = e.run()
    e.check_invariants()
    assert m.jobs_submitted == len([j for j in jobs if j.submit < 12 * 3600])
    assert m.gpu_failures > 0  # the failure path was exercised
    assert 0 < m.jobs_completed <= m.jobs_submitted
    assert 0.0 < m.used_gpu_s <= m.allocated_gpu_s
    # every submitted job either started (one wait each) or still waits at the end (censored wait)
    started_or_waiting = len(m.waits)
    assert started_or_waiting >= m.jobs_completed


def test_cluster_place_is_all_or_nothing():
    c = SimCluster({"a100": 2}, 8)
    assert c.place("a100", [("ns/p0", 8), ("ns/p1", 6)])
    assert not c.place("a100", [("ns/q0", 2), ("ns/q1", 2)])  # 2 free in all: the gang does not fit
    assert c.allocated_gpus() == 14
    c.fail(c.nodes[1], 7)  # the last free GPU goes bad
    assert c.free_gpus("a100") == 1 and not c.fits("a100", [2])
    c.release("ns/p0")
    assert c.free_blocks("a100") == [8, 1]
    c.check()


def _wl(job_id: int, gpus: int, cq: str, t: float) -> SimWorkload:
    return SimWorkload(Job(job_id, cq, t, 100.0, gpus, 0.5), cq, created=t, queue_ts=t)


def test_borrowing_within_cohort_and_limit():
    k = SimKueue([SimClusterQueue("a", "c", {"f": 4.0}, {"f": None}, {}), SimClusterQueue("b", "c", {"f": 4.0}, {"f": 1.0}, {})])
    assert k.fits("a", "f", 6)  # borrows 2 of b's unused 4
    assert not k.fits("b", "f", 6)  # b may borrow at most 1
    assert k.fits("b", "f", 5)
    k.reserve("a", "f", 6)
    assert not k.fits("b", "f", 3)  # the cohort has 2 left
    assert k.headroom("b", "f") == 2
    k.check()


def test_best_effort_fifo_does_not_block_younger_workloads():
    k = SimKueue([SimClusterQueue("a", "c", {"f": 8.0}, {"f": None}, {})])
    k.reserve("a", "f", 4)
    big, small = _wl(1, 8, "a", 0.0), _wl(2, 2, "a", 1.0)
    k.submit(big)
    k.submit(small)
    got = k.schedule(10.0, ("f",))
    assert got == [small] and small.state == RESERVED and big in k.pending


def test_retry_requeues_after_backoff():
    k = SimKueue([SimClusterQueue("a", "c", {"f": 8.0}, {"f": None}, {})])
    w = _wl(1, 4, "a", 0.0)
    k.submit(w)
    assert k.schedule(0.0, ("f",)) == [w]
    k.requeue(w, 5.0, 60.0)  # Retry: quota released, back after 60 s
    assert k.cqs["a"].usage["f"] == 0.0
    assert k.schedule(30.0, ("f",)) == []
    assert k.schedule(65.0, ("f",)) == [w]


def _failed_gpu_engine(policy: str) -> Engine:
    cfg = SimConfig(nodes=1, teams=("team-a",), check_invariants=True)
    e = Engine([Job(0, "team-a", 10.0, 300.0, 8, 0.5)], 900.0, policy, cfg)
    e.cluster.fail(e.cluster.nodes[0], 3)  # XID 79 on one of the node's 8 GPUs
    return e


def test_kueue_quota_admits_unplaceable_workload_and_queuepilot_does_not():
    """8 GPUs of quota, 7 healthy: quota alone admits the 8-GPU job, whose pod cannot be bound."""
    m = _failed_gpu_engine("kueue-quota").run()
    assert m.unplaceable_admissions == 1
    assert m.unplaceable_s == pytest.approx(900.0 - 10.0 - SimConfig().pass_delay_s)
    q = _failed_gpu_engine("queuepilot").run()
    assert q.unplaceable_admissions == 0 and q.unplaceable_s == 0.0
    assert q.retries >= 1  # the check said Retry (InsufficientGpus) and Kueue requeued it


def test_queuepilot_runs_the_controllers_reconcilers_through_the_sim_writer():
    """The engine's queuepilot is the controller's AdmissionReconciler and ScalingReconciler, acting
    through the SimWriter: their counters, Events and explanations are the controller's."""
    from autoscaler.controller.admission import AdmissionReconciler
    from autoscaler.controller.scaling import ScalingReconciler
    from simulator.writer import SimWriter

    e = Engine(_small_jobs(6.0), 6 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS, stall_report=True))
    m = e.run()
    assert isinstance(e.admission, AdmissionReconciler) and isinstance(e.scaling, ScalingReconciler)
    assert isinstance(e.admission.writer, SimWriter) and e.scaling.writer is e.admission.writer
    reg = e.context.registry
    # every Ready the controller counted admitted a workload in the simulated Kueue, and nothing else did
    ready = _total(reg, "queuepilot_admission_decisions", state="Ready")
    rayjobs = sum(1 for j in e.jobs if j.kind != "task" and j.submit < 6 * 3600)
    assert ready == rayjobs - sum(1 for w in e.workloads.values() if w.state in ("pending", "reserved")) > 0
    # each Ready and each Retry the controller counted is one status write, and there is no other
    retry = _total(reg, "queuepilot_admission_decisions", state="Retry")
    assert _total(reg, "queuepilot_writes", resource="workloads/status") == ready + retry
    # the scaler's counted changes are the replica changes the run measured, each one a patch
    changes = _total(reg, "queuepilot_scale_decisions", direction="up") + \
        _total(reg, "queuepilot_scale_decisions", direction="down")
    assert changes == m.scale_events == _total(reg, "queuepilot_writes", resource="rayclusters") > 0
    # and each write explained by an Event on its object (as the KubeWriter would send them)
    on_rc = sum(n for (kind, _, _), n in e.writer.event_counts.items() if kind == "RayCluster")
    stall_events = sum(n for (kind, _, reason), n in e.writer.event_counts.items()
                       if kind == "Workload" and reason.startswith("StalledWorkload"))
    on_wl = sum(n for (kind, _, _), n in e.writer.event_counts.items() if kind == "Workload") - stall_events
    assert on_rc >= m.scale_events and on_wl == ready + retry
    # the stall reconciler runs too (report only: no ClusterQueue opted in to deactivation)
    assert stall_events == e.writer.event_counts[("Workload", "Warning", "StalledWorkload")]
    assert m.deactivated == 0
    assert _total(reg, "queuepilot_writes", resource="events") == len(e.writer.events) == on_rc + on_wl + stall_events
    assert _total(reg, "queuepilot_writes", resource="admissionchecks/status") == 1  # activated once


def _total(reg, family: str, **labels: str) -> float:
    return sum(s.value for mf in reg.collect() if mf.name == family for s in mf.samples
               if s.name.endswith("_total") and all(s.labels.get(k) == v for k, v in labels.items()))


def test_admission_check_must_be_active_before_kueue_reserves_quota():
    """Kueue reserves no quota for a queue whose AdmissionCheck is inactive; the reconciler's first
    pass activates it through the writer."""
    e = _failed_gpu_engine("queuepilot")
    assert e.checks_active == {"gpu-capacity": False}
    e.run()
    assert e.checks_active == {"gpu-capacity": True}


def _run_both(jobs, hours: float, policy: str, flag: str, **config) -> dict[bool, tuple[Engine, dict]]:
    """The same small world run with the ``SimConfig`` switch ``flag`` off and on (and ``config``):
    (engine, summary)."""
    runs = {}
    for on in (False, True):
        cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.2, seed=4, **config, **{flag: on})
        e = Engine(jobs, hours * 3600.0, policy, cfg)
        runs[on] = (e, e.run().summary())
    return runs


@pytest.mark.parametrize("policy", ["queuepilot", "ray-idle"])
def test_a_report_only_stall_detector_changes_no_number(policy):
    """``SimConfig.stall_report``: with nothing opted in to deactivation the stall detector only posts
    Events and sets gauges, so leaving it out (the default) gives the same summary; the run with it
    did report stalls (else the comparison would say nothing)."""
    # the synthetic mix, and an 8-GPU RayJob that stalls 2000 s into its run (so a stall is reported)
    prof = PhasedProfile(key=7, end=10_000.0, start_end=0.0, start_util=0.9, stall_start=2000.0, idle_p=0.0,
                         levels=(0.9,))
    jobs = sorted([*_small_jobs(12.0, seed=5), Job(10**6, TEAMS[0], 600.0, 10_000.0, 8, 0.9, 0.0, prof)],
                  key=lambda j: j.submit)
    runs = _run_both(jobs, 12.0, policy, "stall_report")
    quiet, loud = runs[False][0], runs[True][0]
    assert quiet.stall is None and loud.stall is not None
    assert loud.writer.event_counts[("Workload", "Warning", "StalledWorkload")] > 0
    assert runs[False][1] == runs[True][1]


def _same_events(with_feed: Engine, without: Engine) -> None:
    """The same Events but the feed's, in the same order, for the same objects at the same times; a
    message differs only where it named the GPU series the scaler's workers were measured by."""
    feed_reasons = {"RecommendationChanged"}
    assert ({k: v for k, v in with_feed.writer.event_counts.items() if k[2] not in feed_reasons}
            == without.writer.event_counts)
    mine = [e for e in with_feed.writer.events if e.reason not in feed_reasons]
    theirs = list(without.writer.events)
    assert len(mine) == len(theirs) > 0
    for a, b in zip(mine, theirs, strict=True):
        assert (a.kind, a.namespace, a.name, a.type, a.reason, a.at) == (b.kind, b.namespace, b.name, b.type,
                                                                          b.reason, b.at)
        # the scaler's words for a GPU whose series it names, and for one it cannot name
        named = a.message.replace("GPU gpu_util", "GPU")
        unnamed = b.message.replace("GPU use", "GPU").replace("the GPU", "GPU")
        assert a.message == b.message or ("gpu_util" in a.message and named == unnamed), (a, b)


@pytest.mark.parametrize("policy", ["queuepilot-reclaim", "kueue-quota", "static", "hpa", "ray-idle", "keda"])
def test_leaving_the_right_sizing_feed_out_changes_no_number(policy):
    """``SimConfig.rightsizing``: the right-sizing feed only publishes recommendations (and posts
    Events), which no decision reads, so a run without it (the policy benchmarks') gives the same
    summary and the same Events; the run with it did recommend, and the admission check (where the
    policy has it) did decide (else the comparison would say nothing).  Without the feed or the stall
    detector no reconciler reads the GPUs' utilization on a snapshot (the scaler names its series in
    its messages, no more), so the snapshot's GPUs carry none (``Engine.snapshot_utilization``): that
    too changes no decision, and no Event but for the series' name in a scaler's message."""
    runs = _run_both(_small_jobs(30.0, seed=6), 30.0, policy, "rightsizing")
    with_feed, without = runs[True][0], runs[False][0]
    assert with_feed.recommend is not None and without.recommend is None
    recs = with_feed.context.published.recommendations
    assert any(r.recommended_gpus_per_worker is not None for r in recs), recs
    assert not without.context.published.recommendations
    assert with_feed.snapshot_utilization and not without.snapshot_utilization
    assert all(g.utilization is None for n in without.snapshot(without.now).nodes.values() for g in n.gpus)
    admission = {k: v for k, v in with_feed.writer.event_counts.items() if k[0] == "Workload"}
    assert admission.get(("Workload", "Normal", "CapacityConfirmed"), 0) > 0 or not with_feed.policy.with_check
    _same_events(with_feed, without)
    if with_feed.scaling is not None:  # the scaler decided something worth an Event in both runs
        assert any(k[0] == "RayCluster" for k in without.writer.event_counts), without.writer.event_counts
    assert runs[True][1] == runs[False][1]


@pytest.mark.parametrize("policy", ["queuepilot", "queuepilot-reclaim"])
def test_with_stall_reclaim_and_no_feed_only_the_workloads_gpus_carry_utilization(policy):
    """The stall detector reads the utilization of the GPUs it attributes to a Workload's pods (here a
    RayJob's: no Workload owns a team's RayCluster); without the feed a Ray worker's GPUs carry none
    (``Engine.worker_gpu_utilization``), and the run is the same: summary, Events (the stall
    detector's Warning and its deactivation among them) and the deactivated Workloads."""
    # the synthetic mix, and an 8-GPU RayJob that stalls 2000 s into its run (deactivated 30 min on)
    prof = PhasedProfile(key=7, end=20_000.0, start_end=0.0, start_util=0.9, stall_start=2000.0, idle_p=0.0,
                         levels=(0.9,))
    jobs = sorted([*_small_jobs(12.0, seed=5), Job(10**6, TEAMS[0], 600.0, 20_000.0, 8, 0.9, 0.0, prof)],
                  key=lambda j: j.submit)
    runs = _run_both(jobs, 12.0, policy, "rightsizing", stall_reclaim=True, stall_deactivate_after_s=1800.0)
    with_feed, without = runs[True][0], runs[False][0]
    assert with_feed.worker_gpu_utilization and not without.worker_gpu_utilization
    assert without.snapshot_utilization and without.stall is not None
    assert without.writer.event_counts[("Workload", "Warning", "StalledWorkload")] > 0
    assert runs[False][1]["stall_deactivations"] > 0, runs[False][1]
    _same_events(with_feed, without)
    assert runs[True][1] == runs[False][1]


def test_the_snapshot_carries_the_gpus_utilization_where_the_stall_detector_reads_it():
    """With the stall detector on (reclaim or report only) and the feed left out, the GPUs of the
    RayJobs' pods carry the utilization their jobs run at as the detector reads it (the value under its
    threshold, 1.0 at or over it: ``Engine.busy_utilization_from``), and a Ray worker's GPUs none."""
    for flags in ({"stall_reclaim": True}, {"stall_report": True}):
        cfg = SimConfig(nodes=4, teams=TEAMS, rightsizing=False, **flags)
        e = Engine(_small_jobs(6.0, seed=3), 6 * 3600.0, "queuepilot", cfg)
        assert e.stall is not None and e.snapshot_utilization and not e.worker_gpu_utilization, flags
        threshold = e.stall.config.gpu_utilization
        assert e.busy_utilization_from == threshold
        seen: dict[bool, list[float | None]] = {True: [], False: []}  # a Ray worker's pod -> its GPUs
        carried: list[tuple[float | None, float]] = []  # a RayJob pod's GPU: (carried, its job's now)
        e.run()
        for n in e.snapshot(e.now).nodes.values():
            for g in n.gpus:
                if g.pod is not None:
                    seen[e.ray_worker_pod(f"{g.pod.namespace}/{g.pod.name}")].append(g.utilization)
                    w = e.workloads.get(g.pod.name.rsplit("-", 1)[0])
                    if w is not None and w.name in e.run_start:
                        carried.append((g.utilization, e.rayjob_util(w, e.run_start[w.name])))
        assert seen[False] and all(u is not None for u in seen[False]), (flags, seen)
        assert seen[True] and all(u is None for u in seen[True]), (flags, seen)
        assert carried and all(c == (u if u < threshold else 1.0) for c, u in carried), (flags, carried)
        assert any(u >= threshold for _, u in carried), carried  # a busy job among them
    # with the feed (another reader of the values) every value is carried as it is
    e = Engine(_small_jobs(2.0, seed=3), 2 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS, stall_reclaim=True))
    assert e.recommend is not None and e.busy_utilization_from is None


def _busy_levels(e: Engine) -> list[tuple[float | None, float, float]]:
    """Record, wherever ``e``'s scaler looks (the controller's snapshot, a baseline's group view), every
    busy Ray worker's (carried utilization, its task's mean level, its level now)."""
    seen: list[tuple[float | None, float, float]] = []

    def note(rc, name: str, carried: float | None, now: float) -> None:
        wk = rc.workers.get(name)
        if wk is not None and wk.task is not None and wk.busy(now):
            seen.append((carried, wk.task.util, wk.util(now)))

    if e.policy.baseline is None:
        build = e.snapshot

        def snapshot(now: float, **kw):
            snap = build(now, **kw)
            for rc in e.rays.values():
                for rw in snap.ray_clusters[f"{rc.namespace}/{rc.name}"].groups[0].workers:
                    note(rc, rw.pod, rw.gpu_utilization, now)
            return snap

        e.snapshot = snapshot  # type: ignore[method-assign]
    else:
        view = e.group_view

        def group_view(team: str, now: float):
            v = view(team, now)
            for w in v.workers:
                note(e.rays[team], w.name, w.util, now)
            return v

        e.group_view = group_view  # type: ignore[method-assign]
    return seen


def _with_spare_for_target(monkeypatch) -> None:
    """Every queuepilot policy with ``scaling.keep_spare_for_target: true`` (the utilization target kept
    as a floor, which reads every ready worker's utilization)."""
    import simulator.engine as engine_mod

    real = engine_mod.make_policy

    def make(name, teams, static_replicas):
        p = real(name, teams, static_replicas)
        if p.queuepilot_scaling:
            p.settings = {**p.settings, "scaling": {**p.settings.get("scaling", {}), "keep_spare_for_target": True}}
        return p

    monkeypatch.setattr(engine_mod, "make_policy", make)


@pytest.mark.parametrize(("policy", "stall"), [("queuepilot-reclaim", False), ("queuepilot-reclaim", True),
                                               ("ray-idle", False), ("keda", False), ("static", False)])
def test_a_busy_workers_level_steps_change_no_number_where_no_reader_reads_them(policy, stall, monkeypatch):
    """Without the right-sizing feed, under the controller's scaler (no utilization floor) or a baseline
    whose scaler reads no worker's level (all but hpa), a Ray worker running a task carries its task's
    mean level, and a step of the task's level moves no worker's view (``Engine.busy_worker_utilization``):
    the same summary and the very same Events (messages and times too) as a run in which every busy
    worker carries its level of the moment.  The levels did step while workers were busy (else the
    comparison would say nothing); the controller's scaler removed idle workers and replaced idle actors."""
    jobs = _small_jobs(24.0, seed=9)
    cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.2, seed=4, rightsizing=False, stall_reclaim=stall)
    at_mean = Engine(jobs, 24 * 3600.0, policy, cfg)
    assert not at_mean.busy_worker_utilization
    seen = _busy_levels(at_mean)
    at_mean_summary = at_mean.run().summary()
    assert seen and all(carried == mean for carried, mean, _ in seen)
    assert any(now != mean for _, mean, now in seen)  # the levels stepped under the carried mean
    monkeypatch.setattr(Engine, "_reads_busy_worker_utilization", lambda self: True)  # as if a reader read them
    every = Engine(jobs, 24 * 3600.0, policy, cfg)
    assert every.busy_worker_utilization
    seen_every = _busy_levels(every)
    every_summary = every.run().summary()
    assert seen_every and all(carried == now for carried, _, now in seen_every)
    if every.scaling is not None:  # idle workers removed and idle actors replaced: decisions that read a level
        reasons = {k[2] for k in every.writer.event_counts if k[0] == "RayCluster"}
        assert {"IdleWorkers", "IdleWorkersReplaced", "PendingDemand"} <= reasons, every.writer.event_counts
    assert at_mean.writer.event_counts == every.writer.event_counts
    assert list(at_mean.writer.events) == list(every.writer.events)
    assert at_mean_summary == every_summary


def test_busy_workers_carry_their_level_where_something_reads_it(monkeypatch):
    """The right-sizing feed, hpa (it averages the levels) and a utilization floor read a busy worker's
    level: there every worker carries its level of the moment; elsewhere none is read.  The floor does
    read it: a run that carried the mean there would decide otherwise (so the rule must leave it out)."""
    for policy, rightsizing, reads in (("queuepilot", True, True), ("ray-idle", True, True), ("hpa", False, True),
                                       ("queuepilot", False, False), ("kueue-quota", False, False),
                                       ("ray-idle", False, False), ("keda", False, False), ("static", False, False)):
        e = Engine(_small_jobs(1.0), 3600.0, policy, SimConfig(nodes=4, teams=TEAMS, rightsizing=rightsizing))
        assert e.busy_worker_utilization is reads, (policy, rightsizing)
    _with_spare_for_target(monkeypatch)
    jobs = _small_jobs(24.0, seed=9)
    cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.2, seed=4, rightsizing=False)
    every = Engine(jobs, 24 * 3600.0, "queuepilot", cfg)
    assert every.scaling is not None and every.scaling.defaults.keep_spare_for_target
    assert every.busy_worker_utilization
    every_summary = every.run().summary()
    monkeypatch.setattr(Engine, "_reads_busy_worker_utilization", lambda self: False)  # the rule, wrongly applied
    at_mean = Engine(jobs, 24 * 3600.0, "queuepilot", cfg)
    assert not at_mean.busy_worker_utilization
    at_mean_summary = at_mean.run().summary()
    assert (at_mean_summary, list(at_mean.writer.events)) != (every_summary, list(every.writer.events))


@pytest.mark.parametrize("policy", ["queuepilot", "queuepilot-reclaim", "static", "ray-idle", "keda"])
def test_an_admission_pass_on_unchanged_workloads_decides_what_the_full_pass_decides(policy, monkeypatch):
    """A pass whose snapshot holds the last quiet pass's very Workload map (nothing decided, nothing
    reserved) stops before deciding (``AdmissionReconciler._nothing_moved``); a run that decides every
    pass in full gives the same summary and the very same Events (messages and times too).  The
    quiet passes were many and the check decided (else the comparison would say nothing)."""
    from autoscaler.controller.admission import AdmissionReconciler

    jobs = _small_jobs(24.0, seed=8)
    cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.3, seed=5, rightsizing=False)
    quick = Engine(jobs, 24 * 3600.0, policy, cfg)
    quick_summary = quick.run().summary()
    monkeypatch.setattr(AdmissionReconciler, "_nothing_moved", lambda self, snapshot: False)
    full = Engine(jobs, 24 * 3600.0, policy, cfg)
    full_summary = full.run().summary()
    assert quick.admission is not None and full.admission is not None
    assert full.admission.quiet_passes == 0
    assert quick.admission.quiet_passes > quick.snapshots.builds // 4, (quick.admission.quiet_passes,
                                                                        quick.snapshots.builds)
    assert quick.writer.event_counts[("Workload", "Normal", "CapacityConfirmed")] > 0
    assert quick.writer.event_counts == full.writer.event_counts
    assert list(quick.writer.events) == list(full.writer.events)
    assert quick_summary == full_summary


def test_the_snapshot_keeps_its_workload_map_while_no_workload_moved():
    """The snapshot builder hands out the last snapshot's Workload map while every Workload is the
    state it holds, and a new one (equal to a fresh build) as soon as one moves."""
    e = Engine(_small_jobs(6.0, seed=3), 6 * 3600.0, "static", SimConfig(nodes=4, teams=TEAMS, rightsizing=False))
    e.run()
    first = e.snapshot(e.now).workloads
    assert first and e.snapshot(e.now).workloads is first
    w = next(iter(e.workloads.values()))
    e.kueue.moved(w)  # the Workload moved (a new resourceVersion)
    moved = e.snapshot(e.now).workloads
    assert moved is not first and moved.keys() == first.keys()
    key = f"{w.namespace}/{w.name}"
    assert moved[key] is not first[key] and moved[key].resource_version == str(w.version)
    assert all(moved[k] is first[k] for k in first if k != key)


def test_the_stall_detector_runs_where_it_may_deactivate():
    on = Engine(_small_jobs(2.0), 2 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS, stall_reclaim=True))
    baseline = Engine(_small_jobs(2.0), 2 * 3600.0, "ray-idle", SimConfig(nodes=4, teams=TEAMS, stall_reclaim=True))
    assert on.stall is not None and on.stall.config.deactivate_cluster_queues
    assert baseline.stall is None  # a baseline opts nothing in: the detector could only report


def test_a_tasks_end_keeps_its_place_among_same_time_events_when_its_level_steps():
    """A Ray task's end event is pushed once, when it starts; a step of the task's level (a new
    segment, seen by the ledger) moves the end on in the order of the events due at the same instant,
    where pushing it again at the step would have put it (``_ledger_refresh``, ``_on_busy_end``): an
    event pushed for that instant before the step is handled before the end, one pushed after the step
    after it; and the heap never holds more than the one end event."""
    key = next(k for k in range(1000) if PhasedProfile(k, 900.0, 0.0, 0.5, None, 0.0, (0.2, 0.9)).util_at(599.0)
               != PhasedProfile(k, 900.0, 0.0, 0.5, None, 0.0, (0.2, 0.9)).util_at(600.0))
    prof = PhasedProfile(key, 900.0, 0.0, 0.5, None, 0.0, (0.2, 0.9))
    job = Job(1, TEAMS[0], 0.0, 900.0, 1, 0.5, 0.0, prof)
    e = Engine([job], 3600.0, "static", SimConfig(nodes=1, teams=TEAMS, rightsizing=False))
    order: list[tuple[float, str]] = []
    e._on_probe = lambda data: order.append((e.now, data))  # type: ignore[attr-defined]
    handle_end = e._on_busy_end

    def on_busy_end(data, seq):
        done = e.metrics.jobs_completed
        handle_end(data, seq)
        if e.metrics.jobs_completed > done:
            order.append((e.now, "end"))

    e._on_busy_end = on_busy_end  # type: ignore[method-assign]

    rc = e.rays[TEAMS[0]]
    # the one worker the static policy keeps starts at 90 s (its start-up) and takes the task at once:
    # its level steps 600 s into the task (690 s), and its end is due at 990 s, a tick's time too
    end = e.cfg.worker_startup_s + job.duration

    async def go() -> list[int]:
        e.start()
        ends_on_heap = []
        for t, probe in ((500.0, "pushed before the step"), (800.0, "pushed after the step"), (2000.0, None)):
            await e.advance(t)
            ends_on_heap.append(sum(1 for ev in e.heap if ev.kind == "busy_end"))
            if probe is not None:
                e.push(end, "probe", probe)
        return ends_on_heap

    ends = asyncio.run(go())
    (wk_name,) = rc.workers  # the one worker the static policy keeps
    assert ends[:2] == [1, 1] and ends[2] == 0, ends
    assert [what for t, what in order if t == end] == ["pushed before the step", "end", "pushed after the step"]
    assert rc.workers[wk_name].generation >= 3  # the task (1), its level's steps (>= 1), its end (1)
