"""The scaler rewritten as named steps decides exactly as the frozen copy of the old one.

``tests/decisions/legacy_scaling.py`` is the scaler as it was before ``_decide_group`` became a list
of named steps.  Both run here side by side on (a) random snapshots and histories and (b) a
benchmark-shaped snapshot, for several consecutive passes (each keeps its own history, and the
replicas each pass writes become the next pass's current replicas), and every decision and every
history must be identical.  The only permitted difference is message text where a GPU reports
which utilization signal it used (``GpuState.utilization_source``): the new scaler names that
signal, the old one cannot.  Delete this file together with ``legacy_scaling.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autoscaler.core import reasons as R
from autoscaler.core.policy import scaling as new
from autoscaler.core.policy.behavior import DEFAULT_SCALE_DOWN
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.quota import cohort_totals
from autoscaler.core.snapshot import (
    ClusterQueueState,
    ClusterSnapshot,
    GpuState,
    PodKey,
    RayClusterState,
    RayDemand,
    RayWorker,
    SignalStatus,
    WorkerGroupState,
    frozen_map,
)
from tests.decisions import legacy_scaling as old
from tests.decisions.builders import NOW, gpu_demand, group, node, ray_cluster, snapshot, worker, workload
from tests.decisions.test_properties import cluster_st

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PASSES = 4


def plain(obj: Any) -> Any:
    """A dataclass as nested dicts/tuples (mappings compared by content, not by class)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Mapping):
        return {k: plain(v) for k, v in obj.items()}
    if isinstance(obj, tuple | list):
        return tuple(plain(v) for v in obj)
    return obj


def decision_view(d: Any, keep_message: bool) -> dict[str, Any]:
    out: dict[str, Any] = plain(d)
    if not keep_message:
        out.pop("message")
    return out


def has_named_source(snap: ClusterSnapshot) -> bool:
    return any(g.utilization_source for n in snap.nodes.values() for g in n.gpus)


def run_both(snap: ClusterSnapshot, defaults: ScalingDefaults, passes: int = PASSES, step: float = 90.0,
             shared: bool = True) -> tuple[int, set[str]]:
    """Decide every RayCluster of ``snap`` with both scalers for ``passes`` passes; returns how many
    decisions were compared and the reasons they gave."""
    keep_message = not has_named_source(snap)
    hist_old: dict[str, Any] = {}
    hist_new: dict[str, Any] = {}
    compared = 0
    reasons: set[str] = set()
    for i in range(passes):
        now = snap.taken_at + i * step
        snap_i = at(snap, now)
        kw_old: dict[str, Any] = {}
        kw_new: dict[str, Any] = {}
        if shared:
            kw_old = {"waiting": old.pending_gpu_workloads(snap_i, now), "owned": old.ray_cluster_workloads(snap_i),
                      "cohorts": cohort_totals(snap_i.cluster_queues)}
            kw_new = {"waiting": new.pending_gpu_workloads(snap_i, now), "owned": new.ray_cluster_workloads(snap_i),
                      "cohorts": cohort_totals(snap_i.cluster_queues)}
        written: dict[str, RayClusterState] = {}
        for key, rc in snap_i.ray_clusters.items():
            r_old = old.decide_scaling(snap_i, rc, defaults, hist_old.get(key, {}), now, **kw_old)
            r_new = new.decide_scaling(snap_i, rc, defaults, hist_new.get(key, {}), now, **kw_new)
            assert r_new.warnings == r_old.warnings
            assert [decision_view(d, keep_message) for d in r_new.decisions] == \
                [decision_view(d, keep_message) for d in r_old.decisions], (i, key)
            assert plain(r_new.history) == plain(r_old.history), (i, key)
            compared += len(r_new.decisions)
            reasons.update(d.reason for d in r_new.decisions)
            hist_old[key], hist_new[key] = r_old.history, r_new.history
            written[key] = apply(rc, r_new.decisions)
        snap = replace(snap, ray_clusters=frozen_map(written))
    return compared, reasons


