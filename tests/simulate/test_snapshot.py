"""The snapshots the simulator hands the real policies describe the simulated state faithfully."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

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



def _counting_ray_state(e: Engine) -> list[str]:
    """Each RayCluster the engine's snapshot builder builds from now on, by name."""
    built: list[str] = []
    ray_state = e.snapshots.ray_state

    def counted(rc, now):
        built.append(rc.name)
        return ray_state(rc, now)

    e.snapshots.ray_state = counted
    return built


def test_a_pass_snapshot_builds_its_rayclusters_at_their_first_read_as_they_were():
    e = _engine("ray-idle")
    e.start()
    asyncio.run(e.advance(5 * 3600.0))
    built = _counting_ray_state(e)
    lazy = e.snapshot(e.now, pass_only=True)
    assert len(lazy.ray_clusters) == len(e.rays) and set(lazy.ray_clusters) == {
        f"{rc.namespace}/{rc.name}" for rc in e.rays.values()}
    assert built == []  # keys and length need no RayCluster built
    eager = e.snapshot(e.now)
    assert len(built) == len(e.rays)
    with pytest.raises(RuntimeError, match="moved between a snapshot"):
        lazy.ray_clusters["team-a/team-a-ray"]  # read after a later snapshot: refused, not stale
    lazy = e.snapshot(e.now, pass_only=True)
    assert lazy == eager and dict(lazy.ray_clusters) == dict(eager.ray_clusters)
    rc = e.rays["team-a"]
    later = e.snapshot(e.now, pass_only=True)
    rc.queue.append(rc.queue[0] if rc.queue else (e.jobs[0], e.now))  # Ray's demand moved before the read
    with pytest.raises(RuntimeError, match="moved between a snapshot"):
        later.ray_clusters.get("team-a/team-a-ray")


def test_a_baseline_run_builds_rayclusters_only_when_a_reconciler_reads_them():
    """Under a baseline only the right-sizing feed (every few minutes) reads the RayClusters: the other
    control passes build none, and the run's results are those of a run that builds them every pass."""
    lazy, eager = _engine("ray-idle"), _engine("ray-idle")
    built = _counting_ray_state(lazy)
    eager.snapshot = lambda now, pass_only=False, _s=eager.snapshot: _s(now)  # every pass: all built
    lazy.run()
    eager.run()
    assert lazy.metrics.summary() == eager.metrics.summary()
    ticks = 8 * 3600.0 / lazy.cfg.control_interval_s
    assert 0 < len(built) < 0.25 * ticks * len(lazy.rays)
