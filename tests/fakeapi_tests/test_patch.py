"""Merge, JSON, strategic and server-side-apply patches, as the client sends them."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import FakeApiServer
from tests.fakeapi.plugin import status_of
from tests.support.objects import (
    KUEUE,
    KUEUE_GROUP,
    KUEUE_VERSION,
    OPT_IN,
    check_state,
    namespace,
    pod,
    ray_cluster,
    workload,
)

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
OURS = "queuepilot.io/gpu-capacity"


async def test_dict_body_without_content_type_is_refused_like_the_real_server(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    """The kubernetes-asyncio trap: a dict body goes out as application/json-patch+json."""
    fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    fake_api.clear_requests()
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object(
            "ray.io", "v1", "team-a", "rayclusters", "rc", {"spec": {"suspend": True}}
        )
    assert fake_api.requests[-1].content_type == JSON_PATCH
    assert exc.value.status == 400
    assert status_of(exc.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        "reason": "BadRequest",
        "code": 400,
    }
    assert "suspend" not in fake_api.get("ray.io/v1", "RayCluster", "rc", "team-a")["spec"]


async def test_merge_patch(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    out = await api.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "team-a",
        "rayclusters",
        "rc",
        {
            "metadata": {"annotations": {"queuepilot.io/autoscale": None, "note": "x"}},
            "spec": {"suspend": True},
        },
        _content_type=MERGE,
    )
    assert out["spec"]["suspend"] is True
    assert out["metadata"]["annotations"] == {"note": "x"}
    assert out["metadata"]["generation"] == 2
    # a merge patch replaces lists whole
    out = await api.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "team-a",
        "rayclusters",
        "rc",
        {"spec": {"workerGroupSpecs": [{**out["spec"]["workerGroupSpecs"][0], "replicas": 4}]}},
        _content_type=MERGE,
    )
    assert [g["replicas"] for g in out["spec"]["workerGroupSpecs"]] == [4]


async def test_json_patch_with_a_list_of_operations(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    api = client.CustomObjectsApi(kube_client)
    ops = [
        {"op": "test", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2},
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 1},
        {
            "op": "add",
            "path": "/spec/workerGroupSpecs/0/scaleStrategy",
            "value": {"workersToDelete": ["rc-worker-x"]},
        },
    ]
    out = await api.patch_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", "rc", ops)
    group = out["spec"]["workerGroupSpecs"][0]
    assert group["replicas"] == 1 and group["scaleStrategy"] == {"workersToDelete": ["rc-worker-x"]}
    with pytest.raises(ApiException) as exc:  # the test op fails now: nothing changes
        await api.patch_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", "rc", ops)
    assert exc.value.status == 422
    assert status_of(exc.value)["message"] == "the server rejected our request due to an error in our request"


async def test_resource_version_in_a_patch_is_a_precondition(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    created = fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    fake_api.patch("ray.io/v1", "RayCluster", "rc", {"spec": {"suspend": False}}, "team-a")
    api = client.CustomObjectsApi(kube_client)
    body = {
        "metadata": {"resourceVersion": created["metadata"]["resourceVersion"]},
        "spec": {"workerGroupSpecs": [{**created["spec"]["workerGroupSpecs"][0], "replicas": 0}]},
    }
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object(
            "ray.io", "v1", "team-a", "rayclusters", "rc", body, _content_type=MERGE
        )
    assert exc.value.status == 409 and status_of(exc.value)["reason"] == "Conflict"
    current = fake_api.get("ray.io/v1", "RayCluster", "rc", "team-a")
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    out = await api.patch_namespaced_custom_object(
        "ray.io", "v1", "team-a", "rayclusters", "rc", body, _content_type=MERGE
    )
    assert out["spec"]["workerGroupSpecs"][0]["replicas"] == 0


async def test_strategic_merge_patch(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    p = pod("p")
    p["spec"]["containers"].append({"name": "sidecar", "image": "envoy"})
    fake_api.create(p)
    core = client.CoreV1Api(kube_client)
    fake_api.clear_requests()
    out = await core.patch_namespaced_pod(
        "p", "team-a", {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}
    )
    assert fake_api.requests[-1].content_type == "application/strategic-merge-patch+json"
    assert [(c.name, c.image) for c in out.spec.containers] == [("main", "busybox:2"), ("sidecar", "envoy")]
    fake_api.create(ray_cluster("rc", annotations=OPT_IN, head_ip=None))
    with pytest.raises(ApiException) as exc:
        await client.CustomObjectsApi(kube_client).patch_namespaced_custom_object(
            "ray.io",
            "v1",
            "team-a",
            "rayclusters",
            "rc",
            {"spec": {"suspend": True}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert exc.value.status == 415
    assert status_of(exc.value)["reason"] == "UnsupportedMediaType"
    assert status_of(exc.value)["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )


def _kueue_reserves_quota(fake_api: FakeApiServer, checks: list[dict]) -> dict:
    """Kueue's part: it lists every check as Pending with its own field manager (SSA on /status)."""
    wl = fake_api.create(workload("wl"))
    return fake_api.apply(
        {
            "apiVersion": KUEUE,
            "kind": "Workload",
            "metadata": {"name": "wl", "namespace": "team-a"},
            "status": {"admissionChecks": checks},
        },
        field_manager="kueue-admission",
        subresource="status",
    ) | {"created": wl}


