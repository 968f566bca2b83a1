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


def _failed_gpu_engine(policy: str, horizon: float = 900.0, **cfg_kw) -> Engine:
    cfg = SimConfig(nodes=1, teams=("team-a",), check_invariants=True, **{"pods_ready_timeout_s": None, **cfg_kw})
    e = Engine([Job(0, "team-a", 10.0, 300.0, 8, 0.5)], horizon, policy, cfg)
    e.cluster.fail(e.cluster.nodes[0], 3)  # XID 79 on one of the node's 8 GPUs
    return e


def test_kueue_quota_admits_unplaceable_workload_and_queuepilot_does_not():
    """8 GPUs of quota, 7 healthy: quota alone admits the 8-GPU job, whose pod cannot be bound."""
    m = _failed_gpu_engine("kueue-quota").run()
    assert m.unplaceable_admissions == 1
    assert m.unplaceable_s == pytest.approx(900.0 - 10.0 - SimConfig().pass_delay_s)
    e = _failed_gpu_engine("queuepilot")
    q = e.run()
    assert q.unplaceable_admissions == 0 and q.unplaceable_s == 0.0
    # within the capacity wait (30 min) the check leaves it Pending: quota reserved, no pod, no Retry
    w = next(iter(e.workloads.values()))
    assert (w.state, w.check_state, q.retries) == ("reserved", "Pending", 0)
    assert "waiting with quota reserved for up to 1800s" in w.check_message
    # its 8 GPUs of quota, reserved one Kueue pass after its arrival, held to the end of the run
    assert q.waiting_gpu_s == pytest.approx((900.0 - 10.0 - SimConfig().pass_delay_s) * 8)
    assert m.waiting_gpu_s == 0.0  # without a check quota reservation is admission
    q = _failed_gpu_engine("queuepilot", horizon=2400.0).run()
    assert q.unplaceable_admissions == 0 and q.unplaceable_s == 0.0
    assert q.retries >= 1  # then the check said Retry (InsufficientGpus) and Kueue requeued it
    assert q.waiting_gpu_s >= 1800.0 * 8  # the whole capacity wait held the quota
    # --capacity-wait 0 (the controller's admission.capacity_wait: 0): Retry at once, the quota given back
    q = _failed_gpu_engine("queuepilot", capacity_wait_s=0.0).run()
    assert q.retries >= 2 and q.unplaceable_admissions == 0
    assert q.waiting_gpu_s < 100 * 8  # a pass or so per reservation, not the run
    # the longest waits and delays the CLI accepts reach the controller's config (30 days)
    e = Engine([], 60.0, "queuepilot", SimConfig(capacity_wait_s=30 * 86400.0, stall_reclaim=True,
                                                 stall_deactivate_after_s=30 * 86400.0))
    assert e.admission.config.capacity_wait_seconds == 30 * 86400.0
    assert e.stall.config.deactivate_after_seconds == 30 * 86400.0


def test_queuepilot_runs_the_controllers_reconcilers_through_the_sim_writer():
    """The engine's queuepilot is the controller's AdmissionReconciler and ScalingReconciler, acting
    through the SimWriter: their counters, Events and explanations are the controller's."""
    from autoscaler.controller.admission import AdmissionReconciler
    from autoscaler.controller.scaling import ScalingReconciler
    from simulator.writer import SimWriter

    e = Engine(_small_jobs(6.0), 6 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS))
    m = e.run()
    assert isinstance(e.admission, AdmissionReconciler) and isinstance(e.scaling, ScalingReconciler)
    assert isinstance(e.admission.writer, SimWriter) and e.scaling.writer is e.admission.writer
    reg = e.context.registry
    # every Ready the controller counted admitted a workload in the simulated Kueue, and nothing else did
    ready = _total(reg, "queuepilot_admission_decisions", state="Ready")
    rayjobs = sum(1 for j in e.jobs if j.kind != "task" and j.submit < 6 * 3600)
    assert ready == rayjobs - sum(1 for w in e.workloads.values() if w.state in ("pending", "reserved")) > 0
    # each Ready, Retry and wait (Pending, a new message) the controller counted is one status write,
    # and there is no other
    retry = _total(reg, "queuepilot_admission_decisions", state="Retry")
    waits = _total(reg, "queuepilot_admission_decisions", state="Pending")
    assert waits > 0
    assert _total(reg, "queuepilot_writes", resource="workloads/status") == ready + retry + waits
    # the scaler's counted changes are the replica changes the run measured, each one a patch
    changes = _total(reg, "queuepilot_scale_decisions", direction="up") + \
        _total(reg, "queuepilot_scale_decisions", direction="down")
    assert changes == m.scale_events == _total(reg, "queuepilot_writes", resource="rayclusters") > 0
    # and each write explained by an Event on its object (as the KubeWriter would send them)
    on_rc = sum(n for (kind, _, _), n in e.writer.event_counts.items() if kind == "RayCluster")
    stall_events = sum(n for (kind, _, reason), n in e.writer.event_counts.items()
                       if kind == "Workload" and reason.startswith("StalledWorkload"))
    on_wl = sum(n for (kind, _, _), n in e.writer.event_counts.items() if kind == "Workload") - stall_events
    assert on_rc >= m.scale_events and on_wl == ready + retry + waits
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


