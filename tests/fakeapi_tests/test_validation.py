"""Kueue and KubeRay objects validated against the CRDs' openAPIV3Schema, strict about unknown fields."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi import ApiError, FakeApiServer
from tests.fakeapi.plugin import status_of
from tests.fakeapi.resources import crd_types
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


def test_every_served_crd_version_converts_to_a_valid_json_schema(crds_dir: Path) -> None:
    types = crd_types(crds_dir)
    assert {(t.group, t.plural) for t in types} >= {(KUEUE_GROUP, "workloads"), ("ray.io", "rayclusters")}
    assert next(t for t in types if t.plural == "workloads").versions == ["v1beta2", "v1beta1"]
    patterns = 0
    for t in types:
        for v in t.versions:
            validator = t.validator(v)
            assert validator is not None
            for p in _patterns(validator.schema):
                re.compile(p)  # Go's RE2 spellings are translated
                patterns += 1
    assert patterns > 0
    wl = next(t for t in types if t.plural == "workloads").validator("v1beta2")
    assert wl is not None
    Draft202012Validator.check_schema(wl.schema)


def _patterns(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for v in node.values() for p in _patterns(v)]
    if isinstance(node, list):
        return [p for v in node for p in _patterns(v)]
    return []


async def test_valid_objects_pass(fake_api: FakeApiServer, kube_client: client.ApiClient) -> None:
    fake_api.create(namespace("team-a"))
    api = client.CustomObjectsApi(kube_client)
    await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", workload("w", created=None))
    await api.create_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", ray_cluster("rc", annotations=OPT_IN, head_ip=None, created=None))


async def test_unknown_field_is_rejected_like_strict_field_validation(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(namespace("team-a"))
    bad = workload("w", created=None)
    bad["spec"]["podSets"][0]["replicas"] = 2  # Workload podSets count, not replicas
    bad["spec"]["queue"] = "x"
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.create_namespaced_custom_object(KUEUE_GROUP, KUEUE_VERSION, "team-a", "workloads", bad)
    assert exc.value.status == 400
    assert status_of(exc.value)["reason"] == "BadRequest"
    assert status_of(exc.value)["message"] == (
        'Workload in version "v1beta2" cannot be handled as a Workload: strict decoding error: '
        'unknown field "spec.podSets[0].replicas", unknown field "spec.queue"'
    )
    # deep inside an embedded pod template too
    rc = ray_cluster("rc", annotations=OPT_IN, head_ip=None, created=None)
    rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(ApiException) as exc:
        await api.create_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", rc)
    assert (
        'unknown field "spec.workerGroupSpecs[0].template.spec.containers[0].resource"'
        in status_of(exc.value)["message"]
    )
    with pytest.raises(ApiError):
        fake_api.get(KUEUE, "Workload", "w", "team-a")


async def test_wrong_type_and_enum_are_422_with_causes(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(namespace("team-a"))
    rc = ray_cluster("rc", annotations=OPT_IN, head_ip=None, created=None)
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    api = client.CustomObjectsApi(kube_client)
    with pytest.raises(ApiException) as exc:
        await api.create_namespaced_custom_object("ray.io", "v1", "team-a", "rayclusters", rc)
    assert exc.value.status == 422
    body = status_of(exc.value)
    assert body["reason"] == "Invalid"
    assert body["message"] == (
        'RayCluster.ray.io "rc" is invalid: spec.workerGroupSpecs[0].replicas: Invalid value: "string": '
        'spec.workerGroupSpecs[0].replicas in body must be of type integer: "two"'
    )
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueTypeInvalid",
            "message": 'Invalid value: "string": spec.workerGroupSpecs[0].replicas in body must be of type integer: "two"',
            "field": "spec.workerGroupSpecs[0].replicas",
        }
    ]
    assert body["details"]["kind"] == "RayCluster" and body["details"]["group"] == "ray.io"


async def test_status_is_validated_on_status_writes(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("w"))
    api = client.CustomObjectsApi(kube_client)
    entry = check_state("gpu-capacity", "Maybe")
    del entry["message"]
    body = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "status": {"admissionChecks": [entry]},
    }
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "w",
            body,
            field_manager="queuepilot.io/gpu-capacity",
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    assert exc.value.status == 422
    causes = {(c["field"], c["reason"]) for c in status_of(exc.value)["details"]["causes"]}
    assert causes == {
        ("status.admissionChecks[0].message", "FieldValueRequired"),
        ("status.admissionChecks[0].state", "FieldValueNotSupported"),
    }
    assert "status" not in fake_api.get(KUEUE, "Workload", "w", "team-a")


async def test_apply_with_unknown_field_fails_to_build_the_typed_patch(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    fake_api.create(workload("w"))
    api = client.CustomObjectsApi(kube_client)
    body = {
        "apiVersion": KUEUE,
        "kind": "Workload",
        "metadata": {"name": "w", "namespace": "team-a"},
        "status": {"admissionCheck": []},
    }
    with pytest.raises(ApiException) as exc:
        await api.patch_namespaced_custom_object_status(
            KUEUE_GROUP,
            KUEUE_VERSION,
            "team-a",
            "workloads",
            "w",
            body,
            field_manager="m",
            _content_type="application/apply-patch+yaml",
        )
    assert exc.value.status == 500
    assert status_of(exc.value)["message"] == (
        "failed to create typed patch object (team-a/w; kueue.x-k8s.io/v1beta2, Kind=Workload): "
        ".status.admissionCheck: field not declared in schema"
    )


def test_direct_store_validates_and_bulk_load_does_not(fake_api: FakeApiServer) -> None:
    bad = ray_cluster("rc", annotations=OPT_IN, head_ip=None)
    bad["spec"]["workerGroupSpecs"][0]["maxReplicas"] = "many"
    with pytest.raises(ApiError) as exc:
        fake_api.create(bad)
    assert exc.value.status == 422
    assert fake_api.load([bad]) == 1
    assert (
        fake_api.get("ray.io/v1", "RayCluster", "rc", "team-a")["spec"]["workerGroupSpecs"][0]["maxReplicas"]
        == "many"
    )


def test_v1beta1_is_served_and_validated_against_its_own_schema(fake_api: FakeApiServer) -> None:
    cq = {
        "apiVersion": f"{KUEUE_GROUP}/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "cq"},
        "spec": {"admissionChecks": ["gpu-capacity"], "resourceGroups": []},
    }
    fake_api.create(cq)  # v1beta1 still has spec.admissionChecks
    cq2 = {**cq, "apiVersion": KUEUE.replace("v1beta2", "v1beta2"), "metadata": {"name": "cq2"}}
    with pytest.raises(ApiError) as exc:
        fake_api.create(cq2)  # v1beta2 has not
    assert exc.value.status == 400 and 'unknown field "spec.admissionChecks"' in exc.value.message


async def test_core_kinds_are_checked_against_the_upstream_schema(
    fake_api: FakeApiServer, kube_client: client.ApiClient
) -> None:
    core = client.CoreV1Api(kube_client)
    fake_api.create(namespace("team-a"))
    bad = pod("p")
    bad["spec"]["containers"][0]["resource"] = {"limits": {"nvidia.com/gpu": 1}}
    with pytest.raises(ApiException) as exc:
        await core.create_namespaced_pod("team-a", bad)
    assert exc.value.status == 400
    assert status_of(exc.value)["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
        'unknown field "spec.containers[0].resource"'
    )
    with pytest.raises(ApiException) as exc:
        await core.create_namespaced_pod(
            "team-a", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
        )
    assert exc.value.status == 422
    assert status_of(exc.value)["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    with pytest.raises(ApiException) as exc:
        await core.create_namespaced_event(
            "team-a", {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"}, "reason": "Scaled"}
        )
    assert (
        exc.value.status == 422 and status_of(exc.value)["details"]["causes"][0]["field"] == "involvedObject"
    )
    with pytest.raises(ApiError) as err:
        fake_api.create({**pod("q"), "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": 7}})
    assert err.value.status == 400
    assert "cannot unmarshal number into Go struct field .spec.nodeName" in err.value.message
