"""Ray-aware stall decisions on hand-built snapshots: what Ray says of an idle workload decides whether
its due deactivation goes ahead (``autoscaler.core.policy.ray_evidence``), and the report says which
evidence decided."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.stall import StallConfig, StallTrack, decide_stalls, stall_config
from autoscaler.core.snapshot import GpuState, NodeState, PodKey, RayDemand, RayJobState, frozen_map
from tests.decisions.builders import NOW, group, ray_cluster, snapshot, worker, workload

OPT_IN = StallConfig(deactivate_cluster_queues=("cq-a",))
D = OPT_IN.deactivate_after_seconds
JOB = "job1"
KEY = f"team-a/rayjob-{JOB}"


def _node(pods: list[str]) -> NodeState:
    gs = tuple(GpuState(uuid=f"g{i}", node="n0", index=i, utilization=0.0, utilization_source="gpu_util",
                        pod=PodKey("team-a", p)) for i, p in enumerate(pods))
    return NodeState(name="n0", gpu_allocatable=len(gs), gpu_requested=len(gs), gpus=gs)


def _rayjob_world(*, running: int | None = 0, busy: bool | None = True, pending: int = 0, infeasible: int = 0,
                  ray_age: float | None = 5.0, job_status: str = "RUNNING", kind: str = "RayJob",
                  owner_kind: str = "RayJob"):
    """A RayJob's workload on its RayCluster (two workers, every GPU idle), and what Ray says of it."""
    workers = [worker(f"{JOB}-rc-w{i}", util=0.0, busy=busy, running=running) for i in range(2)]
    demand = [RayDemand("task", frozen_map({"GPU": 1.0}), count=pending)] if pending else []
    demand += [RayDemand("task", frozen_map({"TPU": 1.0}), count=infeasible, infeasible=True)] if infeasible else []
    rc = ray_cluster([group(workers=workers)], name=f"{JOB}-rc", opted_in=False, demand=demand, ray_age=ray_age,
                     labels={"ray.io/originated-from-cr-name": JOB, "ray.io/originated-from-crd": kind})
    wl = workload(f"rayjob-{JOB}", admitted=True, owner_kind=owner_kind, owner_name=JOB)
    snap = snapshot([_node([w.pod for w in workers])], [wl], ray=[rc])
    return replace(snap, ray_jobs=frozen_map({f"team-a/{JOB}": RayJobState("team-a", JOB, job_status=job_status)}))


def _due(snap, config=OPT_IN, quiet_for: float | None = None):
    """One pass at which the deactivation is due (every GPU idle for the delay)."""
    quiet = None if quiet_for is None else NOW - quiet_for
    hist = {KEY: StallTrack(NOW - D, None, reported=True, quiet_since=quiet)}
    (s,) = decide_stalls(snap, config, hist, NOW).stalled
    return s


def test_quiet_ray_lets_the_deactivation_go_and_names_the_evidence():
    s = _due(_rayjob_world(), quiet_for=OPT_IN.ray_quiet_seconds)
    assert (s.deactivate, s.reason, s.evidence_kind) == (True, R.STALLED_WORKLOAD_DEACTIVATED, "quiet")
    assert "Ray reports no task running or waiting on RayCluster job1-rc (2 worker(s))" in s.message


def test_ray_must_stay_quiet_for_its_own_time_before_the_workload_goes():
    s = _due(_rayjob_world(), quiet_for=60.0)
    assert (s.deactivate, s.reason, s.held) == (False, R.STALL_DEACTIVATION_HELD, s.held)
    assert "stall.ray_quiet" in s.held and s.held_new
    # the quiet timer runs from the first quiet pass, across passes
    snap = _rayjob_world()
    hist = {KEY: StallTrack(NOW - D, None, reported=True)}
    first = decide_stalls(snap, OPT_IN, hist, NOW)
    assert first.history[KEY].quiet_since == NOW and not first.stalled[0].deactivate
    t = NOW + OPT_IN.ray_quiet_seconds
    later = decide_stalls(replace(snap, taken_at=t, signals=snapshot(now=t).signals,
                                  ray_clusters=frozen_map({k: replace(v, demand_signal=replace(
                                      v.demand_signal, observed_at=t)) for k, v in snap.ray_clusters.items()})),
                          OPT_IN, first.history, t)
    assert later.stalled[0].deactivate


@pytest.mark.parametrize(("world", "words"), [
    ({"running": 2}, "4 task(s) running"),  # two workers, two each
    ({"running": 0, "pending": 3}, "3 waiting"),
])
def test_ray_at_work_holds_the_deactivation_paused_not_hung(world, words):
    s = _due(_rayjob_world(**world), quiet_for=10 * D)
    assert (s.deactivate, s.reason, s.evidence_kind) == (False, R.STALL_DEACTIVATION_HELD, "active")
    assert words in s.message and "paused" in s.message and "deactivation held" in s.message


def test_a_finished_ray_job_goes_whatever_its_cluster_says():
    s = _due(_rayjob_world(running=None, busy=None, job_status="SUCCEEDED"))
    assert (s.deactivate, s.evidence_kind) == (True, "finished")
    assert "Ray job ended (SUCCEEDED)" in s.message


@pytest.mark.parametrize("world", [{"ray_age": 600.0}, {"ray_age": None}, {"running": None, "busy": True}])
def test_without_a_fresh_ray_verdict_a_ray_workload_is_held_unless_configured(world):
    s = _due(_rayjob_world(**world))
    assert (s.deactivate, s.evidence_kind) == (False, "unknown") and "stall.without_ray_signal" in s.held
    lax = replace(OPT_IN, without_ray_signal="deactivate")
    assert _due(_rayjob_world(**world), lax).deactivate


def test_serving_is_never_deactivated_by_default():
    for world in ({"kind": "RayService", "owner_kind": "RayService"},):
        s = _due(_rayjob_world(**world), quiet_for=10 * D)
        assert (s.deactivate, s.evidence_kind) == (False, "serving") and "stall.deactivate_serving" in s.held
        assert _due(_rayjob_world(**world), replace(OPT_IN, deactivate_serving=True), quiet_for=10 * D).deactivate


def test_infeasible_demand_is_no_work():
    s = _due(_rayjob_world(infeasible=4), quiet_for=OPT_IN.ray_quiet_seconds)
    assert s.deactivate and "4 infeasible" in s.message


def test_a_held_deactivation_is_reported_once_per_reason():
    snap = _rayjob_world(running=1)
    hist = {KEY: StallTrack(NOW - D, None, reported=True)}
    first = decide_stalls(snap, OPT_IN, hist, NOW)
    assert first.stalled[0].held_new
    again = decide_stalls(snap, OPT_IN, first.history, NOW)
    assert not again.stalled[0].held_new and again.stalled[0].held


def test_the_config_section_takes_the_ray_keys():
    c = stall_config({"stall": {"ray_quiet": "45m", "deactivate_serving": True, "without_ray_signal": "deactivate"}})
    assert (c.ray_quiet_seconds, c.deactivate_serving, c.without_ray_signal) == (2700.0, True, "deactivate")
    with pytest.raises(ValueError, match="without_ray_signal"):
        stall_config({"stall": {"without_ray_signal": "maybe"}})
