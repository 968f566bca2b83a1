"""Ray heads for the security tests: real aiohttp servers that answer like a Ray 2.60 head (the recorded
v2 fixtures) and record every request with its Authorization header; a DNS resolver that sends
``<head service>.<namespace>.svc`` names to them, so the real client connects by the name it derived."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.test_utils import TestServer

from tests.support import objects as o
from tests.support.ports import free_port

V2_PARTS = {
    "/api/cluster_status": "cluster_status_v2.json",
    "/api/v0/tasks": "tasks_pending_detail.json",
    "/api/v0/actors": "actors.json",
    "/api/v0/placement_groups": "placement_groups.json",
    "/api/v0/nodes": "nodes.json",
}


@dataclass
class Hit:
    path: str
    authorization: str | None


@dataclass
class RecordingHead:
    """One head: answers the v2 fixtures (``/api/cluster_status?format=1`` and ``/nodes`` 404) and
    records each request; ``redirect_to`` makes it answer 302 to another URL instead."""

    fixtures: Path
    redirect_to: str | None = None
    hits: list[Hit] = field(default_factory=list)
    server: TestServer | None = None

    @property
    def port(self) -> int:
        assert self.server is not None and self.server.port is not None
        return self.server.port

    @property
    def authorizations(self) -> set[str | None]:
        return {h.authorization for h in self.hits}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append(Hit(request.path_qs, request.headers.get("Authorization")))
        if self.redirect_to is not None:
            raise web.HTTPFound(self.redirect_to + request.path_qs)
        name = V2_PARTS.get(request.path)
        if name is None or request.query.get("format") == "1":
            return web.Response(status=404, text="404: Not Found")
        return web.json_response(json.loads((self.fixtures / name).read_text()))

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> RecordingHead:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1", port=free_port())
        await self.server.start_server(ssl=ssl_context)
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


class ServiceResolver(AbstractResolver):
    """Cluster DNS for the test: ``host`` names map to 127.0.0.1 and the port of the head serving them;
    any other name does not resolve (as an unknown Service would not)."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}
        self.asked: list[str] = []

    def add(self, host: str, port: int) -> None:
        self.names[host] = port

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        if host == "127.0.0.1":
            return [_result(host, port)]
        if host not in self.names:
            raise OSError(f"test DNS: {host} does not resolve")
        return [_result(host, self.names[host])]

    async def close(self) -> None:
        return None


def _result(hostname: str, port: int) -> ResolveResult:
    return {"hostname": hostname, "host": "127.0.0.1", "port": port, "family": socket.AF_INET,
            "proto": 0, "flags": socket.AI_NUMERICHOST}


def secret(name: str, namespace: str, token: str | None, key: str = "token") -> dict[str, Any]:
    """The Secret that holds a Ray token under ``key`` (none at all: ``token=None``)."""
    data = {key: base64.b64encode(token.encode()).decode()} if token is not None else {}
    return o.secret(name, namespace, data, type_="Opaque")
