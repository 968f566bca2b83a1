"""Watches through kubernetes_asyncio.watch.Watch: resume from rv, bookmarks, 410, drops, selectors."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import FakeApiServer
from tests.support.eventually import eventually
from tests.support.objects import KUEUE, KUEUE_GROUP, KUEUE_VERSION, pod, workload


async def collect(w: watch.Watch, n: int, limit_s: float = 5.0) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []

    async def run() -> None:
        async for ev in w:
            out.append(ev)
            if len(out) == n:
                w.stop()
                break

    await asyncio.wait_for(run(), limit_s)
    return out


async def test_list_then_watch_from_resource_version(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(kube_client)
    fake_api.create(workload("a"))
    listed = await api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads")
    rv = listed["metadata"]["resourceVersion"]
    fake_api.create(workload("b"))
    fake_api.patch(KUEUE, "Workload", "a", {"spec": {"active": False}}, "team-a")
    fake_api.delete(KUEUE, "Workload", "a", "team-a")
    async with watch.Watch() as w:
        events = await collect(
            w.stream(
                api.list_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", resource_version=rv
            ),
            3,
        )
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "a"),
    ]
    assert events[1]["object"]["spec"]["active"] is False
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
    assert rvs == sorted(rvs) and rvs[0] > int(rv)


async def test_watch_without_resource_version_starts_with_current_state(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(pod("p1"))
    fake_api.create(pod("p2"))
    core = client.CoreV1Api(kube_client)
    async with watch.Watch() as w:
        first = await collect(w.stream(core.list_namespaced_pod, "team-a"), 2)
        assert {(e["type"], e["object"].metadata.name) for e in first} == {("ADDED", "p1"), ("ADDED", "p2")}


async def test_live_events_reach_an_open_watch(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(kube_client)
    w = watch.Watch()
    stream = w.stream(
        api.list_namespaced_custom_object,
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        resource_version=fake_api.resource_version,
    )
    task = asyncio.create_task(collect(stream, 2))
    await asyncio.sleep(0.2)
    fake_api.create(workload("late-1"))
    fake_api.create(workload("late-2"))
    events = await task
    await w.close()
    assert [e["object"]["metadata"]["name"] for e in events] == ["late-1", "late-2"]


async def test_bookmarks_carry_only_the_resource_version(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.bookmark_interval = 0.1
    fake_api.create(workload("a"))
    api = client.CustomObjectsApi(kube_client)
    async with watch.Watch() as w:
        events = await collect(
            w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=fake_api.resource_version,
                allow_watch_bookmarks=True,
            ),
            1,
        )
        assert events[0]["type"] == "BOOKMARK"
        assert events[0]["raw_object"]["kind"] == "Workload"
        assert set(events[0]["raw_object"]["metadata"]) <= {"resourceVersion", "creationTimestamp"}
        assert events[0]["raw_object"]["metadata"]["resourceVersion"] == fake_api.resource_version
        # the client resumes from the bookmark
        assert w.resource_version == fake_api.resource_version


async def test_no_bookmarks_unless_asked(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.bookmark_interval = 0.05
    api = client.CustomObjectsApi(kube_client)
    seen: list[Any] = []
    async with watch.Watch() as w:
        async for ev in w.stream(
            api.list_namespaced_custom_object,
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            resource_version=fake_api.resource_version,
            timeout_seconds=1,
        ):
            seen.append(ev)
    assert seen == []


async def test_compacted_history_gives_410_expired(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("a"))
    old_rv = fake_api.resource_version
    fake_api.create(workload("b"))
    fake_api.compact()
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        async with watch.Watch() as w:
            async for _ in w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=old_rv,
                timeout_seconds=5,
            ):
                pass
    assert exc.value.status == 410
    assert exc.value.reason.startswith("Expired: too old resource version")
    # the raw stream holds exactly one ERROR event with a Status, inside a 200 response
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {fake_api.token}"}) as http:
        url = f"{fake_api.url}/apis/{KUEUE_GROUP}/{KUEUE_VERSION}/namespaces/team-a/workloads?watch=true&resourceVersion={old_rv}"
        async with http.get(url) as resp:
            assert resp.status == 200
            lines = [line for line in (await resp.read()).decode().splitlines() if line]
    import json

    (event,) = [json.loads(line) for line in lines]
    assert event["type"] == "ERROR"
    assert event["object"]["code"] == 410 and event["object"]["reason"] == "Expired"
    # a relist and a watch from the fresh resourceVersion work again
    listed = await api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads")
    fake_api.create(workload("c"))
    async with watch.Watch() as w:
        events = await collect(
            w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=listed["metadata"]["resourceVersion"],
            ),
            1,
        )
    assert events[0]["object"]["metadata"]["name"] == "c"


async def test_bounded_history_expires_old_versions(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    first = fake_api.create(workload("w0"))["metadata"]["resourceVersion"]
    for i in range(1, 6):
        fake_api.create(workload(f"w{i}"))
    kept_from = fake_api.create(workload("w6"))["metadata"]["resourceVersion"]
    fake_api.set_history_limit(3)
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        async with watch.Watch() as w:
            async for _ in w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=first,
                timeout_seconds=5,
            ):
                pass
    assert exc.value.status == 410
    # the last three events are still there: a watch from just before them resumes
    start = str(int(kept_from) - 3)
    async with watch.Watch() as w:
        events = await collect(
            w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=start,
            ),
            3,
        )
    assert [e["object"]["metadata"]["name"] for e in events] == ["w4", "w5", "w6"]


async def test_dropped_watch_is_seen_by_the_client(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(kube_client)
    w = watch.Watch()
    stream = w.stream(
        api.list_namespaced_custom_object,
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        resource_version=fake_api.resource_version,
        timeout_seconds=30,
    )
    task = asyncio.create_task(collect(stream, 5, limit_s=10))
    await eventually(lambda: fake_api.open_watches, "the watch to open", timeout=2.5)
    assert fake_api.drop_watches() == 1
    with pytest.raises(aiohttp.ClientPayloadError):
        await task
    await w.close()
    assert fake_api.open_watches == 0


async def test_graceful_drop_ends_the_stream(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    api = client.CustomObjectsApi(kube_client)
    seen: list[Any] = []

    async def consume() -> None:
        async with watch.Watch() as w:
            async for ev in w.stream(
                api.list_namespaced_custom_object,
                KUEUE_GROUP,
                KUEUE_VERSION,
                "team-a",
                "workloads",
                resource_version=fake_api.resource_version,
                timeout_seconds=30,
            ):
                seen.append(ev)

    task = asyncio.create_task(consume())
    await eventually(lambda: fake_api.open_watches, "the watch to open", timeout=2.5)
    fake_api.drop_watches(graceful=True)
    await asyncio.wait_for(task, 5)
    assert seen == []


async def test_timeout_seconds_is_honoured(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    start = time.monotonic()
    async with watch.Watch() as w:
        events = [
            ev
            async for ev in w.stream(
                core.list_node, resource_version=fake_api.resource_version, timeout_seconds=1
            )
        ]
    elapsed = time.monotonic() - start
    assert events == []
    assert elapsed >= 0.9


async def test_selectors_move_objects_in_and_out_of_a_watch(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(pod("gpu-pod", node="gpu-1", labels={"app": "ray"}))
    fake_api.create(pod("other", node="cpu-1", labels={"app": "web"}))
    rv = fake_api.resource_version
    fake_api.patch(
        "v1", "Pod", "other", {"metadata": {"labels": {"app": "ray"}}}, "team-a"
    )  # now matches labels
    fake_api.patch("v1", "Pod", "gpu-pod", {"metadata": {"labels": {"app": "gone"}}}, "team-a")  # leaves
    fake_api.patch("v1", "Pod", "other", {"metadata": {"annotations": {"x": "y"}}}, "team-a")  # stays
    core = client.CoreV1Api(kube_client)
    async with watch.Watch() as w:
        events = await collect(
            w.stream(core.list_namespaced_pod, "team-a", label_selector="app=ray", resource_version=rv), 3
        )
    assert [(e["type"], e["object"].metadata.name) for e in events] == [
        ("ADDED", "other"),
        ("DELETED", "gpu-pod"),
        ("MODIFIED", "other"),
    ]
    async with watch.Watch() as w:
        events = await collect(
            w.stream(core.list_pod_for_all_namespaces, field_selector="spec.nodeName=gpu-1"), 1
        )
    assert events[0]["object"].metadata.name == "gpu-pod"


async def test_a_client_that_goes_away_ends_its_watch(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("a"))
    api = client.CustomObjectsApi(kube_client)
    w = watch.Watch()
    await collect(w.stream(api.list_namespaced_custom_object, KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads"), 1)
    assert fake_api.open_watches == 1
    await w.close()
    await eventually(lambda: fake_api.open_watches == 0, "the closed watch to end", timeout=2)
    assert fake_api.open_watches == 0
    assert fake_api.store.watchers == []
