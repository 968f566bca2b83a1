"""Honest accounting (docs/simulation.md, "Accounting"): idle by class, killed work, the offline lower
bound on controllable idle, per-class waits, the stall reclaim, and the JSON keys that carry them."""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from autoscaler.core.policy.stall import StallConfig
from simulator.cli import main
from simulator.engine import Engine, SimConfig
from simulator.kueue import INACTIVE, RUNNING
from simulator.metrics import CONTROLLABLE_CLASSES, IDLE_CLASSES, lower_bound_idle_s
from simulator.utilization import PhasedProfile
from simulator.workload import Job, SyntheticParams, synthetic

TEAMS = ("team-a", "team-b", "team-c")
ONE = ("team-a",)


# ------------------------------------------------------------------------------ idle by class
@pytest.mark.parametrize("policy", ["queuepilot", "ray-idle", "static"])
def test_classes_sum_to_the_idle_gpu_seconds(policy: str) -> None:
    params = SyntheticParams(jobs_per_hour=20.0, teams=TEAMS, team_weights=(0.5, 0.3, 0.2))
    jobs = synthetic(8.0, 3, 48, params).jobs
    m = Engine(jobs, 8 * 3600.0, policy, SimConfig(nodes=5, teams=TEAMS, seed=2)).run()
    assert m.idle_gpu_s > 0
    assert sum(m.idle_class_gpu_s.values()) == pytest.approx(m.idle_gpu_s, abs=1e-6)
    assert set(m.idle_class_gpu_s) == set(IDLE_CLASSES)
    assert all(v >= 0 for v in m.idle_class_gpu_s.values())
    # the bound holds what no scaler avoids, and stays under what this policy left controllable
    # (up to the sampling of the accounting: one control interval per transition at most)
    controllable = sum(m.idle_class_gpu_s[k] for k in CONTROLLABLE_CLASSES)
    assert m.unavoidable_gpu_s <= m.lower_bound_idle_gpu_s <= controllable * 1.02 + 300.0


def _one_task(policy: str, idle_tail: float = 0.0, duration: float = 100.0) -> Engine:
    cfg = SimConfig(nodes=1, teams=ONE, control_interval_s=30.0, worker_startup_s=90.0, check_invariants=True)
    # no profile: the scattered model; job 2's first segment is busy (0.8)
    return Engine([Job(2, "team-a", 0.0, duration, 1, 0.8, idle_tail)], 1000.0, policy, cfg)


def test_a_worker_left_empty_counts_exactly_its_empty_gpu_seconds() -> None:
    """static keeps its one worker for the whole run: created by the t=0 tick's operator pass (after
    that tick's sample), starting until 90 s (ticks 30, 60), busy 90-190 s (ticks 90-180, at 0.8), its actor's idle tail 190-390 s (ticks
    210-360: 6 x 30 s; the tail's end, queued before the 390 s tick, runs first), then empty to the end
    (ticks 390-990: 21 x 30 s)."""
    m = _one_task("static", idle_tail=200.0).run()
    assert m.jobs_completed == 1
    c = m.idle_class_gpu_s
    assert c["starting"] == 2 * 30.0
    assert c["idle_actor"] == 6 * 30.0
    assert c["empty"] == 21 * 30.0
    assert c["stalled"] == c["in_job"] == 0.0
    assert m.allocated_gpu_s == 33 * 30.0 and m.used_gpu_s == pytest.approx(4 * 30 * 0.8)
    assert m.killed_gpu_s == 0.0
    # the bound: one launch (90 s) for the one busy interval; nothing else is unavoidable
    assert m.lower_bound_idle_gpu_s == 90.0


