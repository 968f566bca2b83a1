"""MultiKueue worker kubeconfigs held to Kueue's bar (autoscaler.cluster.worker_kubeconfig, Fleet.refresh):
no credential reaches an address a kubeconfig names over plain http or through a proxy, a location is a
Secret name in Kueue's namespace only, and one bad Secret never keeps a good worker from connecting.

The worker "API servers" and the proxy are real servers on loopback that record what reaches them; the
manager is the fake API server read by the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import ssl
import tempfile
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from prometheus_client import CollectorRegistry, generate_latest

from autoscaler.cluster.remote import Fleet
from autoscaler.cluster.worker_kubeconfig import WorkerCredentials, api_client_for
from autoscaler.controller.dispatch import FleetCollector, FleetPublished
from tests.security.attacks import (
    RecordingApi,
    RecordingProxy,
    b64,
    kubeconfig,
    kubeconfig_secret,
    multikueue_cluster,
)
from tests.webhook.certs import make_ca, make_pki

NS = "kueue-system"


class Reporter:
    def __init__(self) -> None:
        self.errors: Counter[tuple[str, str]] = Counter()

    def watch_restarted(self, resource: str) -> None:
        pass

    def source_error(self, source: str, kind: str) -> None:
        self.errors[(source, kind)] += 1


@pytest.fixture
async def tls_worker(tmp_path: Path) -> AsyncIterator[tuple[RecordingApi, str]]:
    """A recording API server over TLS and its CA (PEM text)."""
    (tmp_path / "pki").mkdir()
    pki = make_pki(tmp_path / "pki")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(pki.cert_file, pki.key_file)
    api = await RecordingApi().start(ctx)
    yield api, pki.ca_file.read_text()
    await api.close()


@pytest.fixture
async def plain_worker() -> AsyncIterator[RecordingApi]:
    api = await RecordingApi().start()
    yield api
    await api.close()


@pytest.fixture
async def proxy() -> AsyncIterator[RecordingProxy]:
    p = await RecordingProxy().start()
    yield p
    await p.close()


async def run_fleet(fake_api: Any, kube_client: Any, refreshes: int = 2, **kw: Any) -> tuple[Fleet, Reporter]:
    rep = Reporter()
    fleet = Fleet(kube_client, rep, namespace=NS, **kw)
    fleet.start()
    for _ in range(200):
        if fleet.synced and len(fleet.clusters.items) == len(fake_api.list(*KUEUE_MKC)):
            break
        await asyncio.sleep(0.02)
    for _ in range(refreshes):
        await fleet.refresh()
    return fleet, rep


KUEUE_MKC = ("kueue.x-k8s.io/v1beta2", "MultiKueueCluster")


def setup_namespaces(fake_api: Any) -> None:
    for ns in (NS, "team-a"):
        fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})


ATTACKS = ["http-token", "skip-verify", "basic-auth", "url-credentials", "proxy"]


@pytest.mark.parametrize("attack", ATTACKS)
async def test_no_credential_reaches_an_address_over_plain_http_or_a_proxy(
    fake_api, kube_client, tls_worker, plain_worker, proxy, attack: str
) -> None:
    tls, ca = tls_worker
    host = tls.url.removeprefix("https://")
    token = {"token": "secret-token"}
    cfg = {
        "http-token": kubeconfig(plain_worker.url, token),
        "skip-verify": kubeconfig(tls.url, token, {"insecure-skip-tls-verify": True}),
        "basic-auth": kubeconfig(tls.url, {"username": "admin", "password": "hunter2"},
                                 {"certificate-authority-data": b64(ca)}),
        "url-credentials": kubeconfig(f"https://admin:hunter2@{host}", token, {"certificate-authority-data": b64(ca)}),
        "proxy": kubeconfig(tls.url, token, {"certificate-authority-data": b64(ca),
                                             "proxy-url": f"http://127.0.0.1:{proxy.port}"}),
    }[attack]
    setup_namespaces(fake_api)
    fake_api.create(kubeconfig_secret("worker-kubeconfig", NS, cfg))
    fake_api.create(multikueue_cluster("worker", "worker-kubeconfig"), field_manager="kueue")
    fleet, rep = await run_fleet(fake_api, kube_client)
    try:
        await asyncio.sleep(0.3)  # anything a connected worker would send has had time to arrive
        assert "worker" not in fleet.workers
        assert fleet.failing == {"worker": "insecure"}
        assert rep.errors == Counter({("multikueue", "insecure"): 1})  # counted once per failure streak
        assert tls.seen == [] and plain_worker.seen == [] and proxy.received == []
    finally:
        await fleet.stop()


async def test_plain_http_only_with_the_test_flag(fake_api, kube_client, plain_worker) -> None:
    setup_namespaces(fake_api)
    fake_api.create(kubeconfig_secret("worker-kubeconfig", NS, kubeconfig(plain_worker.url, {"token": "t"})))
    fake_api.create(multikueue_cluster("worker", "worker-kubeconfig"), field_manager="kueue")
    fleet, _ = await run_fleet(fake_api, kube_client, allow_insecure_http=True)
    try:
        assert "worker" in fleet.workers and not fleet.failing
        for _ in range(100):
            if plain_worker.seen:
                break
            await asyncio.sleep(0.02)
        assert plain_worker.authorizations == {"Bearer t"}
    finally:
        await fleet.stop()


async def test_a_verified_worker_gets_its_token_over_tls(fake_api, kube_client, tls_worker) -> None:
    tls, ca = tls_worker
    setup_namespaces(fake_api)
    fake_api.create(kubeconfig_secret("worker-kubeconfig", NS, kubeconfig(
        tls.url, {"token": "good-token"}, {"certificate-authority-data": b64(ca)})))
    fake_api.create(multikueue_cluster("worker", "worker-kubeconfig"), field_manager="kueue")
    fleet, rep = await run_fleet(fake_api, kube_client)
    try:
        assert "worker" in fleet.workers and not fleet.failing and not rep.errors
        for _ in range(100):
            if {s.path.split("?")[0] for s in tls.seen} >= {"/api/v1/nodes", "/api/v1/pods"}:
                break
            await asyncio.sleep(0.02)
        assert tls.authorizations == {"Bearer good-token"}
    finally:
        await fleet.stop()


@pytest.mark.parametrize("location", ["../../team-a/secrets/ray-token", "team-a/ray-token", "Ray_Token",
                                      "ray-token?x=1", "x" * 254])
async def test_a_location_is_a_secret_name_in_kueues_namespace_only(fake_api, kube_client, location: str) -> None:
    setup_namespaces(fake_api)
    fake_api.create(kubeconfig_secret("ray-token", "team-a", kubeconfig("https://w", {"token": "team-a"})))
    fake_api.create(multikueue_cluster("worker", location), field_manager="kueue")
    before = len(fake_api.requests)
    fleet, _ = await run_fleet(fake_api, kube_client)
    try:
        assert fleet.failing == {"worker": "malformed"} and "not a Secret name" in fleet.errors["worker"]
        assert not [r for r in fake_api.requests[before:] if r.resource == "secrets"]  # no Secret was read at all
    finally:
        await fleet.stop()


async def test_one_bad_secret_never_keeps_a_good_worker_from_connecting(fake_api, kube_client, tls_worker) -> None:
    tls, ca = tls_worker
    good = kubeconfig(tls.url, {"token": "good-token"}, {"certificate-authority-data": b64(ca)})
    bad = {  # cluster name -> (its Secret's kubeconfig, or raw bytes), all sorting before the good one
        "a-garbage-ca": kubeconfig(tls.url, {"token": "t"}, {"certificate-authority-data": b64("not a certificate")}),
        "b-http": kubeconfig("http://127.0.0.1:1", {"token": "t"}),
        "c-exec": kubeconfig(tls.url, {"exec": {"command": "/bin/sh"}}),
        "d-not-yaml": b"{{{ not yaml",
        "e-no-user": {**good, "users": [{"name": "other", "user": {"token": "t"}}]},
        "f-ssl-error-on-connect": good,
    }
    setup_namespaces(fake_api)
    for name, cfg in {**bad, "z-good": good}.items():
        raw = cfg if isinstance(cfg, bytes) else None
        fake_api.create(kubeconfig_secret(f"{name}-kubeconfig", NS, None if raw else cfg, raw))
        fake_api.create(multikueue_cluster(name, f"{name}-kubeconfig"), field_manager="kueue")

    def connect(creds: WorkerCredentials, where: str) -> Any:
        if "f-ssl-error" in where:  # what an unforeseen TLS failure in building a client looked like
            raise ssl.SSLError(9, "[SSL] PEM lib (_ssl.c:3874)")
        return api_client_for(creds, where)

    fleet, rep = await run_fleet(fake_api, kube_client, refreshes=3, connect=connect)
    try:
        assert set(fleet.workers) == {"z-good"}
        assert fleet.failing == {"a-garbage-ca": "malformed", "b-http": "insecure", "c-exec": "unsupported",
                                 "d-not-yaml": "malformed", "e-no-user": "malformed",
                                 "f-ssl-error-on-connect": "exception"}
        # counted once per failure streak, not per refresh
        assert rep.errors == Counter({("multikueue", "malformed"): 3, ("multikueue", "insecure"): 1,
                                      ("multikueue", "unsupported"): 1, ("multikueue", "exception"): 1})
        registry = CollectorRegistry()
        registry.register(FleetCollector(FleetPublished(), fleet))
        text = generate_latest(registry).decode()
        assert 'queuepilot_worker_cluster_connect_failing{cluster="b-http",kind="insecure"} 1.0' in text
        assert 'cluster="z-good"' not in text
        # the bad Secret is fixed: that worker connects and its series goes
        sec = fake_api.get("v1", "Secret", "b-http-kubeconfig", NS)
        sec["data"] = kubeconfig_secret("x", NS, good)["data"]
        fake_api.replace(sec)
        await fleet.refresh()
        assert "b-http" in fleet.workers and "b-http" not in fleet.failing
    finally:
        await fleet.stop()


async def test_ca_files_are_removed_once_the_client_holds_them(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    clients = []
    for _ in range(50):  # 50 rotations, each with a CA of its own
        ca, _ = make_ca()
        pem = ca.public_bytes(serialization.Encoding.PEM)
        clients.append(api_client_for(WorkerCredentials("https://127.0.0.1:6443", token="t",
                                                        certificate_authority=pem), "test"))
    try:
        assert await asyncio.to_thread(lambda: list(tmp_path.iterdir())) == []
    finally:
        for c in clients:
            await c.close()
