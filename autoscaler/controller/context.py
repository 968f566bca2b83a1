"""The seam between the controller loop (cluster view, signals, snapshot) and the deciders.

The controller builds one ``ClusterSnapshot`` per pass -- periodically (resync) and soon after
any watch event (event-driven) -- and, while it is the leader, hands it to every ``Reconciler``
from ``autoscaler.controller.reconcilers.build_reconcilers``.  A reconciler runs the pure policy and then
its actuator (the one write), and publishes what the metrics collector should show in
``ControllerContext.published``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes_asyncio.client import ApiClient
from prometheus_client import CollectorRegistry

from autoscaler.act.events import EventSink
from autoscaler.act.kube_writer import KubeWriter
from autoscaler.act.writer import Writer
from autoscaler.controller.counters import ControllerCounters
from autoscaler.core.snapshot import ClusterSnapshot

# (namespace, raycluster, group)
GroupKey = tuple[str, str, str]


@dataclass
class Published:
    """Values the deciders publish for the metrics collector (rendered per scrape)."""

    desired_replicas: dict[GroupKey, int] = field(default_factory=dict)
    idle_gpus: dict[GroupKey, int] = field(default_factory=dict)
    reserved_gpus: dict[str, int] = field(default_factory=dict)  # flavor -> GPUs promised by the ledger
    last_decisions: list[str] = field(default_factory=list)  # newest last, human-readable, bounded
    recommendations: list = field(default_factory=list)  # autoscaler.core.rightsizing.GroupRecommendation


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
                                field_manager=ctx.field_manager, dry_run=ctx.dry_run or ctx.api_client is None)
    return ctx.writer