def _our_entry(entry: dict, rv: str | None = None) -> dict:
    meta: dict = {"name": "wl", "namespace": "team-a"}
    if rv:
        meta["resourceVersion"] = rv
    return {"apiVersion": KUEUE, "kind": "Workload", "metadata": meta, "status": {"admissionChecks": [entry]}}


async def test_apply_merges_list_map_entries_by_key(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    _kueue_reserves_quota(
        fake_api, [check_state("gpu-capacity", "Pending"), check_state("provisioning", "Pending")]
    )
    api = client.CustomObjectsApi(kube_client)
    out = await api.patch_namespaced_custom_object_status(
        KUEUE_GROUP,
        KUEUE_VERSION,
        "team-a",
        "workloads",
        "wl",
        _our_entry(check_state("gpu-capacity", "Ready", "4 x 8 GPUs on a100", "2026-08-22T10:05:00Z")),
        field_manager=OURS,
        force=True,
        _content_type=APPLY,
    )
    checks = {c["name"]: c for c in out["status"]["admissionChecks"]}
    assert checks["gpu-capacity"]["state"] == "Ready"
    assert checks["provisioning"]["state"] == "Pending"  # the other manager's entry is kept
    managers = {m["manager"]: m for m in out["metadata"]["managedFields"]}
    ours = managers[OURS]
    assert ours["operation"] == "Apply" and ours["subresource"] == "status"
    entry = ours["fieldsV1"]["f:status"]["f:admissionChecks"]['k:{"name":"gpu-capacity"}']
    assert set(entry) == {".", "f:name", "f:state", "f:message", "f:lastTransitionTime"}
    kueue_checks = managers["kueue-admission"]["fieldsV1"]["f:status"]["f:admissionChecks"]
    assert "f:state" not in kueue_checks['k:{"name":"gpu-capacity"}']  # forced away from kueue
    assert "f:state" in kueue_checks['k:{"name":"provisioning"}']
    # a merge patch of the same list would have replaced it whole: the difference SSA exists for
    merged = fake_api.patch(
        KUEUE,
        "Workload",
        "wl",
        {"status": {"admissionChecks": [check_state("gpu-capacity", "Retry")]}},
        "team-a",
        subresource="status",
    )
    assert [c["name"] for c in merged["status"]["admissionChecks"]] == ["gpu-capacity"]


async def test_apply_conflict_without_force(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    _kueue_reserves_quota(fake_api, [check_state("gpu-capacity", "Pending")])
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "wl",
            _our_entry(check_state("gpu-capacity", "Ready")),
            field_manager=OURS,
            _content_type=APPLY,
        )
    assert exc.value.status == 409
    body = status_of(exc.value)
    field = '.status.admissionChecks[name="gpu-capacity"].state'
    assert body["reason"] == "Conflict"
    assert (
        body["message"]
        == f'Apply failed with 1 conflict: conflict with "kueue-admission" with subresource "status": {field}'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldManagerConflict",
            "message": 'conflict with "kueue-admission" with subresource "status"',
            "field": field,
        }
    ]
    assert fake_api.get(KUEUE, "Workload", "wl", "team-a")["status"]["admissionChecks"][0]["state"] == "Pending"
    # two conflicting fields: the multi-line message
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "wl",
            _our_entry(check_state("gpu-capacity", "Ready", "fits")),
            field_manager=OURS,
            _content_type=APPLY,
        )
    assert status_of(exc.value)["message"] == (
        'Apply failed with 2 conflicts: conflicts with "kueue-admission" with subresource "status":\n'
        '- .status.admissionChecks[name="gpu-capacity"].message\n'
        '- .status.admissionChecks[name="gpu-capacity"].state'
    )