def at(snap: ClusterSnapshot, now: float) -> ClusterSnapshot:
    """``snap`` taken ``now - snap.taken_at`` later with every signal as old as it was then."""
    shift = now - snap.taken_at

    def moved(sig: SignalStatus | None) -> SignalStatus | None:
        if sig is None or sig.observed_at is None:
            return sig
        return replace(sig, observed_at=sig.observed_at + shift)

    return replace(snap, taken_at=now, signals=frozen_map({k: moved(v) for k, v in snap.signals.items()}),
                   ray_clusters=frozen_map({k: replace(rc, demand_signal=moved(rc.demand_signal))
                                            for k, rc in snap.ray_clusters.items()}))


def apply(rc: RayClusterState, decisions: Sequence[Any]) -> RayClusterState:
    """What the operator would show next pass: the written replicas / maxReplicas / workersToDelete."""
    by_group = {d.group: d for d in decisions}
    groups = []
    for g in rc.groups:
        d = by_group.get(g.name)
        if d is None or d.write == "none":
            groups.append(g)
        elif d.write == "replicas":
            gone = set(d.workers_to_delete)
            groups.append(replace(g, replicas=d.desired, workers_to_delete=d.workers_to_delete or
                                  (() if d.clear_workers_to_delete else g.workers_to_delete),
                                  workers=tuple(w for w in g.workers if w.pod not in gone)))
        else:
            groups.append(replace(g, min_replicas=d.new_min, max_replicas=d.new_max))
    return replace(rc, groups=tuple(groups))


# ------------------------------------------------------------------------------------ random inputs
@st.composite
def workers_st(draw: Any, prefix: str, gpus: int, idle: bool) -> list[RayWorker]:
    """``idle``: mostly Running, ready workers with no Ray work and the GPU/CPU near 0."""
    out = []
    for i in range(draw(st.integers(0, 6))):
        if idle and draw(st.integers(0, 3)):
            out.append(worker(f"{prefix}{i}", util=draw(st.sampled_from([0.0, 0.01, 0.3])) if gpus else None,
                              busy=draw(st.sampled_from([False, False, True])), gpus=gpus,
                              cpu=draw(st.sampled_from([0.0, 0.02, 0.6])), mem=0.1))
            continue
        util = draw(st.sampled_from([None, 0.0, 0.0, 0.01, 0.04, 0.2, 0.5, 0.69, 0.9]) | st.floats(0, 1))
        w = worker(f"{prefix}{i}", util=util if gpus else None, busy=draw(st.sampled_from([None, True, False, False])),
                   gpus=gpus, phase=draw(st.sampled_from(["Running", "Running", "Running", "Pending"])),
                   ready=draw(st.booleans() | st.just(True)),
                   cpu=draw(st.sampled_from([None, 0.0, 0.03, 0.03, 0.5, 0.9])),
                   mem=draw(st.none() | st.sampled_from([0.1, 0.5, 0.95])))
        if draw(st.integers(0, 9)) == 0:
            w = replace(w, deleting=True)
        out.append(w)
    return out


@st.composite
def group_st(draw: Any, name: str, idle: bool) -> WorkerGroupState:
    gpus = draw(st.sampled_from([0, 1, 1, 2, 4, 8]))
    ws = draw(workers_st(f"{name}-w", gpus, idle))
    lo = draw(st.integers(0, 3))
    hi = draw(st.integers(lo, lo + 8))
    replicas = max(0, len(ws) + draw(st.sampled_from([0, 0, 0, 0, 1, 2, -1, -3])))
    to_delete: tuple[str, ...] = ()
    if draw(st.integers(0, 3)) == 0:
        to_delete = tuple(draw(st.lists(st.sampled_from([w.pod for w in ws] + ["gone-1", "gone-2"]), min_size=1,
                                        max_size=2, unique=True)))
    hosts = draw(st.sampled_from([1, 1, 1, 2]))
    g = group(name, workers=ws, replicas=replicas, lo=lo, hi=hi, gpus=gpus, to_delete=to_delete,
              cpu=draw(st.sampled_from([0.0, 4.0, 8.0])), hosts=hosts)
    if draw(st.integers(0, 3)) == 0:
        g = replace(g, ray_resources=frozen_map({"special": 1.0}))
    return g


