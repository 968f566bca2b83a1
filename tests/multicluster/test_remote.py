"""Worker clusters read through MultiKueueCluster kubeconfig Secrets (autoscaler.cluster.remote), against
fake API servers with the real kubernetes-asyncio client; and the fleet metrics."""

from __future__ import annotations

import base64

import pytest
import yaml
from prometheus_client import generate_latest

from autoscaler.cluster.client import make_api_client
from autoscaler.cluster.remote import Fleet, FleetError, check_kubeconfig_dict
from autoscaler.controller.dispatch import DispatchReconciler, cluster_selector
from tests.multicluster.fleet import NS, Fleet3, gpu_node, mk_workload
from tests.support.eventually import eventually
from tests.support.objects import KUEUE
from tests.support.reporters import RecordingReporter


async def synced_fleet(f: Fleet3) -> tuple[Fleet, RecordingReporter, object]:
    api = await make_api_client(str(f.manager.kubeconfig_path))
    rep = RecordingReporter()
    fleet = Fleet(api, rep, namespace=NS, stale_after=1.0, allow_insecure_http=True)  # fake API servers: http
    fleet.start()
    await eventually(lambda: fleet.synced, timeout=30)
    return fleet, rep, api


async def test_workers_connect_rotate_and_go(fleet3: Fleet3) -> None:
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet, _rep, api = await synced_fleet(fleet3)
    try:
        await fleet.refresh()
        assert set(fleet.workers) == {"worker-a", "worker-b"} and not fleet.errors
        wa = fleet.workers["worker-a"]
        await eventually(lambda: wa.nodes.synced and "a1" in wa.nodes.items, timeout=30)
        await fleet.refresh()
        assert fleet.workers["worker-a"] is wa  # same Secret: same client, no reconnect
        # the Secret is rotated: reconnect
        sec = fleet3.manager.get("v1", "Secret", "worker-a-kubeconfig", NS)
        sec["metadata"]["labels"] = {"rotated": "1"}
        fleet3.manager.replace(sec)
        await fleet.refresh()
        assert fleet.workers["worker-a"] is not wa
        # the MultiKueueCluster is deleted: the worker is dropped
        fleet3.manager.delete(KUEUE, "MultiKueueCluster", "worker-b")
        await eventually(lambda: "worker-b" not in fleet.clusters.items, timeout=30)
        await fleet.refresh()
        assert set(fleet.workers) == {"worker-a"}
    finally:
        await fleet.stop()
        await api.close()


@pytest.mark.parametrize("breakage, kind", [
    ("missing", "missing"), ("no-key", "missing"), ("not-yaml", "malformed"), ("exec", "unsupported"),
    ("token-file", "unsupported"), ("profile", "unsupported"),
])
async def test_bad_worker_credentials_are_counted_once_and_skipped(fleet3: Fleet3, breakage: str, kind: str) -> None:
    m = fleet3.manager
    sec = m.get("v1", "Secret", "worker-a-kubeconfig", NS)
    kc = fleet3.workers["worker-a"].kubeconfig()
    if breakage == "missing":
        m.delete("v1", "Secret", "worker-a-kubeconfig", NS)
    elif breakage == "no-key":
        sec["data"] = {"other": sec["data"]["kubeconfig"]}
        m.replace(sec)
    elif breakage == "not-yaml":
        sec["data"] = {"kubeconfig": base64.b64encode(b"{{{not yaml").decode()}
        m.replace(sec)
    elif breakage in ("exec", "token-file"):
        kc["users"][0]["user"] = ({"exec": {"command": "/bin/sh", "apiVersion": "client.authentication.k8s.io/v1"}}
                                  if breakage == "exec" else {"tokenFile": "/var/run/secrets/token"})
        sec["data"] = {"kubeconfig": base64.b64encode(yaml.safe_dump(kc).encode()).decode()}
        m.replace(sec)
    else:
        mkc = m.get(KUEUE, "MultiKueueCluster", "worker-a")
        mkc["spec"] = {"clusterSource": {"clusterProfileRef": {"name": "worker-a"}}}
        m.replace(mkc)
    fleet, rep, api = await synced_fleet(fleet3)
    try:
        if breakage == "profile":
            await eventually(lambda: fleet.clusters.items["worker-a"].secret is None, timeout=30)
        await fleet.refresh()
        await fleet.refresh()
        assert "worker-a" not in fleet.workers and "worker-b" in fleet.workers
        assert fleet.errors["worker-a"].startswith(kind)
        assert rep.errors.count(("multikueue", kind)) == 1  # once per failure streak
        assert fleet.failing == {"worker-a": kind}
        assert next(s for s in fleet.status() if s.name == "worker-a").connected is False
    finally:
        await fleet.stop()
        await api.close()


