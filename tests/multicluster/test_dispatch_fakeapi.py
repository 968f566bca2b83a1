"""The dispatcher against three fake API servers (manager + two workers), real kubernetes-asyncio clients."""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.controller.dispatch import DispatchReconciler
from autoscaler.core.policy.dispatch import DispatchConfig
from autoscaler.rbac import (
    CONTROLLER_API_CALLS,
    MULTIKUEUE_API_CALLS,
    MULTIKUEUE_SECRET_CALLS,
    WORKER_API_CALLS,
)
from tests.fakeapi.server import FakeApiServer
from tests.multicluster.fleet import FROZEN, Fleet3, gpu_node, gpu_pod, mk_workload
from tests.support.eventually import eventually
from tests.support.objects import KUEUE


def dispatcher(f: Fleet3) -> DispatchReconciler:
    assert f.controller is not None
    (d,) = [r for r in f.controller.reconcilers if isinstance(r, DispatchReconciler)]
    return d


@pytest.mark.parametrize("trouble", ["broken", "fragmented"])
async def test_nominated_only_where_it_fits(fleet3: Fleet3, trouble: str) -> None:
    a, b = fleet3.workers["worker-a"], fleet3.workers["worker-b"]
    if trouble == "broken":
        a.create(gpu_node("a1"))
        fleet3.unhealthy["worker-a"] = {"a1": 3}  # 5 healthy free GPUs: an 8-GPU pod does not fit
    else:
        a.create(gpu_node("a1"))
        a.create(gpu_node("a2"))
        a.create(gpu_pod("p1", "a1", 4))
        a.create(gpu_pod("p2", "a2", 4))  # 8 free GPUs in all, but 4 + 4
    b.create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("train"))
    async with fleet3.running():
        await eventually(lambda: fleet3.nominated("train") == ["worker-b"], timeout=30)
        wl = fleet3.manager.get(KUEUE, "Workload", "train", "team-a")
        owners = [e for e in wl["metadata"]["managedFields"] if e.get("subresource") == "status"
                  and "f:nominatedClusterNames" in str(e.get("fieldsV1"))]
        assert [e["manager"] for e in owners] == ["queuepilot"]
        d = dispatcher(fleet3)
        assert "train" in str(d.ledgers["worker-b"].reservations)
        assert not d.ledgers["worker-a"].reservations
        await eventually(lambda: ("Nominated", "live") in d.published.decisions, timeout=30)
        # every request is one the RBAC grants: manager (chart ClusterRoles + named Secrets), workers (nodes, pods)
        assert fleet3.manager.observed_calls() <= CONTROLLER_API_CALLS | MULTIKUEUE_API_CALLS | MULTIKUEUE_SECRET_CALLS
        assert {c for c in fleet3.manager.observed_calls() if c[1] == "secrets"} == {("", "secrets", "get")}
        for w in (a, b):
            assert w.observed_calls() <= WORKER_API_CALLS


async def test_none_fits_event_names_largest_blocks(fleet3: Fleet3) -> None:
    a, b = fleet3.workers["worker-a"], fleet3.workers["worker-b"]
    a.create(gpu_node("a1"))
    a.create(gpu_pod("p1", "a1", 2))
    b.create(gpu_node("b1", 4))
    fleet3.manager.create(mk_workload("big"))
    async with fleet3.running():
        def warnings() -> list[dict]:
            return [e for e in fleet3.manager.list("v1", "Event", "team-a") if e.get("reason") == "NoClusterFits"
                    and "worker-b: stale" not in e.get("message", "")]
        # a pass on a loaded machine may find a worker's GPU reading not yet taken (``stale``); the
        # workload is then decided again when that worker becomes usable, and that Event is the one read
        await eventually(lambda: bool(warnings()), timeout=60)
        (ev,) = warnings()
        assert ev["type"] == "Warning"
        assert "worker-a: insufficient on a100: largest free blocks 6" in ev["message"]
        assert "worker-b: PodLargerThanNode" in ev["message"] or "worker-b: main needs 8 GPUs per pod" in ev["message"]
        assert fleet3.nominated("big") is None  # nothing written


