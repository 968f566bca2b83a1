"""What a Ray head's answers may cost the controller (autoscaler.signals.ray_limits), and that one tenant's
hostile or slow heads leave the other tenants' Ray signals fresh (autoscaler.signals.ray.RaySignals).

The hostile heads are real HTTP servers answering ``[{},{},...]``; the bounds are checked against the
recorded Ray 2.60 answers in fixtures/ray."""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from autoscaler.signals.ray import RaySignals
from autoscaler.signals.ray_demand import RayDashboardClient, RaySignalError
from autoscaler.signals.ray_limits import MARGIN, NODES, PART_LIMITS, ROWS, ByteBudget, ParseGate, part_limits
from servicekit.boundedjson import container_bound, value_bound
from tests.support.eventually import eventually
from tests.support.ports import free_port

# part -> (fixture file, rows in it or None for a per-node answer of one node)
FIXTURES = {
    "cluster_status": ("cluster_status.json", None),
    "cluster_status_format1": ("cluster_status_format1.json", None),
    "tasks": ("tasks_pending_detail.json", "data.result.result"),
    "actors": ("actors.json", "data.result.result"),
    "placement_groups": ("placement_groups.json", "data.result.result"),
    "nodes": ("nodes.json", None),
    "nodes_summary": ("nodes_view_summary.json", None),
}
PATHS = {
    "/api/cluster_status": "cluster_status_v2.json", "/api/v0/tasks": "tasks_pending_detail.json",
    "/api/v0/actors": "actors.json", "/api/v0/placement_groups": "placement_groups.json",
    "/api/v0/nodes": "nodes.json", "/nodes": "nodes_view_summary.json",
}


def _rows(doc: Any, path: str) -> int:
    for key in path.split("."):
        doc = doc[key]
    return len(doc)


@pytest.mark.parametrize("part", sorted(FIXTURES))
def test_every_bound_holds_a_real_answer_at_1000_nodes_with_margin(fixtures_dir: Path, part: str) -> None:
    name, rows_at = FIXTURES[part]
    body = (fixtures_dir / "ray" / name).read_bytes()
    units = _rows(json.loads(body), rows_at) if rows_at else 1
    scale = (ROWS if rows_at else NODES) / units
    limit = PART_LIMITS[part]
    assert limit.max_bytes >= len(body) * scale * MARGIN
    assert limit.max_values >= value_bound(body) * scale * MARGIN
    assert limit.max_containers is not None and limit.max_containers >= container_bound(body) * scale * MARGIN
    # and not wildly more (the bounds are what keeps memory bounded)
    assert limit.max_bytes < len(body) * scale * MARGIN * 1.05 + 2**20
    assert limit.max_values < value_bound(body) * scale * MARGIN * 1.05 + 1000
    assert limit.max_containers < container_bound(body) * scale * MARGIN * 1.1 + 1000


def test_state_api_bounds_follow_the_row_limit() -> None:
    assert part_limits(rows=10_000)["tasks"].max_bytes > 4 * part_limits(rows=2000)["tasks"].max_bytes
    assert part_limits(rows=10_000)["nodes"] == part_limits(rows=2000)["nodes"]


# --------------------------------------------------------------------------------------- real heads
@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Callable[[web.Request], bytes | None]], Any]]:
    servers: list[TestServer] = []

    async def start(answer: Callable[[web.Request], bytes | None]) -> str:
        async def handle(request: web.Request) -> web.Response:
            body = answer(request)
            if body is None:
                return web.Response(status=404, text="404: Not Found")
            return web.Response(body=body, content_type="application/json")

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handle)
        server = TestServer(app, host="127.0.0.1", port=free_port())
        await server.start_server()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}"

    yield start
    for s in servers:
        await s.close()


def fixture_answers(fixtures_dir: Path, nodes: int = 1) -> Callable[[web.Request], bytes | None]:
    """A Ray 2.60 head (autoscaler v2) of ``nodes`` nodes: the recorded node views repeated per node."""
    docs = {p: json.loads((fixtures_dir / "ray" / f).read_text()) for p, f in PATHS.items()}
    summary = docs["/nodes"]["data"]["summary"]
    docs["/nodes"]["data"]["summary"] = [copy.deepcopy(summary[0]) for _ in range(nodes)]
    rows = docs["/api/v0/nodes"]["data"]["result"]["result"]
    docs["/api/v0/nodes"]["data"]["result"]["result"] = [copy.deepcopy(rows[0]) for _ in range(nodes)]
    bodies = {p: json.dumps(d).encode() for p, d in docs.items()}

    def answer(request: web.Request) -> bytes | None:
        return None if request.query.get("format") == "1" else bodies.get(request.path)

    return answer


