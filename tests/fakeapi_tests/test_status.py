"""The /status subresource and metadata.generation."""

from __future__ import annotations

from kubernetes_asyncio import client

from tests.fakeapi import FakeApiServer
from tests.support.objects import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    OPT_IN,
    check_state,
    namespace,
    ray_cluster,
    workload,
)


async def test_main_resource_ignores_status_and_status_ignores_the_rest(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(namespace("team-a"))
    api = client.CustomObjectsApi(kube_client)
    body = workload("w", created=None)
    body["status"] = {"admissionChecks": [check_state("gpu-capacity", "Ready")]}
    created = await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", body)
    assert "status" not in created  # status cannot be set through the main resource
    created["status"] = {"admissionChecks": [check_state("gpu-capacity", "Ready")]}
    created["spec"]["active"] = False
    updated = await api.replace_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "w", created)
    assert "status" not in updated and updated["spec"]["active"] is False
    assert updated["metadata"]["generation"] == 2

    updated["status"] = {"admissionChecks": [check_state("gpu-capacity", "Pending")]}
    updated["spec"]["active"] = True  # ignored on /status
    st = await api.replace_namespaced_custom_object_status(
        KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", "w", updated
    )
    assert st["status"]["admissionChecks"][0]["state"] == "Pending"
    assert st["spec"]["active"] is False
    assert st["metadata"]["generation"] == 2  # status writes never bump the generation
    assert int(st["metadata"]["resourceVersion"]) > int(updated["metadata"]["resourceVersion"])

    patched = await api.patch_namespaced_custom_object_status(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        "w",
        {"status": {"admissionChecks": [check_state("gpu-capacity", "Ready")]}, "spec": {"active": True}},
        _content_type="application/merge-patch+json",
    )
    assert patched["status"]["admissionChecks"][0]["state"] == "Ready" and patched["spec"]["active"] is False


async def test_generation_counts_spec_changes_only(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    out = await api.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "team-a",
        "rayclusters",
        "rc",
        {"metadata": {"labels": {"a": "b"}}},
        _content_type="application/merge-patch+json",
    )
    assert out["metadata"]["generation"] == 1
    out = await api.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "team-a",
        "rayclusters",
        "rc",
        {"spec": {"suspend": True}},
        _content_type="application/merge-patch+json",
    )
    assert out["metadata"]["generation"] == 2


def test_direct_update_status(fake_api: FakeApiServer) -> None:
    wl = fake_api.create(workload("w", active=True))
    wl["status"] = {"admissionChecks": [check_state("gpu-capacity", "Pending")]}
    wl["spec"]["active"] = False
    out = fake_api.update_status(wl)
    assert out["status"]["admissionChecks"][0]["name"] == "gpu-capacity"
    assert out["spec"]["active"] is True
    # direct create keeps status (the test plays the controller that owns it)
    rc = ray_cluster("rc2", annotations=OPT_IN, head_ip=None)
    rc["status"] = {"state": "ready"}
    assert fake_api.create(rc)["status"] == {"state": "ready"}
