"""kubernetes-asyncio's own leader election runs against the fake server's Leases."""

from __future__ import annotations

import asyncio
import contextlib

from kubernetes_asyncio import client
from kubernetes_asyncio.leaderelection import electionconfig, leaderelection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from tests.fakeapi import FakeApiServer
from tests.fakeapi.plugin import api_client_for


async def test_one_leader_then_takeover(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    leading: dict[str, asyncio.Event] = {"a": asyncio.Event(), "b": asyncio.Event()}
    clients = [await api_client_for(fake_api) for _ in range(2)]

    def candidate(identity: str, api: client.ApiClient) -> leaderelection.LeaderElection:
        async def lead() -> None:
            leading[identity].set()
            await asyncio.sleep(3600)

        async def stop() -> None:
            return None

        config = electionconfig.Config(
            LeaseLock("queuepilot-controller", "kube-system", identity, api),
            lease_duration=3,
            renew_deadline=2,
            retry_period=1,
            onstarted_leading=lead,
            onstopped_leading=stop,
        )
        return leaderelection.LeaderElection(config)

    tasks: list[asyncio.Task[None]] = []
    try:
        tasks.append(asyncio.create_task(candidate("a", clients[0]).run()))
        await asyncio.wait_for(leading["a"].wait(), 5)
        tasks.append(asyncio.create_task(candidate("b", clients[1]).run()))
        await asyncio.sleep(1.5)
        assert not leading["b"].is_set()  # a keeps renewing
        coord = client.CoordinationV1Api(kube_client)
        lease = await coord.read_namespaced_lease("queuepilot-controller", "kube-system")
        assert lease.spec.holder_identity == "a" and lease.spec.renew_time is not None
        tasks[0].cancel()  # the leader dies without releasing
        await asyncio.wait_for(leading["b"].wait(), 8)
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for c in clients:
            await c.close()
    lease = await client.CoordinationV1Api(kube_client).read_namespaced_lease(
        "queuepilot-controller", "kube-system"
    )
    assert lease.spec.holder_identity == "b"