async def test_a_real_answer_of_1000_nodes_is_read_and_parsed(serve, fixtures_dir: Path) -> None:
    url = await serve(fixture_answers(fixtures_dir, nodes=1000))
    async with aiohttp.ClientSession() as session:
        client = RayDashboardClient(session)
        status = await client.fetch_status(url, now=0.0)
        assert status.nodes and status.demand
        assert [e.part for e in status.errors] == ["cluster_status_format1"]  # (the recorded head has no text: 404)
        assert client.budget.used == 0 and client.gate.running == 0


async def test_a_head_answering_12_mb_of_empty_objects_is_refused_as_too_large_on_every_part(serve) -> None:
    hostile = b"[" + b",".join([b"{}"] * 4_000_000) + b"]"  # 12 MB, 4 million dicts
    url = await serve(lambda request: hostile)
    async with aiohttp.ClientSession() as session:
        client = RayDashboardClient(session)
        with pytest.raises(RaySignalError) as e:
            await client.fetch_status(url, now=0.0)
        assert e.value.kind == "too_large"
        for part, path in [("nodes_summary", "/nodes?view=summary"), ("tasks", "/api/v0/tasks"),
                           ("cluster_status", "/api/cluster_status")]:
            with pytest.raises(RaySignalError) as e:
                await client.get_json(url, path, part)
            assert e.value.kind == "too_large", part
        # nodes_summary's bytes fit its cap (33 MiB): refused on the values it would build, unparsed
        assert "JSON values" in str(e.value) or "larger than" in str(e.value)
        assert client.budget.used == 0 and client.gate.running == 0


@dataclass(frozen=True)
class Target:
    namespace: str
    base_url: str
    scheme: str = "http"
    token_secret: str | None = None


class HeadClient:
    """RayClient over real heads: the dashboard client with each target's URL."""

    def __init__(self, dashboard: RayDashboardClient) -> None:
        self.dashboard = dashboard

    async def fetch_status(self, target: Target, now: float) -> Any:
        return await self.dashboard.fetch_status(target.base_url, now)


async def test_one_hostile_head_goes_stale_and_the_others_stay_fresh(serve, fixtures_dir: Path) -> None:
    hostile = b"[" + b",".join([b"{}"] * 4_000_000) + b"]"
    bad = await serve(lambda request: hostile)
    good = [await serve(fixture_answers(fixtures_dir)) for _ in range(3)]
    targets: dict[str, Any] = {"team-x/evil": Target("team-x", bad)}
    targets |= {f"team-{i}/rc": Target(f"team-{i}", u) for i, u in enumerate(good)}
    kinds: Counter[str] = Counter()
    async with aiohttp.ClientSession() as session:
        signals = RaySignals(HeadClient(RayDashboardClient(session)), lambda k: kinds.update([k]), timeout=30.0)
        await signals.poll(targets, now=100.0)
        await signals.poll(targets, now=110.0)
    obs = signals.observations
    assert obs["team-x/evil"].status is None and obs["team-x/evil"].error == "too_large"
    assert kinds == Counter({"too_large": 2})
    for i in range(3):
        assert obs[f"team-{i}/rc"].observed_at == 110.0 and obs[f"team-{i}/rc"].error == ""


# ------------------------------------------------------------------------------ fairness, deadlines
class ScriptedRay:
    """Heads of namespace ``slow`` never answer; the others answer at once."""

    def __init__(self) -> None:
        self.active: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.asked: Counter[str] = Counter()

    async def fetch_status(self, target: Target, now: float) -> Any:
        ns = target.namespace
        self.asked[target.base_url] += 1
        self.active[ns] += 1
        self.peak[ns] = max(self.peak[ns], self.active[ns])
        try:
            if ns.startswith("slow"):
                await asyncio.Event().wait()
            return type("Status", (), {"observed_at": now, "demand": ()})()
        finally:
            self.active[ns] -= 1


