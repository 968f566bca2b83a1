"""Ray credentials go only to the head of a RayCluster that opted in, at its own head Service, with its
own namespace's token.  Everything runs through the real parts: RayClusters and Secrets in the fake API
server, read by the controller's watch cache and Secret reader through kubernetes-asyncio; the Ray signal
polling real HTTP servers through aiohttp.  The tenant's "trap" server is where the RayCluster's status
points (the address the controller used to trust)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from autoscaler.cluster.cache import WatchCache
from autoscaler.cluster.resources import RAY_CLUSTERS
from autoscaler.cluster.secrets import SecretTokens
from autoscaler.cluster.views import ray_cluster_view
from autoscaler.signals.ray import RayHeadClient, RaySignals
from autoscaler.signals.ray_demand import RayDashboardClient
from tests.security.heads import RecordingHead, ServiceResolver, secret
from tests.support import objects as o
from tests.support.objects import OPT_IN, RAY_TOKEN_SECRET
from tests.support.reporters import RecordingReporter


def tenant_cluster(name: str, namespace: str, trap: RecordingHead, annotations: dict[str, str]) -> dict[str, Any]:
    """A RayCluster whose status (writable by whoever edits status) points at the trap server."""
    rc = o.ray_cluster(name, namespace, annotations=annotations, head_ip="127.0.0.1", dashboard_port=trap.port)
    rc["status"]["head"]["podIP"] = "127.0.0.1"
    return rc


async def targets_from_the_api(kube_client) -> tuple[dict[str, Any], RecordingReporter]:
    """The controller's own path: list RayClusters into a watch cache, take each view's dashboard target."""
    reporter = RecordingReporter()
    cache: WatchCache[Any] = WatchCache(kube_client, RAY_CLUSTERS, ray_cluster_view, reporter)
    await cache.relist()
    return {k: v.dashboard for k, v in cache.items.items()}, reporter


def namespaces(fake_api, *names: str) -> None:
    for n in names:
        fake_api.create(o.namespace(n))


async def test_tokens_go_only_to_opted_in_heads_each_with_its_own_namespace_token(
    fake_api, kube_client, heads, resolver: ServiceResolver, session
):
    namespaces(fake_api, "team-a", "team-b")
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    fake_api.create(secret("ray-token", "team-b", "token-of-team-b"))
    trap = await heads()
    head_a, head_b, head_c = await heads(), await heads(), await heads()
    resolver.add("rc-a-head-svc.team-a.svc", head_a.port)
    resolver.add("rc-b-head-svc.team-b.svc", head_b.port)
    resolver.add("rc-c-head-svc.team-b.svc", head_c.port)
    resolver.add("rc-idle-head-svc.team-b.svc", trap.port)  # even its real Service: never asked
    fake_api.create(tenant_cluster("rc-a", "team-a", trap, {**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    fake_api.create(tenant_cluster("rc-b", "team-b", trap, {**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    fake_api.create(tenant_cluster("rc-c", "team-b", trap, OPT_IN))  # opted in, names no Secret
    fake_api.create(tenant_cluster("rc-idle", "team-b", trap, {RAY_TOKEN_SECRET: "ray-token"}))  # not opted in

    targets, _ = await targets_from_the_api(kube_client)
    assert targets["team-b/rc-idle"] is None
    errors: list[str] = []
    tokens = SecretTokens(kube_client)
    signals = RaySignals(RayHeadClient(RayDashboardClient(session), read_secret=tokens.token), errors.append)
    await signals.poll(targets, now=1796019999.0)
    await signals.poll(targets, now=1796020009.0)

    assert trap.hits == []  # the address in status never receives anything
    assert head_a.hits and head_a.authorizations == {"Bearer token-of-team-a"}
    assert head_b.hits and head_b.authorizations == {"Bearer token-of-team-b"}
    assert head_c.hits and head_c.authorizations == {None}
    assert "rc-idle-head-svc.team-b.svc" not in resolver.asked
    assert errors == []
    assert set(signals.observations) == {"team-a/rc-a", "team-b/rc-b", "team-b/rc-c"}
    assert all(ob.status is not None and ob.status.demand for ob in signals.observations.values())
    assert tokens.reads == 2  # one GET per Secret, then cached


async def test_shared_token_is_single_tenant_only_and_never_reaches_other_clusters(
    fake_api, kube_client, heads, resolver: ServiceResolver, session
):
    namespaces(fake_api, "team-a", "team-b")
    fake_api.create(secret("ray-token", "team-b", "token-of-team-b"))
    trap = await heads()
    head_a, head_b = await heads(), await heads()
    resolver.add("rc-a-head-svc.team-a.svc", head_a.port)
    resolver.add("rc-b-head-svc.team-b.svc", head_b.port)
    fake_api.create(tenant_cluster("rc-a", "team-a", trap, OPT_IN))
    fake_api.create(tenant_cluster("rc-b", "team-b", trap, {**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    fake_api.create(tenant_cluster("rc-x", "team-b", trap, {}))

    targets, _ = await targets_from_the_api(kube_client)
    tokens = SecretTokens(kube_client)
    client = RayHeadClient(RayDashboardClient(session, token="ignored-default"),
                           read_secret=tokens.token, shared_token="shared")
    kinds: list[str] = []
    signals = RaySignals(client, kinds.append)
    await signals.poll(targets, now=1796019999.0)
    assert trap.hits == []
    assert head_a.authorizations == {"Bearer shared"}  # names no Secret: the operator's shared token
    # a per-namespace Secret next to a shared token is refused: the two never mix (no Secret read,
    # nothing sent to that head, counted as a credentials error)
    assert head_b.hits == [] and tokens.reads == 0
    assert kinds == ["credentials"] and signals.observations["team-b/rc-b"].error == "credentials"


async def test_a_secret_that_cannot_be_read_means_no_request_at_all(
    fake_api, kube_client, heads, resolver: ServiceResolver, session, caplog
):
    namespaces(fake_api, "team-a")
    head = await heads()
    resolver.add("rc-a-head-svc.team-a.svc", head.port)
    resolver.add("rc-m-head-svc.team-a.svc", head.port)
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    fake_api.create(o.ray_cluster("rc-a", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    fake_api.create(o.ray_cluster("rc-m", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: "no-such-secret"}))
    targets, _ = await targets_from_the_api(kube_client)

    tokens = SecretTokens(kube_client)
    kinds: list[str] = []
    signals = RaySignals(RayHeadClient(RayDashboardClient(session), read_secret=tokens.token), kinds.append)
    fake_api.fail_next(1, status=403, path_contains="/secrets/ray-token")  # RBAC does not grant it
    caplog.set_level(logging.WARNING, logger="queuepilot.ray")
    for t in range(3):
        await signals.poll(targets, now=1796019999.0 + t)
    assert head.hits == []  # neither cluster is asked without its token (no unauthenticated fallback)
    # failing twice in a row, a cluster is asked again only after its backoff (10 s): not on the third poll
    assert kinds == ["credentials"] * 4
    assert signals.retry_at("team-a/rc-a") == 1796019999.0 + 1 + 10
    await signals.poll(targets, now=1796019999.0 + 11)
    assert kinds == ["credentials"] * 6
    assert {k: ob.error for k, ob in signals.observations.items()} == {
        "team-a/rc-a": "credentials", "team-a/rc-m": "credentials"}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2  # once per cluster and kind, not every poll
    assert any("forbidden" in m and "team-a/ray-token" in m for m in lines)
    assert any("missing" in m and "team-a/no-such-secret" in m for m in lines)
    assert tokens.reads == 2  # failures are remembered for a while (60 s), not re-read every poll


async def test_a_rayjobs_head_gets_its_own_namespace_token_and_never_the_shared_one(
    fake_api, kube_client, heads, resolver: ServiceResolver, session
):
    """A RayJob's RayCluster did not opt in to scaling; the controller asks its head only for the stall
    detector (an ``evidence_only`` target).  It gets the token of the Secret it names (the RayJob's
    annotation, copied by KubeRay) in its own namespace, and no token otherwise: the single-tenant shared
    token is for clusters someone opted in.  The address in its status is never used."""
    namespaces(fake_api, "team-a", "team-b")
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    fake_api.create(secret("ray-token", "team-b", "token-of-team-b"))  # named by nobody in team-b
    trap = await heads()
    head_a, head_b, head_c = await heads(), await heads(), await heads()
    resolver.add("job-a-raycluster-1-head-svc.team-a.svc", head_a.port)
    resolver.add("job-b-raycluster-1-head-svc.team-b.svc", head_b.port)
    resolver.add("rc-c-head-svc.team-b.svc", head_c.port)
    for name, ns, ann in (("job-a-raycluster-1", "team-a", {RAY_TOKEN_SECRET: "ray-token"}),
                                  ("job-b-raycluster-1", "team-b", {}),
                                  ("rc-c", "team-b", OPT_IN)):
        rc = tenant_cluster(name, ns, trap, ann)
        if name.startswith("job-"):
            rc["metadata"]["labels"] = {"ray.io/originated-from-cr-name": name.split("-raycluster")[0],
                                        "ray.io/originated-from-crd": "RayJob"}
        fake_api.create(rc)

    reporter = RecordingReporter()
    cache: WatchCache[Any] = WatchCache(kube_client, RAY_CLUSTERS, ray_cluster_view, reporter)
    await cache.relist()
    targets = {k: v.head for k, v in cache.items.items()}
    assert {k: t.evidence_only for k, t in targets.items()} == {
        "team-a/job-a-raycluster-1": True, "team-b/job-b-raycluster-1": True, "team-b/rc-c": False}
    errors: list[str] = []
    client = RayHeadClient(RayDashboardClient(session), read_secret=SecretTokens(kube_client).token)
    await RaySignals(client, errors.append).poll(targets, now=1796019999.0)
    assert trap.hits == [] and errors == []
    assert head_a.hits and head_a.authorizations == {"Bearer token-of-team-a"}
    assert head_b.hits and head_b.authorizations == {None}  # names no Secret: no token at all
    # single-tenant mode (a shared token): an evidence-only head that names no Secret still gets no token,
    # the opted-in one gets the shared token, and one that names a Secret is refused (the two never mix)
    for head in (head_a, head_b, head_c):
        head.hits.clear()
        head.authorizations.clear()
    shared = RayHeadClient(RayDashboardClient(session), read_secret=SecretTokens(kube_client).token,
                           shared_token="shared")
    await RaySignals(shared, errors.append).poll(targets, now=1796020099.0)
    assert trap.hits == [] and errors == ["credentials"]
    assert not head_a.hits
    assert head_b.hits and head_b.authorizations == {None}
    assert head_c.authorizations == {"Bearer shared"}  # opted in, names no Secret: the shared token


@pytest.mark.parametrize("value", ["team-b/ray-token", "../ray-token", "Ray_Token", "x" * 254])
def test_a_secret_name_cannot_leave_the_namespace(value):
    from autoscaler.cluster.views import MalformedObject

    with pytest.raises(MalformedObject, match="ray-token-secret"):
        ray_cluster_view(o.ray_cluster("rc", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: value}))


async def test_a_head_that_redirects_does_not_pass_the_token_on(
    fake_api, kube_client, heads, resolver: ServiceResolver, session
):
    namespaces(fake_api, "team-a")
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    trap = await heads()
    head = await heads(redirect_to=f"http://127.0.0.1:{trap.port}")
    resolver.add("rc-a-head-svc.team-a.svc", head.port)
    fake_api.create(o.ray_cluster("rc-a", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    targets, _ = await targets_from_the_api(kube_client)
    kinds: list[str] = []
    client = RayHeadClient(RayDashboardClient(session), read_secret=SecretTokens(kube_client).token)
    await RaySignals(client, kinds.append).poll(targets, now=1796019999.0)
    assert head.hits and trap.hits == []
    assert kinds == ["http_status"]


async def test_bare_urls_are_refused(session, heads):
    """The head client only takes targets derived from a RayCluster; a URL string is never polled."""
    head = await heads()
    kinds: list[str] = []
    client = RayHeadClient(RayDashboardClient(session), shared_token="shared")
    await RaySignals(client, kinds.append).poll({"ns/rc": f"http://127.0.0.1:{head.port}"}, now=0.0)  # type: ignore[dict-item]
    assert head.hits == [] and kinds == ["bad_response"]


async def test_cached_token_secrets_go_when_no_cluster_names_them(
    fake_api, kube_client, heads, resolver: ServiceResolver, session
):
    namespaces(fake_api, "team-a")
    fake_api.create(secret("ray-token", "team-a", "token-of-team-a"))
    head = await heads()
    for name in ("rc-a", "rc-b"):
        resolver.add(f"{name}-head-svc.team-a.svc", head.port)
    fake_api.create(o.ray_cluster("rc-a", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: "ray-token"}))
    fake_api.create(o.ray_cluster("rc-b", "team-a", annotations={**OPT_IN, RAY_TOKEN_SECRET: "no-such-secret"}))
    targets, _ = await targets_from_the_api(kube_client)
    tokens = SecretTokens(kube_client)
    client = RayHeadClient(RayDashboardClient(session), read_secret=tokens.token, forget_secrets=tokens.forget)
    signals = RaySignals(client, lambda kind: None)
    await signals.poll(targets, now=1796019999.0)
    assert set(tokens._cache) == {("team-a", "ray-token"), ("team-a", "no-such-secret")}
    del targets["team-a/rc-b"]  # the cluster (and with it the only mention of that Secret) is gone
    await signals.poll(targets, now=1796020009.0)
    assert set(tokens._cache) == {("team-a", "ray-token")}
