"""Fault injection, auth, latency and request recording."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import FakeApiServer
from tests.fakeapi.plugin import api_client_for
from tests.support.objects import KUEUE, KUEUE_GROUP, KUEUE_VERSION, workload


async def test_429_with_retry_after_then_recovers(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.fail_next(2, status=429, retry_after=3, path_contains="/workloads", method="GET")
    api = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    await core.list_node()  # does not match the rule
    for _ in range(2):
        with pytest.raises(ApiException) as exc:
            await api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads")
        assert exc.value.status == 429
        assert exc.value.headers["Retry-After"] == "3"
        body = json.loads(exc.value.body)
        assert body["reason"] == "TooManyRequests" and body["details"] == {"retryAfterSeconds": 3}
    listed = await api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads")
    assert listed["items"] == []


async def test_500_once(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.fail_next(1, status=500)
    core = client.CoreV1Api(kube_client)
    with pytest.raises(ApiException) as exc:
        await core.list_namespace()
    assert exc.value.status == 500 and json.loads(exc.value.body)["reason"] == "InternalError"
    names = [n.metadata.name for n in (await core.list_namespace()).items]
    assert names == ["default", "kube-system"]


async def test_latency_delays_responses(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    fake_api.set_latency(0.3)
    start = time.monotonic()
    await core.list_node()
    assert time.monotonic() - start >= 0.3
    fake_api.set_latency(0)


async def test_bearer_token_required(fake_api: FakeApiServer) -> None:
    fake_api.token = "something-else"
    api = await api_client_for(fake_api)  # kubeconfig still holds the old token
    try:
        with pytest.raises(ApiException) as exc:
            await client.CoreV1Api(api).list_node()
    finally:
        await api.close()
    assert exc.value.status == 401
    assert json.loads(exc.value.body) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Unauthorized",
        "reason": "Unauthorized",
        "code": 401,
    }


async def test_observed_calls_use_kubernetes_verbs(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("w"))
    api = client.CustomObjectsApi(kube_client)
    await api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "w")
    await api.list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", watch=True, timeout_seconds=0.1, _preload_content=False
    )
    await api.patch_namespaced_custom_object_status(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        "w",
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": "w", "namespace": "team-a"},
        },
        field_manager="m",
        _content_type="application/apply-patch+yaml",
    )
    await client.CoordinationV1Api(kube_client).list_namespaced_lease("kube-system")
    assert fake_api.observed_calls() == {
        (KUEUE_GROUP, "workloads", "get"),
        (KUEUE_GROUP, "workloads", "watch"),
        (KUEUE_GROUP, "workloads/status", "patch"),
        ("coordination.k8s.io", "leases", "list"),
    }
    last = fake_api.requests[-2]
    assert (last.method, last.content_type, last.namespace, last.name) == (
        "PATCH",
        "application/apply-patch+yaml",
        "team-a",
        "w",
    )


async def test_fail_only_watches(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.fail_next(1, status=500, verb="watch")
    api = client.CustomObjectsApi(kube_client)
    listed = await api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads")  # a list passes
    with pytest.raises(ApiException) as exc:
        async with watch.Watch() as w:
            async for _ in w.stream(
                api.list_cluster_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "workloads",
                resource_version=listed["metadata"]["resourceVersion"],
                timeout_seconds=1,
            ):
                pass
    assert exc.value.status == 500
