"""The HTTP side: ``/metrics``, ``/healthz``, and :class:`ExporterApp`, the whole exporter in-process.

``/metrics`` renders the latest published state (text format 0.0.4, see ``exporter.collector``);
``/healthz`` answers 200 ``{"status": "ok"}`` or 503 ``{"status": "degraded", "reasons": [...]}``
when no collection succeeded within ``stale_after_intervals`` intervals (GPU health is reported
in the body, it does not make the exporter unhealthy).

In-process use (the embedded demo, tests)::

    async with ExporterApp(SimSource("node-a"), listen="127.0.0.1:0", interval=1.0) as app:
        print(app.metrics_url)   # http://127.0.0.1:<bound port>/metrics

``serve(app)`` runs one until SIGTERM / SIGINT and shuts it down gracefully.  The HTTP server is
``servicekit.http``'s: header and body timeouts, a connection cap, request size limits and
throttled one-line logs for malformed requests (``limits``; :data:`LIMITS` by default).
"""

from __future__ import annotations

import asyncio
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
from servicekit.http import HttpServer, Limits, OnReject, start_server
from servicekit.listen import parse_listen
from servicekit.tasks import cancel_tasks

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "0.0.0.0:9400"
# GET-only endpoints: a request body is never needed, so a small one is already suspicious
LIMITS = Limits(max_body_bytes=64 * 1024)

__all__ = ["DEFAULT_LISTEN", "LIMITS", "ExporterApp", "build_web_app", "parse_listen", "serve"]


def build_web_app(agent: Agent, registry, limits: Limits = LIMITS) -> web.Application:
    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=render_text(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        ok, body = agent.status()
        return web.json_response(body, status=200 if ok else 503)

    async def index(request: web.Request) -> web.Response:
        return web.Response(text="queuepilot exporter: /metrics /healthz\n")

    app = web.Application(client_max_size=limits.max_body_bytes)
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
        limits: Limits = LIMITS,
        on_reject: OnReject | None = None,
    ) -> None:
        self.source = source
        self.listen = listen
        self.limits = limits
        self.on_reject = on_reject
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
        self._http: HttpServer | None = None
        self._task: asyncio.Task | None = None
        self.host = ""
        self.port = 0

    @property
    def url(self) -> str:
        """Base URL a local client can use (``0.0.0.0`` / ``::`` are reported as loopback)."""
        return parse_listen(self.listen).url("http", self.port)

    @property
    def http(self) -> HttpServer | None:
        """The running HTTP server (its ``rejected`` counts, ``active_connections``)."""
        return self._http

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    async def start(self) -> None:
        """Start the source (may raise ``SourceUnavailable``), collect once, then serve and loop."""
        address = parse_listen(self.listen)
        await self.source.start()
        try:
            await self.agent.collect_once()  # /metrics has data from the first scrape on
            self._http = await start_server(
                build_web_app(self.agent, self.registry, self.limits), address, limits=self.limits,
                name="exporter", on_reject=self.on_reject,
            )
            self.host, self.port = address.host, self._http.port
        except BaseException:
            await self.stop()
            raise
        self._task = asyncio.create_task(self.agent.run(), name="exporter-collect")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_tasks([self._task])
            self._task = None
        if self._http is not None:
            await self._http.close()
            self._http = None
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
