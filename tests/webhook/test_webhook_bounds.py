"""What a flood of reviews can cost the controller that serves the webhook: the body limit is what the API
server can send, a body that could build too many JSON values is refused unparsed, and labelled reviews
are logged in aggregate, not one line each."""

from __future__ import annotations

import json
import logging
import uuid
from typing import Any

from autoscaler.webhook.server import (
    API_SERVER_MAX_OBJECT_BYTES,
    BAD_REQUEST,
    LABELED,
    LIMITS,
    MAX_BODY_BYTES,
    MAX_REVIEW_VALUES,
    _ReviewLog,
)


def review(obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": str(uuid.uuid4()), "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
                        "resource": {"group": "ray.io", "version": "v1", "resource": "rayclusters"},
                        "operation": "CREATE", "namespace": obj["metadata"]["namespace"], "name": "rc",
                        "object": obj, "userInfo": {"username": "alice", "groups": ["system:authenticated"]}}}


def raycluster(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "rc", "namespace": "team-a", "annotations": annotations or {}},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": []}}}}}


async def post(session, url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as resp:
        return resp.status, await resp.json(content_type=None)


def test_the_body_limit_is_the_api_servers_object_limit_plus_the_envelope() -> None:
    assert API_SERVER_MAX_OBJECT_BYTES == 3 * 2**20
    assert LIMITS.max_body_bytes == MAX_BODY_BYTES < 4 * 2**20
    assert LIMITS.max_in_flight is not None and LIMITS.max_in_flight <= 8


async def test_the_largest_object_the_api_server_sends_is_labelled(webhook_url, session, recorder) -> None:
    obj = raycluster({"big": "x" * (API_SERVER_MAX_OBJECT_BYTES - 1024)})
    status, answer = await post(session, webhook_url, json.dumps(review(obj)).encode())
    assert status == 200 and answer["response"]["patchType"] == "JSONPatch"
    assert recorder.calls == [("RayCluster", LABELED)]


async def test_a_body_that_could_build_too_many_values_is_413_unparsed(webhook_url, session, recorder) -> None:
    obj = raycluster()
    obj["spec"]["filler"] = [{}] * (MAX_REVIEW_VALUES // 2 + 1)  # under the byte limit, over the value bound
    body = json.dumps(review(obj), separators=(",", ":")).encode()
    assert len(body) < MAX_BODY_BYTES
    status, answer = await post(session, webhook_url, body)
    assert status == 413 and "too large for a review" in answer["error"]
    assert recorder.calls == [("Other", BAD_REQUEST)]


async def test_labelled_reviews_are_logged_in_aggregate(webhook_url, session, recorder, caplog) -> None:
    caplog.set_level(logging.INFO, logger="queuepilot.webhook")
    for _ in range(50):
        status, _ = await post(session, webhook_url, json.dumps(review(raycluster())).encode())
        assert status == 200
    assert recorder.calls == [("RayCluster", LABELED)] * 50  # every review is still counted
    lines = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert len(lines) == 1 and lines[0].getMessage().startswith("labelled RayCluster team-a/rc")


def test_the_aggregated_line_says_how_many_were_left_out(caplog) -> None:
    clock = [0.0]
    review_log = _ReviewLog(interval=60.0, clock=lambda: clock[0])
    caplog.set_level(logging.INFO, logger="queuepilot.webhook")
    for i in range(1000):
        clock[0] = i * 0.1  # 100 s of reviews, ten a second
        review_log(LABELED, "labelled %s", f"team-a/rc-{i}")
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert lines == ["labelled team-a/rc-0", "labelled team-a/rc-600 (599 more like this in the last 60s not logged)"]