# ------------------------------------------------------------------------------- killed work
def test_a_removed_busy_worker_counts_its_elapsed_work_as_killed() -> None:
    e = _one_task("static", duration=500.0)

    async def go() -> None:
        e.start()
        await e.advance(250.0)  # the task started at 90 s
        rc = e.rays["team-a"]
        (wk,) = rc.workers.values()
        assert wk.task is not None and wk.busy(e.now)
        e.kuberay_patch(rc, replicas=0, workers_to_delete=(wk.name,), min_replicas=None, max_replicas=None,
                        reason="test")

    asyncio.run(go())
    assert e.metrics.tasks_killed == 1
    assert e.metrics.killed_gpu_s == pytest.approx(250.0 - 90.0)
    s = e.metrics.summary()  # the killed work is not delivered
    assert s["delivered_gpu_hours"] == pytest.approx(
        (e.metrics.allocated_gpu_s - e.metrics.idle_gpu_s - (250.0 - 90.0)) / 3600, abs=0.05)
    assert e.rays["team-a"].queue  # it goes back to the queue, to restart from scratch


# ------------------------------------------------------------------------- idle-actor reclaim
def _reclaimed(e: Engine) -> dict[str, float]:
    """The controller's own count of the workers it deleted by name, by reason (``empty``, ``idle_actor``)."""
    out: dict[str, float] = {}
    for fam in e.context.registry.collect():
        for smp in fam.samples:
            if smp.name == "queuepilot_reclaimed_workers_total":
                out[smp.labels["reason"]] = out.get(smp.labels["reason"], 0.0) + smp.value
    return out


def _idle_tails(policy: str, budget: int | None, replace: bool = True) -> Engine:
    """24 one-GPU tasks, one a minute, on one 8-GPU node: each runs 15 min and then its actor holds the
    worker idle for 2 h, so the queue waits behind idle actors unless they are replaced
    (``reclaim_replace``)."""
    jobs = [Job(i, "team-a", 60.0 * i, 900.0, 1, 0.8, 7200.0) for i in range(24)]
    cfg = SimConfig(nodes=1, teams=ONE, check_invariants=True, reclaim_budget_per_hour=budget,
                    reclaim_replace=replace)
    return Engine(jobs, 6 * 3600.0, policy, cfg)


def test_without_reclaim_replace_the_queue_waits_behind_the_idle_actors() -> None:
    e = _idle_tails("queuepilot-reclaim", 1000, replace=False)
    assert e.scaling is not None and e.scaling.defaults.reclaim_replace is False
    kept = e.run()
    replaced = _idle_tails("queuepilot-reclaim", 1000).run()
    plain = _idle_tails("queuepilot", None).run()
    # no actor goes while the team's tasks queue: the queue waits as it would without reclaim
    assert kept.summary()["task_wait_p95_s"] == plain.summary()["task_wait_p95_s"]
    assert kept.summary()["task_wait_p95_s"] > replaced.summary()["task_wait_p95_s"]
    assert kept.actors_killed < replaced.actors_killed


def test_the_reclaim_budget_reaches_the_controller_and_bounds_the_actors_killed() -> None:
    runs = {}
    for budget in (0, None, 1000):
        e = _idle_tails("queuepilot-reclaim", budget)
        assert e.scaling is not None
        assert e.scaling.defaults.reclaim_budget_per_hour == (4 if budget is None else budget)
        m = e.run()
        assert m.jobs_completed == 24 and m.tasks_killed == 0 and m.killed_gpu_s == 0.0  # only idle tails go
        # the simulator's count of actors killed is the controller's count of idle-actor reclaims
        assert m.actors_killed == _reclaimed(e).get("idle_actor", 0.0)
        runs[budget] = m
    assert runs[0].actors_killed == 0
    assert runs[None].actors_killed > 0
    # any clock hour lies in one rolling hour: the budget bounds the actors killed in it
    assert 0 < runs[None].summary()["actors_killed_peak_hour"] <= 4
    assert runs[1000].summary()["actors_killed_peak_hour"] > 4  # unbounded, they go as soon as they idle
    # a larger budget reclaims the idle actors sooner: less idle-actor time, a shorter wait
    assert runs[1000].idle_class_gpu_s["idle_actor"] < runs[None].idle_class_gpu_s["idle_actor"] \
        < runs[0].idle_class_gpu_s["idle_actor"]
    assert runs[1000].summary()["task_wait_p95_s"] < runs[None].summary()["task_wait_p95_s"]


