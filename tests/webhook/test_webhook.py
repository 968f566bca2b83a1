"""The queue-name webhook over real HTTPS (certificates made here), with AdmissionReview v1 payloads
as the API server sends them; the returned JSONPatch is applied with the jsonpatch library and the
result validated against the KubeRay CRD."""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import ssl
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import jsonpatch
import pytest
from cryptography.hazmat.primitives import serialization

from autoscaler.webhook.server import (
    BAD_REQUEST,
    LABEL_PRESENT,
    LABELED,
    MALFORMED_OBJECT,
    NAMESPACE_UNMAPPED,
    NOT_CREATE,
    OPTED_OUT,
    OWNED,
    QUEUE_NAME_LABEL,
    RESULTS,
    UNSUPPORTED_KIND,
    WOULD_LABEL,
    start_webhook,
    webhook_settings,
)
from tests.chart.crd_schema import crd_validator, errors
from tests.support import objects as o
from tests.support.ports import free_port
from tests.webhook.certs import make_ca, make_server_cert, write_pair
from tests.webhook.mapping import MAPPING


def cluster_spec() -> dict[str, Any]:
    return o.ray_cluster_spec([o.ray_group("gpu", 2, 0, 4, gpus=8, image=o.RAY_IMAGE)], ray_version="2.40.0",
                              image=o.RAY_IMAGE)


def raycluster(namespace: str, labels: dict | None = None, annotations: dict | None = None) -> dict[str, Any]:
    """A RayCluster as a client sends it (labels and annotations only where given)."""
    return {"apiVersion": o.RAY, "kind": "RayCluster",
            "metadata": o.metadata("rc", namespace, labels=labels, annotations=annotations), "spec": cluster_spec()}


def rayjob(namespace: str) -> dict[str, Any]:
    return o.ray_job(None, namespace, cluster_spec(), labels={"team": "a"}, generate_name="train-")


def review(obj: dict[str, Any], operation: str = "CREATE", uid: str | None = None,
           namespace: str | None = None) -> dict[str, Any]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    kind = obj.get("kind", "RayCluster")
    resource = {"RayCluster": "rayclusters", "RayJob": "rayjobs"}.get(kind, kind.lower() + "s")
    group, _, version = obj.get("apiVersion", "ray.io/v1").rpartition("/")
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid or str(uuid.uuid4()),
            "kind": {"group": group, "version": version, "kind": kind},
            "resource": {"group": group, "version": version, "resource": resource},
            "requestKind": {"group": group, "version": version, "kind": kind},
            "requestResource": {"group": group, "version": version, "resource": resource},
            "name": meta.get("name", ""),
            "namespace": namespace or meta.get("namespace"),
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json(content_type=None)


