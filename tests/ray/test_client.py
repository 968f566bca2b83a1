"""``RayDashboardClient`` against a real aiohttp server playing a Ray head.

The server answers with the recorded fixtures (so the order of sources and the joins run on real
shapes), or with the bad answers a head, a proxy or a network can give.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from autoscaler.signals.ray_demand import ERROR_KINDS, RayDashboardClient, RaySignalError
from autoscaler.signals.ray_limits import PartLimit, part_limits
from tests.support.ports import free_port

PARTS_V2 = {
    "cluster_status": "cluster_status_v2.json",
    "cluster_status_format1": "cluster_status_v2_format1.json",
    "tasks": "tasks_pending_detail.json",
    "actors": "actors.json",
    "placement_groups": "placement_groups.json",
    "nodes": "nodes.json",
    "nodes_summary": None,  # the v2 run's node id differs from the v1 run's nodes.json: left out
}
STATE_PARTS = ("tasks", "actors", "placement_groups")
V1_NODE = "a16ccebcc6f2e8100417393baeee43c935e3497bbc614837982b941d"


def _part(request: web.Request) -> str:
    path = request.path
    if path == "/api/cluster_status":
        return "cluster_status_format1" if request.query.get("format") == "1" else "cluster_status"
    return {
        "/api/v0/tasks": "tasks",
        "/api/v0/actors": "actors",
        "/api/v0/placement_groups": "placement_groups",
        "/api/v0/nodes": "nodes",
        "/nodes": "nodes_summary",
    }[path]


class FakeHead:
    """Answers per part: a JSON document, or a callable making a bad answer; records every hit."""

    def __init__(self, answers: dict[str, Any], token: str | None = None) -> None:
        self.answers = answers
        self.token = token
        self.hits: list[tuple[str, str]] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        part = _part(request)
        self.hits.append((part, request.query_string))
        if self.token is not None:
            auth = request.headers.get("authorization", "")
            if not auth:
                return web.Response(status=401, text="Unauthorized: Missing authentication token")
            if auth != f"Bearer {self.token}":
                return web.Response(status=403, text="Forbidden: Invalid authentication token")
        answer = self.answers.get(part)
        if answer is None:
            return web.Response(status=404, text="404: Not Found")
        if callable(answer):
            return await answer(request)
        return web.json_response(answer)


@pytest.fixture
def v2_answers(load) -> dict[str, Any]:
    return {part: (load(name) if name else None) for part, name in PARTS_V2.items()}


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    servers: list[TestServer] = []

    async def _serve(answers: dict[str, Any], token: str | None = None) -> tuple[str, FakeHead]:
        head = FakeHead(answers, token)
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", head.handle)
        server = TestServer(app, host="127.0.0.1", port=free_port())
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}", head

    yield _serve
    for s in servers:
        await s.close()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def demand_set(status) -> set[tuple]:
    return {
        (d.kind, tuple(sorted(d.shape.items())), d.count, d.infeasible, d.strategy) for d in status.demand
    }


# --------------------------------------------------------------------------------- good answers
async def test_v2_head_goes_to_the_state_api(serve, session, v2_answers):
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session).fetch_status(url, now=1796019999.0)
    assert status.source == "state_api" and status.autoscaler_version == "v2"
    assert status.observed_at == 1796019999.0
    assert demand_set(status) == {
        ("task", (("CPU", 1.0), ("fakegpu", 1.0)), 4, False, ""),
        ("task", (("CPU", 1.0), ("fakegpu", 8.0)), 1, True, ""),  # no node has 8 fakegpu
        ("actor", (("fakegpu", 1.0),), 2, False, ""),
        ("placement_group", (("fakegpu", 1.0),), 2, False, "STRICT_PACK"),  # NO_RESOURCES
        ("placement_group", (("CPU", 1.0), ("fakegpu", 4.0)), 1, True, "PACK"),  # INFEASIBLE
    }
    assert [(dict(r.shape), r.count) for r in status.resource_requests] == [({"fakegpu": 1.0}, 3)]
    assert status.oldest_pending_since == pytest.approx(1796019911.506)
    assert status.pending_gpus("fakegpu") == 4 + 8 + 2 + 2 + 4
    (node,) = status.nodes
    assert node.node_id == V1_NODE and node.is_head and node.total["fakegpu"] == 2.0
    # the summary view was missing (404): recorded, the rest is used
    assert [(e.part, e.kind) for e in status.errors] == [("nodes_summary", "http_status")]
    assert status.partial


async def test_v1_head_answers_from_the_json_and_skips_the_state_api(serve, session, load):
    answers = {
        "cluster_status": load("cluster_status.json"),
        "nodes": load("nodes.json"),
        "nodes_summary": load("nodes_view_summary.json"),
    }
    url, head = await serve(answers)
    status = await RayDashboardClient(session).fetch_status(url, now=1796019940.0)
    assert status.source == "cluster_status_v1" and status.autoscaler_version == "v1"
    assert status.errors == ()
    assert {p for p, _ in head.hits} == {"cluster_status", "nodes", "nodes_summary"}
    assert ("task", (("CPU", 1.0), ("fakegpu", 8.0)), 1, True, "") in demand_set(status)
    assert ("placement_group", (("CPU", 1.0), ("fakegpu", 4.0)), 1, True, "PACK") in demand_set(status)
    assert sum(d.count for d in status.demand if d.kind == "task") == 7
    v1_node = next(n for n in status.nodes if n.node_id == V1_NODE)
    assert v1_node.available["fakegpu"] == 0.0 and v1_node.busy is True


async def test_state_api_asks_for_detail_and_a_limit(serve, session, v2_answers):
    url, head = await serve(v2_answers)
    await RayDashboardClient(session, limit=500).fetch_status(url, now=0.0)
    queries = dict(head.hits)
    assert "detail=1" in queries["tasks"] and "limit=500" in queries["tasks"]
    assert "filter_values=PENDING_NODE_ASSIGNMENT" in queries["tasks"]
    assert "filter_values=PENDING_CREATION" in queries["actors"] and "detail=1" in queries["actors"]
    assert "detail=1" in queries["placement_groups"]


# ------------------------------------------------------------------------------- partial answers
def _status(code: int, body: str = "", content_type: str = "text/plain"):
    async def answer(request: web.Request) -> web.Response:
        return web.Response(status=code, text=body, content_type=content_type)

    return answer


async def test_placement_groups_fail_tasks_still_count(serve, session, v2_answers):
    v2_answers["placement_groups"] = _status(500, "Internal Server Error")
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session).fetch_status(url, now=0.0)
    assert status.source == "state_api"
    assert {d.kind for d in status.demand} == {"task", "actor"}
    assert ("placement_groups", "http_status") in {(e.part, e.kind) for e in status.errors}


async def test_state_api_down_falls_back_to_the_text(serve, session, v2_answers):
    for part in STATE_PARTS:
        v2_answers[part] = _status(503, "upstream unavailable")
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session).fetch_status(url, now=0.0)
    assert status.source == "cluster_status_format1" and status.autoscaler_version == "v2"
    assert demand_set(status) == {
        ("task", (("CPU", 1.0), ("fakegpu", 1.0)), 4, False, ""),
        ("task", (("fakegpu", 1.0),), 2, False, ""),
        ("task", (("CPU", 1.0), ("fakegpu", 8.0)), 1, True, ""),
        ("placement_group", (("fakegpu", 1.0),), 2, False, "STRICT_PACK"),
        ("placement_group", (("CPU", 1.0), ("fakegpu", 4.0)), 1, True, "PACK"),
    }
    assert {(e.part, e.kind) for e in status.errors} >= {(p, "http_status") for p in STATE_PARTS}


async def test_truncated_list_is_recorded(serve, session, v2_answers):
    doc = v2_answers["tasks"]
    doc["data"]["result"]["total"] = doc["data"]["result"]["num_filtered"] = 9000
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session).fetch_status(url, now=0.0)
    (err,) = [e for e in status.errors if e.part == "tasks"]
    assert err.kind == "incomplete" and "7 of 9000" in err.message


async def test_nodes_unknown_nothing_called_infeasible(serve, session, v2_answers):
    v2_answers["nodes"] = None
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session).fetch_status(url, now=0.0)
    assert status.nodes == ()
    # Ray's own PG flag survives; tasks cannot be judged without nodes
    assert {(d.kind, d.infeasible) for d in status.demand} == {
        ("task", False),
        ("actor", False),
        ("placement_group", False),
        ("placement_group", True),
    }
    assert {e.part for e in status.errors} == {"nodes", "nodes_summary"}


# ----------------------------------------------------------------------------------- bad answers
async def _html(request: web.Request) -> web.Response:
    return web.Response(
        text="<!doctype html><html><body>Ray Dashboard</body></html>", content_type="text/html"
    )


async def _truncated_json(request: web.Request) -> web.Response:
    return web.Response(
        text='{"result": true, "msg": "", "data": {"result": {"total": 7, "result": [{"ta',
        content_type="application/json",
    )


async def _short_body(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Length": "5000", "Content-Type": "application/json"})
    await resp.prepare(request)
    await resp.write(b'{"result": true, "data": ')
    request.transport.close()  # the connection drops mid-body
    return resp


async def _wrong_shape(request: web.Request) -> web.Response:
    return web.json_response({"result": True, "msg": "", "data": ["not", "an", "object"]})


async def _result_false(request: web.Request) -> web.Response:
    return web.json_response({"result": False, "msg": "Given limit exceeds the supported limit", "data": {}})


async def _slow(request: web.Request) -> web.Response:
    await asyncio.sleep(5)
    return web.json_response({})


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (_html, "parse"),
        (_status(500, "Internal Server Error"), "http_status"),
        (_status(502, "<html>Bad Gateway</html>", "text/html"), "http_status"),
        (_truncated_json, "parse"),
        (_short_body, "parse"),
        (_wrong_shape, "parse"),
        (_result_false, "parse"),
        (_slow, "timeout"),
    ],
)
async def test_every_part_bad_raises_the_right_kind(serve, session, answer, kind):
    url, head = await serve({part: answer for part in PARTS_V2})
    with pytest.raises(RaySignalError) as err:
        await RayDashboardClient(session, timeout=0.5).fetch_status(url, now=0.0)
    assert err.value.kind == kind
    assert len(head.hits) == 7  # every source was tried before giving up


async def test_one_source_bad_is_survived(serve, session, v2_answers):
    for answer in (_html, _truncated_json, _wrong_shape, _slow):
        for part in ("cluster_status", "tasks", "nodes"):
            answers = dict(v2_answers)
            answers[part] = answer
            url, _ = await serve(answers)
            status = await RayDashboardClient(session, timeout=0.3).fetch_status(url, now=0.0)
            assert part in {e.part for e in status.errors}, (answer.__name__, part)
            assert status.demand  # the other parts still give demand


async def test_connection_refused(session):
    with pytest.raises(RaySignalError) as err:
        await RayDashboardClient(session).fetch_status(f"http://127.0.0.1:{free_port()}", now=0.0)
    assert err.value.kind == "connect"


async def test_token_auth(serve, session, v2_answers):
    url, _ = await serve(v2_answers, token="s3cret")
    with pytest.raises(RaySignalError) as err:
        await RayDashboardClient(session).fetch_status(url, now=0.0)
    assert err.value.kind == "auth" and "401" in err.value.message
    with pytest.raises(RaySignalError) as err:
        await RayDashboardClient(session, token="wrong").fetch_status(url, now=0.0)
    assert err.value.kind == "auth" and "403" in err.value.message
    status = await RayDashboardClient(session, token="s3cret").fetch_status(url, now=0.0)
    assert status.source == "state_api" and status.demand


def test_error_kinds_are_bounded():
    assert set(ERROR_KINDS) == {"timeout", "connect", "tls", "http_status", "parse", "auth", "credentials", "too_large"}
    with pytest.raises(ValueError):
        RaySignalError("weird", "x")


async def test_stale_v1_report_is_not_trusted(serve, session, v2_answers, load):
    """A v1 report stops changing when its autoscaler stops writing; past max_report_age the
    state API is read instead (the fixture's report says time=1796019934.92)."""
    v2_answers["cluster_status"] = load("cluster_status.json")
    url, _ = await serve(v2_answers)
    client = RayDashboardClient(session, max_report_age=120.0)
    fresh = await client.fetch_status(url, now=1796019934.92 + 60)
    assert fresh.source == "cluster_status_v1"
    old = await client.fetch_status(url, now=1796019934.92 + 600)
    assert old.source == "state_api"
    (err,) = [e for e in old.errors if e.part == "cluster_status"]
    assert err.kind == "incomplete" and "600 s old" in err.message




async def test_large_answer_parsed_off_the_loop(serve, session, v2_answers):
    """A 10 000-task list (~11 MB, Ray's largest page) is decoded in a worker thread, same result."""
    doc = v2_answers["tasks"]
    rows = doc["data"]["result"]["result"]
    normal = [r for r in rows if r["type"] == "NORMAL_TASK"]  # 4 x {CPU 1, fakegpu 1}, 1 x {CPU 1, fakegpu 8}
    doc["data"]["result"]["result"] = [normal[i % len(normal)] for i in range(10_000)]
    doc["data"]["result"]["total"] = doc["data"]["result"]["num_filtered"] = 10_000
    url, _ = await serve(v2_answers)
    status = await RayDashboardClient(session, limit=10_000).fetch_status(url, now=0.0)
    tasks = {tuple(sorted(d.shape.items())): d.count for d in status.demand if d.kind == "task"}
    assert tasks == {(("CPU", 1.0), ("fakegpu", 1.0)): 8000, (("CPU", 1.0), ("fakegpu", 8.0)): 2000}
    assert not [e for e in status.errors if e.part == "tasks"]


async def test_oversized_answer_is_refused(serve, session, v2_answers):
    url, _ = await serve(v2_answers)
    limits = {**part_limits(), "tasks": PartLimit(3000, 10**6)}  # tasks: ~7.8 kB; actors, PGs: < 2.3 kB
    client = RayDashboardClient(session, limits=limits)
    status = await client.fetch_status(url, now=0.0)
    (err,) = [e for e in status.errors if e.part == "tasks"]
    assert err.kind == "too_large" and "larger than 3000 bytes" in err.message
    assert client.budget.used == 0  # what the refused read took is back
    assert {d.kind for d in status.demand} == {"actor", "placement_group"}