async def test_apply_with_stale_resource_version_is_409(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    first = _kueue_reserves_quota(fake_api, [check_state("gpu-capacity", "Pending")])
    fake_api.patch(KUEUE, "Workload", "wl", {"metadata": {"labels": {"touched": "yes"}}}, "team-a")
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "wl",
            _our_entry(check_state("gpu-capacity", "Ready"), rv=first["metadata"]["resourceVersion"]),
            field_manager=OURS,
            force=True,
            _content_type=APPLY,
        )
    assert exc.value.status == 409
    assert "the object has been modified" in status_of(exc.value)["message"]


async def test_apply_drops_entries_a_manager_stops_applying(fake_api: FakeApiServer) -> None:
    fake_api.create(workload("wl"))
    conds = [
        {
            "type": "QuotaReserved",
            "status": "True",
            "reason": "QuotaReserved",
            "message": "",
            "lastTransitionTime": "2026-08-22T10:00:00Z",
        },
        {
            "type": "Admitted",
            "status": "False",
            "reason": "Pending",
            "message": "",
            "lastTransitionTime": "2026-08-22T10:00:00Z",
        },
    ]
    body = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "team-a"},
        "status": {"conditions": conds},
    }
    requeue = {"count": 1, "requeueAt": "2026-08-22T10:10:00Z"}
    fake_api.apply(
        {**body, "status": {"conditions": conds, "requeueState": requeue}},
        field_manager="kueue-admission",
        subresource="status",
    )
    mine = {
        "type": "Custom",
        "status": "True",
        "reason": "Mine",
        "message": "",
        "lastTransitionTime": "2026-08-22T10:00:00Z",
    }
    fake_api.apply({**body, "status": {"conditions": [mine]}}, field_manager="other", subresource="status")
    before = fake_api.store.get(fake_api.registry.by_plural(KUEUE_GROUP, "workloads"), "team-a", "wl")  # type: ignore[arg-type]
    frozen = json.dumps(before, sort_keys=True)
    out = fake_api.apply(
        {**body, "status": {"conditions": conds[:1]}}, field_manager="kueue-admission", subresource="status"
    )
    assert [c["type"] for c in out["status"]["conditions"]] == ["QuotaReserved", "Custom"]
    assert "count" not in out["status"].get("requeueState", {})
    assert json.dumps(before, sort_keys=True) == frozen  # stored versions (and watch events) never change


async def test_apply_requires_field_manager_and_creates(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    api = client.CustomObjectsApi(kube_client)
    fake_api.create(namespace("team-a"))
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object(
            "ray.io", "v1", "team-a", "rayclusters", "rc", ray_cluster("rc", annotations=OPT_IN, head_ip=None, created=None), _content_type=APPLY
        )
    assert exc.value.status == 422
    assert status_of(exc.value)["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch'
    )
    out = await api.patch_namespaced_custom_object(
        "ray.io",
        "v1",
        "team-a",
        "rayclusters",
        "rc",
        ray_cluster("rc", annotations=OPT_IN, head_ip=None, created=None),
        field_manager="tester",
        _content_type=APPLY,
    )
    assert out["metadata"]["managedFields"][0]["manager"] == "tester"
    assert out["metadata"]["managedFields"][0]["operation"] == "Apply"


async def test_apply_with_another_uid_is_409(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    _kueue_reserves_quota(fake_api, [check_state("gpu-capacity", "Pending")])
    body = _our_entry(check_state("gpu-capacity", "Ready"))
    body["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000"  # a workload of the same name, recreated
    with pytest.raises(ApiException) as exc:
        await client.CustomObjectsApi(kube_client).patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "wl",
            body,
            field_manager=OURS,
            force=True,
            _content_type=APPLY,
        )
    assert exc.value.status == 409
    assert "Precondition failed: UID in precondition" in status_of(exc.value)["message"]
