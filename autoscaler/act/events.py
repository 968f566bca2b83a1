"""Kubernetes Events for every decision that changes something (and for malformed annotations).

``EventSink.post`` never blocks and never raises: events go to a bounded queue that a background
task (started on demand, ending when the queue is empty) sends with
``CoreV1Api.create_namespaced_event`` (core v1 ``events`` create, the only verb needed).

The queue is fair between tenants: each namespace's Events wait in their own queue, and the sender
takes one Event of each namespace in turn, so one namespace with thousands of Events never delays
another's by more than one Event per namespace.  When the queue is full (``maxsize`` Events in all),
a namespace holding less than its fair share (``maxsize`` over the namespaces with Events queued)
takes the place of the oldest Event of the namespace holding the most; otherwise its Event is
dropped.  Every Event dropped either way is counted as ``write_errors{resource="events",
kind="dropped"}``.  A failed send goes through the write guard (counted, logged, and the object's
further Events are dropped while it is backed off).  Messages are cut to 1024 characters.

Each Event's name is derived from the object, the reason and the message (``event_name``), not
``generateName``: when a new leader decides again what the previous one already reported, its
create answers 409 AlreadyExists and the Event is skipped and counted as deduplicated
(``queuepilot_events_deduplicated_total``), not as an error.  The API server deletes Events after
its event TTL (1 h by default), so the same text on the same object is reported again after that.

Events are sent in dry-run too: they change nothing in admission or scaling, and they are how a
shadow run explains itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections import deque
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from autoscaler.act.guard import Failure, WriteCounters, WriteGuard, WriteKey
from autoscaler.act.outcome import rfc3339
from servicekit.tasks import cancel_tasks

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
MAX_MESSAGE = 1024
MAX_NAME = 253  # an Event's name is a DNS subdomain
RESOURCE = "events"


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


def event_namespace(ref: ObjectRef) -> str:
    """Where the Event lives: the object's namespace, ``default`` for a cluster-scoped object."""
    return ref.namespace or "default"


def event_name(ev: PendingEvent) -> str:
    """A name derived from what the Event says: (the object, its resourceVersion when given, type,
    reason, message).  Two leaders that post the same decision post the same name; the second
    create answers 409 AlreadyExists and is skipped."""
    ident = ev.ref.uid or f"{ev.ref.api_version}/{ev.ref.kind}/{ev.ref.namespace}/{ev.ref.name}"
    text = "\x00".join((ident, ev.ref.resource_version, ev.type, ev.reason, ev.message[:MAX_MESSAGE]))
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    return f"{ev.ref.name[:MAX_NAME - len(digest) - 1]}.{digest}"


def event_body(ev: PendingEvent, component: str, instance: str) -> dict[str, Any]:
    """A core v1 Event with a name derived from its content (``event_name``)."""
    ts = rfc3339(ev.at)
    involved = {"apiVersion": ev.ref.api_version, "kind": ev.ref.kind, "name": ev.ref.name}
    if ev.ref.namespace:
        involved["namespace"] = ev.ref.namespace
    if ev.ref.uid:
        involved["uid"] = ev.ref.uid
    if ev.ref.resource_version:
        involved["resourceVersion"] = ev.ref.resource_version
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(ev), "namespace": event_namespace(ev.ref)},
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
        api_client: ApiClient | None,
        counters: WriteCounters | None = None,
        *,
        component: str = "queuepilot",
        instance: str = "queuepilot-controller",
        maxsize: int = 1000,
        write_guard: WriteGuard | None = None,
    ) -> None:
        self._api = api_client
        self._counters = counters
        self._component = component
        self._instance = instance
        self._guard = write_guard or WriteGuard(counters)
        self._maxsize = maxsize
        self._queues: dict[str, deque[PendingEvent]] = {}  # namespace -> its Events, oldest first
        self._queued = 0
        self._unfinished = 0  # queued or being sent
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.deduplicated = 0
        self.dropped = 0

    @property
    def queued(self) -> dict[str, int]:
        """Events waiting, per namespace."""
        return {ns: len(q) for ns, q in self._queues.items()}

    def post(self, ref: ObjectRef, type_: EventType, reason: str, message: str, now: float) -> None:
        if self._api is None:
            return
        ns = event_namespace(ref)
        mine = len(self._queues.get(ns, ()))
        if self._queued >= self._maxsize and not self._make_room(ns, mine):
            self._dropped()
            return
        self._queues.setdefault(ns, deque()).append(PendingEvent(ref, type_, reason, message, now))
        self._queued += 1
        self._unfinished += 1
        self._idle.clear()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="queuepilot-events")

    def _make_room(self, ns: str, mine: int) -> bool:
        """The queue is full: drop the oldest Event of the namespace holding the most, if ``ns`` holds
        less than its fair share and less than that namespace."""
        tenants = len(self._queues) + (0 if ns in self._queues else 1)
        if mine >= self._maxsize // max(1, tenants):
            return False
        biggest = max(self._queues, key=lambda n: len(self._queues[n]))
        if len(self._queues[biggest]) <= mine + 1:
            return False
        self._queues[biggest].popleft()
        self._queued -= 1
        self._unfinished -= 1
        self._dropped()
        return True

    def _next(self) -> PendingEvent | None:
        """One Event of each namespace in turn (the namespace served goes to the back of the line)."""
        for ns in list(self._queues):
            q = self._queues.pop(ns)
            if not q:
                continue
            ev = q.popleft()
            if q:
                self._queues[ns] = q
            self._queued -= 1
            return ev
        return None

    async def _run(self) -> None:
        """Send until the queues are empty, then end (``post`` starts a new sender when needed), so an
        idle sink leaves no task behind at shutdown."""
        assert self._api is not None  # post queues nothing without a client
        core = CoreV1Api(self._api)
        while (ev := self._next()) is not None:
            try:
                await self._send(core, ev)
            except asyncio.CancelledError:
                raise
            except Exception:  # an Event must never break the loop
                log.exception("event %s on %s/%s not sent", ev.reason, ev.ref.namespace, ev.ref.name)
            finally:
                self._unfinished -= 1
                if not self._unfinished:
                    self._idle.set()

    async def _send(self, core: CoreV1Api, ev: PendingEvent) -> None:
        key = WriteKey(RESOURCE, ev.ref.api_version, ev.ref.kind, ev.ref.namespace, ev.ref.name, ev.ref.uid)
        if self._guard.blocked(key, ev.at) is not None:  # this object's Events keep failing: wait
            self._dropped()
            return
        res = await self._guard.call(
            # (the stubs type the body as CoreV1Event; the client serialises a dict as it is)
            key, partial(core.create_namespaced_event, event_namespace(ev.ref),
                         event_body(ev, self._component, self._instance)),  # type: ignore[arg-type]
            ev.at, expected=(409,))
        if isinstance(res, Failure):
            if res.status == 409:  # already posted (by us, or by the previous leader): not again
                self.deduplicated += 1
                self._guard.settled(key)
                if self._counters is not None:
                    self._counters.event_deduplicated()
            return
        self.sent += 1
        self._guard.succeeded(key, "create")

    def _dropped(self) -> None:
        self.dropped += 1
        if self._counters is not None:
            self._counters.write_failed(RESOURCE, "dropped")

    async def drain(self, limit_seconds: float = 5.0) -> None:
        """Wait until every queued event was sent (or failed); for tests and shutdown."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), limit_seconds)

    async def close(self) -> None:
        await self.drain(1.0)
        if self._task is not None:
            await cancel_tasks([self._task])
            self._task = None
