"""``queuepilot report`` against answers no real Prometheus should give (NaN and infinite values, deep or
dense JSON, bytes that are not UTF-8, unexpected shapes, oversized answers): each is one line on stderr
and exit status 1, never a traceback.  The "Prometheus" is a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from report import cli, model
from report.prom import PrometheusClient, ReportError
from tests.support.ports import free_port

OK_NAMES = json.dumps({"status": "success", "data": [model.GPU_BUSY]}).encode()
OK_RULES = json.dumps({"status": "success", "data": {"groups": []}}).encode()
EMPTY = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}).encode()


def matrix(values: list) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"namespace": "team-a"}, "values": values}]}}).encode()


def answers(**override: bytes) -> dict[str, bytes]:
    base = {"names": OK_NAMES, "rules": OK_RULES, "range": matrix([[1000.0, "1"]]), "instant": EMPTY}
    return {**base, **override}


@pytest.fixture
def prometheus() -> Iterator[Callable[[dict[str, bytes]], str]]:
    """start(bodies) -> the URL of a server answering each API path with its body."""
    loop = asyncio.new_event_loop()
    servers: list[TestServer] = []

    def start(bodies: dict[str, bytes]) -> str:
        paths = {"/api/v1/label/__name__/values": "names", "/api/v1/rules": "rules",
                 "/api/v1/query_range": "range", "/api/v1/query": "instant"}

        async def handle(request: web.Request) -> web.Response:
            return web.Response(body=bodies[paths[request.path]], content_type="application/json")

        app = web.Application()
        app.router.add_get("/{tail:.*}", handle)
        server = TestServer(app, host="127.0.0.1", port=free_port())
        loop.run_until_complete(server.start_server(loop=loop))
        servers.append(server)
        threading.Thread(target=loop.run_forever, daemon=True).start()
        return f"http://127.0.0.1:{server.port}"

    yield start
    for s in servers:
        asyncio.run_coroutine_threadsafe(s.close(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)


CASES = {
    "NaN value": (answers(range=matrix([[1000.0, "NaN"]])), "not a finite number"),
    "+Inf value": (answers(range=matrix([[1000.0, "+Inf"]])), "not a finite number"),
    "infinite time": (answers(range=matrix([["1e999", "1"]])), "not a finite number"),
    "deeply nested JSON": (answers(names=b'{"status": "success", "data": ' + b'{"abc": ' * 5000 + b"1" + b"}" * 5001),
                           "nested too deeply"),
    "deep and dense JSON": (answers(names=b"[" * 100_000 + b"]" * 100_000), "far denser"),
    "invalid UTF-8": (answers(names=b'{"status": "success", "data": ["\xff\xfe"]}'), "not UTF-8"),
    "dense JSON": (answers(range=b'{"status":"success","data":[' + b",".join([b"{}"] * 200_000) + b"]}"),
                   "far denser than a Prometheus answer"),
    "result not a list": (answers(range=json.dumps({"status": "success", "data": {"result": {"a": 1}}}).encode()),
                          "not a list of series"),
    "labels not text": (answers(range=json.dumps({"status": "success", "data": {"result": [
        {"metric": {"namespace": 7}, "values": [[1, "1"]]}]}}).encode()), "labels that are not text"),
    "sample not a pair": (answers(range=matrix([[1000.0]])), "not a [time, value] pair"),
    "value not a number": (answers(range=matrix([[1000.0, {"x": 1}]])), "not a number"),
    "names not a list": (answers(names=json.dumps({"status": "success", "data": {"a": 1}}).encode()),
                         "other than a list of names"),
    "groups not a list": (answers(rules=json.dumps({"status": "success", "data": {"groups": 5}}).encode()),
                          "without a list of groups"),
    "error with a non-text message": (answers(names=json.dumps({"status": "error", "error": {"x": [1]}}).encode()),
                                      "Prometheus refused"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_answer_is_one_line_and_exit_1(prometheus, capsys, case: str) -> None:
    bodies, message = CASES[case]
    url = prometheus(bodies)
    assert cli.main(["--prometheus-url", url, "--window", "1h"]) == cli.EXIT_PROMETHEUS
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("queuepilot report: ") and message in err[0], err


def test_the_same_server_with_good_answers_reports(prometheus, capsys) -> None:
    """(the control: the stub itself is a Prometheus the report can read)"""
    url = prometheus(answers())
    assert cli.main(["--prometheus-url", url, "--window", "1h"]) in (cli.EXIT_OK, cli.EXIT_NO_DATA)
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize("chunked", [False, True])
async def test_an_answer_over_the_size_cap_is_refused_while_it_arrives(chunked: bool) -> None:
    big = b'{"status": "success", "data": [' + b'"x",' * 100_000 + b'"x"]}'

    async def handle(request: web.Request) -> web.StreamResponse:
        if not chunked:
            return web.Response(body=big, content_type="application/json")
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(0, len(big), 4096):
            await resp.write(big[i:i + 4096])
        return resp

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    server = TestServer(app, host="127.0.0.1", port=free_port())
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            client = PrometheusClient(f"http://127.0.0.1:{server.port}", session, max_bytes=64 * 1024)
            with pytest.raises(ReportError, match="more than 64 KiB; narrow --window"):
                await client.metric_names()
            assert await PrometheusClient(f"http://127.0.0.1:{server.port}", session).metric_names()
    finally:
        await server.close()
