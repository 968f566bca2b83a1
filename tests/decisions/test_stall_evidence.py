"""Ray-aware stall decisions on hand-built snapshots: what Ray says of an idle workload decides whether
its due deactivation goes ahead (``autoscaler.core.policy.ray_evidence``), and the report says which
evidence decided."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.stall import (
    MAX_OWNERS,
    StallConfig,
    StallTrack,
    decide_stalls,
    owner_key,
    ray_clusters_to_watch,
    remember_owner,
    stall_config,
)
from autoscaler.core.snapshot import GpuState, NodeState, PodKey, RayDemand, RayJobState, frozen_map
from tests.decisions.builders import NOW, group, ray_cluster, snapshot, worker, workload

OPT_IN = StallConfig(deactivate_cluster_queues=("cq-a",))
D = OPT_IN.deactivate_after_seconds
JOB = "job1"
KEY = f"team-a/rayjob-{JOB}"


def _node(pods: list[str], util: float | None = 0.0) -> NodeState:
    gs = tuple(GpuState(uuid=f"g{i}", node="n0", index=i, utilization=util if i == 0 else 0.0,
                        utilization_source="gpu_util", pod=PodKey("team-a", p)) for i, p in enumerate(pods))
    return NodeState(name="n0", gpu_allocatable=len(gs), gpu_requested=len(gs), gpus=gs)


def _rayjob_world(*, running: int | None = 0, busy: bool | None = True, pending: int = 0, infeasible: int = 0,
                  ray_age: float | None = 5.0, job_status: str = "RUNNING", kind: str = "RayJob",
                  owner_kind: str = "RayJob", demand_partial: bool = False, gpu_util: float | None = 0.0,
                  ns: str = "team-a", cq: str = "cq-a"):
    """A RayJob's workload on its RayCluster (two workers, every GPU idle unless ``gpu_util`` says what the
    first one does), and what Ray says of it."""
    workers = [worker(f"{JOB}-rc-w{i}", util=0.0, busy=busy, running=running) for i in range(2)]
    demand = [RayDemand("task", frozen_map({"GPU": 1.0}), count=pending)] if pending else []
    demand += [RayDemand("task", frozen_map({"TPU": 1.0}), count=infeasible, infeasible=True)] if infeasible else []
    rc = ray_cluster([group(workers=workers)], name=f"{JOB}-rc", ns=ns, opted_in=False, demand=demand,
                     ray_age=ray_age, labels={"ray.io/originated-from-cr-name": JOB, "ray.io/originated-from-crd": kind})
    rc = replace(rc, demand_partial=demand_partial)
    wl = workload(f"rayjob-{JOB}", ns=ns, cq=cq, admitted=True, owner_kind=owner_kind, owner_name=JOB)
    node = _node([w.pod for w in workers], gpu_util)
    if ns != "team-a":
        node = replace(node, gpus=tuple(replace(g, pod=PodKey(ns, g.pod.name)) for g in node.gpus if g.pod))
    snap = snapshot([node], [wl], ray=[rc])
    return replace(snap, ray_jobs=frozen_map({f"{ns}/{JOB}": RayJobState(ns, JOB, job_status=job_status)}))


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


def test_a_partial_answer_is_no_verdict_of_quiet():
    """A state-API list of pending work that failed or was cut short: nothing may be said to wait."""
    s = _due(_rayjob_world(demand_partial=True), quiet_for=10 * D)
    assert (s.deactivate, s.evidence_kind) == (False, "unknown") and "misses part of its pending work" in s.message
    # what the partial answer does show still counts: work is work
    s = _due(_rayjob_world(demand_partial=True, running=1), quiet_for=10 * D)
    assert s.evidence_kind == "active"


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


# ------------------------------------------------------------------- which heads the controller asks
RC = f"team-a/{JOB}-rc"


def test_the_cluster_of_an_idle_opted_in_ray_workload_is_watched():
    assert ray_clusters_to_watch(_rayjob_world(), OPT_IN) == {RC}
    by_namespace = StallConfig(deactivate_namespaces=("team-b",))
    assert ray_clusters_to_watch(_rayjob_world(ns="team-b", cq="cq-x"), by_namespace) == {f"team-b/{JOB}-rc"}
    # a RayCluster the workload owns (a Kueue-managed RayCluster that did not opt in to scaling) too
    rc = ray_cluster([group(workers=[worker(f"{JOB}-rc-w0", util=0.0)])], name=f"{JOB}-rc", opted_in=False)
    wl = workload("raycluster-x", admitted=True, owner_kind="RayCluster", owner_name=f"{JOB}-rc")
    assert ray_clusters_to_watch(snapshot([_node([f"{JOB}-rc-w0"])], [wl], ray=[rc]), OPT_IN) == {RC}


@pytest.mark.parametrize(("world", "config"), [
    ({}, StallConfig()),  # nothing opted in to deactivation: Ray's view would change no decision
    ({"cq": "cq-b"}, OPT_IN),  # another ClusterQueue
    ({}, replace(OPT_IN, enabled=False)),
    ({"gpu_util": 0.5}, OPT_IN),  # a GPU at work: not stalled
    ({"gpu_util": None}, OPT_IN),  # a GPU whose use is unknown: not stalled
    ({"job_status": "SUCCEEDED"}, OPT_IN),  # the Ray job ended: decided without Ray's view
    ({"kind": "RayService", "owner_kind": "RayService"}, OPT_IN),  # serving: decided without it
    ({"kind": "RayService", "owner_kind": "RayService"}, replace(OPT_IN, deactivate_serving=True)),
])
def test_no_head_is_asked_where_ray_cannot_change_the_decision(world, config):
    assert ray_clusters_to_watch(_rayjob_world(**world), config) == frozenset()


def test_no_head_is_asked_on_a_stale_gpu_signal():
    snap = _rayjob_world()
    stale = replace(snap, signals=snapshot(gpu_age=600.0).signals)
    assert ray_clusters_to_watch(snap, OPT_IN) == {RC} and ray_clusters_to_watch(stale, OPT_IN) == frozenset()


def test_a_cluster_in_another_namespace_cannot_speak_for_a_workload():
    """Origin labels are the tenant's to write: a RayCluster in team-b labelled as made by team-a's RayJob
    is neither that workload's cluster nor watched for it (only the workload's own namespace counts)."""
    snap = _rayjob_world()
    (rc,) = snap.ray_clusters.values()
    foreign = replace(rc, namespace="team-b", demand_signal=replace(rc.demand_signal, name=f"ray/team-b/{rc.name}"))
    snap = replace(snap, ray_clusters=frozen_map({foreign.key: foreign}))
    assert ray_clusters_to_watch(snap, replace(OPT_IN, deactivate_namespaces=("team-b",))) == frozenset()
    s = _due(snap)
    assert s.evidence_kind == "unknown" and "RayCluster is not known" in s.message


# ------------------------------------------------------------------- a workload its owner brought back
def _reactivated(snap, deactivations: int = 1):
    """The same world, its Workload reactivated after ``deactivations`` deactivations (Kueue's schedulingStats)."""
    wl = snap.workloads[KEY]
    return replace(snap, workloads=frozen_map({KEY: replace(wl, deactivations=deactivations)}))


def test_a_reactivated_workload_is_not_deactivated_again_on_a_quiet_cluster():
    """Its owner brought it back: a pause Ray cannot see looks the same as the one it was killed in, so
    quiet is not enough the second time; the report says why, and names the history."""
    quiet = OPT_IN.ray_quiet_seconds
    assert _due(_rayjob_world(), quiet_for=quiet).deactivate  # without the history it goes
    s = _due(_reactivated(_rayjob_world(), 2), quiet_for=quiet)
    assert (s.deactivate, s.reason, s.evidence_kind) == (False, R.STALL_DEACTIVATION_HELD, "quiet")
    assert "reactivated after 2 deactivation(s)" in s.held and "stall.reactivated" in s.message
    # held on the quiet timer first, then for the history: a new reason is reported again
    snap = _reactivated(_rayjob_world())
    hist = {KEY: StallTrack(NOW - D, None, reported=True, quiet_since=NOW - 60.0, held="quiet")}
    assert decide_stalls(snap, OPT_IN, hist, NOW).stalled[0].held_new
    # the operator's choice: judged as any other
    assert _due(_reactivated(_rayjob_world()), replace(OPT_IN, reactivated="deactivate"), quiet_for=quiet).deactivate


def test_a_reactivated_workload_whose_ray_job_ended_still_goes():
    s = _due(_reactivated(_rayjob_world(running=None, busy=None, job_status="FAILED")))
    assert (s.deactivate, s.evidence_kind) == (True, "finished")


def test_a_reactivated_workload_off_ray_is_held_on_its_gpus_alone():
    node = _node(["trainer-0"])
    wl = workload("job-trainer", admitted=True, owner_kind="PyTorchJob", owner_name="trainer")
    hist = {wl.key: StallTrack(NOW - D, None, reported=True)}
    (fresh,) = decide_stalls(snapshot([node], [wl]), OPT_IN, hist, NOW).stalled
    (back,) = decide_stalls(snapshot([node], [replace(wl, deactivations=1)]), OPT_IN, hist, NOW).stalled
    assert (fresh.deactivate, fresh.evidence_kind) == (True, "none")
    assert (back.deactivate, back.evidence_kind) == (False, "none") and "reactivated after 1" in back.held


# ------------------------------------------------------------------- a job created again under its name
def _owners_due(snap, owners, config=OPT_IN, quiet_for: float | None = OPT_IN.ray_quiet_seconds):
    hist = {KEY: StallTrack(NOW - D, None, reported=True, quiet_since=NOW - quiet_for if quiet_for else None)}
    (s,) = decide_stalls(snap, config, hist, NOW, owners).stalled
    return s


def test_a_job_created_again_after_a_deactivation_is_held_as_a_reactivated_one():
    """A new Workload (no Kueue history) of the RayJob name whose workload was deactivated an hour ago: a
    quiet cluster is not enough; the report names the owner and when."""
    gone = {owner_key("team-a", "RayJob", JOB): NOW - 3600.0}
    s = _owners_due(_rayjob_world(), gone)
    assert (s.deactivate, s.reason, s.evidence_kind) == (False, R.STALL_DEACTIVATION_HELD, "quiet")
    assert f"RayJob {JOB} created again after a deactivation at" in s.held and "stall.remember_owners" in s.held
    # an owner of another name, kind or namespace is not this one
    for other in (owner_key("team-a", "RayJob", "other"), owner_key("team-a", "PyTorchJob", JOB),
                  owner_key("team-b", "RayJob", JOB)):
        assert _owners_due(_rayjob_world(), {other: NOW - 3600.0}).deactivate
    # remembered for stall.remember_owners only; 0 remembers nothing; reactivated: deactivate judges it as any
    assert _owners_due(_rayjob_world(), gone, replace(OPT_IN, remember_owners_seconds=3000.0)).deactivate
    assert _owners_due(_rayjob_world(), gone, replace(OPT_IN, remember_owners_seconds=0.0)).deactivate
    assert _owners_due(_rayjob_world(), gone, replace(OPT_IN, reactivated="deactivate")).deactivate
    # an ended Ray job still goes
    ended = _owners_due(_rayjob_world(running=None, busy=None, job_status="FAILED"), gone)
    assert (ended.deactivate, ended.evidence_kind) == (True, "finished")


def test_the_owners_remembered_are_pruned_and_bounded():
    config = replace(OPT_IN, remember_owners_seconds=100.0)
    owners = remember_owner({"ns/RayJob/old": 0.0, "ns/RayJob/kept": 50.0}, "ns/RayJob/new", config, 120.0)
    assert owners == {"ns/RayJob/kept": 50.0, "ns/RayJob/new": 120.0}
    assert remember_owner(owners, "ns/RayJob/kept", config, 130.0)["ns/RayJob/kept"] == 130.0  # renewed
    assert remember_owner(owners, None, config, 120.0) == owners  # an owner unknown: nothing added
    assert remember_owner({}, "ns/RayJob/x", replace(config, remember_owners_seconds=0.0), 1.0) == {}
    assert owner_key("ns", "", "x") is None and owner_key("ns", "RayJob", "") is None
    full = {f"ns/RayJob/j{i}": float(i) for i in range(MAX_OWNERS)}
    after = remember_owner(full, "ns/RayJob/last", replace(config, remember_owners_seconds=86400.0), float(MAX_OWNERS))
    assert len(after) == MAX_OWNERS and "ns/RayJob/j0" not in after and after["ns/RayJob/last"] == MAX_OWNERS


def test_the_config_section_takes_reactivated():
    assert stall_config({"stall": {"reactivated": "Deactivate"}}).reactivated == "deactivate"
    assert StallConfig().reactivated == "hold"
    with pytest.raises(ValueError, match="reactivated"):
        stall_config({"stall": {"reactivated": "sometimes"}})
    assert StallConfig().remember_owners_seconds == 7 * 86400.0
    assert stall_config({"stall": {"remember_owners": "6h"}}).remember_owners_seconds == 6 * 3600.0
    assert stall_config({"stall": {"remember_owners": 0}}).remember_owners_seconds == 0.0
    for bad in ("-1h", "40d", True, "soon"):
        with pytest.raises(ValueError, match="remember_owners"):
            stall_config({"stall": {"remember_owners": bad}})


def test_two_owner_memories_merge_at_the_later_time_of_each_owner():
    from autoscaler.core.policy.stall import merge_owners
    a = {"ns/Job/a": 10.0, "ns/Job/b": 50.0}
    b = {"ns/Job/b": 20.0, "ns/RayJob/c": 30.0}
    assert merge_owners(a, b) == merge_owners(b, a) == {"ns/Job/a": 10.0, "ns/Job/b": 50.0, "ns/RayJob/c": 30.0}
    assert a == {"ns/Job/a": 10.0, "ns/Job/b": 50.0}  # neither argument changed