@st.composite
def demand_st(draw: Any, groups: Sequence[str], fitting: bool) -> list[RayDemand]:
    """``fitting``: small GPU bundles any GPU worker holds."""
    out = []
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3, 4]))):
        if fitting and draw(st.integers(0, 3)):
            out.append(gpu_demand(draw(st.sampled_from([1, 1, 2])), count=draw(st.integers(1, 8)),
                                  strategy=draw(st.sampled_from(["", "STRICT_SPREAD"]))))
            continue
        d = gpu_demand(draw(st.sampled_from([0.0, 0.5, 1, 1, 1, 2, 4, 8, 16])), count=draw(st.integers(0, 6)),
                       infeasible=draw(st.integers(0, 6)) == 0, group=draw(st.none() | st.sampled_from(groups)),
                       cpu=draw(st.sampled_from([0.0, 0.0, 1.0, 4.0, 16.0])),
                       strategy=draw(st.sampled_from(["", "PACK", "STRICT_SPREAD"])))
        if draw(st.integers(0, 5)) == 0:
            d = replace(d, shape=frozen_map({**d.shape, draw(st.sampled_from(["special", "TPU"])): 1.0}))
        out.append(d)
    return out


ANNOTATIONS = st.dictionaries(
    st.sampled_from(["queuepilot.io/reclaim-idle-actors", "queuepilot.io/idle-window",
                     "queuepilot.io/pressured-idle-window", "queuepilot.io/scale-down-policy",
                     "queuepilot.io/scale-up-policy", "queuepilot.io/tolerance", "queuepilot.io/idle-gpu-utilization",
                     "queuepilot.io/target-gpu-utilization", "queuepilot.io/queue-pressure-wait"]),
    st.sampled_from(["true", "false", "0", "60s", "5m", "Pods:1:60;window=0s", "Percent:50:30;select=Min",
                     "Pods:2:15,Percent:100:15;window=1m", "0.2", "50%", "bogus", "1e400"]),
    max_size=3,
)


@st.composite
def world_st(draw: Any) -> tuple[ClusterSnapshot, ScalingDefaults, bool]:
    n_groups = draw(st.integers(1, 3))
    names = [f"g{i}" for i in range(n_groups)]
    scenario = draw(st.sampled_from(["demand", "idle", "mixed"]))
    groups = [draw(group_st(n, scenario != "demand")) for n in names]
    # 0: outside Kueue, 1: elastic Kueue cluster, 2: Kueue, not elastic
    kueue = draw(st.sampled_from([0, 0, 0, 1, 1, 1, 2]))
    labels = {"kueue.x-k8s.io/queue-name": "lq"} if kueue else {}
    ann = dict(draw(ANNOTATIONS))
    if kueue == 1:
        ann["kueue.x-k8s.io/elastic-job"] = "true"
    rc = ray_cluster(groups, demand=draw(demand_st(names, scenario != "idle")), in_tree=draw(st.booleans()),
                     ray_age=draw(st.sampled_from([5.0, 5.0, 5.0, 5.0, 600.0, None])), annotations=ann, labels=labels,
                     cq=draw(st.sampled_from(["cq-a", "cq-a", "cq-missing"])) if kueue else None,
                     suspended=draw(st.integers(0, 29)) == 0, opted_in=draw(st.integers(0, 29)) != 0)
    if kueue and draw(st.booleans()):  # a Workload of the RayCluster, admitted on one of the flavors
        flavor = draw(st.sampled_from(["a100", "h100"]))
        owned = workload("rc-wl", [(names[0], 1, 1)], flavors={names[0]: flavor}, owner_kind="RayCluster",
                         owner_name="rc", admitted=True)
    else:
        owned = None
    cqs = [ClusterQueueState("cq-a", cohort=draw(st.sampled_from([None, "c"])),
                             nominal_gpus=frozen_map({"a100": draw(st.sampled_from([0, 4, 8, 16])), "h100": 8}),
                             used_gpus=frozen_map({"a100": draw(st.sampled_from([0, 4, 8, 12])), "h100": 2})),
           ClusterQueueState("cq-b", cohort="c", nominal_gpus=frozen_map({"a100": draw(st.sampled_from([0, 8]))}),
                             used_gpus=frozen_map({"a100": 0}))]
    waiting = []
    for i in range(draw(st.integers(0, 3))):
        waiting.append(replace(workload(f"q{i}", ns=draw(st.sampled_from(["team-a", "team-b"])),
                                        cq=draw(st.sampled_from(["cq-a", "cq-b", None])), quota_reserved=False),
                               created_at=NOW - draw(st.sampled_from([30, 400, 3600]))))
    # the GPUs of the workers, some naming the utilization series they come from
    source = draw(st.sampled_from(["", "", "gr_engine_active", "sm_active", "gpu_util"]))
    gpus = []
    for g in groups:
        for i, w in enumerate(g.workers):
            gpus.append(GpuState(uuid=f"{w.pod}-gpu", node="n", index=i, utilization=w.gpu_utilization,
                                 utilization_source=source, pod=PodKey(rc.namespace, w.pod)))
    n = replace(node("n", gpus=0), gpus=tuple(gpus))
    snap = snapshot([n], [*waiting, *([owned] if owned else [])], ray=[rc], cqs=cqs, flavors=("a100", "h100"),
                    gpu_age=draw(st.sampled_from([5.0, 5.0, 5.0, 5.0, 600.0])))
    idle_window = draw(st.sampled_from([0.0, 120.0, 600.0]))
    defaults = ScalingDefaults(idle_window_seconds=idle_window,
                               pressured_idle_window_seconds=draw(st.sampled_from(
                                   [w for w in (0.0, 60.0, 120.0) if w <= idle_window])),
                               reclaim_idle_actors=draw(st.booleans()))
    return snap, defaults, draw(st.booleans())


