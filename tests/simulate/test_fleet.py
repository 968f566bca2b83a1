"""The multi-cluster (MultiKueue) simulator: hand-built fleets where the right answer is known."""

from __future__ import annotations

import pytest

from autoscaler.controller.dispatch import DispatchReconciler
from simulator import fleet_cli
from simulator.fleet import (
    ALL_AT_ONCE,
    CAPACITY,
    INCREMENTAL,
    MULTI_GPU,
    MULTI_POD,
    ONE_GPU,
    FleetConfig,
    FleetSim,
    job_class,
    split_nodes,
)
from simulator.workload import Job, synthetic

HOUR = 3600.0


def job(i: int, submit: float, gpus: int, duration: float = 10 * HOUR) -> Job:
    return Job(i, "team-a", submit, duration, gpus, 0.5)


def sim(jobs, dispatcher: str, *, nodes: int, clusters: int, hours: float = 2.0, seed: int = 0) -> FleetSim:
    return FleetSim(jobs, hours * HOUR, dispatcher, FleetConfig(nodes=nodes, clusters=clusters, seed=seed))


def break_all(s: FleetSim, worker: str) -> None:
    c = s.by_name[worker].cluster
    for n in c.nodes:
        for i in range(n.gpus):
            assert c.fail(n, i)


def started_wait(s: FleetSim, cls: str) -> list[float]:
    return sorted(s.metrics.waits[cls])


def test_split_and_classes():
    assert split_nodes(112, 3) == [38, 37, 37]
    assert split_nodes(6, 6) == [1] * 6
    with pytest.raises(ValueError):
        split_nodes(2, 3)
    with pytest.raises(ValueError):
        FleetConfig(nodes=4, clusters=1)
    assert job_class(job(0, 0, 1)) == ONE_GPU
    assert job_class(job(0, 0, 8)) == MULTI_GPU
    assert job_class(job(0, 0, 16)) == MULTI_POD


# worker-1's GPUs all failed; worker-2 has room for one 8-GPU job at a time
SCENARIO = [job(0, 0.0, 8, duration=HOUR), job(1, 10.0, 8, duration=600.0)]


def test_capacity_never_nominates_a_worker_where_the_pods_cannot_be_placed():
    s = sim(SCENARIO, CAPACITY, nodes=2, clusters=2)
    assert isinstance(s.reconciler, DispatchReconciler)  # the controller's own reconciler decides
    break_all(s, "worker-1")
    s.run()
    s.check()
    m = s.metrics
    assert m.created_by_worker == {"worker-2": 2}  # never a copy where nothing can be placed
    assert m.remote_deleted == 0
    assert m.unplaceable_dispatches == 0 and m.unplaceable_gpu_s == 0
    assert m.jobs_started == 2 and m.jobs_completed == 2
    first, second = started_wait(s, MULTI_GPU)
    assert first <= 2.0
    # waits for job 0 to end, and no longer: GPUs freed on a usable worker end the dispatch backoff
    assert HOUR - 10 <= second <= HOUR - 10 + 2.0
    assert m.decisions["Nominated"] == 2 and m.decisions["NoClusterFits"] >= 1


def test_all_at_once_dispatches_to_the_broken_worker_by_quota():
    s = sim(SCENARIO, ALL_AT_ONCE, nodes=2, clusters=2)
    break_all(s, "worker-1")
    s.run()
    s.check()
    m = s.metrics
    # job 0: both copies reserve at once, the worker whose pods start wins (the benefit of the doubt);
    # job 1: only worker-1 has quota left -> it wins and its pods never start (no repair here)
    assert m.remote_created == 4 and m.remote_deleted == 2
    assert m.unplaceable_dispatches == 1
    assert m.unplaceable_gpu_s == pytest.approx(8 * (2 * HOUR - 11.0), abs=8 * 2)
    assert m.jobs_started == 1
    assert started_wait(s, MULTI_GPU)[1] == pytest.approx(2 * HOUR - 10.0)  # censored at the window's end


def test_all_at_once_creates_n_copies_and_deletes_n_minus_1():
    s = sim([job(0, 0.0, 1)], ALL_AT_ONCE, nodes=4, clusters=4)
    s.run()
    s.check()
    assert s.metrics.created_by_worker == {f"worker-{i}": 1 for i in range(1, 5)}
    assert s.metrics.remote_deleted == 3
    assert s.metrics.jobs_started == 1


def test_incremental_nominates_in_rounds():
    # five 1-node workers; jobs 0-2 fill three of them; job 3 arrives later
    jobs = [job(i, float(i), 8) for i in range(3)] + [job(3, 100.0, 8)]
    inc = sim(jobs, INCREMENTAL, nodes=5, clusters=5)
    inc.run()
    inc.check()
    every = sim(jobs, ALL_AT_ONCE, nodes=5, clusters=5)
    every.run()
    every.check()
    # incremental: each of jobs 0-2 goes to one of worker-1..3 (round 1 names those three only), so
    # job 3's first round finds no quota; 5 minutes later round 2 adds worker-4 and worker-5
    assert inc.metrics.created_by_worker == {"worker-1": 4, "worker-2": 4, "worker-3": 4, "worker-4": 1, "worker-5": 1}
    assert inc.metrics.remote_deleted == 3 * 2 + 4
    wait3 = max(started_wait(inc, MULTI_GPU))
    assert 300.0 < wait3 <= 303.0
    # all-at-once: a free worker at once, but 5 copies per job
    assert every.metrics.remote_created == 20 and every.metrics.remote_deleted == 16
    assert max(started_wait(every, MULTI_GPU)) <= 2.0