async def mutate(session, url, obj, **kw) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response, the object after applying the response's patch)."""
    rev = review(obj, **kw)
    status, answer = await post(session, url, rev)
    assert status == 200, answer
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    resp = answer["response"]
    assert resp["uid"] == rev["request"]["uid"] and resp["allowed"] is True
    after = obj
    if "patch" in resp:
        assert resp["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(resp["patch"]))
        after = jsonpatch.JsonPatch(ops).apply(copy.deepcopy(obj))
    return resp, after


@pytest.fixture(scope="module")
def ray_validators(crds_dir: Path):
    return {"RayCluster": crd_validator(crds_dir / "kuberay" / "ray.io_rayclusters.yaml", "v1"),
            "RayJob": crd_validator(crds_dir / "kuberay" / "ray.io_rayjobs.yaml", "v1")}


def valid_ray(validators, obj) -> None:
    o = copy.deepcopy(obj)
    o["metadata"].setdefault("name", "generated")
    assert errors(validators[o["kind"]], o) == []


async def test_raycluster_without_labels_gets_the_mapped_queue(webhook_url, session, recorder, ray_validators):
    obj = raycluster("team-a")
    valid_ray(ray_validators, obj)
    resp, after = await mutate(session, webhook_url, obj)
    assert after["metadata"]["labels"] == {QUEUE_NAME_LABEL: "team-a-queue"}
    assert {k: v for k, v in after.items() if k != "metadata"} == {k: v for k, v in obj.items() if k != "metadata"}
    valid_ray(ray_validators, after)
    assert recorder.calls == [("RayCluster", LABELED)]
    assert "warnings" not in resp


async def test_existing_labels_are_kept_and_the_path_is_escaped(webhook_url, session, ray_validators):
    obj = raycluster("team-b", labels={"team": "b", "a/b": "c"})
    resp, after = await mutate(session, webhook_url, obj)
    ops = json.loads(base64.b64decode(resp["patch"]))
    assert ops == [{"op": "add", "path": "/metadata/labels/kueue.x-k8s.io~1queue-name", "value": "lq-b"}]
    assert after["metadata"]["labels"] == {"team": "b", "a/b": "c", QUEUE_NAME_LABEL: "lq-b"}
    valid_ray(ray_validators, after)


async def test_rayjob_with_generated_name(webhook_url, session, recorder, ray_validators):
    obj = rayjob("team-a")
    valid_ray(ray_validators, obj)
    _, after = await mutate(session, webhook_url, obj)
    assert after["metadata"]["labels"] == {"team": "a", QUEUE_NAME_LABEL: "team-a-queue"}
    valid_ray(ray_validators, after)
    assert recorder.calls == [("RayJob", LABELED)]


@pytest.mark.parametrize("value", ["", "other-queue"])
async def test_existing_queue_label_is_never_overridden(webhook_url, session, recorder, value):
    obj = raycluster("team-a", labels={QUEUE_NAME_LABEL: value})
    resp, after = await mutate(session, webhook_url, obj)
    assert "patch" not in resp and after == obj
    assert recorder.calls == [("RayCluster", LABEL_PRESENT)]


async def test_unmapped_namespace_is_left_alone(webhook_url, session, recorder):
    resp, after = await mutate(session, webhook_url, rayjob("team-z"))
    assert "patch" not in resp and QUEUE_NAME_LABEL not in after["metadata"]["labels"]
    assert recorder.calls == [("RayJob", NAMESPACE_UNMAPPED)]


async def test_opt_out_annotation(webhook_url, session, recorder):
    resp, _ = await mutate(session, webhook_url, raycluster("team-a", annotations={"queuepilot.io/skip-queue-name": "true"}))
    assert "patch" not in resp
    resp, after = await mutate(session, webhook_url, raycluster("team-a", annotations={"queuepilot.io/skip-queue-name": "false"}))
    assert after["metadata"]["labels"][QUEUE_NAME_LABEL] == "team-a-queue"
    assert recorder.calls == [("RayCluster", OPTED_OUT), ("RayCluster", LABELED)]


async def test_raycluster_owned_by_a_rayjob_is_queued_through_its_owner(webhook_url, session, recorder):
    obj = raycluster("team-a")
    obj["metadata"]["ownerReferences"] = [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "train-x",
                                           "uid": str(uuid.uuid4()), "controller": True}]
    resp, _ = await mutate(session, webhook_url, obj)
    assert "patch" not in resp
    assert recorder.calls == [("RayCluster", OWNED)]


async def test_update_is_not_mutated(webhook_url, session, recorder):
    resp, _ = await mutate(session, webhook_url, raycluster("team-a"), operation="UPDATE")
    assert "patch" not in resp
    assert recorder.calls == [("RayCluster", NOT_CREATE)]


async def test_wrong_kind_is_allowed_with_a_warning(webhook_url, session, recorder):
    obj = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "team-a"}, "spec": {}}
    resp, _ = await mutate(session, webhook_url, obj)
    assert "patch" not in resp
    assert "apps/Deployment" in resp["warnings"][0] and "not handled" in resp["warnings"][0]
    assert recorder.calls == [("Other", UNSUPPORTED_KIND)]


@pytest.mark.parametrize("mangle", [
    lambda o: o["metadata"].__setitem__("labels", ["not", "a", "map"]),
    lambda o: o["metadata"].__setitem__("annotations", "x"),
    lambda o: o.__setitem__("metadata", 42),
])
async def test_malformed_object_is_allowed_with_a_warning(webhook_url, session, recorder, mangle):
    obj = raycluster("team-a")
    mangle(obj)
    resp, _ = await mutate(session, webhook_url, obj, namespace="team-a")
    assert "patch" not in resp and "malformed" in resp["warnings"][0]
    assert recorder.calls == [("RayCluster", MALFORMED_OBJECT)]


