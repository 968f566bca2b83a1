"""Slow, oversized, malformed and too many clients against the real servers: the exporter, the
webhook (over TLS) and the controller's metrics endpoint, each through raw sockets or a real client.

Every test here failed against the servers as they were before ``servicekit.http``: half-sent
requests were held forever, a declared oversized body got 405 or waited for the body, there was
no connection cap, and each malformed request logged a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from autoscaler.controller.config import ControllerConfig
from autoscaler.webhook.server import LIMITS as WEBHOOK_LIMITS
from autoscaler.webhook.server import start_webhook
from exporter.server import LIMITS as EXPORTER_LIMITS
from exporter.server import ExporterApp
from exporter.sources.sim import SimSource
from servicekit.http import (
    AT_CAPACITY,
    BODY_TIMEOUT,
    BUSY,
    HEADER_TIMEOUT,
    IDLE_CLOSED,
    MALFORMED,
    TOO_LARGE,
    Limits,
)
from tests.webhook.certs import make_pki

SHORT = {"header_timeout": 0.5, "body_timeout": 1.0, "max_connections": 3}
SERVERS = ["exporter", "webhook", "controller"]


@dataclass
class Target:
    name: str
    port: int
    ssl: ssl.SSLContext | None
    get_path: str
    post_path: str
    max_body: int
    rejected: Callable[[], dict[str, int]]  # the server's own counts (empty where it keeps none)


Factory = Callable[..., Awaitable[Target]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Factory]:
    """start(name, **limits) -> a running Target; everything is stopped at the end."""
    closers: list[Callable[[], Awaitable[None]]] = []

    async def factory(name: str, **overrides: float) -> Target:
        if name == "exporter":
            app = ExporterApp(SimSource("node-a", gpus=1), listen="127.0.0.1:0", interval=60.0,
                              limits=replace(EXPORTER_LIMITS, **overrides))
            await app.start()
            closers.append(app.stop)
            return Target(name, app.port, None, "/metrics", "/metrics", EXPORTER_LIMITS.max_body_bytes,
                          lambda: dict(app.http.rejected) if app.http else {})
        if name == "webhook":
            pki = make_pki(tmp_path)
            server = await start_webhook("127.0.0.1:0", str(pki.cert_file), str(pki.key_file), {"team-a": "q"},
                                         limits=replace(WEBHOOK_LIMITS, **overrides))
            closers.append(server.close)
            return Target(name, server.port, ssl.create_default_context(cafile=str(pki.ca_file)), "/",
                          "/mutate-ray", WEBHOOK_LIMITS.max_body_bytes, lambda: dict(server.http.rejected))
        from autoscaler.controller.loop import Controller

        config = ControllerConfig(listen_host="127.0.0.1", listen_port=0, leader_elect=False,
                                  max_connections=int(overrides.get("max_connections", Limits.max_connections)),
                                  http_header_timeout_seconds=overrides.get("header_timeout", Limits.header_timeout))
        controller = Controller(config, None)
        await controller.start_http()
        closers.append(controller.shutdown)
        assert controller.port
        return Target(name, controller.port, None, "/healthz", "/metrics", config.http_limits.max_body_bytes,
                      lambda: dict(controller._http.rejected) if controller._http else {})

    yield factory
    for close in reversed(closers):
        await close()


async def connect(t: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", t.port, ssl=t.ssl)


async def read_all(reader: asyncio.StreamReader, within: float = 10.0) -> bytes:
    """Everything until the server closes the connection (TimeoutError when it never does)."""
    out = b""
    async with asyncio.timeout(within):
        while True:
            try:
                chunk = await reader.read(65536)
            except (ConnectionResetError, ssl.SSLError):
                return out
            if not chunk:
                return out
            out += chunk


async def get(t: Target, path: str) -> bytes:
    reader, writer = await connect(t)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    try:
        return await read_all(reader)
    finally:
        writer.close()


@pytest.mark.parametrize("name", SERVERS)
async def test_a_half_sent_request_head_is_dropped_after_the_header_timeout(start, name):
    t = await start(name, **SHORT)
    reader, writer = await connect(t)
    writer.write(f"GET {t.get_path} HTTP/1.1\r\nHost: x\r\n".encode())  # the blank line never comes
    answer = await read_all(reader)
    assert answer.startswith(b"HTTP/1.1 408")
    writer.close()
    assert t.rejected().get(HEADER_TIMEOUT, 0) == 1
    # and it still serves
    assert (await get(t, t.get_path)).startswith(b"HTTP/1.1 ")


@pytest.mark.parametrize("name", SERVERS)
async def test_a_slowloris_dribbling_header_bytes_is_dropped_too(start, name):
    t = await start(name, **SHORT)
    reader, writer = await connect(t)
    writer.write(f"GET {t.get_path} HTTP/1.1\r\n".encode())

    async def dribble() -> None:
        for _ in range(200):  # a header byte every 50 ms: each one arrives well within any idle timeout
            await asyncio.sleep(0.05)
            writer.write(b"X")
            await writer.drain()

    task = asyncio.create_task(dribble())
    try:
        assert (await read_all(reader)).startswith(b"HTTP/1.1 408")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, ConnectionError, ssl.SSLError):
            await task
        writer.close()


@pytest.mark.parametrize("name", SERVERS)
async def test_a_declared_oversized_body_is_413_before_it_is_sent(start, name):
    t = await start(name, **SHORT)
    reader, writer = await connect(t)
    writer.write(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {t.max_body + 1}\r\n\r\n".encode())
    answer = await read_all(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 413"), answer[:100]
    assert t.rejected().get(TOO_LARGE, 0) == 1


@pytest.mark.parametrize("name", SERVERS)
async def test_a_body_that_does_not_arrive_in_time_is_408(start, name):
    t = await start(name, **SHORT)
    reader, writer = await connect(t)
    writer.write(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: 100\r\n\r\n{\"apiVersion\"".encode())
    answer = await read_all(reader)
    writer.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert t.rejected().get(BODY_TIMEOUT, 0) == 1


async def busy_holder(t: Target) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection with a request in flight: a POST whose body never finishes arriving."""
    reader, writer = await connect(t)
    writer.write(f"POST {t.post_path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 "Content-Length: 100\r\n\r\n{".encode())
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("name", SERVERS)
async def test_the_connection_cap_holds_while_every_connection_has_a_request_in_flight(start, name):
    t = await start(name, max_connections=3, header_timeout=30.0, body_timeout=30.0)
    holders = [await busy_holder(t) for _ in range(3)]
    await asyncio.sleep(0.3)  # the server has accepted all three and is reading their bodies

    late = asyncio.create_task(get(t, t.get_path))
    done, _ = await asyncio.wait({late}, timeout=1.0)
    assert not done, "a fourth connection was served while three requests were in flight (cap 3)"
    holders[0][1].close()  # one slot frees: the waiting client is accepted and answered
    answer = await asyncio.wait_for(late, 10)
    assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 404"))  # the webhook serves no GET route
    assert t.rejected().get(AT_CAPACITY, 0) >= 1 and not t.rejected().get(IDLE_CLOSED)
    for _, w in holders[1:]:
        w.close()


@pytest.mark.parametrize("name", SERVERS)
async def test_at_the_cap_the_connection_idle_longest_is_closed_for_a_new_client(start, name):
    t = await start(name, max_connections=3, header_timeout=30.0)  # idle holders are not timed out here
    holders = []
    for _ in range(3):  # each sends one request, reads the answer and stays open, idle (keep-alive)
        reader, writer = await connect(t)
        writer.write(f"GET {t.get_path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        holders.append((reader, writer))
        await asyncio.sleep(0.05)

    answer = await asyncio.wait_for(get(t, t.get_path), 10)  # served although three connections are open
    assert answer.startswith((b"HTTP/1.1 200", b"HTTP/1.1 404"))
    assert t.rejected().get(IDLE_CLOSED) == 1 and not t.rejected().get(AT_CAPACITY)
    # the oldest idle holder was closed; the two younger ones are still open
    oldest, *younger = holders
    assert await asyncio.wait_for(_drained_to_eof(oldest[0]), 10)
    for reader, _ in younger:
        assert not reader.at_eof()
    for _, w in holders:
        w.close()


async def _drained_to_eof(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(ConnectionResetError, ssl.SSLError):
        while await reader.read(65536):
            pass
    return True


async def test_webhook_reviews_in_flight_are_capped_and_a_waiter_past_the_body_timeout_gets_503(tmp_path):
    pki = make_pki(tmp_path)
    results: list[tuple[str, str]] = []
    limits = replace(WEBHOOK_LIMITS, max_in_flight=1, body_timeout=1.0, header_timeout=30.0)
    server = await start_webhook("127.0.0.1:0", str(pki.cert_file), str(pki.key_file), {"team-a": "q"},
                                 limits=limits, on_review=lambda k, r: results.append((k, r)))
    t = Target("webhook", server.port, ssl.create_default_context(cafile=str(pki.ca_file)), "/", "/mutate-ray",
               WEBHOOK_LIMITS.max_body_bytes, lambda: dict(server.http.rejected))
    try:
        first = await busy_holder(t)  # takes the only slot, then its body times out (408) after 1 s
        await asyncio.sleep(0.2)
        second = await busy_holder(t)  # waits for the slot, gets it when the first times out, times out too
        await asyncio.sleep(0.2)
        third = asyncio.create_task(get(t, "/mutate-ray"))  # waits longer than the body timeout: 503
        answers = [await read_all(first[0]), await read_all(second[0]), await asyncio.wait_for(third, 10)]
        assert [a[:12] for a in answers] == [b"HTTP/1.1 408", b"HTTP/1.1 408", b"HTTP/1.1 503"]
        assert t.rejected().get(BUSY) == 1 and t.rejected().get(BODY_TIMEOUT) == 2
        assert results.count(("Other", "Busy")) == 1
        for _, w in (first, second):
            w.close()
    finally:
        await server.close()


MALFORMED_REQUESTS = [
    b"GET / HTTP/1.1\r\nHost: x\r\nthis is not a header\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",  # over max_field_size
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",  # over max_line_size
    b"GET / HTTP/9.9.9\r\n\r\n",
    b"\x00\x01\x02 garbage\r\n\r\n",
]


@pytest.mark.parametrize("name", SERVERS)
async def test_malformed_requests_are_answered_400_and_logged_as_one_line(start, name, caplog):
    t = await start(name, **SHORT)
    caplog.set_level(logging.DEBUG, logger="aiohttp")
    caplog.set_level(logging.INFO)
    for raw in MALFORMED_REQUESTS:
        reader, writer = await connect(t)
        writer.write(raw)
        answer = await read_all(reader)
        writer.close()
        assert answer.startswith((b"HTTP/1.0 4", b"HTTP/1.1 4")), answer[:80]
    assert (await get(t, t.get_path)).startswith(b"HTTP/1.1 ")  # still serving
    loud = [r for r in caplog.records if r.levelno >= logging.INFO and r.name != "queuepilot.webhook"]
    assert len(loud) == 1, [r.getMessage() for r in loud]
    (record,) = loud
    assert "malformed HTTP request from 127.0.0.1" in record.getMessage()
    assert "\n" not in record.getMessage() and not record.exc_info
    assert not [r for r in caplog.records if r.exc_info], "no traceback at any level"
    assert t.rejected()[MALFORMED] == len(MALFORMED_REQUESTS)


async def test_at_the_file_descriptor_limit_the_exporter_pauses_accepting_and_logs_one_line(tmp_path):
    """The real CLI under a 40-descriptor limit, flooded with connections beyond it (its cap set
    higher, so the descriptor limit is hit first): one line, no traceback, and it serves again once
    the flood goes.  (Before: asyncio logged 'socket.accept() out of system resource' with a
    traceback in a busy loop, 16 298 lines in 4 s.)"""
    import os
    import resource
    import signal
    import socket
    import sys

    from tests.support.paths import REPO
    from tests.support.ports import free_port

    port = free_port()
    err_path = tmp_path / "stderr.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEPILOT_") and k != "NODE_NAME"}

    def limit_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    with open(err_path, "w") as err:  # noqa: ASYNC230 (set-up, before any server runs)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "exporter", "--source", "sim", "--listen", f"127.0.0.1:{port}", "--interval", "60",
            "--pod-resources-socket", "", "--max-connections", "1000", cwd=REPO, env=env, stderr=err,
            preexec_fn=limit_fds,
        )
    flood: list[socket.socket] = []
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port)).close()
                    break
                except OSError:
                    await asyncio.sleep(0.1)
        for _ in range(100):  # within the listen backlog, beyond the descriptor limit
            flood.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        await asyncio.sleep(2.0)
        for s in flood:
            s.close()
        flood.clear()
        t = Target("exporter", port, None, "/metrics", "/metrics", 0, lambda: {})
        async with asyncio.timeout(30):
            while True:  # it serves again once the flood is gone
                answer = await get(t, "/metrics")
                if answer.startswith(b"HTTP/1.1 200"):
                    break
                await asyncio.sleep(0.2)
        assert b"DCGM_FI_DEV_GPU_UTIL" in answer
    finally:
        for s in flood:
            s.close()
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(proc.wait(), 30)
    log = err_path.read_text()
    assert rc == 0, log
    assert "Traceback" not in log and "out of system resource" not in log
    accept_lines = [line for line in log.splitlines() if "accept() failed" in line]
    assert len(accept_lines) == 1, log
    assert "Too many open files" in accept_lines[0] and len(log.splitlines()) <= 5, log
