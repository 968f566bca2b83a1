"""The demo's controller is the real ``Controller`` over ``SimClusterSource``: not ready and not acting
before its (simulated) caches are synced, then both reconcilers run and write into the simulation."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from autoscaler.core import reasons as R
from servicekit.listen import ListenAddress
from simulator.demo.app import demo_controller
from simulator.demo.world import DemoConfig, DemoWorld


def _count(controller, loop: str) -> float:
    return controller.registry.get_sample_value("queuepilot_reconcile_seconds_count", {"loop": loop}) or 0.0


async def test_readyz_and_passes_follow_the_sync():
    world = DemoWorld(DemoConfig(nodes=2, hours=12.0, warmup_s=2 * 3600.0, seed=3))
    await world.warm_up()
    c = demo_controller(world, ListenAddress("127.0.0.1", 0), [])
    async with TestClient(TestServer(c.app())) as client:
        r = await client.get("/readyz")
        assert r.status == 503 and "workloads" in await r.text()
        await c.run_pass()  # a snapshot, but nothing acts before the caches are synced
        assert c.snapshot is not None and _count(c, "admission") == _count(c, "scaling") == 0
        world.hand_over(c.published, c.counters, lambda: c.request_pass("world"))
        r = await client.get("/readyz")
        assert r.status == 200
        stale_key = ("RayCluster", "Warning", R.GPU_SIGNAL_STALE)
        stale_before = world.engine.writer.event_counts[stale_key]
        for _ in range(3):
            await world.step_to(world.sim_now + 30.0)
            await c.ray.poll(c.source.ray_targets(), c.clock())  # SimRayClient, through RaySignals
            await c.run_pass()
        assert _count(c, "admission") == _count(c, "scaling") == 3
        # the snapshot is the world's: every simulated workload and RayCluster, keyed as the caches key them
        snap = c.snapshot
        assert set(snap.workloads) == {f"{w.namespace}/{w.name}" for w in world.engine.workloads.values()}
        teams = {f"{rc.namespace}/{rc.name}" for rc in world.engine.rays.values()}
        # the teams' RayClusters, and those the running RayJobs created (labelled with their RayJob)
        assert teams <= set(snap.ray_clusters)
        assert all(rc.labels.get("ray.io/originated-from-crd") == "RayJob"
                   for key, rc in snap.ray_clusters.items() if key not in teams)
        workers = {w.pod for key in teams for g in snap.ray_clusters[key].groups for w in g.workers}
        assert workers == {w for rc in world.engine.rays.values() for w in rc.workers}
        assert not any(sig.is_stale(c.clock()) for name, sig in snap.signals.items() if name.startswith("ray/"))
        # without GPU readings (no exporters here) the scaler holds and says why, once per cluster,
        # through the sim writer, and counts it in the controller's own counters
        assert c.snapshot.gpu_signal_stale()
        assert world.engine.writer.event_counts[stale_key] - stale_before == len(world.engine.rays)
        held = c.registry.get_sample_value("queuepilot_scale_decisions_total", {
            "namespace": "team-a", "raycluster": "team-a-ray", "group": "gpu-workers", "direction": "hold",
            "reason": R.GPU_SIGNAL_STALE, "mode": "live"})
        assert held == 1.0
    await c.shutdown()