@pytest.mark.parametrize("dispatcher", [ALL_AT_ONCE, INCREMENTAL, CAPACITY])
def test_deterministic_by_seed(dispatcher):
    window = synthetic(12.0, 3, 64)

    def once(seed: int) -> dict:
        s = FleetSim(window.jobs, 12 * HOUR, dispatcher,
                     FleetConfig(nodes=12, clusters=3, gpu_failure_rate=2.0, seed=seed))
        s.run()
        s.check()
        return s.metrics.summary()

    a, b = once(5), once(5)
    assert a == b
    assert a["gpu_failures"] > 0 and a["jobs_started"] > 0
    assert once(6)["gpu_failures"] != a["gpu_failures"]  # the seed drives the failures


@pytest.mark.parametrize("argv, needle", [
    (["--clusters", "1"], "--clusters"),
    (["--dispatchers", "all-at-once,bogus"], "bogus"),
    (["--nodes", "2", "--clusters", "3"], "cannot split"),
    (["--hours", "-1"], "--hours"),
    (["--trace", "/nonexistent/philly.csv"], "trace not found"),
])
def test_bad_cli_input_is_one_line_and_exit_2(argv, needle, capsys):
    assert fleet_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.startswith("queuepilot simulate: ")


def test_cli_runs_and_writes_json(tmp_path, capsys):
    out = tmp_path / "fleet.json"
    rc = fleet_cli.main(["--trace", "synthetic", "--hours", "6", "--nodes", "9", "--clusters", "3",
                         "--gpu-failure-rate", "1", "--seed", "2", "--no-progress", "--json", str(out)])
    assert rc == 0
    import json

    data = json.loads(out.read_text())
    assert set(data["dispatchers"]) == {ALL_AT_ONCE, INCREMENTAL, CAPACITY}
    assert data["meta"]["nodes_per_cluster"] == [3, 3, 3]
    assert "capacity" in capsys.readouterr().out


def test_every_dispatcher_sees_the_same_gpu_failures():
    window = synthetic(12.0, 4, 64)
    cfg = FleetConfig(nodes=12, clusters=3, gpu_failure_rate=2.0, seed=4)
    failures = set()
    for d in (ALL_AT_ONCE, INCREMENTAL, CAPACITY):
        s = FleetSim(window.jobs, 12 * HOUR, d, cfg)
        s.run()
        failures.add(s.metrics.gpu_failures)
    assert len(failures) == 1 and failures.pop() > 0


def test_incremental_with_three_clusters_is_all_at_once():
    # its first round names up to 3 workers: with 3 clusters the two built-ins are the same dispatcher
    window = synthetic(24.0, 7, 64)
    cfg = FleetConfig(nodes=9, clusters=3, gpu_failure_rate=1.0, seed=7)
    out = []
    for d in (ALL_AT_ONCE, INCREMENTAL):
        s = FleetSim(window.jobs, 24 * HOUR, d, cfg)
        s.run()
        out.append({k: v for k, v in s.metrics.summary().items() if k != "passes"})
    assert out[0] == out[1]
    assert out[0]["unplaceable_dispatches"] > 0  # a run where quota-only dispatch mattered


@pytest.mark.parametrize("dispatcher", [ALL_AT_ONCE, CAPACITY])
@pytest.mark.parametrize("queued", [True, False])
def test_gpus_no_pod_holds_while_jobs_wait_for_quota(dispatcher, queued):
    # worker-1: all 8 GPUs failed; worker-2: 4 of 8 taken by a pod outside Kueue.  Two 8-GPU jobs take
    # the manager's whole quota (16 GPUs, failed ones included) and cannot be placed; a 1-GPU job that
    # arrives at t=20 then waits for quota to the window's end, while 4 healthy and 8 failed GPUs hold no pod
    jobs = [job(0, 0.0, 8), job(1, 10.0, 8)] + ([job(2, 20.0, 1)] if queued else [])
    s = sim(jobs, dispatcher, nodes=2, clusters=2)
    break_all(s, "worker-1")
    assert s.by_name["worker-2"].cluster.place("a100", [("other/outside-0", 4)])
    s.run()
    s.check()
    m = s.metrics.summary()
    assert s.metrics.jobs_started == 0
    if not queued:  # nobody waits for quota: nothing is counted, however many GPUs are idle
        assert m["quota_wait_hours"] == m["free_gpu_hours_quota_wait"] == m["failed_gpu_hours_quota_wait"] == 0
        return
    waited = 2 * HOUR - 20.0  # from job 2's arrival (its pass within a second) to the end
    assert s.metrics.quota_wait_s == pytest.approx(waited, abs=2.0)
    assert s.metrics.free_gpu_s_quota_wait == pytest.approx(4 * s.metrics.quota_wait_s)
    assert s.metrics.failed_gpu_s_quota_wait == pytest.approx(8 * s.metrics.quota_wait_s)
    assert m["failed_gpu_hours_quota_wait"] == pytest.approx(8 * waited / HOUR, abs=0.01)
