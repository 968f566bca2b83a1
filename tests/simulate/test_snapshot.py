"""The snapshots the simulator hands the real policies describe the simulated state faithfully."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from simulator.engine import Engine, SimConfig
from simulator.workload import SyntheticParams, synthetic

TEAMS = ("team-a", "team-b")


def _engine(policy: str = "queuepilot", **kw) -> Engine:
    jobs = synthetic(8.0, 11, 32, SyntheticParams(jobs_per_hour=30.0, teams=TEAMS, team_weights=(0.7, 0.3))).jobs
    cfg = replace(SimConfig(nodes=4, teams=TEAMS, gpu_failure_rate=1.0, repair_mean_s=7200.0), **kw)
    return Engine(jobs, 8 * 3600.0, policy, cfg)


def test_snapshot_matches_cluster_kueue_and_ray_state():
    e = _engine()
    e.start()
    asyncio.run(e.advance(5 * 3600.0))
    snap = e.snapshot(e.now)
    cap = snap.flavor_capacity("a100")
    c = e.cluster
    assert cap.allocated == c.allocated_gpus()
    assert cap.free == c.free_gpus("a100")
    assert cap.unhealthy == c.unhealthy_gpus()
    assert list(cap.free_blocks) == c.free_blocks("a100")
    for q in e.kueue.cqs.values():
        s = snap.cluster_queues[q.name]
        assert dict(s.used_gpus) == q.usage and dict(s.nominal_gpus) == q.nominal
    for rc in e.rays.values():
        s = snap.ray_clusters[f"{rc.namespace}/{rc.name}"]
        g = s.groups[0]
        assert g.replicas == rc.replicas and len(g.workers) == len(rc.workers)
        assert {w.pod for w in g.workers} == set(rc.workers)
        assert sum(w.ray_busy for w in g.workers) == sum(1 for w in rc.workers.values() if w.task is not None)
        assert sum(d.count for d in s.demand) == len(rc.queue)  # the full count: no cap
    pending = [w for w in snap.workloads.values() if w.pending]
    assert len(pending) == sum(1 for w in e.workloads.values() if w.state in ("pending", "reserved", "admitted"))
