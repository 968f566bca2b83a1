"""Serve an aiohttp application on a listen address, with limits a slow or hostile client cannot pass.

``start_server(app, "0.0.0.0:9400")`` returns a running :class:`HttpServer` (``port`` is the bound
port, so port 0 works; ``close()`` stops it).  Every queuepilot server (the exporter, the
controller's metrics endpoint, the webhook) is served this way, with these guarantees
(:class:`Limits`):

- **connection cap**: at most ``max_connections`` connections are open, so a connection flood cannot
  exhaust the process's file descriptors.  At the cap the server closes the connection that has been
  idle longest (no request in flight: a kept-alive connection between requests, or one that has not
  finished a request head) to make room for the next client, so idle connections cannot hold every
  slot while a real client (a Prometheus scrape) waits; only when every open connection has a request
  in flight does it stop calling ``accept()`` until one closes (new clients wait in the kernel's
  listen backlog);
- **requests in flight**: with ``max_in_flight``, at most that many requests are read and handled at
  once; the others wait for a slot (their bodies stay unread in the socket buffers, flow-controlled)
  and are answered 503 with ``Retry-After`` when none frees within ``body_timeout``;
- **header timeout**: a connection must deliver a complete request head within ``header_timeout``
  seconds of connecting (or of sending the first byte of a later request on a kept-alive connection);
  a half-sent request (slowloris) is answered 408 and closed; a TLS handshake has the same limit;
- **idle timeout**: a kept-alive connection with no request in flight is closed after
  ``keepalive_timeout`` seconds;
- **body limits**: a declared ``Content-Length`` over ``max_body_bytes`` is answered 413 before a byte
  of the body is read; a body must arrive within ``body_timeout`` seconds (else 408); a chunked body
  is bounded by the application's ``client_max_size`` (413); a connection whose request carried more
  than ``keepalive_body_bytes`` is closed after its answer (an idle kept-alive connection would hold
  its last request, body included, until its next request);
- **request head limits**: request line and header fields are bounded by ``max_line_size`` /
  ``max_field_size`` (aiohttp answers 400 / 431);
- **logs that cannot be amplified**: a malformed request, a dropped slow client, a refused body, a
  failing ``accept()`` (for instance at the file-descriptor limit, which is then retried with a
  growing pause instead of in a busy loop) is ONE line without a traceback, at most one per kind per
  ``log_interval`` seconds; an exception in a handler (a 500) logs its traceback once per interval.
  aiohttp's access log is off.

Each of these events is also counted in ``HttpServer.rejected`` and passed to ``on_reject(kind)``
(bounded kinds: :data:`REJECT_KINDS`) so a process can export it as a metric.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from servicekit.listen import ListenAddress, parse_listen
from servicekit.logthrottle import ThrottledLog
from servicekit.tasks import cancel_tasks

log = logging.getLogger("queuepilot.http")

# what the server refused or dropped (the values of a ``reason`` label)
MALFORMED = "malformed"  # the request head did not parse (400 / 431)
HEADER_TIMEOUT = "header_timeout"
BODY_TIMEOUT = "body_timeout"
TOO_LARGE = "too_large"
AT_CAPACITY = "at_capacity"  # accepting paused at the connection cap
ACCEPT_ERROR = "accept_error"  # accept() failed: descriptors or memory exhausted
TLS_HANDSHAKE = "tls_handshake"
HANDLER_ERROR = "handler_error"  # an exception in a handler (answered 500)
IDLE_CLOSED = "idle_closed"  # an idle connection closed at the connection cap to make room
BUSY = "busy"  # no request slot (max_in_flight) freed in time: answered 503
REJECT_KINDS: tuple[str, ...] = (MALFORMED, HEADER_TIMEOUT, BODY_TIMEOUT, TOO_LARGE, AT_CAPACITY, ACCEPT_ERROR,
                                 TLS_HANDSHAKE, HANDLER_ERROR, IDLE_CLOSED, BUSY)

# a failed TLS handshake is most often a TCP probe or a client without the CA: worth a line, not a warning
_LEVELS = {HANDLER_ERROR: logging.ERROR, TLS_HANDSHAKE: logging.INFO, IDLE_CLOSED: logging.INFO}
_RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_ACCEPT_PAUSE_MIN, _ACCEPT_PAUSE_MAX = 0.05, 2.0


@dataclass(frozen=True)
class Limits:
    """Per-server limits; the defaults suit a metrics or webhook endpoint."""

    max_connections: int = 128
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    keepalive_timeout: float = 75.0  # longer than a 60 s scrape interval, so Prometheus keeps its connection
    max_body_bytes: int = 1024 * 1024
    max_line_size: int = 8190
    max_field_size: int = 8190
    backlog: int = 128
    shutdown_timeout: float = 5.0
    log_interval: float = 60.0
    # after an early answer (413, 408) the unread rest of a body is read and dropped this long, so
    # the client sees the answer instead of a reset; then the connection is closed
    lingering_time: float = 1.0
    # requests read and handled at once (None: no limit besides max_connections)
    max_in_flight: int | None = None
    keepalive_body_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        for name in ("max_connections", "header_timeout", "body_timeout", "keepalive_timeout", "max_body_bytes",
                     "max_line_size", "max_field_size", "backlog"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)!r}")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            raise ValueError(f"max_in_flight must be at least 1 or None, got {self.max_in_flight!r}")


OnReject = Callable[[str], None]


class _OneLineLogger:
    """Stands in for aiohttp's ``aiohttp.server`` logger inside the request handler: a malformed
    request becomes one throttled line, a handler exception one throttled traceback."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server

    def debug(self, msg: str, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        if isinstance(exc_info, HttpProcessingError):  # aiohttp logs non-HTTP traffic at debug level
            self.exception(msg, *args, exc_info=exc_info)
        elif log.isEnabledFor(logging.DEBUG):
            log.debug("%s: " + msg, self._server.name, *args)

    def exception(self, msg: str, *args: Any, exc_info: Any = None, **kw: Any) -> None:
        exc = exc_info if isinstance(exc_info, BaseException) else None
        remote = args[0] if args else "?"
        if isinstance(exc, HttpProcessingError):
            self._server._event(MALFORMED, "malformed HTTP request from %s: %s", remote,
                                _one_line(exc.message or str(exc)))
        else:
            try:
                text = msg % args if args else msg
            except (TypeError, ValueError):
                text = msg
            self._server._event(HANDLER_ERROR, "%s (%s: %s)", text,
                                type(exc).__name__ if exc else "error", _one_line(str(exc)) if exc else "",
                                exc_info=exc)

    # anything else aiohttp might call is plain, throttled logging
    def warning(self, msg: str, *args: Any, **kw: Any) -> None:
        self._server._throttle.log("warning:" + msg, logging.WARNING, "%s: " + msg, self._server.name, *args)

    error = warning


def _one_line(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Connection(asyncio.Protocol):
    """One accepted connection: aiohttp's request handler plus the header timer and the slot it
    holds under the connection cap."""

    def __init__(self, server: HttpServer) -> None:
        self._server = server
        self._inner: Any = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_flight = 0
        self.idle_since = 0.0  # loop time since when no request is in flight (connect or last answer)

    @property
    def idle(self) -> bool:
        return self._in_flight == 0

    # -- header timer
    def _arm(self) -> None:
        if self._timer is None and self._transport is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self._server.limits.header_timeout, self._header_timeout)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _header_timeout(self) -> None:
        self._timer = None
        t = self._transport
        if t is None or t.is_closing() or self._in_flight:
            return
        peer = t.get_extra_info("peername")
        self._server._event(HEADER_TIMEOUT, "dropped a connection from %s: no complete request head within %gs",
                            peer[0] if isinstance(peer, tuple) else peer, self._server.limits.header_timeout)
        with contextlib.suppress(Exception):
            t.write(b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
        t.close()

    def request_started(self) -> None:
        self._in_flight += 1
        self._disarm()

    def request_finished(self) -> None:
        self._in_flight -= 1
        if not self._in_flight:
            self.idle_since = asyncio.get_running_loop().time()

    # -- asyncio.Protocol, forwarded to aiohttp's handler
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self.idle_since = asyncio.get_running_loop().time()
        self._server._open[transport] = self
        self._inner = self._server._runner.server()  # type: ignore[union-attr]
        self._arm()
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if not self._in_flight:
            self._arm()  # the first byte of a request starts its clock (a no-op while armed)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._transport is not None:
            self._server._open.pop(self._transport, None)
        try:
            if self._inner is not None:
                self._inner.connection_lost(exc)
        finally:
            self._server._release()


class HttpServer:
    """A running server: ``host`` / ``port`` (bound), ``url``, ``active_connections``,
    ``rejected`` (a Counter by kind); ``close()`` stops accepting and closes every connection."""

    def __init__(self, app: web.Application, address: ListenAddress, limits: Limits,
                 ssl_context: ssl.SSLContext | None, name: str, on_reject: OnReject | None) -> None:
        self.app = app
        self.address = address
        self.limits = limits
        self.ssl_context = ssl_context
        self.name = name
        self.on_reject = on_reject
        self.rejected: Counter[str] = Counter()
        self.host = address.host
        self.port = 0
        self._throttle = ThrottledLog(log, limits.log_interval)
        self._runner: web.AppRunner | None = None
        self._sock: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._handshakes: set[asyncio.Task[None]] = set()
        self._open: dict[asyncio.Transport, _Connection] = {}
        self._slots = 0
        self._room = asyncio.Event()
        self._requests = asyncio.Semaphore(limits.max_in_flight) if limits.max_in_flight else None

    @property
    def url(self) -> str:
        """Base URL a local client can use (a wildcard host is reported as loopback)."""
        return self.address.url("https" if self.ssl_context else "http", self.port)

    @property
    def active_connections(self) -> int:
        return self._slots

    # -- events
    def _event(self, kind: str, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        self.rejected[kind] += 1
        if self.on_reject is not None:
            try:
                self.on_reject(kind)
            except Exception:  # a broken metric must not break serving
                self._throttle.log("on_reject", logging.WARNING, "%s: on_reject callback failed", self.name)
        self._throttle.log(kind, _LEVELS.get(kind, logging.WARNING), "%s: " + msg, self.name, *args,
                           exc_info=exc_info)

    # -- lifecycle
    async def start(self) -> None:
        self.app.middlewares.insert(0, self._middleware())
        self._runner = web.AppRunner(
            self.app, handle_signals=False, access_log=None, shutdown_timeout=self.limits.shutdown_timeout,
            keepalive_timeout=self.limits.keepalive_timeout, max_line_size=self.limits.max_line_size,
            max_field_size=self.limits.max_field_size, lingering_time=self.limits.lingering_time,
            logger=_OneLineLogger(self),
        )
        await self._runner.setup()
        try:
            family = socket.AF_INET6 if ":" in self.address.host else socket.AF_INET
            self._sock = socket.create_server((self.address.host, self.address.port), family=family,
                                              backlog=self.limits.backlog)
            self._sock.setblocking(False)
            self.port = self._sock.getsockname()[1]
        except BaseException:
            await self._runner.cleanup()
            self._runner = None
            raise
        self._accept_task = asyncio.create_task(self._accept_loop(), name=f"{self.name}-accept")

    async def close(self) -> None:
        if self._accept_task is not None:
            await cancel_tasks([self._accept_task])
            self._accept_task = None
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        await cancel_tasks(list(self._handshakes))
        if self._runner is not None:
            await self._runner.cleanup()  # closes idle connections, waits for running handlers
            self._runner = None
        for transport in list(self._open):
            transport.abort()

    async def __aenter__(self) -> HttpServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- accepting
    def _release(self) -> None:
        self._slots = max(0, self._slots - 1)
        self._room.set()

    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        sock = self._sock
        assert sock is not None
        pause = _ACCEPT_PAUSE_MIN
        while True:
            if self._slots >= self.limits.max_connections:
                self._room.clear()
                if await self._room_or_client(sock) and self._slots >= self.limits.max_connections:
                    # a client waits in the backlog: make room by closing an idle connection, else wait
                    if not self._close_idlest():
                        self._event(AT_CAPACITY, "%d connections open (the cap), each with a request in flight: "
                                    "not accepting until one closes", self._slots)
                    with contextlib.suppress(TimeoutError):  # (and look again for an idle one each second)
                        async with asyncio.timeout(1.0):
                            await self._room.wait()
                continue
            try:
                conn, _ = await loop.sock_accept(sock)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as e:
                if e.errno in _RESOURCE_ERRNOS:  # e.g. EMFILE: wait for descriptors, do not spin
                    self._event(ACCEPT_ERROR, "accept() failed: %s; pausing accepts for %.2fs (%d connections open)",
                                e.strerror or e, pause, self._slots)
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _ACCEPT_PAUSE_MAX)
                    continue
                if self._sock is None or e.errno == errno.EBADF:
                    return
                self._event(ACCEPT_ERROR, "accept() failed: %s", e)
                await asyncio.sleep(pause)
                continue
            pause = _ACCEPT_PAUSE_MIN
            self._slots += 1
            conn.setblocking(False)
            task = asyncio.create_task(self._connect(conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _room_or_client(self, sock: socket.socket) -> bool:
        """Wait until a slot frees or a client is waiting to be accepted; True for the latter."""
        loop = asyncio.get_running_loop()
        client: asyncio.Future[bool] = loop.create_future()

        def readable() -> None:
            if not client.done():
                client.set_result(True)

        room = asyncio.ensure_future(self._room.wait())
        loop.add_reader(sock.fileno(), readable)
        try:
            await asyncio.wait({client, room}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            loop.remove_reader(sock.fileno())
            room.cancel()
            if not client.done():
                client.cancel()
        return client.done() and not client.cancelled()

    def _close_idlest(self) -> bool:
        """At the cap: close the connection idle longest (no request in flight), so the next client gets
        its slot; False when every open connection has a request in flight."""
        idle = [(c.idle_since, t) for t, c in self._open.items() if c.idle and not t.is_closing()]
        if not idle:
            return False
        _, transport = min(idle, key=lambda pair: pair[0])
        peer = transport.get_extra_info("peername")
        self._event(IDLE_CLOSED, "%d connections open (the cap): closed the one idle longest (from %s) to make room",
                    self._slots, peer[0] if isinstance(peer, tuple) else peer)
        transport.abort()  # at once: no request is in flight, and a TLS shutdown could take its peer's time
        return True

    async def _connect(self, conn: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        made: list[_Connection] = []

        def factory() -> _Connection:
            c = _Connection(self)
            made.append(c)
            return c

        try:
            if self.ssl_context is not None:
                await loop.connect_accepted_socket(factory, conn, ssl=self.ssl_context,
                                                   ssl_handshake_timeout=self.limits.header_timeout)
            else:
                await loop.connect_accepted_socket(factory, conn)
        except asyncio.CancelledError:
            conn.close()
            if not (made and made[0]._transport is not None):
                self._release()
            raise
        except Exception as e:  # TLS handshake failed or timed out, peer gone: nothing was served
            conn.close()
            if not (made and made[0]._transport is not None):
                self._release()
            kind = TLS_HANDSHAKE if self.ssl_context is not None else ACCEPT_ERROR
            self._event(kind, "connection setup failed: %s", _one_line(f"{type(e).__name__}: {e}"))

    def _middleware(self) -> Callable[..., Awaitable[web.StreamResponse]]:
        limits = self.limits

        @web.middleware
        async def guard(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                        ) -> web.StreamResponse:
            conn = self._open.get(request.transport) if request.transport is not None else None  # type: ignore[arg-type]
            if conn is not None:
                conn.request_started()
            slot = False
            try:
                length = request.content_length
                if length is not None and length > limits.max_body_bytes:
                    self._event(TOO_LARGE, "refused a %d-byte body from %s (limit %d)", length, request.remote,
                                limits.max_body_bytes)
                    resp = web.Response(status=413, text=f"request body over {limits.max_body_bytes} bytes\n")
                    resp.force_close()
                    return resp
                if self._requests is not None:
                    try:
                        async with asyncio.timeout(limits.body_timeout):
                            await self._requests.acquire()
                    except TimeoutError:
                        self._event(BUSY, "answered 503 to %s: %d requests in flight (the cap) for %gs",
                                    request.remote, limits.max_in_flight, limits.body_timeout)
                        resp = web.Response(status=503, text="busy: too many requests in flight\n",
                                            headers={"Retry-After": "1"})
                        resp.force_close()
                        return resp
                    slot = True
                big = False
                if request.body_exists:
                    try:
                        async with asyncio.timeout(limits.body_timeout):
                            body = await request.read()  # kept by aiohttp for the handler's own read()
                        big = len(body) > limits.keepalive_body_bytes
                        del body
                    except TimeoutError:
                        self._event(BODY_TIMEOUT, "dropped a request from %s: body not received within %gs",
                                    request.remote, limits.body_timeout)
                        resp = web.Response(status=408, text="request body not received in time\n")
                        resp.force_close()
                        return resp
                    except web.HTTPRequestEntityTooLarge as e:
                        self._event(TOO_LARGE, "refused a body from %s: %s", request.remote, _one_line(e.text or ""))
                        e.force_close()
                        raise
                resp = await handler(request)
                if big and not resp.prepared:
                    resp.force_close()
                return resp
            finally:
                if slot and self._requests is not None:
                    self._requests.release()
                if conn is not None:
                    conn.request_finished()

        return guard


async def start_server(
    app: web.Application,
    listen: str | ListenAddress | tuple[str, int],
    *,
    limits: Limits = Limits(),
    ssl_context: ssl.SSLContext | None = None,
    name: str = "http",
    on_reject: OnReject | None = None,
) -> HttpServer:
    """Serve ``app`` on ``listen`` (``HOST:PORT``; port 0 binds a free port) until ``close()``.

    ValueError for a bad address; OSError when it cannot be bound.  The app must not be running
    elsewhere (a guard middleware is added to it).
    """
    address = parse_listen(listen) if isinstance(listen, str) else ListenAddress(*listen)
    server = HttpServer(app, address, limits, ssl_context, name, on_reject)
    await server.start()
    return server
