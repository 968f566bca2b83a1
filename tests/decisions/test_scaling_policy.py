"""Table tests for the worker-group scaling policy: every reason, the three write cases, history."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import ScalingDefaults, scaling_defaults
from autoscaler.core.policy.scaling import GroupHistory, ScalingContext, decide_scaling, workers_needed
from autoscaler.core.snapshot import ClusterQueueState, GpuState, PodKey, frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, node, ray_cluster, snapshot, worker, workload

D = ScalingDefaults()
LONG_AGO = NOW - 3600


def decide(rc, snap=None, history=None, defaults=D, now=NOW):
    snap = snap or snapshot(ray=[rc])
    return decide_scaling(snap, rc, defaults, history or {}, now)


def one(result):
    assert len(result.decisions) == 1
    return result.decisions[0]


def idle_hist(*pods, since=LONG_AGO):
    return {"gpu": GroupHistory(idle_since=frozen_map({p: since for p in pods}))}


def test_pending_demand_scales_up_with_replicas():
    rc = ray_cluster([group(workers=[worker("w0"), worker("w1")])], demand=[gpu_demand(1, count=3)])
    d = one(decide(rc))
    assert (d.direction, d.reason, d.current, d.desired, d.write) == ("up", R.PENDING_DEMAND, 2, 5, "replicas")
    assert d.pending_gpus == 3 and d.workers_to_delete == ()


def test_starting_workers_absorb_demand():
    rc = ray_cluster([group(workers=[worker("w0"), worker("w1", phase="Pending", ready=False)])],
                     demand=[gpu_demand(1, count=3)])
    assert one(decide(rc)).desired == 4  # 3 workers needed, 1 starting -> +2 on 2 replicas


def test_bundles_are_packed_into_workers():
    # 8-GPU workers: 3 x {GPU 4} + 2 x {GPU 2} = 16 GPUs -> first-fit decreasing: [4,4] [4,2,2] -> 2 workers
    bundles = [({"GPU": 4.0}, False)] * 3 + [({"GPU": 2.0}, False)] * 2
    assert workers_needed(bundles, {"GPU": 8.0}) == 2
    # STRICT_SPREAD: one worker per bundle
    assert workers_needed([({"GPU": 1.0}, True)] * 3, {"GPU": 8.0}) == 3


def test_idle_workers_scaled_down_by_name_idlest_first():
    ws = [worker("w0", util=0.6), worker("w1", util=0.0, busy=False), worker("w2", util=0.01, busy=False)]
    rc = ray_cluster([group(workers=ws)])
    d = one(decide(rc, history=idle_hist("w1", "w2")))
    # utilization floor: mean (0.6+0+0.01)/3 = 0.203, target 0.7 -> ceil(3 * 0.29) = 1 -> not binding
    assert (d.direction, d.reason, d.desired, d.write) == ("down", R.IDLE_WORKERS, 1, "replicas")
    assert d.workers_to_delete == ("w1", "w2")  # lowest utilization first
    assert d.idle_gpus == 2


SPARE = {"queuepilot.io/keep-spare-for-target": "true"}


def test_utilization_target_keeps_headroom_without_pressure_when_asked():
    ws = [worker("w0", util=0.95), worker("w1", util=0.0, busy=False), worker("w2", util=0.0, busy=False)]
    d = one(decide(ray_cluster([group(workers=ws)], annotations=SPARE), history=idle_hist("w1", "w2")))
    # HPA rule: mean 0.317 / 0.7 = 0.452 -> ceil(3 * 0.452) = ceil(1.357) = 2 -> one idle worker kept
    assert (d.reason, d.desired, d.workers_to_delete) == (R.KEPT_FOR_UTILIZATION_TARGET, 2, ("w1",))
    # by default empty workers go, however hot the busy one runs
    d = one(decide(ray_cluster([group(workers=ws)]), history=idle_hist("w1", "w2")))
    assert (d.reason, d.desired, d.workers_to_delete) == (R.IDLE_WORKERS, 1, ("w1", "w2"))


def waiting_elsewhere(minutes: float):
    return workload("other", ns="team-b", cq="cq-b", quota_reserved=False, created=NOW - minutes * 60)


def test_queue_pressure_uses_the_shorter_window_and_drops_the_floor():
    ws = [worker("w0", util=0.95), worker("w1", util=0.0, busy=False), worker("w2", util=0.0, busy=False)]
    rc = ray_cluster([group(workers=ws)], cq="cq-a")
    # 75 s: past the 60 s pressured window, not the 90 s one
    hist = idle_hist("w1", "w2", since=NOW - 75)
    quiet = one(decide(rc, snapshot(ray=[rc]), hist))
    assert (quiet.direction, quiet.reason) == ("hold", R.WITHIN_TARGET)
    busy = one(decide(rc, snapshot(ray=[rc], workloads=[waiting_elsewhere(12)]), hist))
    assert (busy.direction, busy.reason, busy.desired) == ("down", R.IDLE_WORKERS_QUEUE_PRESSURE, 1)
    assert "team-b/other" in busy.message
    # a workload waiting for less than the threshold (5 min) is no pressure
    short = one(decide(rc, snapshot(ray=[rc], workloads=[waiting_elsewhere(2)]), hist))
    assert short.reason == R.WITHIN_TARGET
    # the team's own queue does not count
    own = replace(waiting_elsewhere(12), cluster_queue="cq-a")
    assert one(decide(rc, snapshot(ray=[rc], workloads=[own]), hist)).reason == R.WITHIN_TARGET


def test_idle_timer_starts_on_first_sight_and_unknown_work_is_not_idle():
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.0, busy=None), worker("w2", util=None, busy=False)]
    rc = ray_cluster([group(workers=ws)])
    r1 = decide(rc)
    assert one(r1).reason == R.WITHIN_TARGET
    assert dict(r1.history["gpu"].idle_since) == {"w0": NOW}
    later = NOW + D.idle_window_seconds
    rc2 = ray_cluster([group(workers=ws)], now=later)
    r2 = decide_scaling(snapshot(ray=[rc2], now=later), rc2, D, r1.history, later)
    d = one(r2)
    assert d.workers_to_delete == ("w0",)


def test_stale_signals_hold_and_reset_idle_timers():
    ws = [worker("w0", util=0.0, busy=False), worker("w1")]
    rc = ray_cluster([group(workers=ws)], ray_age=600, demand=[gpu_demand(1, count=5)])
    r = decide(rc, history=idle_hist("w0"))
    d = one(r)
    assert (d.direction, d.reason, d.desired, d.write) == ("hold", R.RAY_SIGNAL_STALE, 2, "none")
    assert dict(r.history["gpu"].idle_since) == {}
    rc2 = ray_cluster([group(workers=ws)])
    d2 = one(decide(rc2, snapshot(ray=[rc2], gpu_age=600), idle_hist("w0")))
    assert (d2.direction, d2.reason, d2.write) == ("hold", R.GPU_SIGNAL_STALE, "none")
    assert one(decide(ray_cluster([group(workers=ws)], ray_age=None))).reason == R.RAY_SIGNAL_STALE


def test_cpu_only_group_uses_cpu_utilization_and_ignores_gpu_staleness():
    ws = [worker("c0", util=None, cpu=0.01, mem=0.1, busy=False, gpus=0), worker("c1", util=None, cpu=0.5, mem=0.5, gpus=0)]
    rc = ray_cluster([group("cpu", ws, gpus=0)])
    d = one(decide_scaling(snapshot(ray=[rc], gpu_age=600), rc, D, {"cpu": GroupHistory(
        idle_since=frozen_map({"c0": LONG_AGO}))}, NOW))
    # CPU floor: mean 0.255 / 0.7 -> ceil(2 * 0.364) = 1; memory: 0.3 / 0.8 -> ceil(0.75) = 1 -> not binding
    assert (d.reason, d.desired, d.workers_to_delete) == (R.IDLE_WORKERS, 1, ("c0",))


def test_kueue_managed_non_elastic_is_left_alone():
    rc = ray_cluster([group(workers=[worker("w0", util=0.0, busy=False)])],
                     labels={"kueue.x-k8s.io/queue-name": "lq"}, demand=[gpu_demand(1, count=4)])
    d = one(decide(rc, history=idle_hist("w0")))
    assert (d.direction, d.reason, d.write, d.desired) == ("hold", R.NOT_SCALABLE_UNDER_KUEUE, "none", 1)


def test_kueue_elastic_scale_up_capped_by_quota_headroom():
    cq = ClusterQueueState("cq-a", nominal_gpus=frozen_map({"a100": 4}), used_gpus=frozen_map({"a100": 3}))
    rc = ray_cluster([group(workers=[worker("w0"), worker("w1")])], cq="cq-a", demand=[gpu_demand(1, count=3)],
                     labels={"kueue.x-k8s.io/queue-name": "lq"}, annotations={"kueue.x-k8s.io/elastic-job": "true"})
    d = one(decide(rc, snapshot(ray=[rc], cqs=[cq])))
    assert (d.reason, d.desired, d.write) == (R.QUOTA_HEADROOM_LIMIT, 3, "replicas")  # only 1 GPU of headroom
    assert any("quota headroom" in s for s in d.infeasible)


def test_at_max_replicas_is_reported_infeasible():
    rc = ray_cluster([group(workers=[worker("w0"), worker("w1")], hi=3)], demand=[gpu_demand(1, count=5)])
    d = one(decide(rc))
    assert (d.desired, d.reason) == (3, R.AT_MAX_REPLICAS)
    assert any("maxReplicas 3" in s for s in d.infeasible)


def test_infeasible_demand_never_scales_up():
    rc = ray_cluster([group(workers=[worker("w0")])], demand=[gpu_demand(1, count=2, infeasible=True),
                                                            gpu_demand(2, count=1)])  # 2 GPUs > 1 per worker
    d = one(decide(rc))
    assert (d.direction, d.desired, d.write, d.reason) == ("hold", 1, "none", R.INFEASIBLE_DEMAND)
    assert len(d.infeasible) == 2
    assert any("infeasible per Ray" in s for s in d.infeasible) and any("fits no worker" in s for s in d.infeasible)


def test_waiting_for_worker_deletion_and_clearing_the_list():
    ws = [worker("w0"), worker("w1")]
    d = one(decide(ray_cluster([group(workers=ws, to_delete=("w1",))], demand=[gpu_demand(1, count=3)])))
    assert (d.reason, d.write) == (R.WAITING_FOR_WORKER_DELETION, "none")
    d = one(decide(ray_cluster([group(workers=ws, to_delete=("gone-pod",))])))
    assert (d.reason, d.write, d.clear_workers_to_delete, d.desired) == (R.WORKERS_DELETED, "replicas", True, 2)


def test_in_tree_autoscaler_steers_max_only_and_restores_it():
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.0, busy=False), worker("w2", util=0.6)]
    rc = ray_cluster([group(workers=ws, hi=8)], in_tree=True)
    r = decide(rc, history=idle_hist("w0", "w1"))
    d = one(r)
    assert (d.write, d.new_max, d.new_min, d.workers_to_delete, d.direction) == ("min_max", 1, 0, (), "down")
    # the Ray autoscaler removed the workers; the work is busy again: max goes back to the user's 8
    rc2 = ray_cluster([group(workers=[worker("w2", util=0.9)], hi=1)], in_tree=True)
    d2 = one(decide(rc2, history=r.history, now=NOW + 30))
    assert (d2.write, d2.new_max) == ("min_max", 8)
    # a user who changes maxReplicas meanwhile is followed
    rc3 = ray_cluster([group(workers=[worker("w2", util=0.9)], hi=5)], in_tree=True)
    d3 = one(decide(rc3, history=r.history, now=NOW + 30))
    assert d3.write == "none"


def test_suspended_and_not_opted_in():
    assert one(decide(ray_cluster([group(workers=[worker("w0")])], suspended=True))).reason == R.CLUSTER_SUSPENDED
    assert decide(ray_cluster([group(workers=[worker("w0")])], opted_in=False)).decisions == ()


def test_annotations_override_and_malformed_warns():
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.0, busy=False), worker("w2", util=0.0, busy=False)]
    rc = ray_cluster([group(workers=ws)], annotations={"queuepilot.io/scale-down-policy": "Pods:1:60",
                                                       "queuepilot.io/idle-window": "ten minutes",
                                                       "queuepilot.io/target-gpu-utilisation": "0.5"})
    r = decide(rc, history=idle_hist("w0", "w1", "w2"))
    d = one(r)
    assert (d.desired, d.reason) == (2, R.SCALE_DOWN_LIMIT)  # Pods:1:60 -> one at a time
    assert len(d.workers_to_delete) == 1
    assert len(r.warnings) == 2
    assert any("idle-window" in w and "ten minutes" in w for w in r.warnings)
    assert any("unknown annotation queuepilot.io/target-gpu-utilisation" in w for w in r.warnings)


def test_scale_down_stabilization_uses_history_but_not_for_empty_workers():
    """The stabilization window smooths recommendations (here: replicas whose pods were never made);
    it does not hold back workers that sat empty for their idle window."""
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.0, busy=False)]
    hist = {"gpu": GroupHistory(recommendations=((NOW - 100, 2),), idle_since=frozen_map({"w0": LONG_AGO,
                                                                                          "w1": LONG_AGO}))}
    d = one(decide(ray_cluster([group(workers=ws)]), history=hist))
    assert (d.desired, d.reason, d.write) == (0, R.IDLE_WORKERS, "replicas")
    assert set(d.workers_to_delete) == {"w0", "w1"}
    # 4 replicas, 2 busy pods, no demand: the 2 never-made replicas wait for the window
    busy = [worker("w0", util=0.9, busy=True), worker("w1", util=0.9, busy=True)]
    hist = {"gpu": GroupHistory(recommendations=((NOW - 100, 4),))}
    d = one(decide(ray_cluster([group(workers=busy, replicas=4)]), history=hist))
    assert (d.desired, d.reason, d.write) == (4, R.SCALE_DOWN_STABILIZED, "none")


def test_min_replicas_respected():
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.0, busy=False)]
    d = one(decide(ray_cluster([group(workers=ws, lo=2)]), history=idle_hist("w0", "w1")))
    assert (d.desired, d.write, d.workers_to_delete) == (2, "none", ())


def test_scaling_defaults_from_settings():
    s = scaling_defaults({"scaling": {"idle_window": "15m", "target_gpu_utilization": "60%",
                                      "scale_down": {"policies": ["Pods:2:60"], "select_policy": "Min",
                                                     "stabilization_window": "2m"}}})
    assert (s.idle_window_seconds, s.target_gpu_utilization) == (900.0, 0.6)
    assert (s.scale_down.select_policy, s.scale_down.stabilization_window_seconds) == ("Min", 120)
    assert [(p.type, p.value, p.period_seconds) for p in s.scale_down.policies] == [("Pods", 2, 60)]
    with pytest.raises(ValueError, match=r"scaling\.idle_windw"):
        scaling_defaults({"scaling": {"idle_windw": "15m"}})


# ------------------------------------------------------------------ which GPU signal the messages name
def _with_gpus(rc, source):
    """A node ``n`` carrying one GPU per GPU worker of ``rc``, attributed to it, from ``source``."""
    gs = tuple(GpuState(uuid=f"{w.pod}-0", node="n", index=i, utilization=w.gpu_utilization,
                        utilization_source=source, pod=PodKey(rc.namespace, w.pod))
               for i, w in enumerate(rc.groups[0].workers))
    return snapshot([replace(node("n", gpus=0), gpus=gs)], ray=[rc])


@pytest.mark.parametrize("source", ["gr_engine_active", "sm_active", "gpu_util"])
def test_idle_message_names_the_utilization_signal(source):
    ws = [worker("w0", util=0.0, busy=False), worker("w1", util=0.02, busy=False)]
    rc = ray_cluster([group(workers=ws)])
    named = one(decide(rc, snap=_with_gpus(rc, source), history=idle_hist("w0", "w1")))
    plain = one(decide(rc, snap=_with_gpus(rc, ""), history=idle_hist("w0", "w1")))
    assert f"(GPU {source} under 5%, no Ray work) for 1.5m" in named.message
    assert "(GPU use under 5%, no Ray work) for 1.5m" in plain.message
    # only the text differs
    assert replace(named, message="") == replace(plain, message="")


def test_utilization_floor_message_names_the_signal():
    ws = [worker("w0", util=0.9), worker("w1", util=0.9), worker("w2", util=0.0, busy=False)]
    rc = ray_cluster([group(workers=ws)], annotations=SPARE)
    d = one(decide(rc, snap=_with_gpus(rc, "sm_active"), history=idle_hist("w2")))
    assert d.reason == R.KEPT_FOR_UTILIZATION_TARGET
    assert "GPU sm_active 60% of target 70%" in d.message


def test_gpus_of_other_pods_do_not_name_the_signal():
    ws = [worker("w0", util=0.0, busy=False)]
    rc = ray_cluster([group(workers=ws)])
    other = replace(node("n", gpus=0), gpus=(GpuState(uuid="x", node="n", index=0, utilization_source="sm_active",
                                                      pod=PodKey("team-b", "w0")),))
    d = one(decide(rc, snap=snapshot([other], ray=[rc]), history=idle_hist("w0")))
    assert "(GPU use under 5%" in d.message


# -------------------------------------------------------------------------------- history and context
def test_rollback_keeps_observations_and_forgets_the_write():
    old = GroupHistory(recommendations=((NOW - 50, 3),), scale_events=((NOW - 50, 1),), user_max=8, written_max=6)
    new = GroupHistory(recommendations=((NOW - 50, 3), (NOW, 2)), scale_events=((NOW - 50, 1), (NOW, -1)),
                       idle_since=frozen_map({"w1": NOW - 700}), user_max=9, written_max=2)
    back = new.rollback(old)
    assert back == GroupHistory(recommendations=new.recommendations, scale_events=old.scale_events,
                                idle_since=new.idle_since, user_max=9, written_max=6)


def test_a_failed_write_does_not_count_against_the_step_limits():
    # scale-down limited to 1 pod per 5 minutes: after a failed write the next pass may remove one again
    ws = [worker(f"w{i}", util=0.0, busy=False) for i in range(3)]
    rc = ray_cluster([group(workers=ws)], annotations={"queuepilot.io/scale-down-policy": "Pods:1:300;window=0s"})
    first = decide(rc, history=idle_hist("w0", "w1", "w2"))
    assert one(first).desired == 2
    written = decide(rc, history=first.history, now=NOW + 10)
    assert one(written).reason == R.SCALE_DOWN_LIMIT and one(written).desired == 3
    rolled = {g: h.rollback(idle_hist("w0", "w1", "w2")[g]) for g, h in first.history.items()}
    assert one(decide(rc, history=rolled, now=NOW + 10)).desired == 2


def test_one_context_serves_every_cluster_of_the_snapshot():
    others = [replace(workload("q", ns="team-b", cq="cq-b", quota_reserved=False), created_at=NOW - 3600)]
    rcs = [ray_cluster([group(workers=[worker("w0", util=0.0, busy=False)])], name=f"rc{i}") for i in range(3)]
    snap = snapshot(workloads=others, ray=rcs)
    ctx = ScalingContext.build(snap, NOW)
    assert len(ctx.waiting) == 1 and ctx.waiting[0][1].name == "q"
    for rc in rcs:
        shared = decide_scaling(snap, rc, D, idle_hist("w0"), NOW, context=ctx)
        alone = decide_scaling(snap, rc, D, idle_hist("w0"), NOW)
        assert shared == alone and one(shared).reason == R.IDLE_WORKERS_QUEUE_PRESSURE
    with pytest.raises(ValueError, match="another snapshot"):
        decide_scaling(snap, rcs[0], D, {}, NOW + 1, context=ctx)


def test_each_decision_names_its_groups_position_in_the_spec():
    """The writer patches ``spec.workerGroupSpecs[i]``: each decision carries its group's ``i``."""
    rc = ray_cluster([group("cpu", gpus=0), group("gpu"), group("big", gpus=8)])
    result = decide_scaling(snapshot(ray=[rc]), rc, ScalingDefaults(), {}, NOW)
    assert [(d.group, d.group_index) for d in result.decisions] == [("cpu", 0), ("gpu", 1), ("big", 2)]