def test_without_reclaim_the_budget_changes_nothing_and_ray_kills_no_actor() -> None:
    a = _idle_tails("queuepilot", None).run().summary()
    b = _idle_tails("queuepilot", 1000).run().summary()
    assert a == b and a["actors_killed"] == 0
    assert _idle_tails("ray-idle", 1000).run().actors_killed == 0  # Ray removes only workers with nothing on them


# ------------------------------------------------------------------------------- stall reclaim
START_S = SimConfig().rayjob_startup_s


def _stalling_rayjob(stall_reclaim: bool, stall_at: float = 2000.0, delay: float | None = None) -> Engine:
    prof = PhasedProfile(key=7, end=10_000.0, start_end=0.0, start_util=0.9, stall_start=stall_at, idle_p=0.0,
                         levels=(0.9,))
    job = Job(1, "team-a", 0.0, 10_000.0, 8, 0.9, 0.0, prof)
    cfg = SimConfig(nodes=2, teams=ONE, stall_reclaim=stall_reclaim, check_invariants=True,
                    stall_deactivate_after_s=delay, hang_share=0.0)  # (Ray sees nothing run in the stall)
    return Engine([job], 12_000.0, "queuepilot", cfg)


@pytest.mark.parametrize("delay", [600.0, 3600.0])
def test_the_stall_delay_reaches_the_controller_and_sets_when_the_job_goes(delay: float) -> None:
    """--stall-deactivate-after: the stalled 8-GPU job holds its GPUs stalled for that long (to a control
    pass or two), then goes; 10 min also shortens the 30-min report window to 10 min."""
    e = _stalling_rayjob(True, delay=delay)
    assert e.stall is not None and e.stall.config.deactivate_after_seconds == delay
    assert e.stall.config.window_seconds == min(delay, 1800.0)
    m = e.run()
    assert m.deactivated == 1 and m.killed_gpu_s == 0.0
    assert 8 * delay <= m.idle_class_gpu_s["stalled"] <= 8 * (delay + 2 * 30.0)


def test_a_stalled_rayjob_is_deactivated_with_no_work_lost_and_its_quota_released() -> None:
    e = _stalling_rayjob(True)
    m = e.run()
    w_gone = "rayjob-1" not in e.workloads
    # its work was done (it is counted complete), nothing is resubmitted
    assert w_gone and m.deactivated == 1 and m.jobs_completed == 1 and m.resubmitted == 0
    assert m.killed_gpu_s == 0.0  # it was in its stall: nothing left to lose
    assert e.kueue.cqs["cq-team-a"].usage.get("a100", 0.0) == 0.0  # quota released
    assert e.cluster.allocated_gpus() == 0
    stalled_from = START_S + 2000.0
    # deactivated stall.deactivate_after (the controller's default, 7200 s: later than the 1800-s report)
    # after the first pass that saw it stalled, not at its end
    delay = StallConfig().deactivate_after_seconds
    assert delay < 10_000.0 - 2000.0  # the stall outlasts the delay
    assert 8 * delay <= m.idle_class_gpu_s["stalled"] <= 8 * (delay + 2 * 30.0)
    assert e.writer.event_counts[("Workload", "Warning", "StalledWorkloadDeactivated")] == 1
    # without the opt-in the same job holds its 8 GPUs stalled until its end
    plain = _stalling_rayjob(False).run()
    assert plain.deactivated == 0 and plain.jobs_completed == 1
    assert plain.idle_class_gpu_s["stalled"] == pytest.approx(8 * (START_S + 10_000.0 - stalled_from), abs=8 * 30.0)
    # the stall is reclaimable: the bound counts only the RayJob's start-up (unavoidable)
    assert m.lower_bound_idle_gpu_s == plain.lower_bound_idle_gpu_s == 8 * START_S


