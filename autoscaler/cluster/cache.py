"""List-then-watch caches: one per watched resource, holding parsed views, never raw objects.

The loop (kopf's shape, ``research-aesthetics.md`` 4): list (paginated) and remember the list's
resourceVersion; watch from it with bookmarks; on a clean end of the stream (server timeout) watch
again from the last resourceVersion seen; on ``410 Gone`` (an ERROR event in the stream or an HTTP
410) relist; on any other failure back off (jittered exponential, ``Retry-After`` honoured for 429)
and resume.  Every restart that is not a clean stream end is counted in
``queuepilot_watch_restarts_total{resource}``.  ``run()`` is the trivial infinite wrapper around
``step()`` with an ``iterations`` hook for tests.

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
from autoscaler.cluster.views import MalformedObject, object_key

log = logging.getLogger("queuepilot.watch")
T = TypeVar("T")
# parse(raw) -> view, or None when the object is not wanted (e.g. a terminal pod); raises MalformedObject
Parser = Callable[[Mapping[str, Any]], Any]
ABSENT_RETRY_SECONDS = 60.0


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

    # --------------------------------------------------------------------------- public state
    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def malformed(self) -> int:
        return len(self._bad)

    def observed_at(self, now: float) -> float | None:
        """When the cache was last known current: now while watching, else when the stream was lost."""
        if (self.connected and self.synced) or self.absent:
            return now
        return self._lost_at

    # ------------------------------------------------------------------------------- the loop
    async def run(self, iterations: int | None = None) -> None:
        """Forever (or ``iterations`` steps): kept trivial, all logic is in :meth:`step`."""
        i = 0
        while iterations is None or i < iterations:
            i += 1
            await self.step()

    async def step(self) -> None:
        """One list-if-needed + one watch stream, with error handling and backoff."""
        try:
            if self.resource_version is None:
                await self.relist()
            await self.watch_once()
            self._backoff.reset()
        except asyncio.CancelledError:
            raise
        except Gone:
            self._restart("gone")
            self.resource_version = None
        except KubeError as e:
            if e.status == 404 and self.resource_version is None:
                await self._absent(e)
                return
            self._restart(e.kind)
            if e.status == 410:
                self.resource_version = None
                return
            delay = self._backoff.next_delay(e.retry_after if e.status == 429 else None)
            log.warning("watch %s: %s; retrying in %.1fs", self.name, e, delay)
            await self._sleep(delay)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
            self._restart("connection")
            delay = self._backoff.next_delay()
            log.warning("watch %s: %s: %s; retrying in %.1fs", self.name, type(e).__name__, e, delay)
            await self._sleep(delay)

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
            self._backoff.reset()
            while True:
                line = await resp.content.readline()
                if not line:
                    # End of stream: watch again from the last resourceVersion.  Ending well before the
                    # timeout we asked for means the connection was cut: that is a restart.
                    if time.monotonic() - started < 0.5 * self._watch_timeout:
                        self._restart("dropped")
                    return
                line = line.strip()
                if line:
                    self._event(json.loads(line))
        finally:
            self.connected = False
            self._lost_at = self._clock()
            resp.release()

    # --------------------------------------------------------------------------------- events
    def _event(self, ev: Mapping[str, Any]) -> None:
        typ = ev.get("type")
        obj = ev.get("object")
        if not isinstance(obj, dict):
            raise ValueError(f"watch event without an object: {str(ev)[:200]}")
        if typ == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise Gone(obj.get("message", ""))
            raise KubeError(code or 500, str(obj.get("reason", "")), str(obj.get("message", "")))
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
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
        rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
        if key in self.items and self._rvs.get(key) == rv:
            return self.items[key]
        try:
            return self._parse(obj)
        except (MalformedObject, ValueError, TypeError, KeyError, AttributeError) as e:
            if self._bad.get(key) != rv:
                self._bad[key] = rv
                self._counters.source_error(f"watch/{self.name}", "malformed")
                log.warning("skipping malformed %s %s (resourceVersion %s): %s", self.spec.plural, key, rv, e)
            return None

    def _notify(self) -> None:
        if self._on_change is not None:
            with contextlib.suppress(Exception):
                self._on_change(self.name)