async def test_review_without_object_is_allowed_with_a_warning(webhook_url, session):
    rev = review(raycluster("team-a"))
    del rev["request"]["object"]
    status, answer = await post(session, webhook_url, rev)
    assert status == 200 and answer["response"]["allowed"] is True and "patch" not in answer["response"]
    assert answer["response"]["warnings"]


@pytest.mark.parametrize(("body", "message"), [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}).encode(),
     "admission.k8s.io/v1"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}).encode(), "no request"),
    (json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"kind": {}}}).encode(),
     "no uid"),
])
async def test_unanswerable_reviews_get_400_with_a_message(webhook_url, session, recorder, body, message):
    status, answer = await post(session, webhook_url, body)
    assert status == 400 and message in answer["error"]
    assert recorder.calls == [("Other", BAD_REQUEST)]
    # and the server is still serving
    resp, _ = await mutate(session, webhook_url, raycluster("team-a"))
    assert "patch" in resp


async def test_other_paths_and_methods(webhook_url, session):
    async with session.get(webhook_url) as resp:
        assert resp.status == 405
    async with session.post(webhook_url.replace("/mutate-ray", "/mutate"), data=b"{}") as resp:
        assert resp.status == 404


async def test_plain_http_is_refused(webhook_url):
    url = webhook_url.replace("https://", "http://")
    async with aiohttp.ClientSession() as plain:
        with pytest.raises(aiohttp.ClientError):
            async with plain.post(url, json=review(raycluster("team-a"))) as resp:
                await resp.read()


async def test_untrusted_client_fails_the_handshake(webhook_url):
    # it is real TLS with the test CA's certificate: a client that does not trust the CA refuses it
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl.create_default_context())) as s:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await s.post(webhook_url, json=review(raycluster("team-a")))


async def test_results_are_bounded(webhook_url, session, recorder):
    await mutate(session, webhook_url, raycluster("team-a"))
    await post(session, webhook_url, b"junk")
    assert {r for _, r in recorder.calls} <= set(RESULTS)
    assert {k for k, _ in recorder.calls} <= {"RayCluster", "RayJob", "Other"}


async def test_a_failing_metric_callback_does_not_fail_admission(pki, client_ssl):
    def broken(kind: str, result: str) -> None:
        raise RuntimeError("registry gone")

    server = await start_webhook(f"127.0.0.1:{free_port()}", str(pki.cert_file), str(pki.key_file), MAPPING,
                                 on_review=broken)
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl)) as s:
            _, after = await mutate(s, f"https://127.0.0.1:{server.port}/mutate-ray", raycluster("team-a"))
        assert after["metadata"]["labels"][QUEUE_NAME_LABEL] == "team-a-queue"
    finally:
        await server.close()


async def test_rotated_certificate_is_served_without_restart(pki, tmp_path, webhook_url):
    # cert-manager renews: a new CA-signed pair replaces the files; new connections get the new one
    ca, ca_key = make_ca()
    cert, key = make_server_cert(ca, ca_key)
    new_ca = tmp_path / "new-ca.crt"
    new_ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_pair(cert, key, pki.cert_file, pki.key_file)
    ctx = ssl.create_default_context(cafile=str(new_ca))
    for _ in range(100):
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx, force_close=True)) as s:
                resp, _ = await mutate(s, webhook_url, raycluster("team-a"))
            break
        except aiohttp.ClientConnectorCertificateError:
            await asyncio.sleep(0.05)
    else:
        pytest.fail("the rotated certificate was never served")
    assert "patch" in resp


async def test_tls_is_mandatory(pki):
    with pytest.raises(ValueError, match="TLS only"):
        await start_webhook(f"127.0.0.1:{free_port()}", "", str(pki.key_file), MAPPING)
    with pytest.raises(FileNotFoundError):
        await start_webhook(f"127.0.0.1:{free_port()}", str(pki.cert_file) + ".missing", str(pki.key_file), MAPPING)