@SETTINGS
@given(world_st(), st.data())
def test_same_decisions_on_random_worlds(world, data):
    snap, defaults, shared = world
    # a history as an earlier pass could have left it (idle timers, recommendations, scale events)
    (rc,) = snap.ray_clusters.values()
    history = {}
    for g in rc.groups:
        idle = {w.pod: NOW - data.draw(st.floats(0, 3600)) for w in g.workers if data.draw(st.booleans())}
        recs = tuple((NOW - data.draw(st.floats(1, 400)), data.draw(st.integers(0, 10)))
                     for _ in range(data.draw(st.integers(0, 3))))
        events = tuple((NOW - data.draw(st.floats(1, 100)), data.draw(st.integers(-3, 3)))
                       for _ in range(data.draw(st.integers(0, 2))))
        user_max = data.draw(st.none() | st.integers(0, 12))
        history[g.name] = (recs, events, idle, user_max, data.draw(st.none() | st.integers(0, 12)))
    step = data.draw(st.sampled_from([15.0, 90.0, 400.0]))
    assert run_with_history(snap, defaults, history, step, shared) == PASSES * len(rc.groups) * rc.opted_in


@SETTINGS
@given(cluster_st(), st.booleans(), st.booleans())
def test_same_decisions_on_the_property_tests_worlds(cluster_hist, gpu_stale, pressure):
    """The worlds of ``test_properties.test_scaling_properties`` (one GPU group, random history)."""
    rc, hist = cluster_hist
    others = [replace(workload("q", ns="team-b", cq="cq-b", quota_reserved=False), created_at=NOW - 3600)] if pressure else []
    snap = snapshot(ray=[rc], gpu_age=600 if gpu_stale else 5, workloads=others)
    history = {g: (h.recommendations, h.scale_events, dict(h.idle_since), h.user_max, h.written_max)
               for g, h in hist.items()}
    assert run_with_history(snap, ScalingDefaults(), history, 60.0, shared=False) == PASSES


