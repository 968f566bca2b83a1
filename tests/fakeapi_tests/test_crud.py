"""Create / get / list / replace / delete through the real kubernetes-asyncio client."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import ApiError, FakeApiServer
from tests.fakeapi.plugin import status_of
from tests.support.objects import (
    KUEUE,
    KUEUE_GROUP,
    KUEUE_VERSION,
    OPT_IN,
    namespace,
    pod,
    ray_cluster,
    workload,
)


async def test_create_get_list_and_resource_versions(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(namespace("team-a"))
    api = client.CustomObjectsApi(kube_client)
    a = await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", workload("a", queue="team-a-queue", created=None))
    b = await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", workload("b", queue="team-a-queue", created=None))
    assert int(b["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert a["metadata"]["uid"] and a["metadata"]["creationTimestamp"] and a["metadata"]["generation"] == 1
    got = await api.get_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "a")
    assert got["spec"]["queueName"] == "team-a-queue"
    listed = await api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a", "b"]
    assert listed["kind"] == "WorkloadList"
    assert int(listed["metadata"]["resourceVersion"]) >= int(b["metadata"]["resourceVersion"])
    # the direct store sees what the client wrote, and the other way round
    assert (
        fake_api.get(KUEUE, "Workload", "b", "team-a")["metadata"]["uid"]
        == b["metadata"]["uid"]
    )


async def test_already_exists_and_not_found_are_real_status_objects(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("a"))
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", workload("a", created=None))
    assert exc.value.status == 409
    assert status_of(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'workloads.kueue.x-k8s.io "a" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "a", "group": "kueue.x-k8s.io", "kind": "workloads"},
        "code": 409,
    }
    with pytest.raises(ApiException) as exc:
        await client.CoreV1Api(kube_client).read_namespaced_pod("nope", "team-a")
    assert exc.value.status == 404
    assert status_of(exc.value)["message"] == 'pods "nope" not found'
    assert status_of(exc.value)["details"] == {"name": "nope", "kind": "pods"}


async def test_generate_name(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(namespace("team-a"))
    body = workload("x", created=None)
    del body["metadata"]["name"]
    body["metadata"]["generateName"] = "raycluster-foo-"
    api = client.CustomObjectsApi(kube_client)
    one = await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", body)
    two = await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", body)
    assert one["metadata"]["name"].startswith("raycluster-foo-") and len(one["metadata"]["name"]) == 20
    assert one["metadata"]["name"] != two["metadata"]["name"]


async def test_create_in_missing_namespace_is_404(kube_client: client.ApiClient) -> None:
    with pytest.raises(ApiException) as exc:
        await client.CustomObjectsApi(kube_client).create_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "nowhere", "workloads", workload("a", namespace="nowhere", created=None)
        )
    assert exc.value.status == 404
    assert status_of(exc.value)["message"] == 'namespaces "nowhere" not found'


async def test_replace_with_stale_resource_version_is_409(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    created = fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    fresh = dict(created)
    fresh["spec"]["workerGroupSpecs"][0]["replicas"] = 3
    updated = await api.replace_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", "rc", fresh)
    assert updated["metadata"]["generation"] == 2
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    # created still carries the old resourceVersion
    created["spec"]["workerGroupSpecs"][0]["replicas"] = 5
    with pytest.raises(ApiException) as exc:
        await api.replace_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", "rc", created)
    assert exc.value.status == 409
    body = status_of(exc.value)
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on rayclusters.ray.io "rc": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert (
        fake_api.get("ray.io/v1", "RayCluster", "rc", "team-a")["spec"]["workerGroupSpecs"][0]["replicas"]
        == 3
    )


async def test_noop_replace_keeps_resource_version(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    created = fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    same = await api.replace_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", "rc", created)
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_delete_and_finalizers(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    api = client.CustomObjectsApi(kube_client)
    fake_api.create(workload("plain"))
    held = workload("held")
    held["metadata"]["finalizers"] = ["kueue.x-k8s.io/resource-in-use"]
    fake_api.create(held)
    await api.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "plain")
    with pytest.raises(ApiError):
        fake_api.get(KUEUE, "Workload", "plain", "team-a")
    out = await api.delete_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "held")
    assert out["metadata"]["deletionTimestamp"]
    still = fake_api.get(KUEUE, "Workload", "held", "team-a")
    assert still["metadata"]["deletionTimestamp"]
    await api.patch_namespaced_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        "held",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    with pytest.raises(ApiError) as exc:
        fake_api.get(KUEUE, "Workload", "held", "team-a")
    assert exc.value.status == 404


async def test_core_pods_and_nodes(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    fake_api.create(namespace("team-a"))
    created = await core.create_namespaced_pod(
        "team-a",
        client.V1Pod(
            metadata=client.V1ObjectMeta(name="p"),
            spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="busybox")]),
        ),
    )
    assert created.status.phase == "Pending"  # the server owns the status of a new pod
    fake_api.create(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "gpu-1"},
            "status": {"capacity": {"nvidia.com/gpu": "8"}},
        }
    )
    nodes = await core.list_node()
    assert [n.metadata.name for n in nodes.items] == ["gpu-1"]
    assert nodes.items[0].status.capacity == {"nvidia.com/gpu": "8"}
    fake_api.create(pod("q", node="gpu-1"))
    pods = await core.list_pod_for_all_namespaces()
    assert sorted(p.metadata.name for p in pods.items) == ["p", "q"]


async def test_lease_replace_conflict(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    coord = client.CoordinationV1Api(kube_client)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="queuepilot-controller"),
        spec=client.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15),
    )
    created = await coord.create_namespaced_lease("kube-system", lease)
    created.spec.holder_identity = "b"
    taken = await coord.replace_namespaced_lease("queuepilot-controller", "kube-system", created)
    assert taken.spec.holder_identity == "b"
    created.spec.holder_identity = "c"  # stale resourceVersion: another replica got there first
    with pytest.raises(ApiException) as exc:
        await coord.replace_namespaced_lease("queuepilot-controller", "kube-system", created)
    assert exc.value.status == 409
    got = await coord.read_namespaced_lease("queuepilot-controller", "kube-system")
    assert got.spec.holder_identity == "b"


async def test_dry_run_stores_nothing(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(namespace("team-a"))
    api = client.CustomObjectsApi(kube_client)
    rv = fake_api.resource_version
    out = await api.create_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", workload("w", created=None), dry_run="All"
    )
    assert out["metadata"]["name"] == "w"
    assert fake_api.list(KUEUE, "Workload") == []
    assert fake_api.resource_version == rv


async def test_unknown_paths(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.list_cluster_custom_object(KUEUE_GROUP, "v1", "workloads")  # not a served version
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        await api.list_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "clusterqueues")  # cluster-scoped
    assert exc.value.status == 404
    with pytest.raises(ApiException) as exc:
        await api.get_namespaced_custom_object_status(KUEUE_GROUP, KUEUE_VERSION, "team-a", "resourceflavors", "x")
    assert exc.value.status == 404


async def test_versions_share_one_store(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(
        {"apiVersion": f"{KUEUE_GROUP}/v1beta1", "kind": "ResourceFlavor", "metadata": {"name": "a100"}, "spec": {}}
    )
    api = client.CustomObjectsApi(kube_client)
    got = await api.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "a100")
    assert got["apiVersion"] == KUEUE
    out = await api.patch_cluster_custom_object(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "resourceflavors",
        "a100",
        {"spec": {"nodeLabels": {"gpu": "a100"}}},
        _content_type="application/merge-patch+json",
    )
    assert out["spec"]["nodeLabels"] == {"gpu": "a100"}
    with pytest.raises(ApiException) as exc:  # the body names another version than the URL
        await api.replace_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "resourceflavors", "a100", {**out, "apiVersion": f"{KUEUE_GROUP}/v1beta1"}
        )
    assert exc.value.status == 400