def test_deactivating_a_running_workload_before_its_stall_loses_the_work_it_had_done() -> None:
    """Killed work is what was done and is thrown away (to be redone if the job is run again), as for
    a Ray task killed mid-work; the work never started is not counted."""
    e = _stalling_rayjob(False, stall_at=5000.0)

    async def go() -> None:
        e.start()
        await e.advance(1060.0)
        w = e.workloads["rayjob-1"]
        assert w.state == RUNNING
        start = e.run_start[w.name]
        done = e.now - start - START_S
        e.kueue_check_rejected(w, "deactivated by a test")
        assert w.state == INACTIVE
        assert 0 < done < 5000.0
        assert e.metrics.killed_gpu_s == pytest.approx(done * 8)

    asyncio.run(go())
    assert e.cluster.allocated_gpus() == 0 and e.kueue.cqs["cq-team-a"].usage.get("a100", 0.0) == 0.0
    e.check_invariants()


# ------------------------------------------------------------------------------- lower bound
def _brute_force_min_idle(busy: list[tuple[int, int]], startup: int, horizon: int, max_workers: int) -> int:
    """The least idle worker-time over every schedule of up to ``max_workers`` worker lifetimes
    [create, delete) on the integer grid (ready ``startup`` after creation) that has, in every unit
    slot, at least as many ready workers as busy intervals open."""
    demand = [sum(1 for a, b in busy if a <= t < b) for t in range(horizon)]
    lifetimes = [(c, d) for c in range(horizon) for d in range(c + 1, horizon + 1)]
    need = sum(demand)
    best = None
    for n in range(max_workers + 1):
        for combo in itertools.combinations_with_replacement(lifetimes, n):
            ready = [0] * horizon
            for c, d in combo:
                for t in range(c + startup, d):
                    ready[t] += 1
            if all(r >= x for r, x in zip(ready, demand, strict=True)):
                cost = sum(d - c for c, d in combo) - need
                best = cost if best is None else min(best, cost)
    assert best is not None
    return best


@pytest.mark.parametrize("busy", [
    [(2, 4), (5, 7)],  # gap 1 < start-up 2: keep the worker
    [(2, 3), (6, 8)],  # gap 3 > 2: remove it and start again
    [(2, 6), (3, 4), (5, 7)],  # two levels, the second with a gap of 1
    [(3, 5), (3, 5), (7, 8)],
])
def test_lower_bound_equals_the_best_schedule_by_brute_force(busy: list[tuple[int, int]]) -> None:
    startup, horizon = 2, 9
    best = _brute_force_min_idle(busy, startup, horizon, max_workers=3)
    lb = lower_bound_idle_s([(float(a), float(b)) for a, b in busy], float(startup))
    assert lb == best


def test_lower_bound_by_hand() -> None:
    assert lower_bound_idle_s([], 90.0) == 0.0
    assert lower_bound_idle_s([(100.0, 200.0)], 90.0) == 90.0
    # handed straight on at 200 (end before start): no gap, one launch
    assert lower_bound_idle_s([(100.0, 200.0), (200.0, 300.0)], 90.0) == 90.0
    # gap of 30 s kept, gap of 500 s relaunched
    assert lower_bound_idle_s([(100.0, 200.0), (230.0, 300.0), (800.0, 900.0)], 90.0) == 90.0 + 30.0 + 90.0


# ------------------------------------------------------------------------------------- JSON
NEW_KEYS = ("idle_gpu_hours_controllable", "idle_gpu_hours_by_class", "killed_gpu_hours", "lower_bound_idle_gpu_hours",
            "wait_p95_s_by_class", "wait_p99_s_by_class", "scale_downs_after_up_300s")


