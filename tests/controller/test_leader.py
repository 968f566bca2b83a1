"""Leader election on a Lease through the fake API server: the algorithm step by step with a fake clock,
then two controller replicas (exactly one leader; the other takes over when it stops)."""

from __future__ import annotations

import asyncio
import time

from autoscaler.cluster.client import make_api_client
from autoscaler.controller.leader import LEADER, OTHER, LeaderElector, lease_holder
from autoscaler.controller.loop import Controller
from autoscaler.rbac import CONTROLLER_API_CALLS
from tests.controller.harness import StaticGpu, StubRay, config_for, http_get, running_controller
from tests.support.eventually import eventually


class Clock:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def lease(fake_api, name="qp"):
    return fake_api.get("coordination.k8s.io/v1", "Lease", name, "default")


async def test_lease_algorithm_with_a_fake_clock(fake_api):
    api = await make_api_client(str(fake_api.kubeconfig_path))
    try:
        clock = Clock()
        a = LeaderElector(api, "default", "qp", "a", lease_duration=15, renew_deadline=10, clock=clock)
        b = LeaderElector(api, "default", "qp", "b", lease_duration=15, renew_deadline=10, clock=clock)
        assert await a.step() is True  # creates the Lease
        assert lease_holder(lease(fake_api))[0] == "a"
        assert await b.step() is False and not b.is_leader
        clock.t += 14
        assert await b.try_acquire_or_renew() == OTHER  # not expired: b first saw this record 14 s ago
        clock.t += 2  # a stopped renewing 16 s ago (> 15 s): b takes over
        assert await b.step() is True
        spec = lease(fake_api)["spec"]
        assert spec["holderIdentity"] == "b" and spec["leaseTransitions"] == 1
        # a comes back: sees b's fresh record and steps down at once
        assert await a.step() is False and not a.is_leader
        # b renews; a's observation restarts with every renewal, so it cannot take over
        for _ in range(5):
            clock.t += 5
            assert await b.try_acquire_or_renew() == LEADER
            assert await a.try_acquire_or_renew() == OTHER
        # b releases: the holder is emptied and a takes over at its next attempt, no waiting
        await b.release()
        assert not b.is_leader and lease_holder(lease(fake_api))[0] == ""
        assert await a.step() is True
        assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
    finally:
        await api.close()


async def test_leader_that_cannot_renew_steps_down(fake_api):
    api = await make_api_client(str(fake_api.kubeconfig_path))
    try:
        clock = Clock()
        a = LeaderElector(api, "default", "qp", "a", lease_duration=15, renew_deadline=10, clock=clock)
        assert await a.step()
        fake_api.fail_next(100, status=500, path_contains="/leases/")
        clock.t += 5
        assert await a.step() is True  # failures within the renew deadline: still leader
        clock.t += 6
        assert await a.step() is False  # 11 s without a renewal > 10 s deadline
    finally:
        await api.close()


async def test_two_replicas_exactly_one_leader_and_failover(fake_api):
    async with running_controller(fake_api, leader_elect=True, identity="r1", lease_name="qp") as r1:
        async with running_controller(fake_api, leader_elect=True, identity="r2", lease_name="qp") as r2:
            await eventually(lambda: r1.is_leader or r2.is_leader)
            await eventually(lambda: r1.synced and r2.synced)
            assert r1.is_leader != r2.is_leader
            leader, standby = (r1, r2) if r1.is_leader else (r2, r1)
            _, text = await http_get(f"http://127.0.0.1:{standby.port}/metrics")
            assert "queuepilot_controller_is_leader 0.0" in text  # every replica serves metrics
            await leader.shutdown()  # graceful stop: releases the Lease
            await eventually(lambda: standby.is_leader, timeout=5)
            assert lease_holder(lease(fake_api))[0] == standby.config.identity
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS


async def test_crashed_leader_is_replaced_after_the_lease_expires(fake_api):
    async with running_controller(fake_api, leader_elect=True, identity="r1", lease_name="qp") as r1:
        await eventually(lambda: r1.is_leader)
        # simulate a crash: the election stops without releasing the Lease
        for t in r1._tasks:
            if t.get_name() == "leader":
                t.cancel()
        r1.leader = None
        async with running_controller(fake_api, leader_elect=True, identity="r2", lease_name="qp") as r2:
            # r2 acts on its own view: wait for it, then the Lease must name it (the server's write
            # lands before r2 has read the reply, so waiting on the Lease first would race)
            await eventually(lambda: r2.is_leader, timeout=10)
            assert lease_holder(lease(fake_api))[0] == "r2"


async def test_a_leader_blocked_past_its_renew_deadline_stops_acting(fake_api):
    """A pass that outlasts the renew deadline must not hand the snapshot to the next reconciler."""
    calls: list[str] = []

    class Slow:
        name = "slow"

        async def reconcile(self, snapshot, now):
            calls.append("slow")
            time.sleep(1.2)  # noqa: ASYNC251 (a CPU-bound decider blocking the loop past the deadline)

    class Next:
        name = "next"

        async def reconcile(self, snapshot, now):
            calls.append("next")

    config = config_for(fake_api, leader_elect=True, identity="r1", lease_name="qp", lease_duration_seconds=3.0,
                        renew_deadline_seconds=1.0, retry_period_seconds=0.2, resync_seconds=30.0)
    client = await make_api_client(config.kubeconfig)
    c = Controller(config, client, gpu_signal=StaticGpu(), ray_client=StubRay(),
                   build_reconcilers=lambda ctx: [Slow(), Next()])
    await c.start()
    try:
        await eventually(lambda: c.is_leader and c.synced)
        await eventually(lambda: "slow" in calls)
        await asyncio.sleep(0.5)
        assert calls[0] == "slow" and (len(calls) < 2 or calls[1] == "slow")  # "next" never ran after it
    finally:
        await c.shutdown()
        await client.close()
