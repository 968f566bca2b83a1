"""Properties over random snapshots (hypothesis): the promises the policies must never break."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.policy.admission import AdmissionConfig, decide_admissions
from autoscaler.core.policy.ledger import Ledger
from autoscaler.core.policy.scaling import GroupHistory, ScalingDefaults, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, node, ray_cluster, snapshot, worker, workload

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def nodes_st(draw):
    out = []
    for i in range(draw(st.integers(1, 6))):
        gpus = draw(st.sampled_from([4, 8]))
        requested = draw(st.integers(0, gpus))
        out.append(node(f"n{i}", gpus=gpus, requested=requested, unhealthy=draw(st.integers(0, gpus - requested)),
                        ready=draw(st.booleans() | st.just(True)), schedulable=draw(st.booleans() | st.just(True))))
    return out


@st.composite
def workloads_st(draw):
    out = []
    for i in range(draw(st.integers(1, 5))):
        sets = [(f"ps{j}", draw(st.integers(1, 4)), draw(st.sampled_from([0, 1, 2, 4, 8, 16])))
                for j in range(draw(st.integers(1, 3)))]
        out.append(workload(f"w{i}", sets, priority=draw(st.integers(0, 3)),
                            reserved_at=draw(st.floats(8_000, 9_999, allow_nan=False))))
    return out


def _fits_at_all(w, nodes) -> bool:
    """Necessary conditions, computed independently: total GPUs and the largest pod fit the free blocks."""
    free = [n.free_gpus for n in nodes]
    need = sum(ps.count * ps.gpus_per_pod for ps in w.pod_sets)
    largest = max((ps.gpus_per_pod for ps in w.pod_sets), default=0)
    return need <= sum(free) and largest <= max(free, default=0)


@SETTINGS
@given(nodes_st(), workloads_st(), st.booleans(), st.sampled_from(["fail-open", "hold"]))
def test_admission_properties(nodes, workloads, stale, mode):
    snap = snapshot(nodes, workloads, gpu_age=600 if stale else 5)
    cfg = AdmissionConfig(stale_signal_mode=mode)
    r = decide_admissions(snap, Ledger(), {}, cfg, NOW)
    # same inputs -> same decisions
    assert r == decide_admissions(snap, Ledger(), {}, cfg, NOW)
    # never more GPUs promised on a node than it has free and healthy
    for n in nodes:
        assert r.ledger.promised_on(n.name) <= n.free_gpus
    by_key = {w.key: w for w in workloads}
    for d in r.decisions:
        w = by_key[d.workload]
        if d.state == "Ready" and d.reason == "CapacityConfirmed":
            # no Ready unless every GPU pod was actually placed
            assert _fits_at_all(w, nodes)
            placed = {ps: sum(v.values()) for ps, v in d.placement.items()}
            assert placed == {ps.name: ps.count * ps.gpus_per_pod for ps in w.pod_sets if ps.gpus_per_pod}
        if stale and mode == "hold":
            assert d.state != "Ready" or d.reason == "NoGpusRequested"
        if d.state == "Retry":
            assert d.requeue_after_seconds is not None and d.requeue_after_seconds <= cfg.retry_backoff_cap_seconds


@st.composite
def cluster_st(draw):
    n = draw(st.integers(0, 6))
    ws = []
    for i in range(n):
        ws.append(worker(f"w{i}", util=draw(st.none() | st.floats(0, 1)), busy=draw(st.none() | st.booleans()),
                         phase=draw(st.sampled_from(["Running", "Running", "Pending"])), ready=draw(st.booleans())))
    lo = draw(st.integers(0, 4))
    hi = draw(st.integers(lo, lo + 6))
    replicas = draw(st.integers(0, 10))
    to_delete = tuple(draw(st.lists(st.sampled_from([w.pod for w in ws] + ["gone"]), max_size=2, unique=True)))
    g = group(workers=ws, replicas=replicas, lo=lo, hi=hi, gpus=draw(st.sampled_from([1, 2, 4])), to_delete=to_delete)
    demand = [gpu_demand(draw(st.sampled_from([1, 2, 4, 8])), count=draw(st.integers(1, 5)),
                         infeasible=draw(st.booleans())) for _ in range(draw(st.integers(0, 3)))]
    rc = ray_cluster([g], demand=demand, in_tree=draw(st.booleans()), ray_age=draw(st.sampled_from([5.0, 600.0, None])))
    idle = {w.pod: NOW - draw(st.floats(0, 3600)) for w in ws if draw(st.booleans())}
    recs = tuple((NOW - draw(st.floats(1, 400)), draw(st.integers(0, 10))) for _ in range(draw(st.integers(0, 3))))
    hist = {"gpu": GroupHistory(recommendations=recs, idle_since=frozen_map(idle))}
    return rc, hist


@SETTINGS
@given(cluster_st(), st.booleans(), st.booleans())
def test_scaling_properties(cluster_hist, gpu_stale, pressure):
    rc, hist = cluster_hist
    others = [replace(workload("q", ns="team-b", cq="cq-b", quota_reserved=False), created_at=NOW - 3600)] if pressure else []
    snap = snapshot(ray=[rc], gpu_age=600 if gpu_stale else 5, workloads=others)
    d_ = ScalingDefaults()
    r = decide_scaling(snap, rc, d_, hist, NOW)
    assert r == decide_scaling(snap, rc, d_, hist, NOW)  # deterministic
    g = rc.groups[0]
    (d,) = r.decisions
    if d.write == "replicas" and d.desired != d.current:  # a clearing-only write leaves replicas alone
        assert g.min_replicas <= d.desired <= g.max_replicas
    if d.write == "min_max":
        assert d.new_min is not None and d.new_max is not None and d.new_min <= d.new_max
        assert d.workers_to_delete == ()
    # scale-down names only existing pods that are idle now, at most as many as replicas drop
    idle_now = {w.pod for w in g.workers if w.phase == "Running" and w.ready and w.ray_busy is False
                and w.gpu_utilization is not None and w.gpu_utilization < d_.idle_gpu_utilization}
    assert set(d.workers_to_delete) <= idle_now
    assert len(d.workers_to_delete) <= max(0, d.current - d.desired)
    if rc.in_tree_autoscaler:
        assert d.write in ("min_max", "none")
    # stale signals: hold, no scale-down, no scale-up beyond current
    ray_stale = rc.demand_signal is None or rc.demand_signal.is_stale(NOW)
    if ray_stale or gpu_stale:
        assert d.direction == "hold" and d.desired == d.current and d.workers_to_delete == ()
        assert d.write == "none" or d.clear_workers_to_delete


@SETTINGS
@given(workloads_st(), st.text("abc-", min_size=1, max_size=6), st.text("xyz", min_size=1, max_size=6))
def test_a_workloads_derived_fields_follow_its_fields_through_replace(wls, ns, name):
    # ``key`` and ``gpu_demand`` are worked out once per object; a replaced object works them out anew
    for wl in wls:
        assert wl.key == f"{wl.namespace}/{wl.name}"
        assert wl.gpu_demand == sum(ps.count * int(ps.requests.get("nvidia.com/gpu", 0)) for ps in wl.pod_sets)
        moved = replace(wl, namespace=ns, name=name, pod_sets=wl.pod_sets[:1])
        assert moved.key == f"{ns}/{name}"
        assert moved.gpu_demand == wl.pod_sets[0].count * wl.pod_sets[0].gpus_per_pod
