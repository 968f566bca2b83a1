"""Write refusals with any status and malformed watch lines, seen through the real kubernetes-asyncio client."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.cluster.client import request
from tests.fakeapi import FakeApiServer
from tests.support.eventually import eventually
from tests.support.objects import KUEUE_GROUP, KUEUE_VERSION, workload

STATUS_PATCH = {"status": {"admissionChecks": []}}


async def _patch_status(api: client.CustomObjectsApi, name: str) -> dict:
    return await api.patch_namespaced_custom_object_status(
        KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", name, STATUS_PATCH, _content_type="application/merge-patch+json")


@pytest.mark.parametrize(("status", "reason"), [
    (422, "Invalid"), (403, "Forbidden"), (409, "Conflict"), (404, "NotFound"), (400, "BadRequest"),
    (500, "InternalError"), (503, "ServiceUnavailable"), (418, ""),
])
async def test_refuse_writes_with_any_status(fake_api: FakeApiServer, kube_client: client.ApiClient,
                                             status: int, reason: str) -> None:
    fake_api.create(workload("wl-1"))
    fake_api.create(workload("wl-2"))
    api = client.CustomObjectsApi(kube_client)
    rule = fake_api.refuse_writes(status, resource="workloads/status", name="wl-1")
    for _ in range(3):
        with pytest.raises(ApiException) as exc:
            await _patch_status(api, "wl-1")
        body = json.loads(exc.value.body)
        assert exc.value.status == status == body["code"] and body["reason"] == reason
    assert rule.hits == 3
    await _patch_status(api, "wl-2")  # another object: not refused
    await api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "wl-1")  # reads never are
    rule.cancel()
    await _patch_status(api, "wl-1")
    assert rule.hits == 3


async def test_refusal_texts_are_the_real_servers(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(workload("wl-1"))
    api = client.CustomObjectsApi(kube_client)
    fake_api.refuse_writes(403, resource="workloads/status", times=1)
    with pytest.raises(ApiException) as exc:
        await _patch_status(api, "wl-1")
    msg = json.loads(exc.value.body)["message"]
    assert msg.startswith('workloads.kueue.x-k8s.io "wl-1" is forbidden: User "system:serviceaccount:')
    assert msg.endswith('cannot patch resource "workloads/status" in API group "kueue.x-k8s.io" in the namespace "team-a"')
    fake_api.refuse_writes(422, resource="workloads/status", times=1, message="denied by policy")
    with pytest.raises(ApiException) as exc:
        await _patch_status(api, "wl-1")
    body = json.loads(exc.value.body)
    assert body["details"]["causes"][0]["message"] == "denied by policy"
    assert body["message"] == 'workloads.kueue.x-k8s.io "wl-1" is invalid: spec: denied by policy'
    await _patch_status(api, "wl-1")  # both rules were used up


async def test_429_refusal_carries_retry_after(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(workload("wl-1"))
    fake_api.refuse_writes(429, retry_after=7, verbs=("patch",))
    with pytest.raises(ApiException) as exc:
        await _patch_status(client.CustomObjectsApi(kube_client), "wl-1")
    assert exc.value.status == 429 and exc.value.headers["Retry-After"] == "7"
    assert json.loads(exc.value.body)["details"] == {"retryAfterSeconds": 7}
    # a create is not a patch: not refused
    await client.CoreV1Api(kube_client).create_namespace({"metadata": {"name": "team-z"}})


async def _open_watch(fake_api: FakeApiServer, kube_client: client.ApiClient):
    resp = await request(kube_client, "GET", "/api/v1/nodes", [("watch", "true"), ("resourceVersion", "0")],
                         request_timeout=None)
    await eventually(lambda: fake_api.open_watches, "the watch to open", timeout=1)
    return resp


@pytest.mark.parametrize("line", [b"null", b"<html>502 Bad Gateway</html>", b'{"type": "ADDED", "object": {"metad'])
async def test_inject_a_malformed_watch_line(fake_api: FakeApiServer, kube_client: client.ApiClient,
                                             line: bytes) -> None:
    resp = await _open_watch(fake_api, kube_client)
    try:
        assert fake_api.inject_watch_line(line, path_contains="/nodes") == 1
        assert fake_api.inject_watch_line(b"null", path_contains="/pods") == 0
        fake_api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        got = await asyncio.wait_for(resp.content.readline(), 5)
        assert got == line + b"\n"  # the raw line, then the stream goes on
        event = json.loads(await asyncio.wait_for(resp.content.readline(), 5))
        assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "n1"
    finally:
        resp.release()


async def test_inject_a_cut_off_event_ends_the_stream(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    resp = await _open_watch(fake_api, kube_client)
    try:
        fake_api.inject_watch_line(b'{"type": "ADDED", "obj', end=True)
        # the half event may or may not be delivered before the cut; the stream then fails, it never
        # ends cleanly (that would read as a server timeout)
        with pytest.raises(aiohttp.ClientPayloadError):
            while True:
                line = await asyncio.wait_for(resp.content.readline(), 5)
                assert line == b'{"type": "ADDED", "obj'
    finally:
        resp.release()