async def test_unreachable_worker_drops_out(fleet3: Fleet3) -> None:
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("train"))
    async with fleet3.running():
        await eventually(lambda: fleet3.nominated("train") == ["worker-a", "worker-b"], timeout=30)
        await fleet3.workers["worker-a"].stop()  # partition: worker-a's API server is gone
        await eventually(lambda: fleet3.nominated("train") == ["worker-b"], timeout=40)
        d = dispatcher(fleet3)
        await eventually(lambda: d.published.up.get("worker-a") == 0, timeout=30)
        assert d.published.up.get("worker-b") == 1


async def test_nothing_is_nominated_before_every_worker_s_gpu_health_was_read(fleet3: Fleet3) -> None:
    """Until a worker's first GPU health reading the dispatcher decides nothing (within its settle
    time): a pass before it would find that worker stale and nominate the others only, and a
    nomination that stays usable is kept, so the workload would never be offered to that worker."""
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("first", at=2000.0))
    FROZEN.add("worker-b")  # its GPU health source has not answered yet
    async with fleet3.running():
        d = dispatcher(fleet3)
        await eventually(lambda: set(fleet3.fleet.fleet.workers) == {"worker-a", "worker-b"}
                              and all(w.nodes.synced and w.pods.synced for w in fleet3.fleet.fleet.workers.values()), timeout=30)
        await asyncio.sleep(1.0)  # passes run (refresh 0.3 s, GPU poll 0.2 s): none may decide
        assert fleet3.nominated("first") is None
        assert not any(led.reservations for led in d.ledgers.values())
        FROZEN.discard("worker-b")  # the first reading comes
        await eventually(lambda: fleet3.nominated("first") == ["worker-a", "worker-b"], timeout=30)


async def test_ledger_never_promises_a_gpu_twice(fleet3: Fleet3) -> None:
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("first", at=2000.0))
    fleet3.manager.create(mk_workload("second", at=2001.0))
    async with fleet3.running():
        await eventually(lambda: fleet3.nominated("first") == ["worker-a", "worker-b"], timeout=30)
        await asyncio.sleep(0.5)
        assert not fleet3.nominated("second")  # every free GPU is promised to "first"
        d = dispatcher(fleet3)
        for ledger in d.ledgers.values():
            assert set(ledger.reservations) == {"team-a/first"}
        # Kueue: worker-a admitted "first": clusterName set, nominations cleared
        wl = fleet3.manager.get(KUEUE, "Workload", "first", "team-a")
        wl["status"]["clusterName"] = "worker-a"
        wl["status"].pop("nominatedClusterNames", None)
        fleet3.manager.update_status(wl, field_manager="kueue")
        # its promise on worker-b is given back: "second" goes there (after its backoff)
        await eventually(lambda: fleet3.nominated("second") == ["worker-b"], timeout=40)
        assert set(d.ledgers["worker-a"].reservations) == {"team-a/first"}
        assert set(d.ledgers["worker-b"].reservations) == {"team-a/second"}


async def test_dry_run_writes_nothing_and_reports(fleet3: Fleet3) -> None:
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("train"))
    async with fleet3.running(dry_run=True):
        def reported() -> bool:
            return any(e.get("reason") == "Nominated" and "dry-run: would nominate worker-b" in e.get("message", "")
                       for e in fleet3.manager.list("v1", "Event", "team-a"))
        await eventually(reported, timeout=30)
        assert fleet3.nominated("train") is None


async def test_multikueue_crds_are_served(fleet3: Fleet3) -> None:
    m: FakeApiServer = fleet3.manager
    assert {c["metadata"]["name"] for c in m.list(KUEUE, "MultiKueueCluster")} == {"worker-a", "worker-b"}
    assert m.get(KUEUE, "MultiKueueConfig", "mk-config")["spec"]["clusters"] == ["worker-a", "worker-b"]


async def test_stale_gpu_health_drops_out(fleet3: Fleet3) -> None:
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.manager.create(mk_workload("train"))
    async with fleet3.running(config=DispatchConfig(stale_seconds=1.0)):
        await eventually(lambda: fleet3.nominated("train") == ["worker-a", "worker-b"], timeout=30)
        FROZEN.add("worker-b")  # its series stop arriving in the shared Prometheus
        await eventually(lambda: fleet3.nominated("train") == ["worker-a"], timeout=40)
