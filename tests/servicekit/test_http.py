"""servicekit.http on a plain application: handler errors, addresses, shutdown, limits."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
import pytest
from aiohttp import web

from servicekit.http import HANDLER_ERROR, Limits, start_server


def app_with(handler) -> web.Application:
    app = web.Application()
    app.router.add_get("/", handler)
    return app


async def test_a_handler_error_is_500_and_its_traceback_is_logged_once_per_interval(caplog):
    async def boom(_: web.Request) -> web.Response:
        raise RuntimeError("bug in a handler")

    server = await start_server(app_with(boom), "127.0.0.1:0", name="t")
    try:
        with caplog.at_level(logging.INFO):
            async with aiohttp.ClientSession() as s:
                for _ in range(10):
                    async with s.get(server.url + "/") as r:
                        assert r.status == 500
    finally:
        await server.close()
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1 and errors[0].exc_info and "RuntimeError: bug in a handler" in errors[0].getMessage()
    assert server.rejected[HANDLER_ERROR] == 10


async def test_addresses_and_a_taken_port():
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    with pytest.raises(ValueError, match="HOST:PORT"):
        await start_server(app_with(ok), "8080")
    server = await start_server(app_with(ok), ":0")  # every interface, any port
    try:
        assert server.host == "0.0.0.0" and server.url == f"http://127.0.0.1:{server.port}"
        with pytest.raises(OSError):
            await start_server(app_with(ok), f"127.0.0.1:{server.port}")
        async with aiohttp.ClientSession() as s, s.get(server.url + "/") as r:
            assert await r.text() == "ok"
    finally:
        await server.close()


async def test_close_ends_idle_connections_and_stops_listening():
    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    server = await start_server(app_with(ok), "127.0.0.1:0", limits=Limits(header_timeout=60))
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    await asyncio.sleep(0.1)
    assert server.active_connections == 1
    await asyncio.wait_for(server.close(), 10)
    assert await asyncio.wait_for(reader.read(), 5) == b""  # the idle connection was closed
    writer.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=1).close()


def test_limits_must_be_positive():
    for field in ("max_connections", "header_timeout", "body_timeout", "max_body_bytes"):
        with pytest.raises(ValueError, match=field):
            Limits(**{field: 0})