async def test_a_namespace_of_slow_heads_holds_only_its_share_and_never_delays_the_others() -> None:
    ray = ScriptedRay()
    kinds: Counter[str] = Counter()
    signals = RaySignals(ray, lambda k: kinds.update([k]), concurrency=8, timeout=0.3)  # 2 per namespace
    targets: dict[str, Any] = {f"slow/rc-{i}": Target("slow", f"slow-{i}") for i in range(200)}
    targets |= {f"team-{i}/rc": Target(f"team-{i}", f"fast-{i}") for i in range(6)}
    await signals.poll(targets, now=100.0)
    for i in range(6):  # every other tenant was read in this very poll
        assert signals.observations[f"team-{i}/rc"].observed_at == 100.0
    assert ray.peak["slow"] == 2  # its share of the 8 slots, however many heads it has
    reading = signals.reading  # the slow namespace's heads still wait for their share: the poll did not
    assert len(reading) > 100
    await signals.poll(targets, now=110.0)
    for i in range(6):
        assert signals.observations[f"team-{i}/rc"].observed_at == 110.0
    assert max(ray.asked[targets[k].base_url] for k in reading) == 1  # one still being read is not asked again
    # each slow head ends at its own deadline (0.3 s after it was asked; waited for, not raced: on a loaded
    # machine the second poll can come back before two deadlines have passed)
    await eventually(lambda: kinds["timeout"] >= 2, "two slow heads timed out", timeout=10)
    await signals.close()
    assert signals.in_flight == 0


async def test_a_failing_head_is_asked_less_often_and_again_once_it_answers() -> None:
    class Flaky:
        def __init__(self) -> None:
            self.fail = True
            self.asked = 0

        async def fetch_status(self, target: Target, now: float) -> Any:
            self.asked += 1
            if self.fail:
                raise RaySignalError("connect", "refused")
            return type("Status", (), {"observed_at": now})()

    ray = Flaky()
    signals = RaySignals(ray, lambda k: None, retry_base=10.0, retry_cap=60.0)
    targets: dict[str, Any] = {"team-a/rc": Target("team-a", "a")}
    asked_at = []
    for t in range(0, 300, 2):  # a poll every 2 s for 5 minutes
        before = ray.asked
        await signals.poll(targets, now=float(t))
        if ray.asked > before:
            asked_at.append(t)
    # 0 and 2 (the second failure), then after 10, 20, 40 s, then every 60 s at most
    assert asked_at[:5] == [0, 2, 12, 32, 72]
    assert all(b - a <= 60 for a, b in itertools.pairwise(asked_at[4:]))
    assert len(asked_at) < 12
    ray.fail = False
    await signals.poll(targets, now=1000.0)
    await signals.poll(targets, now=1002.0)
    assert signals.observations["team-a/rc"].observed_at == 1002.0 and signals.retry_at("team-a/rc") is None


# -------------------------------------------------------------------------------- budget and gate
async def test_the_byte_budget_is_first_come_first_served_and_a_cancelled_wait_takes_nothing() -> None:
    budget = ByteBudget(100)
    await budget.take(80)
    order: list[str] = []

    async def take(name: str, n: int) -> None:
        await budget.take(n)
        order.append(name)

    big = asyncio.create_task(take("big", 50))
    await asyncio.sleep(0)
    small = asyncio.create_task(take("small", 10))  # would fit now, but waits behind the first come
    cancelled = asyncio.create_task(take("cancelled", 20))
    await asyncio.sleep(0.01)
    assert order == [] and budget.used == 80
    cancelled.cancel()
    budget.give(80)
    await asyncio.gather(big, small)
    assert order == ["big", "small"] and budget.used == 60
    assert cancelled.cancelled()


async def test_parses_run_one_at_a_time_and_a_cancelled_caller_frees_its_slot_when_the_thread_ends() -> None:
    import threading
    import time

    gate = ParseGate(1)
    released: list[int] = []
    started = threading.Event()
    peak = [0]

    def slow_parse(n: int) -> int:
        started.set()
        peak[0] = max(peak[0], gate.running)
        time.sleep(0.2)
        return n

    first = asyncio.create_task(gate.run(slow_parse, 1, release=lambda: released.append(1)))
    second = asyncio.create_task(gate.run(slow_parse, 2, release=lambda: released.append(2)))
    await asyncio.to_thread(started.wait)
    first.cancel()  # its head's deadline passed; its thread goes on
    await asyncio.sleep(0.05)
    assert released == [] and gate.running == 1  # still parsing: its bytes and its slot are held
    assert await second == 2
    assert released == [1, 2] and gate.running == 0 and peak[0] == 1
