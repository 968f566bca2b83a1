"""Contention as shared GPU clusters have it: Kueue's waitForPodsReady evicting an admitted workload whose
pods cannot be placed, the GPU-hours of quota it held meanwhile, waits by class, and the scheduler's
node choice (spread, the kube-scheduler default, or pack)."""

from __future__ import annotations

import pytest

from simulator.cluster import PACK, SPREAD, SimCluster
from simulator.engine import Engine, SimConfig, wait_class
from simulator.workload import Job


def _unplaceable(policy: str, **kw) -> Engine:
    """One 8-GPU node with a failed GPU: quota (8) admits the 8-GPU job; its pod can never be bound."""
    cfg = SimConfig(nodes=1, teams=("team-a",), check_invariants=True, **kw)
    e = Engine([Job(0, "team-a", 10.0, 300.0, 8, 0.5)], 3600.0, policy, cfg)
    e.cluster.fail(e.cluster.nodes[0], 3)
    return e


def test_wait_for_pods_ready_evicts_an_unplaceable_admission_and_queues_it_again_with_backoff():
    e = _unplaceable("kueue-quota", repair_mean_s=1e9)
    m = e.run()
    s = m.summary()
    # admitted at 11 s, evicted 300 s later, back after 60, 120, 240, 480 s of backoff...: every admission
    # holds 8 GPUs of quota for the 300 s timeout
    assert s["pods_ready_evictions"] >= 4
    assert s["unplaceable_admissions"] == s["pods_ready_evictions"] + 1  # the last one still waits at the end
    assert m.unplaceable_gpu_s == pytest.approx(8 * m.unplaceable_s, rel=1e-9)
    assert m.unplaceable_s < 3600 - 11 - 4 * 300 + 1  # not admitted (nor holding quota) through the backoffs
    backoffs = [60.0 * 2 ** i for i in range(s["pods_ready_evictions"])]
    assert m.unplaceable_s + sum(backoffs) <= 3600  # the backoffs double
    # with the check the workload is never admitted unplaceable: Retry, no quota held
    q = _unplaceable("queuepilot", repair_mean_s=1e9).run().summary()
    assert (q["unplaceable_admissions"], q["pods_ready_evictions"], q["unplaceable_gpu_hours"]) == (0, 0, 0.0)


def test_without_wait_for_pods_ready_an_unplaceable_admission_holds_its_quota_to_the_end():
    m = _unplaceable("kueue-quota", repair_mean_s=1e9, pods_ready_timeout_s=None).run()
    assert m.pods_ready_evictions == 0 and m.unplaceable_admissions == 1
    assert m.unplaceable_s == pytest.approx(3600 - 10 - SimConfig().pass_delay_s)


@pytest.mark.parametrize(("gpus", "klass"), [(1, "ray_task"), (2, "single_pod"), (8, "single_pod"), (16, "gang"),
                                             (32, "gang")])
def test_wait_classes(gpus, klass):
    assert wait_class(Job(0, "t", 0.0, 10.0, gpus, 0.5)) == klass


def test_spread_fragments_what_pack_keeps_whole():
    """Eight 1-GPU pods on two empty 8-GPU nodes: spread (the kube-scheduler default) puts four on each,
    and an 8-GPU pod no longer fits; pack fills one node and leaves the other whole."""
    for placement, fits in ((SPREAD, False), (PACK, True)):
        c = SimCluster({"a100": 2}, 8, placement)
        for i in range(8):
            assert c.place("a100", [(f"ns/w{i}", 1)])
        assert c.fits("a100", [8]) is fits, placement
        c.check()
    with pytest.raises(ValueError, match="placement"):
        SimCluster({"a100": 1}, 8, "random")
