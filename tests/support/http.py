"""A test's own HTTP server (a fake Prometheus, exporter, Ray head or webhook receiver): an aiohttp app
served on a free loopback port for the length of a ``with`` block."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from tests.support.ports import free_port


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    """``app`` on 127.0.0.1; its base URL (``http://127.0.0.1:<port>``). Stopped when the block ends."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])
