"""The HTTP side: ``/metrics``, ``/healthz``, and :class:`ExporterApp`, the whole exporter in-process.

``/metrics`` renders the latest published state (text format 0.0.4, see ``exporter.collector``);
``/healthz`` answers 200 ``{"status": "ok"}`` or 503 ``{"status": "degraded", "reasons": [...]}``
when no collection succeeded within ``stale_after_intervals`` intervals (GPU health is reported
in the body, it does not make the exporter unhealthy).

In-process use (the embedded demo, tests)::

    async with ExporterApp(SimSource("node-a"), listen="127.0.0.1:0", interval=1.0) as app:
        print(app.metrics_url)   # http://127.0.0.1:<bound port>/metrics

``serve(app)`` runs one until SIGTERM / SIGINT and shuts it down gracefully.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from collections.abc import Callable

from aiohttp import web

from exporter.agent import Agent
from exporter.collector import CONTENT_TYPE, ExporterCollector, new_registry, render_text
from exporter.health import HealthConfig
from exporter.podresources.client import PodResourcesClient
from exporter.sources.base import GpuSource

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9400"


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` (all interfaces) or ``[v6]:PORT`` -> (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


def build_web_app(agent: Agent, registry) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render_text(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        ok, body = agent.status()
        return web.json_response(body, status=200 if ok else 503)

    async def index(request: web.Request) -> web.Response:
        return web.Response(text="queuepilot exporter: /metrics /healthz\n")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", index)
    return app


class ExporterApp:
    """Source + agent loop + HTTP server. ``listen`` port 0 binds a free port (see ``url``).

    ``hostname`` (the ``Hostname`` label) defaults to the source's, then ``$NODE_NAME``, then the host name.
    """

    def __init__(
        self,
        source: GpuSource,
        *,
        listen: str = "127.0.0.1:0",
        hostname: str | None = None,
        interval: float = 10.0,
        pod_resources_socket: str | None = None,
        health: HealthConfig = HealthConfig(),
        stale_after_intervals: float = 3.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.source = source
        self.listen = listen
        self.hostname = (
            hostname or getattr(source, "hostname", None) or os.environ.get("NODE_NAME") or socket.gethostname()
        )
        self.collector = ExporterCollector(clock=clock)
        self.registry = new_registry(self.collector)
        self.pod_resources = PodResourcesClient(pod_resources_socket) if pod_resources_socket else None
        self.agent = Agent(
            source,
            self.collector,
            hostname=self.hostname,
            interval=interval,
            pod_resources=self.pod_resources,
            health=health,
            stale_after_intervals=stale_after_intervals,
            clock=clock,
        )
        self._runner: web.AppRunner | None = None
        self._task: asyncio.Task | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL a local client can use (``0.0.0.0`` / ``::`` are reported as loopback)."""
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://[{host}]:{self.port}" if ":" in host else f"http://{host}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    async def start(self) -> None:
        """Start the source (may raise ``SourceUnavailable``), collect once, then serve and loop."""
        host, port = parse_listen(self.listen)
        await self.source.start()
        try:
            await self.agent.collect_once()  # /metrics has data from the first scrape on
            sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
            self.host, self.port = host, sock.getsockname()[1]
            self._runner = web.AppRunner(build_web_app(self.agent, self.registry), access_log=None)
            await self._runner.setup()
            await web.SockSite(self._runner, sock).start()
        except BaseException:
            await self.stop()
            raise
        self._task = asyncio.create_task(self.agent.run(), name="exporter-collect")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.pod_resources is not None:
            await self.pod_resources.close()
        await self.source.close()

    async def __aenter__(self) -> ExporterApp:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(app: ExporterApp, stop: asyncio.Event | None = None) -> None:
    """Run ``app`` until ``stop`` is set or SIGTERM / SIGINT arrives; then shut down cleanly."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with app:
            state = app.collector.state
            log.info(
                "serving %s (source=%s, node=%s, %d GPUs, every %gs; health at %s/healthz)",
                app.metrics_url,
                app.source.name,
                app.hostname,
                len(state.sample.gpus) if state and state.sample else 0,
                app.agent.interval,
                app.url,
            )
            await stop.wait()
            log.info("shutting down")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
