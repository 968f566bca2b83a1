"""build_snapshot on a hand-built cluster: joins (flavor -> nodes, pods -> nodes, LocalQueue -> ClusterQueue,
GPUs -> nodes and pods, Ray nodes -> worker pods) and signal ages."""

from __future__ import annotations

import dataclasses

from autoscaler.cluster import views
from autoscaler.cluster.source import ClusterObjects
from autoscaler.controller.snapshot_builder import BuildConfig, SnapshotBuilder, build_snapshot
from autoscaler.core.snapshot import GpuState, PodKey, RayDemand
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayObservation
from tests.controller import scenario
from tests.controller.scenario import FakeRayNode, FakeRayStatus, build, gpu_reading


def test_nodes_flavors_and_capacity():
    snap = build()
    assert snap.nodes["h1"].gpu_requested == 4
    assert snap.nodes["h2"].gpu_requested == 2  # the Succeeded pod's 8 GPUs are not counted
    assert len(snap.nodes["h2"].gpus) == 8
    assert snap.flavors["h100"].node_names == ("h1", "h2")
    assert snap.flavors["a100"].node_names == ("a1",)
    cap = snap.flavor_capacity("h100")
    assert (cap.nominal, cap.healthy, cap.unhealthy, cap.allocated, cap.free) == (24, 15, 1, 6, 9)
    assert cap.free_blocks == (5, 4)
    a100 = snap.flavor_capacity("a100")
    assert (a100.healthy, a100.unhealthy, a100.free) == (0, 8, 0)


def test_exporter_allocation_covers_unwatched_pods():
    now = scenario.NOW
    reading = gpu_reading(now)
    extra = tuple(GpuState(f"GPU-h2-x{i}", "h2", 10 + i, pod=PodKey("kube-system", "unwatched")) for i in range(5))
    snap = build(gpu=GpuReading(reading.gpus + extra, reading.observed_at))
    assert snap.nodes["h2"].gpu_requested == 5  # max(pod requests 2, exporter-allocated 5)


def test_workloads_resolve_cluster_queue_through_local_queue():
    snap = build()
    assert snap.workloads["team-a/wl-a1"].cluster_queue == "cq-a"
    assert snap.workloads["team-a/wl-a2"].cluster_queue == "cq-a"  # from status.admission
    assert snap.workloads["team-b/wl-b1"].cluster_queue == "cq-b"
    assert snap.cluster_queue_of("team-b", "lq-b") == "cq-b"


def test_ray_workers_joined_to_gpu_and_ray_signals():
    now = scenario.NOW
    status = FakeRayStatus(
        demand=(RayDemand("task", {"GPU": 4.0}, count=2),),
        nodes=(FakeRayNode("10.0.1.1", None, busy=False, idle_seconds=300, cpu_utilization=0.05),),
    )
    snap = build(ray={"team-a/rc": RayObservation(status, now - 10)})
    rc = snap.ray_clusters["team-a/rc"]
    (g,) = rc.groups
    (w,) = g.workers
    assert w.pod == "rc-gpu-worker-1" and w.node == "h1" and w.gpus == 4
    assert abs(w.gpu_utilization - 0.25) < 1e-9  # mean of 0.1, 0.2, 0.3, 0.4
    assert w.ray_busy is False and w.cpu_utilization == 0.05  # joined by pod IP
    assert rc.demand == status.demand
    assert rc.demand_signal.age(now) == 10 and not rc.demand_signal.is_stale(now)
    assert rc.opted_in


def test_signals_carry_ages_and_staleness():
    now = scenario.NOW
    snap = build(ray={"team-a/rc": RayObservation(None, now - 600, "timeout")})
    assert snap.signals["gpu"].age(now) == 30 and not snap.gpu_signal_stale()
    assert snap.signals["ray/team-a/rc"].is_stale(now)
    assert snap.signals["watch/workloads"].age(now) == 5
    assert snap.signals["watch/pods"].is_stale(now)  # never observed
    old = build(gpu=GpuReading(gpu_reading(now).gpus, observed_at=now - 61))
    assert old.gpu_signal_stale()
    assert build(gpu=GpuReading()).gpu_signal_stale()


def test_missing_ray_observation_is_stale_not_an_error():
    snap = build()
    rc = snap.ray_clusters["team-a/rc"]
    assert rc.demand == () and rc.demand_signal.observed_at is None
    assert rc.groups[0].workers[0].ray_busy is None