def test_kubeconfig_check() -> None:
    with pytest.raises(FleetError, match="malformed"):
        check_kubeconfig_dict(["x"], "here")
    with pytest.raises(FleetError, match="certificate-authority"):
        check_kubeconfig_dict({"clusters": [{"cluster": {"certificate-authority": "/ca"}}], "users": [{"user": {}}],
                               "contexts": [{"context": {}}]}, "here")
    with pytest.raises(FleetError, match="insecure: here: server http://"):
        check_kubeconfig_dict({"clusters": [{"name": "c", "cluster": {"server": "http://w:6443"}}],
                               "users": [{"name": "u", "user": {"token": "t"}}],
                               "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}, "here")


@pytest.mark.parametrize("base, expect", [
    ("", '{cluster="w-1"}'), ('{env="prod"}', '{env="prod",cluster="w-1"}'), ('{env="prod",}', '{env="prod",cluster="w-1"}'),
])
def test_cluster_selector(base: str, expect: str) -> None:
    assert cluster_selector(base, "cluster", "w-1") == expect


async def test_fleet_metrics_and_restart_keeps_nominations(fleet3: Fleet3) -> None:
    fleet3.workers["worker-a"].create(gpu_node("a1"))
    fleet3.workers["worker-b"].create(gpu_node("b1"))
    fleet3.unhealthy["worker-b"] = {"b1": 2}
    fleet3.manager.create(mk_workload("train", gpus_per_pod=4))
    async with fleet3.running() as c:
        await eventually(lambda: fleet3.nominated("train") == ["worker-b", "worker-a"], timeout=30)
        (d,) = [r for r in c.reconcilers if isinstance(r, DispatchReconciler)]
        await eventually(lambda: d.published.gpus.get(("worker-b", "a100", "promised")) == 4, timeout=30)
        text = generate_latest(c.registry).decode()
        assert 'queuepilot_worker_cluster_gpus{cluster="worker-b",flavor="a100",state="unhealthy"} 2.0' in text
        assert 'queuepilot_worker_cluster_largest_free_block_gpus{cluster="worker-b",flavor="a100"} 2.0' in text
        assert 'queuepilot_worker_cluster_up{cluster="worker-a"} 1.0' in text
        assert 'queuepilot_dispatch_decisions_total{mode="live",reason="Nominated"} 1.0' in text
        assert "queuepilot_worker_cluster_capacity_age_seconds" in text
    rv = fleet3.manager.get(KUEUE, "Workload", "train", "team-a")["metadata"]["resourceVersion"]
    async with fleet3.running() as c:  # a new leader: the nomination stands, nothing rewritten
        (d,) = [r for r in c.reconcilers if isinstance(r, DispatchReconciler)]
        await eventually(lambda: "team-a/train" in d.ledgers.get("worker-b", _EMPTY).reservations, timeout=30)
        wl = fleet3.manager.get(KUEUE, "Workload", "train", "team-a")
        assert wl["metadata"]["resourceVersion"] == rv
        assert "team-a/train" in d.ledgers["worker-a"].reservations


class _Empty:
    reservations: dict = {}


_EMPTY = _Empty()
