"""``queuepilot.io/ray-dashboard-scheme: https``: the head is polled over TLS, its certificate verified
against the configured CA for the head Service's name; a head that cannot prove it gets no token."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.cluster.cache import WatchCache
from autoscaler.cluster.resources import RAY_CLUSTERS
from autoscaler.cluster.secrets import SecretTokens
from autoscaler.cluster.views import ray_cluster_view
from autoscaler.signals.ray import RayHeadClient, RaySignals
from autoscaler.signals.ray_demand import RayDashboardClient
from tests.security.heads import ServiceResolver, secret
from tests.security.tls import make_ca_and_server
from tests.support import objects as o
from tests.support.objects import OPT_IN, RAY_TOKEN_SECRET
from tests.support.reporters import RecordingReporter

HTTPS = {**OPT_IN, RAY_TOKEN_SECRET: "ray-token", "queuepilot.io/ray-dashboard-scheme": "https"}


async def _setup(fake_api, kube_client, heads, resolver: ServiceResolver, tmp_path: Path, cert_name: str):
    fake_api.create(o.namespace("team-a"))
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    fake_api.create(o.ray_cluster("rc-tls", "team-a", annotations=HTTPS))
    ca, server_ctx = make_ca_and_server(tmp_path, cert_name)
    head = await heads()
    await head.close()
    await head.start(ssl_context=server_ctx)
    resolver.add("rc-tls-head-svc.team-a.svc", head.port)
    cache = WatchCache(kube_client, RAY_CLUSTERS, ray_cluster_view, RecordingReporter())
    await cache.relist()
    targets = {k: v.dashboard for k, v in cache.items.items()}
    assert targets["team-a/rc-tls"].base_url.startswith("https://rc-tls-head-svc.team-a.svc:")
    return ca, head, targets


async def test_https_head_verified_with_the_configured_ca(fake_api, kube_client, heads, resolver, session,
                                                          tmp_path):
    ca, head, targets = await _setup(fake_api, kube_client, heads, resolver, tmp_path, "rc-tls-head-svc.team-a.svc")
    kinds: list[str] = []
    client = RayHeadClient(RayDashboardClient(session), read_secret=SecretTokens(kube_client).token,
                           ca_file=str(ca))
    signals = RaySignals(client, kinds.append)
    await signals.poll(targets, now=1796019999.0)
    assert kinds == [] and signals.observations["team-a/rc-tls"].status.demand
    assert head.authorizations == {"Bearer token-of-team-a"}


@pytest.mark.parametrize(("cert_name", "give_ca"), [
    ("other.team-b.svc", True),  # signed by the right CA for another name: not the cluster's own Service
    ("rc-tls-head-svc.team-a.svc", False),  # the right name, signed by a CA the controller does not trust
])
async def test_unverifiable_head_gets_no_token(fake_api, kube_client, heads, resolver, session, tmp_path,
                                               cert_name, give_ca):
    ca, head, targets = await _setup(fake_api, kube_client, heads, resolver, tmp_path, cert_name)
    kinds: list[str] = []
    client = RayHeadClient(RayDashboardClient(session), read_secret=SecretTokens(kube_client).token,
                           ca_file=str(ca) if give_ca else None)
    await RaySignals(client, kinds.append).poll(targets, now=1796019999.0)
    assert kinds == ["tls"]
    assert head.hits == []  # the handshake failed before any request (and its header) was sent
