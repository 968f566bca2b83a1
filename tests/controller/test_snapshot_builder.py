"""build_snapshot on a hand-built cluster: joins (flavor -> nodes, pods -> nodes, LocalQueue -> ClusterQueue,
GPUs -> nodes and pods, Ray nodes -> worker pods) and signal ages."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.controller.snapshot_builder import BuildConfig, build_snapshot
from autoscaler.core.snapshot import GpuState, PodKey, RayDemand
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayObservation
from tests.controller import scenario


@dataclass
class FakeRayNode:
    node_ip: str
    pod_name: str | None
    is_head: bool = False
    busy: bool = False
    idle_seconds: float = 0.0
    cpu_utilization: float | None = None
    memory_utilization: float | None = None


@dataclass
class FakeRayStatus:
    demand: tuple
    nodes: tuple
    observed_at: float = 0.0


def gpu_reading(now: float) -> GpuReading:
    gpus = [GpuState(f"GPU-h1-{i}", "h1", i, utilization=0.1 * (i + 1), pod=PodKey("team-a", "rc-gpu-worker-1"))
            for i in range(4)]
    gpus += [GpuState(f"GPU-h1-{i}", "h1", i) for i in range(4, 8)]
    gpus += [GpuState(f"GPU-h2-{i}", "h2", i) for i in range(7)]
    gpus.append(GpuState("GPU-h2-7", "h2", 7, healthy=False, health_reason="XidFatal"))
    return GpuReading(tuple(gpus), observed_at=now - 30)


def build(now=scenario.NOW, ray=None, gpu=None, config=BuildConfig(gpu_stale_seconds=60, ray_stale_seconds=60)):
    return build_snapshot(
        scenario.cluster_objects(scenario.raw_objects(now)),
        gpu if gpu is not None else gpu_reading(now),
        ray or {},
        now,
        config,
        watch_observed={"workloads": now - 5, "pods": None},
    )


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