@pytest.mark.parametrize(("policy", "stall"), [("queuepilot", False), ("queuepilot-reclaim", True),
                                               ("kueue-quota", False), ("hpa", False), ("ray-idle", False)])
def test_every_policy_reads_every_gpu_and_worker_as_it_runs_now(policy, stall):
    """Whatever the policy, each pass's snapshot is the whole of what the controller would read: every
    GPU of a running RayJob's pod carries its job's utilization now, every Ray worker its task's level
    now (through the GPU signal, joined by pod as the controller joins it), every free GPU 0, and every
    RayCluster is there with its workers and Ray's demand."""
    cfg = SimConfig(nodes=6, teams=TEAMS, gpu_failure_rate=0.2, seed=4, stall_reclaim=stall)
    e = Engine(_small_jobs(12.0, seed=9), 12 * 3600.0, policy, cfg)
    checked = {"rayjob": 0, "busy": 0, "free": 0, "moved": 0}
    build = e.snapshots.build

    def checking_build(now):
        snap = build(now)
        for n in snap.nodes.values():
            for g in n.gpus:
                assert g.utilization is not None and g.utilization_source == "gpu_util"
                if g.pod is None:
                    checked["free"] += g.utilization == 0.0
                    continue
                w = e.workloads.get(g.pod.name.rsplit("-", 1)[0])
                if w is not None and w.name in e.run_start:
                    assert g.utilization == e.rayjob_util(w, e.run_start[w.name])
                    checked["rayjob"] += 1
        for rc in e.rays.values():
            state = snap.ray_clusters[f"{rc.namespace}/{rc.name}"]
            assert sum(d.count for d in state.demand) == len(rc.queue)
            workers = {rw.pod: rw for rw in state.groups[0].workers}
            assert set(workers) == set(rc.workers)
            for name, wk in rc.workers.items():
                rw = workers[name]
                if rw.node is not None:
                    assert rw.gpu_utilization == wk.util(now)
                if wk.busy(now):
                    checked["busy"] += 1
                    checked["moved"] += wk.util(now) != wk.task.util
        return snap

    e.snapshots.build = checking_build  # type: ignore[method-assign]
    e.run()
    assert min(checked.values()) > 0, checked  # busy workers whose level moved off its mean among them


def test_the_stall_detector_deactivates_only_where_opted_in():
    on = Engine(_small_jobs(2.0), 2 * 3600.0, "queuepilot", SimConfig(nodes=4, teams=TEAMS, stall_reclaim=True))
    baseline = Engine(_small_jobs(2.0), 2 * 3600.0, "ray-idle", SimConfig(nodes=4, teams=TEAMS, stall_reclaim=True))
    assert on.stall is not None and on.stall.config.deactivate_cluster_queues
    # a baseline opts nothing in: the detector runs and reports, as in a cluster that did not opt in
    assert baseline.stall is not None and not baseline.stall.config.deactivate_cluster_queues


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
    e = Engine([job], 3600.0, "static", SimConfig(nodes=1, teams=TEAMS))
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
