"""Selectors, pagination and discovery."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import FakeApiServer
from tests.support.objects import KUEUE, KUEUE_GROUP, KUEUE_VERSION, node, pod, workload


async def _names(core: client.CoreV1Api, **kw: str) -> list[str]:
    return [p.metadata.name for p in (await core.list_pod_for_all_namespaces(**kw)).items]


async def test_label_selectors(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(pod("head", labels={"ray.io/node-type": "head", "ray.io/cluster": "rc"}))
    fake_api.create(pod("worker", labels={"ray.io/node-type": "worker", "ray.io/cluster": "rc"}))
    fake_api.create(pod("web", labels={"app": "web"}))
    core = client.CoreV1Api(kube_client)
    assert await _names(core, label_selector="ray.io/node-type=worker") == ["worker"]
    assert await _names(core, label_selector="ray.io/node-type==head") == ["head"]
    assert await _names(core, label_selector="ray.io/node-type!=head") == ["web", "worker"]
    assert await _names(core, label_selector="ray.io/node-type in (head, worker)") == ["head", "worker"]
    assert await _names(core, label_selector="ray.io/node-type notin (head)") == ["web", "worker"]
    assert await _names(core, label_selector="ray.io/cluster") == ["head", "worker"]
    assert await _names(core, label_selector="!ray.io/cluster") == ["web"]
    assert await _names(core, label_selector="ray.io/cluster=rc,ray.io/node-type in (worker)") == ["worker"]


async def test_field_selectors(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(pod("a", node="gpu-1", phase="Running"))
    fake_api.create(pod("b", node="gpu-2", phase="Pending"))
    fake_api.create(pod("c", namespace="team-b", phase="Pending"))
    core = client.CoreV1Api(kube_client)
    assert await _names(core, field_selector="spec.nodeName=gpu-1") == ["a"]
    assert await _names(core, field_selector="status.phase=Pending") == ["b", "c"]
    assert await _names(core, field_selector="status.phase!=Running,metadata.namespace=team-a") == ["b"]
    assert await _names(core, field_selector="spec.nodeName=") == ["c"]
    assert await _names(core, field_selector="metadata.name=c") == ["c"]
    with pytest.raises(ApiException) as exc:
        await client.CustomObjectsApi(kube_client).list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "workloads", field_selector="spec.queueName=x"
        )
    assert exc.value.status == 400


async def test_pagination_is_a_consistent_snapshot(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.load(workload(f"w{i:03d}") for i in range(25))
    api = client.CustomObjectsApi(kube_client)
    first = await api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads", limit=10)
    assert len(first["items"]) == 10 and first["metadata"]["remainingItemCount"] == 15
    fake_api.create(workload("w999"))  # after the snapshot: not in this list, seen by a watch from its rv
    fake_api.delete(KUEUE, "Workload", "w020", "team-a")
    names = [i["metadata"]["name"] for i in first["items"]]
    token = first["metadata"]["continue"]
    while token:
        page = await api.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "workloads", limit=10, _continue=token)
        assert page["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        names += [i["metadata"]["name"] for i in page["items"]]
        token = page["metadata"].get("continue")
    assert names == [f"w{i:03d}" for i in range(25)]


async def test_continue_token_expires_after_compaction(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.load(node(f"n{i}") for i in range(5))
    core = client.CoreV1Api(kube_client)
    first = await core.list_node(limit=2)
    fake_api.create(node("late"))
    fake_api.compact()
    with pytest.raises(ApiException) as exc:
        await core.list_node(limit=2, _continue=first.metadata._continue)
    assert exc.value.status == 410


async def test_discovery(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    groups = await client.ApisApi(kube_client).get_api_versions()
    by_name = {g.name: g for g in groups.groups}
    assert by_name[KUEUE_GROUP].preferred_version.version == "v1beta2"
    assert {v.version for v in by_name[KUEUE_GROUP].versions} == {"v1beta2", "v1beta1"}
    assert "ray.io" in by_name and "coordination.k8s.io" in by_name
    res = await client.CustomObjectsApi(kube_client).get_api_resources(KUEUE_GROUP, KUEUE_VERSION)
    names = {r.name: r for r in res.resources}
    assert names["workloads"].namespaced and not names["clusterqueues"].namespaced
    assert "workloads/status" in names and "resourceflavors/status" not in names
    core = await client.CoreV1Api(kube_client).get_api_resources()
    assert {"pods", "nodes", "events", "namespaces", "services"} <= {r.name for r in core.resources}