def run_with_history(snap: ClusterSnapshot, defaults: ScalingDefaults, history: Mapping[str, tuple[Any, ...]],
                     step: float, shared: bool) -> int:
    """``run_both`` with a starting history (each scaler gets it in its own ``GroupHistory`` class)."""
    (rc,) = snap.ray_clusters.values()
    start_old = {g: old.GroupHistory(r, e, frozen_map(i), u, w) for g, (r, e, i, u, w) in history.items()}
    start_new = {g: new.GroupHistory(r, e, frozen_map(i), u, w) for g, (r, e, i, u, w) in history.items()}
    keep_message = not has_named_source(snap)
    hist_old: Mapping[str, Any] = start_old
    hist_new: Mapping[str, Any] = start_new
    compared = 0
    for i in range(PASSES):
        now = NOW + i * step
        snap_i = at(replace(snap, ray_clusters=frozen_map({rc.key: rc})), now)
        kw_old: dict[str, Any] = {}
        kw_new: dict[str, Any] = {}
        if shared:
            kw_old = {"waiting": old.pending_gpu_workloads(snap_i, now), "owned": old.ray_cluster_workloads(snap_i),
                      "cohorts": cohort_totals(snap_i.cluster_queues)}
            kw_new = {"waiting": new.pending_gpu_workloads(snap_i, now), "owned": new.ray_cluster_workloads(snap_i),
                      "cohorts": cohort_totals(snap_i.cluster_queues)}
        r_old = old.decide_scaling(snap_i, rc, defaults, hist_old, now, **kw_old)
        r_new = new.decide_scaling(snap_i, rc, defaults, hist_new, now, **kw_new)
        assert r_new.warnings == r_old.warnings
        assert [decision_view(d, keep_message) for d in r_new.decisions] == \
            [decision_view(d, keep_message) for d in r_old.decisions], i
        assert plain(r_new.history) == plain(r_old.history), i
        compared += len(r_new.decisions)
        for d in r_new.decisions:
            event(f"{d.reason} {d.write}")
        hist_old, hist_new = r_old.history, r_new.history
        # a failed write: both roll back the same way (the reconciler's rule, and GroupHistory.rollback)
        if i == 1:
            prev_old, prev_new = hist_old, hist_new
            hist_new = {g: h.rollback(prev_new.get(g, new.GroupHistory())) for g, h in hist_new.items()}
            hist_old = {g: old.GroupHistory(recommendations=h.recommendations,
                                            scale_events=prev_old.get(g, old.GroupHistory()).scale_events,
                                            idle_since=h.idle_since, user_max=h.user_max,
                                            written_max=prev_old.get(g, old.GroupHistory()).written_max)
                        for g, h in hist_old.items()}
            assert plain(hist_new) == plain(hist_old)
        else:
            rc = apply(rc, r_new.decisions)
    return compared


# -------------------------------------------------------------------------------- benchmark snapshot
def bench_snapshot(n_rc: int = 300, n_nodes: int = 300, n_workloads: int = 6_000, source: str = "") -> ClusterSnapshot:
    """The shape of ``benchmarks/decision_latency.py``'s pure-policy snapshot (GPU nodes, many
    workloads, opted-in RayClusters of 4 GPU workers, one of them idle), at a moderate size, varied
    so that every step of the scaler has work: waiting workloads of other queues, tight quota for the
    elastic Kueue clusters, in-tree clusters, infeasible and strict-spread demand, idle actors, a
    tighter scale-down policy, multi-host groups, stale signals, suspended clusters and pods in
    workersToDelete that are gone."""
    nodes = [node(f"n{i}", requested=(i * 3) % 9) for i in range(n_nodes)]
    wls = [workload(f"w{i}", [("main", 1 + i % 4, 8)], state="Pending" if i % 100 == 0 else "Ready",
                    reserved_at=9_000 + i % 500, quota_reserved=i % 37 != 0, ns="team-a" if i % 2 else "team-b",
                    cq="cq-a" if i % 3 else "cq-b", created=NOW - (i % 50) * 60) for i in range(n_workloads)]
    rcs = []
    for i in range(n_rc):
        busy_util = 0.3 if i % 5 == 0 else 0.5 if i % 4 == 2 else 0.8
        workers = [worker(f"rc{i}-w{j}", util=0.0 if j == 3 else busy_util, busy=j != 3) for j in range(4)]
        if i % 17 == 0:  # an idle GPU that holds an actor (reclaimed where the annotation allows it)
            workers[2] = replace(workers[2], gpu_utilization=0.0, ray_busy=True)
        workers = [replace(w, node=f"n{i % n_nodes}") for w in workers]
        kueue = i % 7 == 0
        demand = [gpu_demand(1, count=2 + i % 4)] if i % 3 == 0 else []
        if i % 11 == 0:
            demand.append(gpu_demand(16, count=1))
        if i % 13 == 0:
            demand.append(gpu_demand(1, count=3, group="gpu", strategy="STRICT_SPREAD"))
        ann: dict[str, str] = {}
        if kueue:
            ann["kueue.x-k8s.io/elastic-job"] = "true"
        if i % 2 == 0:
            ann["queuepilot.io/queue-pressure-wait"] = "100h"  # nobody waits that long: no queue pressure
        if i % 17 == 0:
            ann["queuepilot.io/reclaim-idle-actors"] = "true"
        if i % 10 == 1:  # two idle workers, one removed per 5 minutes
            ann["queuepilot.io/scale-down-policy"] = "Pods:1:300;window=0s"
            workers[2] = replace(workers[2], gpu_utilization=0.0, ray_busy=False)
        gpu_group = group(workers=workers, hi=6, hosts=2 if i % 19 == 5 else 1,
                          to_delete=("gone",) if i % 31 == 4 else ())
        cpu_group = group("cpu", gpus=0, hi=3, workers=[worker(f"rc{i}-c0", util=None, busy=False, gpus=0, cpu=0.01)])
        rcs.append(ray_cluster([gpu_group, cpu_group], name=f"rc{i}", ns="team-a" if i % 2 else "team-b",
                               demand=demand, in_tree=i % 4 == 1, annotations=ann,
                               labels={"kueue.x-k8s.io/queue-name": "lq"} if kueue else None,
                               cq="cq-a" if kueue else None, ray_age=None if i % 23 == 22 else 5.0,
                               suspended=i % 29 == 28))
    gpus_by_node: dict[str, list[GpuState]] = {}
    for rc in rcs:
        for w in rc.groups[0].workers:
            gpus_by_node.setdefault(w.node or "", []).append(GpuState(
                uuid=w.pod, node=w.node or "", index=0, utilization=w.gpu_utilization, utilization_source=source,
                pod=PodKey(rc.namespace, w.pod)))
    nodes = [replace(n, gpus=n.gpus + tuple(gpus_by_node.get(n.name, ()))) for n in nodes]
    cqs = [ClusterQueueState("cq-a", cohort="c", nominal_gpus=frozen_map({"a100": 64}), used_gpus=frozen_map({"a100": 63})),
           ClusterQueueState("cq-b", cohort="c", nominal_gpus=frozen_map({"a100": 32}), used_gpus=frozen_map({"a100": 31}))]
    return snapshot(nodes, wls, ray=rcs, cqs=cqs)