# ------------------------------------------------------------------------- the incremental builder
def _changes(now: float):
    """A run of cluster changes, each a function of the mutable ClusterObjects dicts (as the caches hold
    them) -> the GPU reading and Ray observations to build with."""
    from tests.support import objects as o

    def same(objs):
        return gpu_reading(now), {}

    def new_workload(objs):
        objs.workloads["team-a/wl-new"] = views.workload_view(
            o.workload("wl-new", "team-a", "lq-a", created=now - 1, pod_sets=[("main", 1, 1)]))
        return gpu_reading(now), {}

    def requeue_to_other_queue(objs):  # a LocalQueue now points elsewhere: resolved again
        objs.local_queues["team-a/lq-a"] = views.local_queue_view(o.local_queue("lq-a", "team-a", "cq-b"))
        return gpu_reading(now), {}

    def pod_moves(objs):
        objs.pods["team-b/batch-2"] = views.pod_view(o.pod("batch-2", "team-b", node="h1", gpus=1))
        del objs.pods["team-b/batch-1"]
        return gpu_reading(now), {}

    def node_relabelled(objs):
        objs.nodes["a1"] = views.node_view(o.node("a1", 8, {"gpu": "h100"}))
        return gpu_reading(now), {}

    def ray_answers(objs):
        status = FakeRayStatus(demand=(RayDemand("task", {"GPU": 1.0}, count=1),), nodes=())
        return gpu_reading(now), {"team-a/rc": RayObservation(status, now - 1)}

    def workload_deleted(objs):
        del objs.workloads["team-a/wl-a1"]
        return gpu_reading(now), {}

    return [same, new_workload, same, requeue_to_other_queue, pod_moves, node_relabelled, ray_answers,
            workload_deleted, same]


def _mutable(objects):
    return ClusterObjects(**{f: dict(getattr(objects, f)) for f in ClusterObjects.__dataclass_fields__})


def test_incremental_builds_equal_fresh_builds_and_reuse_what_did_not_change():
    now = scenario.NOW
    objs = _mutable(scenario.cluster_objects(scenario.raw_objects(now)))
    builder = SnapshotBuilder(BuildConfig(gpu_stale_seconds=60, ray_stale_seconds=60))
    reading = gpu_reading(now)
    first = builder.build(objs, reading, {}, now)
    assert builder.reused == 0
    again = builder.build(objs, reading, {}, now)  # nothing changed: every completed view is reused
    assert again == first and builder.reused > 0
    assert again.workloads["team-a/wl-a1"] is first.workloads["team-a/wl-a1"]
    assert again.nodes["h1"] is first.nodes["h1"] and again.ray_clusters["team-a/rc"] is first.ray_clusters["team-a/rc"]
    seen = {}
    for change in _changes(now):
        gpu, ray = change(objs)
        got = builder.build(objs, gpu, ray, now)
        want = build_snapshot(objs, gpu, ray, now, BuildConfig(gpu_stale_seconds=60, ray_stale_seconds=60))
        assert got == want, change.__name__
        seen[change.__name__] = got
    assert seen["new_workload"].workloads["team-a/wl-new"].cluster_queue == "cq-a"
    assert seen["requeue_to_other_queue"].workloads["team-a/wl-a1"].cluster_queue == "cq-b"
    assert seen["requeue_to_other_queue"].workloads["team-a/wl-a2"].cluster_queue == "cq-a"  # status.admission
    assert seen["node_relabelled"].flavors["h100"].node_names == ("a1", "h1", "h2")
    assert seen["ray_answers"].ray_clusters["team-a/rc"].demand[0].count == 1
    assert "team-a/wl-a1" not in seen["workload_deleted"].workloads


def test_copied_objects_are_of_one_instant():
    """What the controller hands a build in a worker thread: later changes to the caches are not in it."""
    from tests.support import objects as o

    now = scenario.NOW
    objs = _mutable(scenario.cluster_objects(scenario.raw_objects(now)))
    expected = build_snapshot(objs, gpu_reading(now), {}, now)
    frozen = objs.copied()
    objs.workloads.pop("team-a/wl-a1")  # the watches go on while the build runs
    objs.pods["team-b/p-new"] = views.pod_view(o.pod("p-new", "team-b", node="h2", gpus=1))
    assert build_snapshot(frozen, gpu_reading(now), {}, now) == expected
    assert build_snapshot(objs, gpu_reading(now), {}, now) != expected


def test_an_unhealthy_gpu_a_pod_holds_is_not_counted_healthy():
    """A GPU that fell off the bus under a running pod stays allocated and is unhealthy, not healthy too:
    healthy + unhealthy = the flavor's GPUs (queuepilot_flavor_gpus)."""
    now = scenario.NOW
    reading = gpu_reading(now)
    gpus = tuple(dataclasses.replace(g, healthy=False, health_reason="GpuLost") if g.uuid == "GPU-h1-0" else g
                 for g in reading.gpus)
    cap = build(gpu=GpuReading(gpus, reading.observed_at)).flavor_capacity("h100")
    assert (cap.healthy, cap.unhealthy, cap.allocated) == (14, 2, 6)
    assert cap.healthy + cap.unhealthy == 16