def test_json_has_the_accounting_keys_with_sane_values(tmp_path) -> None:
    out = tmp_path / "r.json"
    assert main(["--trace", "synthetic", "--hours", "6", "--nodes", "16", "--policies", "queuepilot,ray-idle",
                 "--no-progress", "--stall-reclaim", "--worker-cap-factor", "1.5", "--util-model", "grounded",
                 "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert data["meta"]["util_model"] == "grounded" and data["meta"]["stall_reclaim"] is True
    assert data["meta"]["worker_cap_factor"] == 1.5
    assert data["meta"]["reclaim_budget_per_hour"] == 4  # the controller's default
    for name, p in data["policies"].items():
        for k in NEW_KEYS:
            assert k in p, (name, k)
        by = p["idle_gpu_hours_by_class"]
        assert set(by) == {"empty", "starting", "idle_actor", "stalled", "in_job"}
        assert sum(by.values()) == pytest.approx(p["idle_gpu_hours"], abs=0.3)  # each rounded to 0.1
        assert p["idle_gpu_hours_controllable"] == pytest.approx(sum(by[k] for k in CONTROLLABLE_CLASSES), abs=0.3)
        assert p["idle_gpu_hours_controllable"] <= p["idle_gpu_hours"]
        assert 0 <= p["lower_bound_idle_gpu_hours"]
        assert p["killed_gpu_hours"] >= 0
        # delivered: the allocated GPU-hours less the idle ones and the work killed (each rounded to 0.1)
        assert p["delivered_gpu_hours"] == pytest.approx(
            p["allocated_gpu_hours"] - p["idle_gpu_hours"] - p["killed_gpu_hours"], abs=0.3)
        assert 0 < p["delivered_gpu_hours"] < p["allocated_gpu_hours"]
        for key in ("wait_p95_s_by_class", "wait_p99_s_by_class"):
            assert set(p[key]) == {"ray_task", "single_pod", "gang", "workload"}
        for cls in ("ray_task", "workload"):
            assert 0 <= p["wait_p95_s_by_class"][cls] <= p["wait_p99_s_by_class"][cls]
        assert p["wait_p95_s_by_class"]["ray_task"] == p["task_wait_p95_s"]
        assert p["wait_p95_s_by_class"]["workload"] == p["rayjob_wait_p95_s"]
        assert p["scale_downs_after_up_300s"] == p["down_after_up_5m"]


def test_the_worker_cap_factor_sets_max_replicas() -> None:
    jobs = synthetic(1.0, 0, 64).jobs
    a = Engine(jobs, 3600.0, "queuepilot", SimConfig(nodes=8))
    b = Engine(jobs, 3600.0, "queuepilot", SimConfig(nodes=8, ray_max_quota_factor=0.5))
    for t in a.rays:
        assert b.rays[t].max_replicas == max(1, round(a.nominal[t] * 0.5))
        assert a.rays[t].max_replicas == max(1, round(a.nominal[t] * 2.0))


def test_bad_new_flags_are_one_line_and_exit_2(capsys, monkeypatch) -> None:
    for args, needle in [(["--worker-cap-factor", "0"], "--worker-cap-factor"),
                         (["--util-model", "flat"], "--util-model"),
                         (["--stall-deactivate-after", "soon"], "--stall-deactivate-after"),
                         (["--stall-deactivate-after", "5s"], "--stall-deactivate-after"),
                         (["--reclaim-budget", "-1"], "--reclaim-budget"),
                         (["--reclaim-budget", "1001"], "--reclaim-budget")]:
        with pytest.raises(SystemExit) as exc:
            main(["--trace", "synthetic", "--no-progress", *args])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and needle in err and "Traceback" not in err
    monkeypatch.setenv("QUEUEPILOT_UTIL_MODEL", "flat")
    with pytest.raises(SystemExit) as exc:
        main(["--trace", "synthetic", "--no-progress"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "QUEUEPILOT_UTIL_MODEL" in err and "Traceback" not in err