# what the benchmark snapshot must make the scaler say (else the comparison would miss a step)
BENCH_REASONS = {R.PENDING_DEMAND, R.IDLE_WORKERS, R.IDLE_WORKERS_QUEUE_PRESSURE, R.IDLE_ACTORS_RECLAIMED,
                 R.KEPT_FOR_UTILIZATION_TARGET, R.WITHIN_TARGET, R.QUOTA_HEADROOM_LIMIT, R.INFEASIBLE_DEMAND,
                 R.RAY_SIGNAL_STALE, R.CLUSTER_SUSPENDED, R.WORKERS_DELETED, R.SCALE_DOWN_LIMIT}


def test_same_decisions_on_the_benchmark_snapshot():
    snap = bench_snapshot()
    defaults = ScalingDefaults(idle_window_seconds=120.0, pressured_idle_window_seconds=60.0,
                               scale_down=replace(DEFAULT_SCALE_DOWN, stabilization_window_seconds=60))
    compared, reasons = run_both(snap, defaults, passes=PASSES, step=90.0)
    assert compared == PASSES * 2 * len(snap.ray_clusters)
    assert BENCH_REASONS <= reasons, BENCH_REASONS - reasons


def test_same_decisions_on_the_benchmark_snapshot_without_shared_indexes():
    snap = bench_snapshot(n_rc=60, n_workloads=1_000)
    compared, _ = run_both(snap, ScalingDefaults(reclaim_idle_actors=True), passes=3, step=400.0, shared=False)
    assert compared == 3 * 2 * len(snap.ray_clusters)


def test_named_source_changes_only_messages():
    snap = bench_snapshot(n_rc=60, n_workloads=1_000, source="gr_engine_active")
    assert has_named_source(snap)
    defaults = ScalingDefaults(idle_window_seconds=0.0, pressured_idle_window_seconds=0.0)
    compared, reasons = run_both(snap, defaults, passes=3, step=90.0)
    assert compared == 3 * 2 * len(snap.ray_clusters)
    assert R.IDLE_WORKERS in reasons