def test_webhook_settings_parsing() -> None:
    s = webhook_settings({"webhook": {"namespace_queues": {"team-a": "q-a"}, "opt_out_annotation": "x.io/skip"}})
    assert dict(s.namespace_queues) == {"team-a": "q-a"} and s.opt_out_annotation == "x.io/skip"
    assert dict(webhook_settings({}).namespace_queues) == {}
    for bad, field in [({"namespace_queues": {"Team_A": "q"}}, "Team_A"),
                       ({"namespace_queues": {"team-a": "Bad Queue"}}, "team-a"),
                       ({"namespace_queues": ["team-a"]}, "namespace_queues"),
                       ({"namespaces": {}}, "namespaces")]:
        with pytest.raises(ValueError, match=field):
            webhook_settings({"webhook": bad})


def hostile_bodies() -> list[tuple[str, bytes]]:
    rev = json.dumps(review(raycluster("team-a")))
    return [
        ("deeply nested JSON (RecursionError)", b'{"apiVersion": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
        ("nested inside a valid review", rev[:-1].encode() + b', "x": ' + b"{\"a\":" * 50_000 + b"1" + b"}" * 50_000 + b"}"),
        ("a 5000-digit integer (ValueError)", rev[:-1].encode() + b', "n": ' + b"7" * 5000 + b"}"),
        ("a 5000-digit integer as the uid", json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                                         "request": {"uid": 1}}).encode().replace(b"1}", b"9" * 5000 + b"}")),
    ]


@pytest.mark.parametrize(("what", "body"), hostile_bodies(), ids=[w for w, _ in hostile_bodies()])
async def test_bodies_the_parser_refuses_are_400_and_counted(webhook_url, session, recorder, what, body):
    status, answer = await post(session, webhook_url, body)
    assert status == 400, (what, answer)
    assert answer["error"].startswith("request body")
    assert recorder.calls == [("Other", BAD_REQUEST)]
    resp, _ = await mutate(session, webhook_url, raycluster("team-a"))  # still serving
    assert "patch" in resp


async def test_an_oversized_chunked_body_is_413_and_counted(webhook_url, session, recorder):
    async def chunks():
        for _ in range(9):  # 9 MiB, no Content-Length: only the running total can refuse it
            yield b" " * (1024 * 1024)

    async with session.post(webhook_url, data=chunks(), headers={"Content-Type": "application/json"}) as resp:
        assert resp.status == 413
    assert recorder.calls == [("Other", BAD_REQUEST)]


@pytest.fixture
async def dry_run_url(pki, recorder):
    server = await start_webhook("127.0.0.1:0", str(pki.cert_file), str(pki.key_file), MAPPING, on_review=recorder,
                                 dry_run=True)
    try:
        yield f"https://127.0.0.1:{server.port}/mutate-ray"
    finally:
        await server.close()


async def test_dry_run_answers_without_a_patch_and_warns_what_it_would_set(dry_run_url, session, recorder):
    resp, after = await mutate(session, dry_run_url, raycluster("team-a"))
    assert "patch" not in resp and "patchType" not in resp and after == raycluster("team-a")
    assert resp["warnings"] == ["queuepilot dry-run: would set label kueue.x-k8s.io/queue-name=team-a-queue"]
    resp, _ = await mutate(session, dry_run_url, rayjob("team-b"))
    assert resp["warnings"] == ["queuepilot dry-run: would set label kueue.x-k8s.io/queue-name=lq-b"]
    # what it would leave alone stays silent
    resp, _ = await mutate(session, dry_run_url, raycluster("team-a", labels={QUEUE_NAME_LABEL: "mine"}))
    assert "patch" not in resp and "warnings" not in resp
    resp, _ = await mutate(session, dry_run_url, raycluster("team-z"))
    assert "patch" not in resp and "warnings" not in resp
    assert recorder.calls == [("RayCluster", WOULD_LABEL), ("RayJob", WOULD_LABEL), ("RayCluster", LABEL_PRESENT),
                              ("RayCluster", NAMESPACE_UNMAPPED)]
