"""List-then-watch caches: one per watched resource, holding parsed views, never raw objects.

The loop (the shape of kopf's and client-go's reflectors): list (paginated) and remember the list's
resourceVersion; watch from it with bookmarks; on a clean end of the stream (server timeout) watch
again from the last resourceVersion seen; on ``410 Gone`` (an ERROR event in the stream or an HTTP
410) relist after a delay that grows as client-go's reflector's does (:class:`RelistBackoff`: 0.8 s
doubling up to 30 s, jittered up to twice that, back to 0.8 s after two minutes without a 410), so
a server that answers 410 to every watch gets a relist every half minute, not hundreds a second; on
any other failure back off (jittered exponential, ``Retry-After`` honoured for 429) and resume.  Every restart that is not a clean stream end is counted in
``queuepilot_watch_restarts_total{resource}`` and, by cause, in
``queuepilot_source_errors_total{source="watch/<res>", kind}``.

Supervised: *any* exception in a step (a ``null`` or garbage line from a broken proxy, a cut-off
event, a bug) restarts the watch from the last resourceVersion after a backoff; nothing but
cancellation ends ``run()``.  A failure is logged once when it starts (a warning with its cause)
and once when the watch recovers, not on every retry.  A cache that makes no progress for
``stale_after`` seconds -- not watching, and no list page or event received -- reports it
through :meth:`WatchCache.stale_for` / :meth:`WatchCache.healthy`, which ``/healthz`` uses so
that a watch that cannot recover gets the process restarted.  The default (45 s) is above the
backoff cap (30 s: one long retry is not a failure) and well under the chart's liveness window
(3 probes x 20 s).

Objects are parsed into views once per resourceVersion (``autoscaler.cluster.views``).  A malformed one
is left out of the cache, counted once in ``queuepilot_source_errors_total{source="watch/<res>",
kind="malformed"}`` and logged once with its namespace/name and what is wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
from kubernetes_asyncio.client import ApiClient

from autoscaler.cluster.client import KubeError, request, request_json
from autoscaler.cluster.resources import ResourceSpec
from autoscaler.cluster.views import object_key
from servicekit.tasks import cancel_tasks

__all__ = ["Backoff", "Gone", "MalformedStream", "RelistBackoff", "WatchCache", "WatchReporter", "cancel_tasks"]

log = logging.getLogger("queuepilot.watch")
T = TypeVar("T")
# parse(raw) -> view, or None when the object is not wanted (e.g. a terminal pod); raises MalformedObject
Parser = Callable[[Mapping[str, Any]], Any]
ABSENT_RETRY_SECONDS = 60.0
STALE_AFTER_SECONDS = 45.0
# failure causes that are routine for a watch: counted as restarts, not as source errors
_ROUTINE = frozenset({"gone", "dropped"})
# failures of the data, not the transport: a new connection proves nothing until a good line arrives
_DATA_FAILURES = frozenset({"malformed_stream", "exception"})


class MalformedStream(Exception):
    """A watch line that is not a JSON event object (a proxy's error page, ``null``, a cut-off event)."""


class Gone(Exception):
    """The resourceVersion we watch from is too old: relist."""


class Backoff:
    """Jittered exponential backoff: base * 2^n, capped, each delay drawn from [delay/2, delay]."""

    def __init__(self, base: float = 0.5, cap: float = 30.0, rng: random.Random | None = None) -> None:
        self.base, self.cap, self.failures = base, cap, 0
        self._rng = rng or random.Random()

    def next_delay(self, retry_after: float | None = None) -> float:
        d = min(self.cap, self.base * (2 ** self.failures))
        self.failures += 1
        d = self._rng.uniform(d / 2, d)
        return max(d, retry_after or 0.0)

    def reset(self) -> None:
        self.failures = 0


class RelistBackoff:
    """The delay before a relist after 410 Gone, as client-go's reflector backs off its ListAndWatch
    (``wait.NewExponentialBackoffManager(800ms, 30s, 2m, 2.0, 1.0)``): ``initial`` doubling per relist
    up to ``cap``, each drawn from [d, (1 + jitter) d), back to ``initial`` when the last relist is more
    than ``reset_after`` seconds ago."""

    def __init__(self, initial: float = 0.8, cap: float = 30.0, reset_after: float = 120.0, factor: float = 2.0,
                 jitter: float = 1.0, rng: random.Random | None = None) -> None:
        self.initial, self.cap, self.reset_after, self.factor, self.jitter = initial, cap, reset_after, factor, jitter
        self._rng = rng or random.Random()
        self._delay = initial
        self._last: float | None = None

    def next_delay(self, now: float) -> float:
        if self._last is None or now - self._last > self.reset_after:
            self._delay = self.initial
        else:
            self._delay = min(self.cap, self._delay * self.factor)
        self._last = now
        return self._delay * (1.0 + self.jitter * self._rng.random())


class WatchReporter(Protocol):
    """Where a cache reports what it cannot fix itself (the controller counts it); the cluster layer
    knows nothing of the controller's metrics."""

    def watch_restarted(self, resource: str) -> None: ...

    def source_error(self, source: str, kind: str) -> None: ...


class WatchCache(Generic[T]):
    def __init__(
        self,
        api: ApiClient,
        spec: ResourceSpec,
        parse: Parser,
        counters: WatchReporter,
        on_change: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        page_size: int = 500,
        watch_timeout_seconds: int = 300,
        backoff: Backoff | None = None,
        sleep: Callable[[float], Any] = asyncio.sleep,
        stale_after: float = STALE_AFTER_SECONDS,
        relist_backoff: RelistBackoff | None = None,
    ) -> None:
        self.api = api
        self.spec = spec
        self._parse = parse
        self._counters = counters
        self._on_change = on_change
        self._clock = clock
        self._page_size = page_size
        self._watch_timeout = watch_timeout_seconds
        self._backoff = backoff or Backoff()
        self._relist_backoff = relist_backoff or RelistBackoff()
        self._sleep = sleep
        self.items: dict[str, T] = {}
        self._rvs: dict[str, str] = {}  # key -> resourceVersion of the cached view
        self._bad: dict[str, str] = {}  # key -> resourceVersion of a malformed object (logged once)
        self.resource_version: str | None = None
        self.synced = False
        self.connected = False
        self.last_event_at: float | None = None
        self._lost_at: float | None = None
        self.restarts = 0
        self.absent = False  # the API server does not serve this resource (404 on the list)
        self.synced_event = asyncio.Event()
        self.stale_after = stale_after
        self._progress_at = clock()  # last list page, watch connect or watch line
        self._failing: str | None = None  # the cause of the failure streak being retried (logged once)
        self._failures = 0

    # --------------------------------------------------------------------------- public state
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def malformed(self) -> int:
        return len(self._bad)

    def stale_for(self, now: float) -> float:
        """Seconds without progress: 0 while a watch stream is open (or the resource is not served),
        else since the last list page, good watch line, clean stream end or reconnect.  After bad data
        (a malformed line, an unexpected error) only a good line counts: a stream that connects and
        then fails the same way again never looks current."""
        if self.absent or (self.connected and self._failing not in _DATA_FAILURES):
            return 0.0
        return max(0.0, now - self._progress_at)

    def healthy(self, now: float) -> bool:
        """False once the cache has made no progress for ``stale_after`` seconds (``/healthz`` fails)."""
        return self.stale_for(now) <= self.stale_after

    def observed_at(self, now: float) -> float | None:
        """When the cache was last known current: now while watching, else when the stream was lost."""
        if (self.connected and self.synced) or self.absent:
            return now
        return self._lost_at

    # ------------------------------------------------------------------------------- the loop
    async def run(self, iterations: int | None = None) -> None:
        """Forever (or ``iterations`` steps); only cancellation ends it."""
        i = 0
        while iterations is None or i < iterations:
            i += 1
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # step handles every failure it knows; this is the last line of defence
                log.exception("watch %s: step failed; restarting", self.name)
                self.connected = False
                await self._guard(self._sleep(self._backoff.next_delay()))

    async def step(self) -> None:
        """One list-if-needed + one watch stream; any failure is counted, logged once and backed off."""
        try:
            if self.resource_version is None:
                await self.relist()
            await self.watch_once()
            self._backoff.reset()
        except asyncio.CancelledError:
            raise
        except Gone:
            self._restart("gone")
            await self._relist_later()
        except KubeError as e:
            if e.status == 404 and self.resource_version is None:
                await self._guard(self._absent(e))
                return
            self._restart(e.kind)
            if e.status == 410:
                await self._relist_later()
                return
            await self._retry(e.kind, str(e), e.retry_after if e.status == 429 else None)
        except MalformedStream as e:
            self._restart("malformed_stream")
            await self._retry("malformed_stream", str(e))
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            self._restart("connection")
            await self._retry("connection", f"{type(e).__name__}: {e}")
        except Exception as e:  # a shape or a bug nobody foresaw: never let it end the watch
            self._restart("exception")
            await self._retry("exception", f"{type(e).__name__}: {e}", exc=e)

    async def _relist_later(self) -> None:
        """410 Gone: the next step relists, after the reflector's backoff."""
        self.resource_version = None
        delay = self._relist_backoff.next_delay(self._clock())
        log.debug("watch %s: resourceVersion expired (410); relisting in %.1fs", self.name, delay)
        await self._guard(self._sleep(delay))

    async def _retry(self, kind: str, message: str, retry_after: float | None = None,
                     exc: BaseException | None = None) -> None:
        delay = self._backoff.next_delay(retry_after)
        self._failures += 1
        if self._failing != kind:  # once per failure streak and cause, not on every retry
            self._failing = kind
            log.warning("watch %s: %s; retrying with backoff (next in %.1fs)", self.name, message, delay,
                        exc_info=exc)
        else:
            log.debug("watch %s: %s; retrying in %.1fs", self.name, message, delay)
        await self._guard(self._sleep(delay))

    async def _guard(self, aw: Any) -> None:
        """Await a sleep-like step of the error path; an injected sleep that fails must not end the watch."""
        try:
            await aw
        except asyncio.CancelledError:
            raise
        except Exception:
            log.debug("watch %s: error-path wait failed", self.name, exc_info=True)

    def _progressed(self) -> None:
        """A list page, a good watch line or a clean stream end: the cache is current again."""
        self._progress_at = self._clock()
        if self._failing is not None:
            log.info("watch %s recovered after %d failed attempts", self.name, self._failures)
            self._failing, self._failures = None, 0

    async def _absent(self, e: KubeError) -> None:
        """The resource is not served (e.g. KubeRay's CRDs not installed): an empty, synced cache.

        Readiness must not wait for a CRD that may never come; the list is retried every
        ``ABSENT_RETRY_SECONDS`` and the cache fills once the CRD is installed.
        """
        if not self.absent:
            log.warning("%s (%s) is not served by the API server (%s); treating it as empty and retrying "
                        "every %ss", self.spec.plural, self.spec.list_path, e, ABSENT_RETRY_SECONDS)
            self.absent = True
            if self.items:
                self.items, self._rvs = {}, {}
                self._notify()
        if not self.synced:
            self.synced = True
            self.synced_event.set()
            self._notify()
        await self._sleep(ABSENT_RETRY_SECONDS)

    def _restart(self, kind: str) -> None:
        self.restarts += 1
        self._counters.watch_restarted(self.name)
        if kind not in _ROUTINE:
            self._counters.source_error(f"watch/{self.name}", kind)
        if self.connected or self._lost_at is None:
            self._lost_at = self._clock()
        self.connected = False

    # ----------------------------------------------------------------------------- list/watch
    def _selectors(self) -> list[tuple[str, Any]]:
        q: list[tuple[str, Any]] = []
        if self.spec.label_selector:
            q.append(("labelSelector", self.spec.label_selector))
        if self.spec.field_selector:
            q.append(("fieldSelector", self.spec.field_selector))
        return q

    async def relist(self) -> None:
        """A full paginated list; replaces the cache atomically and records the list's resourceVersion."""
        new_items: dict[str, T] = {}
        new_rvs: dict[str, str] = {}
        seen: set[str] = set()
        cont: str | None = None
        rv = ""
        while True:
            q = [*self._selectors(), ("limit", self._page_size)]
            if cont:
                q.append(("continue", cont))
            page = await request_json(self.api, "GET", self.spec.list_path, q, request_timeout=60.0)
            self._progressed()
            for obj in page.get("items") or []:
                if not isinstance(obj, dict):
                    continue
                key = object_key(obj)
                seen.add(key)
                view = self._view(key, obj)
                if view is not None:
                    new_items[key] = view
                    new_rvs[key] = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            meta = page.get("metadata") or {}
            rv = str(meta.get("resourceVersion", "")) or rv
            cont = meta.get("continue") or None
            if not cont:
                break
        changed = new_rvs != self._rvs
        self._bad = {k: v for k, v in self._bad.items() if k in seen and k not in new_items}
        self.items, self._rvs = new_items, new_rvs
        self.resource_version = rv
        if self.absent:
            log.info("%s is served now", self.spec.plural)
            self.absent = False
        self.last_event_at = self._clock()
        if not self.synced:
            self.synced = True
            self.synced_event.set()
            changed = True
        if changed:
            self._notify()

    async def watch_once(self) -> None:
        """One watch stream from ``resource_version`` until the server ends it."""
        q = [
            *self._selectors(),
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", self.resource_version or ""),
            ("timeoutSeconds", self._watch_timeout),
        ]
        timeout = aiohttp.ClientTimeout(total=None, connect=15, sock_connect=15, sock_read=self._watch_timeout + 30)
        resp = await request(self.api, "GET", self.spec.list_path, q, request_timeout=timeout)
        started = time.monotonic()
        try:
            self.connected = True
            if self._failing not in _DATA_FAILURES:
                self._progress_at = self._clock()
            self._backoff.reset()
            while True:
                line = await resp.content.readline()
                if not line:
                    # End of stream: watch again from the last resourceVersion.  Ending well before the
                    # timeout we asked for means the connection was cut: that is a restart.
                    if time.monotonic() - started < 0.5 * self._watch_timeout:
                        self._restart("dropped")
                    else:
                        self._progressed()
                    return
                line = line.strip()
                if line:
                    self._event(_decode_event(line))
                    self._progressed()
        finally:
            self.connected = False
            self._lost_at = self._clock()
            resp.release()

    # --------------------------------------------------------------------------------- events
    def _event(self, ev: Mapping[str, Any]) -> None:
        typ = ev.get("type")
        obj = ev.get("object")
        if not isinstance(obj, dict):
            raise MalformedStream(f"watch event without an object: {str(ev)[:200]}")
        if typ == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise Gone(obj.get("message", ""))
            raise KubeError(code or 500, str(obj.get("reason", "")), str(obj.get("message", "")))
        md = obj.get("metadata")
        rv = str(md.get("resourceVersion", "")) if isinstance(md, dict) else ""
        if typ == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        key = object_key(obj)
        changed = False
        if typ in ("ADDED", "MODIFIED"):
            if self._rvs.get(key) != rv or key not in self.items:
                view = self._view(key, obj)
                if view is None:
                    changed = self._remove(key)
                else:
                    self.items[key] = view
                    self._rvs[key] = rv
                    self._bad.pop(key, None)
                    changed = True
        elif typ == "DELETED":
            self._bad.pop(key, None)
            changed = self._remove(key)
        if rv:
            self.resource_version = rv
        self.last_event_at = self._clock()
        if changed:
            self._notify()

    def _remove(self, key: str) -> bool:
        self._rvs.pop(key, None)
        return self.items.pop(key, None) is not None

    def _view(self, key: str, obj: Mapping[str, Any]) -> Any:
        md = obj.get("metadata")
        rv = str(md.get("resourceVersion", "")) if isinstance(md, dict) else ""
        if key in self.items and self._rvs.get(key) == rv:
            return self.items[key]
        try:
            return self._parse(obj)
        except Exception as e:  # MalformedObject, or a shape no parser foresaw: skip this object only
            if self._bad.get(key) != rv:
                self._bad[key] = rv
                self._counters.source_error(f"watch/{self.name}", "malformed")
                log.warning("skipping malformed %s %s (resourceVersion %s): %s", self.spec.plural, key, rv, e)
            return None

    def _notify(self) -> None:
        if self._on_change is not None:
            with contextlib.suppress(Exception):
                self._on_change(self.name)


def _decode_event(line: bytes) -> Mapping[str, Any]:
    """One watch line -> the event object; anything else is a :class:`MalformedStream`."""
    try:
        ev = json.loads(line)
    except (ValueError, RecursionError) as e:
        raise MalformedStream(f"watch line is not JSON ({e}): {line[:200]!r}") from e
    if not isinstance(ev, dict):
        raise MalformedStream(f"watch line is not an event object: {line[:200]!r}")
    return ev
