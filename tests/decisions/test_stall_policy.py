"""The stalled-workload decision on hand-built snapshots: attribution of GPUs to workloads (Job pods by
name, RayCluster and RayJob workers), the window, once per stall, the opt-in deactivation after its
own longer delay (report early, act late), and the ``stall:`` config section."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.stall import (
    StallConfig,
    StallTrack,
    decide_stalls,
    format_duration,
    stall_config,
    workload_gpus,
)
from autoscaler.core.snapshot import GpuState, NodeState, PodKey, frozen_map
from tests.decisions.builders import NOW, group, ray_cluster, snapshot, worker, workload

C = StallConfig()
W = C.window_seconds
D = C.deactivate_after_seconds  # the deactivation delay (opted in)
OPT_IN = StallConfig(deactivate_cluster_queues=("cq-a",))


def gpu_node(name: str, pods: dict[tuple[str, str], float | None], source: str = "gr_engine_active") -> NodeState:
    """A node with one GPU per (namespace, pod) -> utilization, plus one free GPU."""
    gs = [GpuState(uuid=f"{name}-{i}", node=name, index=i, utilization=u, utilization_source=source,
                   pod=PodKey(ns, pod)) for i, ((ns, pod), u) in enumerate(sorted(pods.items()))]
    gs.append(GpuState(uuid=f"{name}-free", node=name, index=len(gs), utilization=0.0))
    return NodeState(name=name, gpu_allocatable=len(gs), gpu_requested=len(pods), gpus=tuple(gs))


def job(name: str, gpus: int = 2, **kw):
    return workload(f"job-{name}", pod_sets=(("main", gpus, 1),), admitted=True, owner_kind="Job", owner_name=name,
                    **kw)


def train_snapshot(util: float | None, other: float | None = 0.0, *, now: float = NOW, gpu_age: float = 5.0,
                   wls=None):
    nodes = [gpu_node("n0", {("team-a", "train-abc12"): util, ("team-a", "train-xyz34"): other,
                             ("team-a", "trainer-q1w2e"): 0.9})]
    return snapshot(nodes, wls or [job("train"), job("trainer", gpus=1)], now=now, gpu_age=gpu_age)


def test_pods_are_attributed_by_job_name_longest_first():
    snap = train_snapshot(0.0)
    got = {k: sorted(g.pod.name for g in v) for k, v in
           workload_gpus(snap, list(snap.workloads.values())).items()}
    assert got == {"team-a/job-train": ["train-abc12", "train-xyz34"], "team-a/job-trainer": ["trainer-q1w2e"]}


@pytest.mark.parametrize(("util", "other", "stalled"), [
    (0.0, 0.0, True), (0.049, 0.01, True), (0.05, 0.0, False), (0.0, 0.3, False), (None, 0.0, False),
])
def test_every_gpu_must_be_known_and_under_the_threshold(util, other, stalled):
    first = decide_stalls(train_snapshot(util, other), C, {}, NOW)
    later = NOW + W
    r = decide_stalls(train_snapshot(util, other, now=later), C, first.history, later)
    assert [s.key for s in r.stalled] == (["team-a/job-train"] if stalled else [])


def test_the_window_then_once_per_stall_then_again_after_activity():
    r = decide_stalls(train_snapshot(0.0), C, {}, NOW)
    assert r.stalled == () and r.history["team-a/job-train"].since == NOW
    t = NOW + W - 1
    r = decide_stalls(train_snapshot(0.0, now=t), C, r.history, t)
    assert r.stalled == ()
    t = NOW + W
    r = decide_stalls(train_snapshot(0.0, now=t), C, r.history, t)
    (s,) = r.stalled
    assert (s.new, s.deactivate, s.reason, s.gpus) == (True, False, R.STALLED_WORKLOAD, 2)
    assert "all 2 GPU(s) under 5% GPU gr_engine_active" in s.message and "Job train" in s.message
    t += 60
    r = decide_stalls(train_snapshot(0.0, now=t), C, r.history, t)
    assert [x.new for x in r.stalled] == [False]  # still stalled, reported already
    t += 60
    r = decide_stalls(train_snapshot(0.2, now=t), C, r.history, t)  # it computes again: the stall ends
    assert r.stalled == () and "team-a/job-train" not in r.history
    for dt in (0, W):
        r = decide_stalls(train_snapshot(0.0, now=t + 60 + dt), C, r.history, t + 60 + dt)
    assert [x.new for x in r.stalled] == [True]  # a new stall is reported again


def test_a_stale_gpu_signal_judges_nothing_and_restarts_the_timers():
    r = decide_stalls(train_snapshot(0.0), C, {}, NOW)
    t = NOW + W
    stale = decide_stalls(train_snapshot(0.0, now=t, gpu_age=3600), C, r.history, t)
    assert stale.stalled == () and stale.history == {} and "stale" in stale.held


def test_a_new_admission_restarts_the_timer():
    r = decide_stalls(train_snapshot(0.0), C, {}, NOW)
    readmitted = [replace(job("train"), admitted_at=NOW + 100), job("trainer", gpus=1)]
    t = NOW + W
    r = decide_stalls(train_snapshot(0.0, now=t, wls=readmitted), C, r.history, t)
    assert r.stalled == () and r.history["team-a/job-train"].since == t


@pytest.mark.parametrize("change", [dict(admitted=False), dict(active=False), dict(finished=True),
                                    dict(evicted=True)])
def test_only_admitted_active_running_workloads(change):
    wls = [replace(job("train"), **change), job("trainer", gpus=1)]
    hist = {"team-a/job-train": StallTrack(NOW - 2 * W, None)}
    assert decide_stalls(train_snapshot(0.0, wls=wls), C, hist, NOW).stalled == ()


def test_no_gpu_attributed_is_no_stall():
    snap = snapshot([gpu_node("n0", {("team-a", "other-pod"): 0.0})], [job("train")])
    r = decide_stalls(snap, C, {"team-a/job-train": StallTrack(NOW - 2 * W, None)}, NOW)
    assert r.stalled == ()


def test_ray_workers_belong_to_the_raycluster_or_the_rayjob_workload():
    rc = ray_cluster([group(workers=[worker("rc-w0", util=0.0), worker("rc-w1", util=0.0)])], name="rc")
    rj = ray_cluster([group(workers=[worker("rj-w0", util=0.0)])], name="job1-raycluster-x7",
                     labels={"ray.io/originated-from-cr-name": "job1", "ray.io/originated-from-crd": "RayJob"})
    wls = [workload("raycluster-rc", admitted=True, owner_kind="RayCluster", owner_name="rc"),
           workload("rayjob-job1", admitted=True, owner_kind="RayJob", owner_name="job1")]
    node = gpu_node("n0", {("team-a", "rc-w0"): 0.0, ("team-a", "rc-w1"): 0.01, ("team-a", "job1-raycluster-x7-w"): 0.0,
                           ("team-a", "rj-w0"): 0.0})
    snap = snapshot([node], wls, ray=[rc, rj])
    got = {k: sorted(g.pod.name for g in v) for k, v in workload_gpus(snap, wls).items()}
    assert got["team-a/raycluster-rc"] == ["rc-w0", "rc-w1"]
    assert "rj-w0" in got["team-a/rayjob-job1"]
    hist = {w.key: StallTrack(NOW - W, None) for w in wls}
    assert sorted(s.key for s in decide_stalls(snap, C, hist, NOW).stalled) == sorted(hist)


def test_deactivation_is_opt_in_by_cluster_queue_or_namespace_and_once_per_stall():
    hist = {"team-a/job-train": StallTrack(NOW - D, None, reported=True)}
    assert [s.deactivate for s in decide_stalls(train_snapshot(0.0), C, hist, NOW).stalled] == [False]
    for cfg in (StallConfig(deactivate_cluster_queues=("cq-a",)), StallConfig(deactivate_namespaces=("team-a",))):
        r = decide_stalls(train_snapshot(0.0), cfg, hist, NOW)
        (s,) = r.stalled
        assert (s.deactivate, s.reason) == (True, R.STALLED_WORKLOAD_DEACTIVATED)
        assert "spec.active: false" in s.message and "releases its quota" in s.message
        assert f"every GPU idle for {format_duration(D)}" in s.message  # how long, in the Event
        assert r.history[s.key].deactivated
        again = decide_stalls(train_snapshot(0.0, now=NOW + 30), cfg, r.history, NOW + 30)
        assert [x.deactivate for x in again.stalled] == [False]
        # a deactivation that was not written is decided again
        back = {k: v.rollback_deactivation() for k, v in r.history.items()}
        assert [x.deactivate for x in decide_stalls(train_snapshot(0.0), cfg, back, NOW).stalled] == [True]
    other = StallConfig(deactivate_cluster_queues=("cq-b",), deactivate_namespaces=("team-b",))
    assert [s.deactivate for s in decide_stalls(train_snapshot(0.0), other, hist, NOW).stalled] == [False]


def test_the_defaults_report_at_30m_and_deactivate_at_2h():
    assert (W, D) == (1800.0, 7200.0)


def test_opted_in_a_stall_is_reported_at_the_window_but_not_deactivated_before_the_delay():
    r = decide_stalls(train_snapshot(0.0), OPT_IN, {}, NOW)
    t = NOW + W
    r = decide_stalls(train_snapshot(0.0, now=t), OPT_IN, r.history, t)
    (s,) = r.stalled
    assert (s.new, s.deactivate, s.reason) == (True, False, R.STALLED_WORKLOAD)  # reported, not acted on
    assert s.deactivate_at == NOW + D and s.deactivate_in(t) == D - W
    assert f"will be deactivated (spec.active: false) at {format_duration(D)} idle" in s.message
    assert f"(in {format_duration(D - W)}), unless a GPU gets busy" in s.message
    assert not r.history[s.key].deactivated
    t = NOW + D - 1
    r = decide_stalls(train_snapshot(0.0, now=t), OPT_IN, r.history, t)
    assert [(x.new, x.deactivate) for x in r.stalled] == [(False, False)]
    # not opted in: nothing is due
    (plain,) = decide_stalls(train_snapshot(0.0, now=t), C, r.history, t).stalled
    assert plain.deactivate_at is None and plain.deactivate_in(t) is None and "deactivated" not in plain.message


@pytest.mark.parametrize("step", [30.0, 47.0, 600.0])
def test_opted_in_a_stall_is_deactivated_once_at_or_after_the_delay(step):
    history: dict = {}
    decided = []
    t = NOW
    while t <= NOW + D + 4 * step:
        r = decide_stalls(train_snapshot(0.0, now=t), OPT_IN, history, t)
        history = dict(r.history)
        decided += [(t, x) for x in r.stalled if x.deactivate]
        t += step
    ((at, s),) = decided  # exactly once in the stall
    assert NOW + D <= at < NOW + D + step  # the first pass at or after the delay
    assert s.stalled_for == at - NOW and s.reason == R.STALLED_WORKLOAD_DEACTIVATED and s.deactivate_in(at) == 0


def test_a_delay_equal_to_the_window_reports_and_deactivates_in_one_pass():
    cfg = StallConfig(deactivate_cluster_queues=("cq-a",), deactivate_after_seconds=W)
    r = decide_stalls(train_snapshot(0.0), cfg, {}, NOW)
    r = decide_stalls(train_snapshot(0.0, now=NOW + W), cfg, r.history, NOW + W)
    assert [(x.new, x.deactivate) for x in r.stalled] == [(True, True)]


def test_a_stall_that_ends_before_the_delay_is_never_deactivated_and_a_later_one_restarts_the_timer():
    r = decide_stalls(train_snapshot(0.0), OPT_IN, {}, NOW)
    t = NOW + W
    r = decide_stalls(train_snapshot(0.0, now=t), OPT_IN, r.history, t)
    assert [(x.new, x.deactivate) for x in r.stalled] == [(True, False)]  # reported
    t = NOW + D - 60  # a GPU gets busy before the delay (evaluation done, training goes on)
    r = decide_stalls(train_snapshot(0.3, now=t), OPT_IN, r.history, t)
    assert r.stalled == () and r.history == {}
    seen = []
    restart = t + 60  # idle again: a new stall, timed from here
    for t in (restart, NOW + D, NOW + D + 60, restart + W, restart + D - 1, restart + D):
        r = decide_stalls(train_snapshot(0.0, now=t), OPT_IN, r.history, t)
        seen.append([(x.new, x.deactivate) for x in r.stalled])
    assert r.history["team-a/job-train"].since == restart
    # not deactivated at the old stall's due time; reported again at the window; deactivated at the delay
    assert seen == [[], [], [], [(True, False)], [(False, False)], [(False, True)]]


def test_disabled_detects_nothing():
    hist = {"team-a/job-train": StallTrack(NOW - W, None)}
    r = decide_stalls(train_snapshot(0.0), StallConfig(enabled=False), hist, NOW)
    assert r.stalled == () and r.held


# ------------------------------------------------------------------------------------------ config
def test_config_section():
    assert stall_config({}) == C and stall_config({"stall": None}) == C
    c = stall_config({"stall": {"window": "45m", "gpu_utilization": "2%", "enabled": "true",
                                "deactivate_cluster_queues": ["cq-a", " cq-b "], "deactivate_namespaces": []}})
    assert (c.window_seconds, c.gpu_utilization, c.deactivate_cluster_queues) == (2700.0, 0.02, ("cq-a", "cq-b"))
    assert C.deactivate_cluster_queues == () and C.deactivate_namespaces == ()  # safe default: report only
    assert c.deactivate_after_seconds == D  # the default delay, over the window
    for key, raw, want in (("deactivate_after", "3h", 10800.0), ("deactivate_after_seconds", 5400, 5400.0),
                           ("deactivate-after", "45m", 2700.0), ("deactivate_after", "30m", 1800.0)):
        got = stall_config({"stall": {key: raw}})
        assert (got.deactivate_after_seconds, got.window_seconds) == (want, W)
    # a window longer than the default delay, with no delay set (valid before the delay existed):
    # deactivated at the window, not an error
    long = stall_config({"stall": {"window": "3h"}})
    assert (long.window_seconds, long.deactivate_after_seconds) == (10800.0, 10800.0)
    assert stall_config({"stall": {"window": "1h"}}).deactivate_after_seconds == D
    with pytest.raises(ValueError, match="'deactivate_after'"):  # the known keys name it
        stall_config({"stall": {"deactivate_delay": "2h"}})


@pytest.mark.parametrize(("section", "text"), [
    ({"deactivate_after": "10m"}, "stall.deactivate_after (10m) must be at least stall.window (30m)"),
    ({"window": "3h", "deactivate_after": "2h"}, "stall.deactivate_after (2h) must be at least stall.window (3h)"),
    ({"window": "1h", "deactivate_after_seconds": 3599}, "(59m59s) must be at least stall.window (1h)"),
])
def test_a_delay_below_the_window_names_both(section, text):
    with pytest.raises(ValueError) as e:
        stall_config({"stall": section})
    assert text in str(e.value)
    with pytest.raises(ValueError, match=r"stall\.deactivate_after \(10m\) must be at least stall\.window \(30m\)"):
        StallConfig(deactivate_after_seconds=600.0)


@pytest.mark.parametrize("bad", [float("nan"), 31 * 86400.0, True, "2h"])
def test_the_delay_must_be_a_duration_of_at_most_30_days(bad):
    with pytest.raises(ValueError, match=r"stall\.deactivate_after"):
        StallConfig(deactivate_after_seconds=bad)


@pytest.mark.parametrize(("section", "key"), [
    ({"window": "10s"}, "stall"), ({"window": "nan"}, "stall.window"), ({"window": "31d"}, "stall.window"),
    ({"gpu_utilization": 0}, "stall.gpu_utilization"), ({"gpu_utilization": "150%"}, "stall.gpu_utilization"),
    ({"enabled": "yes"}, "stall.enabled"), ({"deactivate_cluster_queues": "cq-a"}, "stall.deactivate_cluster_queues"),
    ({"deactivate_namespaces": ["ok", ""]}, "stall.deactivate_namespaces"),
    ({"deactivate_namespaces": [1]}, "stall.deactivate_namespaces"), ({"windw": "1h"}, "stall.windw"),
    ({"deactivate_after": "soon"}, "stall.deactivate_after"), ({"deactivate_after": "31d"}, "stall.deactivate_after"),
    ({"deactivate_after_seconds": -1}, "stall.deactivate_after_seconds"),
])
def test_config_errors_name_the_key(section, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        stall_config({"stall": section})
    with pytest.raises(ValueError):
        stall_config({"stall": "on"})


def test_history_is_frozen():
    r = decide_stalls(train_snapshot(0.0), C, {}, NOW)
    with pytest.raises(TypeError):
        r.history["x"] = StallTrack(0.0, None)  # type: ignore[index]
    assert isinstance(r.history, type(frozen_map()))


def test_a_worker_of_a_raycluster_no_workload_owns_is_not_matched_by_job_name():
    """A team's RayCluster (no Workload owns it) named so that its worker pods start with a Job's name:
    those GPUs belong to the RayCluster, not to the Job -- a busy pool must not keep a hung Job alive,
    nor an idle one make a busy Job look stalled."""
    pool = ray_cluster([group(workers=[worker("train-pool-gpu-w0", util=0.9)])], name="train-pool")
    wls = [job("train")]
    node = gpu_node("n0", {("team-a", "train-abc12"): 0.0, ("team-a", "train-pool-gpu-w0"): 0.9})
    snap = snapshot([node], wls, ray=[pool])
    got = {k: sorted(g.pod.name for g in v) for k, v in workload_gpus(snap, wls).items()}
    assert got == {"team-a/job-train": ["train-abc12"]}
    r = decide_stalls(snap, C, {"team-a/job-train": StallTrack(NOW - W, None)}, NOW)
    assert [s.key for s in r.stalled] == ["team-a/job-train"]
