"""The seam between the controller loop (cluster view, signals, snapshot) and the deciders.

The controller builds one ``ClusterSnapshot`` per pass -- periodically (resync) and soon after
any watch event (event-driven) -- and, while it is the leader, hands it to every ``Reconciler``
from ``autoscaler.controller.reconcilers.build_reconcilers``.  A reconciler runs the pure policy and then
its actuator (the one write), and publishes what the metrics collector should show in
``ControllerContext.published``.

The pure decisions of a large pass (``decide_admissions``, ``decide_scaling``, ``decide_stalls``)
run in a worker thread (:func:`offload`), so the event loop keeps serving ``/healthz``, the watches
and the Lease meanwhile.  That is safe because the snapshot is immutable and the reconcilers run
one after another, each awaiting its decision before it touches its own state again.  Small
snapshots (the simulator's, the demo's, the tests') are decided inline: a thread hop costs more than
their decision, and the results are the same either way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ParamSpec, Protocol, TypeVar

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from autoscaler.act.events import EventSink
from autoscaler.act.kube_writer import KubeWriter
from autoscaler.act.writer import Writer
from autoscaler.controller.counters import ControllerCounters
from autoscaler.core.snapshot import ClusterSnapshot

# (namespace, raycluster, group)
GroupKey = tuple[str, str, str]

P = ParamSpec("P")
T = TypeVar("T")

# A snapshot with at least this many Workloads + RayClusters + Nodes is decided in a worker thread, so
# that the event loop keeps answering probes and watches while it runs; smaller ones (the simulator's,
# the demo's) are decided on the loop, where the thread hop would cost more than the decision.
# Module-level so tests can move it.
OFFLOAD_MIN_OBJECTS = 5_000


def snapshot_size(snapshot: ClusterSnapshot) -> int:
    """What :func:`offload` compares with ``OFFLOAD_MIN_OBJECTS``."""
    return len(snapshot.workloads) + len(snapshot.ray_clusters) + len(snapshot.nodes)


async def offload(size: int, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``, in a worker thread when ``size >= OFFLOAD_MIN_OBJECTS``, else inline.

    ``fn`` must be pure over its arguments (it runs while the loop goes on): the same result either way.
    """
    if size >= OFFLOAD_MIN_OBJECTS:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)


MAX_DECISION_LINES = 50


@dataclass
class Published:
    """Values the deciders publish for the metrics collector (rendered per scrape)."""

    desired_replicas: dict[GroupKey, int] = field(default_factory=dict)
    idle_gpus: dict[GroupKey, int] = field(default_factory=dict)
    reserved_gpus: dict[str, int] = field(default_factory=dict)  # flavor -> GPUs promised by the ledger
    last_decisions: list[str] = field(default_factory=list)  # newest last, human-readable, bounded
    recommendations: list[Any] = field(default_factory=list)  # autoscaler.core.policy.rightsizing.GroupRecommendation

    def remember(self, line: str) -> None:
        """Append a human-readable decision line (the demo's view and logs; the newest
        ``MAX_DECISION_LINES`` are kept)."""
        self.last_decisions.append(line)
        del self.last_decisions[:-MAX_DECISION_LINES]


@dataclass
class ControllerContext:
    """What a reconciler gets at construction: the API client, the config and the shared registry."""

    api_client: ApiClient | None  # None in the simulator and the demo
    registry: CollectorRegistry
    counters: ControllerCounters
    dry_run: bool = False
    # Parsed configuration file (YAML) sections, e.g. {"admission": {...}, "scaling": {...}, "webhook": {...}}
    settings: dict[str, Any] = field(default_factory=dict)
    published: Published = field(default_factory=Published)
    controller_name: str = "queuepilot.io/gpu-capacity"
    field_manager: str = "queuepilot"
    # ask the controller for a pass soon (e.g. after a write); the argument names why
    request_pass: Callable[[str], None] | None = None
    # how decisions reach the world: None -> a KubeWriter over ``api_client`` (build_reconcilers);
    # the simulator and the demo pass their own
    writer: Writer | None = None
    # (namespace, name) of the ConfigMap that keeps the stall reconciler's owner memory (None: memory only)
    stall_owners: tuple[str, str] | None = None


class Reconciler(Protocol):
    name: str

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        """Decide on ``snapshot`` (pure policy) and act (the one write). Must never raise for bad data."""
        ...


class WritingReconciler:
    """What the reconcilers that write through ``self.writer`` share: its Event sender and closing it."""

    writer: Writer

    @property
    def events(self) -> EventSink | None:
        """The writer's Event sender (``KubeWriter.events``), for tests that wait for Events."""
        sink = getattr(self.writer, "events", None)
        return sink if isinstance(sink, EventSink) else None

    async def close(self) -> None:
        await self.writer.close()


def writer_for(ctx: ControllerContext) -> Writer:
    """``ctx.writer``, or a ``KubeWriter`` over ``ctx.api_client`` (stored back, so every reconciler
    of this context shares one writer and one Event sender)."""
    if ctx.writer is None:
        ctx.writer = KubeWriter(ctx.api_client, ctx.counters, controller_name=ctx.controller_name,
                                field_manager=ctx.field_manager, dry_run=ctx.dry_run or ctx.api_client is None,
                                stall_owners=ctx.stall_owners)
    return ctx.writer
