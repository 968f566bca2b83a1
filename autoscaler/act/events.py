"""Kubernetes Events for every decision that changes something (and for malformed annotations).

``EventSink.post`` never blocks and never raises: events go to a bounded queue that a background
task (started on demand, ending when the queue is empty) sends with ``CoreV1Api.create_namespaced_event`` (core v1 ``events`` create).  A full queue
drops the event (counted as ``write_errors{resource="events", kind="dropped"}``); a failed send is
counted and logged once per kind.  Messages are cut to 1024 characters.  Events are sent in dry-run
too: they change nothing in admission or scaling, and they are how a shadow run explains itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes_asyncio.client import CoreV1Api

from autoscaler.act.outcome import error_kind, rfc3339

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE = 1024


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The ``involvedObject`` of an Event."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""


@dataclass(frozen=True, slots=True)
class PendingEvent:
    ref: ObjectRef
    type: EventType
    reason: str
    message: str
    at: float


def event_body(ev: PendingEvent, component: str, instance: str) -> dict[str, Any]:
    """A core v1 Event (generateName, so repeated reasons never collide)."""
    ts = rfc3339(ev.at)
    involved = {"apiVersion": ev.ref.api_version, "kind": ev.ref.kind, "namespace": ev.ref.namespace,
                "name": ev.ref.name}
    if ev.ref.uid:
        involved["uid"] = ev.ref.uid
    if ev.ref.resource_version:
        involved["resourceVersion"] = ev.ref.resource_version
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{ev.ref.name}.", "namespace": ev.ref.namespace},
        "involvedObject": involved,
        "reason": ev.reason,
        "message": ev.message[:MAX_MESSAGE],
        "type": ev.type,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": ts,
        "lastTimestamp": ts,
        "count": 1,
    }


class EventSink:
    """Queue + background sender; ``post`` is safe to call from any reconcile."""

    def __init__(
        self,
        api_client: Any,
        counters: Any = None,
        *,
        component: str = "queuepilot",
        instance: str = "queuepilot-controller",
        maxsize: int = 1000,
    ) -> None:
        self._api = api_client
        self._counters = counters
        self._component = component
        self._instance = instance
        self._queue: asyncio.Queue[PendingEvent] = asyncio.Queue(maxsize=maxsize)
        self._task: asyncio.Task[None] | None = None
        self._logged: set[str] = set()
        self.sent = 0

    def post(self, ref: ObjectRef, type_: EventType, reason: str, message: str, now: float) -> None:
        if self._api is None:
            return
        try:
            self._queue.put_nowait(PendingEvent(ref, type_, reason, message, now))
        except asyncio.QueueFull:
            self._count_error("dropped")
            return
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="queuepilot-events")

    async def _run(self) -> None:
        """Send until the queue is empty, then end (``post`` starts a new sender when needed), so an
        idle sink leaves no task behind at shutdown."""
        core = CoreV1Api(self._api)
        while not self._queue.empty():
            ev = self._queue.get_nowait()
            try:
                await core.create_namespaced_event(ev.ref.namespace, event_body(ev, self._component, self._instance))
                self.sent += 1
                if self._counters is not None:
                    self._counters.writes.labels(resource="events", verb="create").inc()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # an Event must never break the loop
                kind = error_kind(exc)
                self._count_error(kind)
                if kind not in self._logged:
                    self._logged.add(kind)
                    log.warning("event %s on %s/%s not sent: %s", ev.reason, ev.ref.namespace, ev.ref.name, exc)
            finally:
                self._queue.task_done()

    def _count_error(self, kind: str) -> None:
        if self._counters is not None:
            self._counters.write_errors.labels(resource="events", kind=kind).inc()

    async def drain(self, limit_seconds: float = 5.0) -> None:
        """Wait until every queued event was sent (or failed); for tests and shutdown."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), limit_seconds)

    async def close(self) -> None:
        await self.drain(1.0)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
