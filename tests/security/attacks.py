"""Servers that play the attacker's side for the security tests: an API server that records who sends it
which credentials (plain http or TLS), a proxy that records every connection made to it, and the
MultiKueue objects that point a worker cluster at them."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
from dataclasses import dataclass, field
from typing import Any

import yaml
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support.ports import free_port

KUEUE = "kueue.x-k8s.io/v1beta2"


@dataclass
class Seen:
    path: str
    authorization: str | None


@dataclass
class RecordingApi:
    """Answers every list with an empty list and every watch by holding the stream open; records each
    request's path and Authorization header."""

    seen: list[Seen] = field(default_factory=list)
    server: TestServer | None = None
    scheme: str = "http"

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"{self.scheme}://127.0.0.1:{self.server.port}"

    @property
    def authorizations(self) -> set[str | None]:
        return {s.authorization for s in self.seen}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append(Seen(request.path_qs, request.headers.get("Authorization")))
        if request.query.get("watch") == "true":
            resp = web.StreamResponse()
            await resp.prepare(request)
            await asyncio.sleep(3600)
            return resp
        return web.json_response({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"},
                                  "items": []})

    async def start(self, ssl_context: ssl.SSLContext | None = None) -> RecordingApi:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1", port=free_port())
        await self.server.start_server(ssl=ssl_context, shutdown_timeout=0.1)
        self.scheme = "https" if ssl_context is not None else "http"
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


@dataclass
class RecordingProxy:
    """A TCP listener that records the first bytes of every connection (``CONNECT host:port`` or an
    absolute-form request with its headers) and closes it."""

    received: list[bytes] = field(default_factory=list)
    server: asyncio.Server | None = None
    port: int = 0

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            self.received.append(await asyncio.wait_for(reader.read(65536), 5))
        except (TimeoutError, ConnectionError):
            self.received.append(b"")
        writer.close()

    async def start(self) -> RecordingProxy:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


def kubeconfig(server: str, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "w",
            "clusters": [{"name": "w", "cluster": {"server": server, **(cluster or {})}}],
            "users": [{"name": "w", "user": user}],
            "contexts": [{"name": "w", "context": {"cluster": "w", "user": "w"}}]}


def kubeconfig_secret(name: str, namespace: str, cfg: Any, raw: bytes | None = None) -> dict[str, Any]:
    data = raw if raw is not None else yaml.safe_dump(cfg).encode()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace},
            "data": {"kubeconfig": base64.b64encode(data).decode()}}


def multikueue_cluster(name: str, location: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE, "kind": "MultiKueueCluster", "metadata": {"name": name},
            "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": location}}},
            "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "",
                                       "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}


def b64(data: bytes | str) -> str:
    return base64.b64encode(data.encode() if isinstance(data, str) else data).decode()


def dump(obj: Any) -> str:
    return json.dumps(obj)
