"""The collection loop: source -> pod attribution -> health -> publish, on its own interval.

One cycle (:meth:`Agent.collect_once`):

1. ``source.collect(now)``.  A ``SourceError`` (or any unexpected exception, kind ``internal``)
   is counted and logged once; the last good sample is re-served with ``stale=True`` (its XID
   events cleared so they are not counted twice).  Per-GPU errors the source reports in
   ``FleetSample.errors`` are counted too.
2. Pod attribution through the kubelet PodResources API when a socket is configured; when it
   fails (``socket_absent``, ``rpc_error``) it is counted under source ``pod_resources`` and the
   source's own pod labels stay.
3. Health per GPU (``exporter.health.classify``), history carried between cycles by UUID.
4. XID totals per (GPU, xid), then an immutable ``ExporterState`` is published to the collector.
   A (GPU, xid) series appears at 0 and stays at 0 for ``xid_zero_hold`` seconds (default 60 s, at
   least two scrapes at the usual 15-30 s) before its count shows: Prometheus' ``increase()`` and
   ``rate()`` need a sample before the first XID to see it, and seeding a zero series for every
   possible XID of every GPU would cost hundreds of series per node.  Only the counter waits: health
   uses the events at once.

Nothing here raises out of the loop: the exporter keeps serving its last state.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from exporter.attribution import attribute
from exporter.collector import ExporterCollector, ExporterState
from exporter.health import EMPTY_HISTORY, GpuHistory, HealthConfig, classify
from exporter.podresources.client import PodResourcesClient, PodResourcesUnavailable
from exporter.sample import FleetSample
from exporter.sources.base import GpuSource, SourceError

log = logging.getLogger(__name__)

POD_RESOURCES = "pod_resources"
BASE_SOURCE_KINDS: tuple[str, ...] = ("internal", "gpu_lost")
POD_RESOURCES_KINDS: tuple[str, ...] = ("socket_absent", "rpc_error")


@dataclass(frozen=True, slots=True)
class LastError:
    source: str
    kind: str
    message: str
    at: float


class Agent:
    """Runs collection cycles and publishes each result to ``collector``."""

    def __init__(
        self,
        source: GpuSource,
        collector: ExporterCollector,
        *,
        hostname: str,
        interval: float = 10.0,
        pod_resources: PodResourcesClient | None = None,
        health: HealthConfig = HealthConfig(),
        stale_after_intervals: float = 3.0,
        clock: Callable[[], float] = time.time,
        xid_zero_hold: float = 60.0,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be > 0")
        self.source = source
        self.collector = collector
        self.hostname = hostname
        self.interval = interval
        self.pod_resources = pod_resources
        self.health = health
        self.stale_after_intervals = stale_after_intervals
        self.clock = clock
        self.started_at = clock()
        self.cycles = 0
        self.last_success: float | None = None
        self.last_error: LastError | None = None
        self.pod_resources_up = False
        self._last_good: FleetSample | None = None
        self._history: dict[str, GpuHistory] = {}
        self._xids: dict[tuple[str, int], int] = {}
        self.xid_zero_hold = xid_zero_hold
        self._xid_shown_from: dict[tuple[str, int], float] = {}  # (uuid, xid) -> when its count may show
        self._verdicts: dict[str, str] = {}  # uuid -> last health reason logged
        kinds = (*BASE_SOURCE_KINDS, *getattr(source, "ERROR_KINDS", ()))
        self._errors: dict[tuple[str, str], int] = {(source.name, k): 0 for k in kinds}
        if pod_resources is not None:
            self._errors.update({(POD_RESOURCES, k): 0 for k in POD_RESOURCES_KINDS})
        self._failing: set[tuple[str, str]] = set()

    # --- errors ------------------------------------------------------------------------------------
    def _count(self, source: str, kind: str, message: str, now: float, n: int = 1) -> None:
        self._errors[(source, kind)] = self._errors.get((source, kind), 0) + n
        self.last_error = LastError(source, kind, message, now)
        if (source, kind) not in self._failing:  # log once per episode, with context
            self._failing.add((source, kind))
            log.warning("%s error (%s): %s", source, kind, message)

    def _recovered(self, source: str, still_failing: frozenset[str] = frozenset()) -> None:
        done = {k for k in self._failing if k[0] == source and k[1] not in still_failing}
        if done:
            self._failing -= done
            log.info("%s recovered (was failing: %s)", source, ", ".join(sorted(k for _, k in done)))

    # --- one cycle -----------------------------------------------------------------------------------
    async def collect_once(self) -> ExporterState:
        now = self.clock()
        t0 = time.perf_counter()
        name = self.source.name
        sample: FleetSample | None
        try:
            sample = await self.source.collect(now)
        except SourceError as e:
            self._count(name, e.kind, str(e), now)
            sample = None
        except Exception as e:  # a bug or an unexpected library error must not stop the exporter
            log.exception("%s collection failed unexpectedly", name)
            self._count(name, "internal", f"{type(e).__name__}: {e}", now)
            sample = None
        if sample is None:
            last = self._last_good
            sample = None if last is None else replace(
                last, stale=True, gpus=tuple(replace(g, xid_events=()) for g in last.gpus)
            )
        else:
            self._last_good = sample
            self.last_success = now
            for kind, n in sample.errors.items():
                if n:
                    self._count(name, kind, f"{n} {kind} error(s) in one collection", now, n)
            self._recovered(name, frozenset(k for k, n in sample.errors.items() if n))
            for g in sample.gpus:
                for xid, _at in g.xid_events:
                    key = (g.uuid, xid)
                    if key not in self._xids:
                        self._xid_shown_from[key] = now + self.xid_zero_hold
                    self._xids[key] = self._xids.get(key, 0) + 1

        if sample is not None and self.pod_resources is not None:
            try:
                allocations = await self.pod_resources.list_allocations()
            except PodResourcesUnavailable as e:
                self.pod_resources_up = False
                self._count(POD_RESOURCES, e.kind, str(e), now)
            else:
                self.pod_resources_up = True
                self._recovered(POD_RESOURCES)
                sample = attribute(sample, allocations)

        if sample is not None:
            gpus = []
            history: dict[str, GpuHistory] = {}
            for g in sample.gpus:
                verdict, history[g.uuid] = classify(g, self._history.get(g.uuid, EMPTY_HISTORY), now, self.health)
                self._log_verdict(g.uuid, g.index, verdict.reason, verdict.message)
                gpus.append(replace(g, health=verdict))
            self._history = history
            sample = replace(sample, gpus=tuple(gpus), collect_seconds=time.perf_counter() - t0)

        self.cycles += 1
        state = ExporterState(
            hostname=self.hostname,
            source=name,
            sample=sample,
            errors_total=MappingProxyType(dict(self._errors)),
            last_success=self.last_success,
            pod_resources_up=self.pod_resources_up,
            xid_totals=MappingProxyType(self._xid_totals(now)),
        )
        self.collector.publish(state)
        return state

    def _xid_totals(self, now: float) -> dict[tuple[str, int], int]:
        """Counts to publish: a new (GPU, xid) series reads 0 until its hold has passed."""
        shown = self._xid_shown_from
        for key in [k for k, at in shown.items() if now >= at]:
            del shown[key]
        return {key: (0 if key in shown else n) for key, n in self._xids.items()}

    def _log_verdict(self, uuid: str, index: int, reason: str, message: str) -> None:
        """One log line when a GPU's health reason changes (with the reason's message)."""
        before = self._verdicts.get(uuid, "")
        if reason == before:
            return
        self._verdicts[uuid] = reason
        if reason:
            log.warning("GPU %d (%s) unhealthy: %s: %s", index, uuid, reason, message)
        else:
            log.info("GPU %d (%s) healthy again (was %s)", index, uuid, before)

    async def run(self, *, initial_delay: float | None = None) -> None:
        """Collect every ``interval`` seconds until cancelled (the first after ``initial_delay``)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time() + (self.interval if initial_delay is None else initial_delay)
        while True:
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            try:
                await self.collect_once()
            except Exception:  # defensive: collect_once already catches source errors
                log.exception("collection cycle failed")
            next_at += self.interval
            if next_at < loop.time():  # fell behind (a slow source): don't burst to catch up
                next_at = loop.time() + self.interval

    # --- /healthz ------------------------------------------------------------------------------------
    def status(self, now: float | None = None) -> tuple[bool, dict[str, Any]]:
        """(healthy, body): degraded when no collection succeeded within ``stale_after_intervals``."""
        now = self.clock() if now is None else now
        limit = self.stale_after_intervals * self.interval
        reasons: list[str] = []
        if self.last_success is None:
            reasons.append(f"no successful {self.source.name} collection since start ({now - self.started_at:.0f}s ago)")
        elif now - self.last_success > limit:
            reasons.append(
                f"no successful {self.source.name} collection for {now - self.last_success:.0f}s "
                f"(more than {self.stale_after_intervals:g} intervals of {self.interval:g}s)"
            )
        if reasons and self.last_error is not None:
            reasons.append(f"last error: {self.last_error.source} {self.last_error.kind}: {self.last_error.message}")
        state = self.collector.state
        sample = state.sample if state else None
        body: dict[str, Any] = {
            "status": "degraded" if reasons else "ok",
            "reasons": reasons,
            "source": self.source.name,
            "hostname": self.hostname,
            "interval_seconds": self.interval,
            "last_success": self.last_success,
            "sample_stale": bool(sample and sample.stale),
            "gpus": len(sample.gpus) if sample else 0,
            "unhealthy_gpus": {
                g.uuid: g.health.reason for g in (sample.gpus if sample else ()) if not g.health.healthy
            },
            "unhealthy_gpu_messages": {
                g.uuid: g.health.message for g in (sample.gpus if sample else ()) if not g.health.healthy
            },
            "pod_resources_up": self.pod_resources_up if self.pod_resources is not None else None,
            "last_error": None
            if self.last_error is None
            else {"source": self.last_error.source, "kind": self.last_error.kind, "message": self.last_error.message},
        }
        return not reasons, body
