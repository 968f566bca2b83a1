"""MultiKueue dispatcher mode: nominate worker clusters where a Workload's pods fit on healthy GPUs.

Runs in the manager cluster (``queuepilot controller --multikueue-dispatcher``; Kueue's Configuration
names queuepilot's dispatcher in ``multiKueue.dispatcherName``).  Two parts:

- :class:`FleetSource` (self-contained: ``start`` / ``stop`` / ``views`` / ``targets``): the manager's
  MultiKueue objects and, per worker cluster, Nodes / Pods caches read through the kubeconfig
  Secret its MultiKueueCluster names (``autoscaler.cluster.remote.Fleet``), plus one GPU signal per
  worker — the shared Prometheus queried with ``{<cluster label>="<MultiKueueCluster name>"}``
  added to every GPU query.  ``views(manager_snapshot, now)`` builds one ``WorkerView`` per worker:
  its nodes (GPU requests from its pods, GPU health from its series) with the manager's
  ResourceFlavors resolved on them (the flavors a manager ClusterQueue assigns are the flavors the
  worker clusters define alike);
- :class:`DispatchReconciler`: per pass, releases each worker's ledger, runs the pure
  ``decide_dispatch`` and writes ``status.nominatedClusterNames`` through the ``Writer``
  (``nominate_clusters``), posts an Event per decision that changes something (Warning with the
  largest free blocks per cluster when nothing fits), counts ``queuepilot_dispatch_decisions_total``
  and publishes per-worker capacity for :class:`FleetCollector`.

A nomination that could not be written gives its promises back.  Dry-run writes nothing and reports
the would-be nomination (Event ``Normal``, decision line, counter ``mode=dry_run``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from autoscaler import metrics as m
from autoscaler.act.events import ObjectRef
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.writer import EventType, Writer
from autoscaler.cluster.cache import STALE_AFTER_SECONDS, WatchReporter
from autoscaler.cluster.remote import DEFAULT_KUEUE_NAMESPACE, Fleet
from autoscaler.cluster.source import ClusterObjects
from autoscaler.controller.context import ControllerContext, writer_for
from autoscaler.controller.snapshot_builder import BuildConfig, build_snapshot
from autoscaler.core.policy.dispatch import (
    NO_CLUSTER_FITS,
    NO_USABLE_CLUSTER,
    DispatchConfig,
    DispatchDecision,
    DispatchHistory,
    DispatchTarget,
    WorkerView,
    decide_dispatch,
    release_worker_ledger,
    worker_problem,
)
from autoscaler.core.policy.ledger import Ledger
from autoscaler.core.snapshot import ClusterSnapshot, WorkloadState
from autoscaler.signals.gpu import GpuReading, GpuSignalSource
from servicekit.tasks import cancel_tasks, every

log = logging.getLogger(__name__)

WORKER_GPU_STATES = ("healthy", "unhealthy", "allocated", "free", "promised")
GpuFactory = Callable[[str], GpuSignalSource]


def cluster_selector(base: str, label: str, cluster: str) -> str:
    """``{a="b"}`` + cluster -> ``{a="b",cluster="worker-1"}`` (PromQL matchers for one worker's series)."""
    inner = base.strip()
    if inner.startswith("{") and inner.endswith("}"):
        inner = inner[1:-1].strip()
    quoted = cluster.replace("\\", "\\\\").replace('"', '\\"')
    parts = [p for p in (inner.rstrip(","), f'{label}="{quoted}"') if p]
    return "{" + ",".join(parts) + "}"


class FleetSource:
    """The worker clusters, for the dispatcher: construct, ``await start()``, pass to the reconciler,
    ``await stop()`` on shutdown."""

    def __init__(
        self,
        api: Any,
        counters: WatchReporter,
        *,
        namespace: str = DEFAULT_KUEUE_NAMESPACE,
        gpu_factory: GpuFactory | None = None,
        on_change: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.time,
        refresh_seconds: float = 60.0,
        gpu_poll_seconds: float = 15.0,
        stale_after: float = STALE_AFTER_SECONDS,
        gpu_stale_seconds: float = 120.0,
        fleet: Fleet | None = None,
        settle_seconds: float = 30.0,
        allow_insecure_http: bool = False,
    ) -> None:
        self.fleet = fleet or Fleet(api, counters, namespace=namespace, on_change=on_change, clock=clock,
                                    stale_after=stale_after, allow_insecure_http=allow_insecure_http)
        self._gpu_factory = gpu_factory
        self._gpu: dict[str, GpuSignalSource] = {}
        self._clock = clock
        self._refresh_seconds = refresh_seconds
        self._gpu_poll_seconds = gpu_poll_seconds
        self._build = BuildConfig(gpu_stale_seconds=gpu_stale_seconds)
        self._tasks: list[asyncio.Task[None]] = []
        self._settle_seconds = settle_seconds
        self._started_at: float | None = None

    @property
    def running(self) -> bool:
        return self._started_at is not None

    async def start(self) -> None:
        self._started_at = self._clock()
        self.fleet.start()
        self._tasks = [asyncio.create_task(every(self._refresh_seconds, self.refresh, name="fleet refresh", logger=log),
                                           name="fleet-refresh"),
                       asyncio.create_task(every(self._gpu_poll_seconds, self.poll_gpu, name="fleet GPU poll",
                                                 logger=log), name="fleet-gpu")]

    async def stop(self) -> None:
        self._started_at = None  # the dispatcher decides nothing from here on
        await cancel_tasks(self._tasks)
        self._tasks = []
        for sig in self._gpu.values():
            with contextlib.suppress(Exception):
                await sig.close()
        self._gpu.clear()
        await self.fleet.stop()

    async def refresh(self) -> None:
        """Connect / reconnect / drop workers (``Fleet.refresh``) once the manager caches listed."""
        if not self.fleet.synced:
            return
        await self.fleet.refresh()
        for name in [n for n in self._gpu if n not in self.fleet.workers]:
            with contextlib.suppress(Exception):
                await self._gpu.pop(name).close()
        if self._gpu_factory is not None:
            for name in self.fleet.workers:
                if name not in self._gpu:
                    self._gpu[name] = self._gpu_factory(name)

    def settled(self, now: float) -> bool:
        """The manager caches listed and every MultiKueueCluster either has a worker whose caches listed
        once and, with a GPU health source, whose GPU health was read once, or a known failure — or
        ``settle_seconds`` passed since ``start``.  (A pass before a worker's first GPU reading would
        find it stale and nominate a workload to the others only, and a nomination that stays usable
        is kept.)"""
        if not self.fleet.synced or self._started_at is None:
            return False
        if now - self._started_at > self._settle_seconds:
            return True
        for name in self.fleet.clusters.items:
            w = self.fleet.workers.get(name)
            if name in self.fleet.errors:
                continue
            if w is None or not (w.nodes.synced and w.pods.synced):
                return False
            if self._gpu_factory is not None:
                sig = self._gpu.get(name)
                if sig is None or sig.reading.observed_at is None:
                    return False
        return True

    async def poll_gpu(self) -> None:
        now = self._clock()
        await asyncio.gather(*(sig.poll(now) for sig in self._gpu.values()), return_exceptions=True)

    def _gpu_reading(self, name: str, now: float) -> GpuReading:
        if self._gpu_factory is None:  # no GPU health source: node objects alone (documented trade-off)
            return GpuReading(observed_at=now)
        sig = self._gpu.get(name)
        return sig.reading if sig is not None else GpuReading()

    def views(self, manager: ClusterSnapshot, now: float,
              workloads: Mapping[str, WorkloadState] | None = None) -> dict[str, WorkerView]:
        """One ``WorkerView`` per MultiKueueCluster (unconnected ones: unreachable, no nodes).
        ``workloads``: the manager Workloads the ledgers may hold (default: all of them)."""
        out: dict[str, WorkerView] = {}
        wls = manager.workloads if workloads is None else workloads
        for name, mkc in self.fleet.clusters.items.items():
            w = self.fleet.workers.get(name)
            objects = ClusterObjects(
                workloads=wls, flavors=manager.flavors,
                nodes=dict(w.nodes.items) if w is not None else {}, pods=dict(w.pods.items) if w is not None else {},
            )
            snap = build_snapshot(objects, self._gpu_reading(name, now), {}, now, self._build)
            out[name] = WorkerView(
                name=name, active=mkc.active, reachable=w is not None and w.reachable(now),
                observed_at=w.observed_at(now) if w is not None else None, snapshot=snap,
            )
        return out

    def targets(self, manager: ClusterSnapshot) -> list[DispatchTarget]:
        """Manager Workloads whose ClusterQueue has a MultiKueue AdmissionCheck, with that check's clusters."""
        checks = self.fleet.checks.items
        configs = self.fleet.configs.items
        placements = self.fleet.placements.items
        clusters_of_cq: dict[str, tuple[str, ...] | None] = {}
        for cq in manager.cluster_queues.values():
            for ac in cq.admission_checks:
                mk = checks.get(ac)
                if mk is not None:
                    cfg = configs.get(mk.config) if mk.config else None
                    clusters_of_cq[cq.name] = cfg.clusters if cfg is not None else ()
                    break
        out = []
        for key, wl in manager.workloads.items():
            clusters = clusters_of_cq.get(wl.cluster_queue or "")
            if clusters is None:
                continue
            p = placements.get(key)
            if p is not None and p.uid and p.uid != wl.uid:
                p = None
            out.append(DispatchTarget(wl, clusters, p.nominated if p else (), p.cluster_name if p else None))
        return out


@dataclass
class FleetPublished:
    """What the dispatcher publishes for :class:`FleetCollector` (rendered per scrape)."""

    gpus: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (cluster, flavor, state)
    largest_block: dict[tuple[str, str], int] = field(default_factory=dict)  # (cluster, flavor)
    up: dict[str, int] = field(default_factory=dict)  # cluster -> 1 usable / 0
    capacity_age: dict[str, float] = field(default_factory=dict)  # cluster -> seconds since last current
    decisions: dict[tuple[str, str], int] = field(default_factory=dict)  # (reason, mode) -> count


class FleetCollector(Collector):
    """Renders :class:`FleetPublished` as the ``queuepilot_worker_cluster_*`` and dispatch families, and
    each worker's connection failure (``Fleet.failing``) as ``queuepilot_worker_cluster_connect_failing``."""

    def __init__(self, published: FleetPublished, fleet: Fleet | None = None) -> None:
        self.published = published
        self.fleet = fleet

    def collect(self) -> Iterable[Any]:
        p = self.published
        g = GaugeMetricFamily(m.WORKER_CLUSTER_GPUS.name, m.WORKER_CLUSTER_GPUS.help,
                              labels=list(m.WORKER_CLUSTER_GPUS.labels))
        for (c, f, s), v in sorted(p.gpus.items()):
            g.add_metric([c, f, s], v)
        b = GaugeMetricFamily(m.WORKER_CLUSTER_LARGEST_FREE_BLOCK.name, m.WORKER_CLUSTER_LARGEST_FREE_BLOCK.help,
                              labels=list(m.WORKER_CLUSTER_LARGEST_FREE_BLOCK.labels))
        for (c, f), v in sorted(p.largest_block.items()):
            b.add_metric([c, f], v)
        up = GaugeMetricFamily(m.WORKER_CLUSTER_UP.name, m.WORKER_CLUSTER_UP.help, labels=["cluster"])
        for c, v in sorted(p.up.items()):
            up.add_metric([c], v)
        age = GaugeMetricFamily(m.WORKER_CLUSTER_CAPACITY_AGE.name, m.WORKER_CLUSTER_CAPACITY_AGE.help,
                                labels=["cluster"])
        for c, v in sorted(p.capacity_age.items()):
            age.add_metric([c], v)
        d = CounterMetricFamily(m.DISPATCH_DECISIONS_TOTAL.name.removesuffix("_total"), m.DISPATCH_DECISIONS_TOTAL.help,
                                labels=list(m.DISPATCH_DECISIONS_TOTAL.labels))
        for (r, mode), v in sorted(p.decisions.items()):
            d.add_metric([r, mode], v)
        f = GaugeMetricFamily(m.WORKER_CLUSTER_CONNECT_FAILING.name, m.WORKER_CLUSTER_CONNECT_FAILING.help,
                              labels=list(m.WORKER_CLUSTER_CONNECT_FAILING.labels))
        for c, kind in sorted(dict(self.fleet.failing).items() if self.fleet is not None else ()):
            f.add_metric([c, kind], 1)
        return [g, b, up, age, d, f]


class DispatchReconciler:
    name = "dispatch"

    def __init__(self, ctx: ControllerContext, fleet: FleetSource, writer: Writer | None = None,
                 config: DispatchConfig | None = None, *, write_concurrency: int = 8,
                 published: FleetPublished | None = None) -> None:
        self.ctx = ctx
        self.fleet = fleet
        self.writer = writer or writer_for(ctx)
        self.dry_run = self.writer.dry_run
        self.config = config or DispatchConfig()
        self.ledgers: dict[str, Ledger] = {}
        self.history: dict[str, DispatchHistory] = {}
        self.published = published or FleetPublished()
        self._sem = asyncio.Semaphore(write_concurrency)
        self._usable: set[str] = set()
        self._free: dict[str, int] = {}  # worker -> free healthy GPUs at the last pass
        self.outcomes: list[tuple[DispatchDecision, WriteOutcome]] = []  # last pass's, for tests

    def register(self) -> None:
        """Put the fleet families on the controller's registry (once)."""
        self.ctx.registry.register(FleetCollector(self.published, self.fleet.fleet))

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        if not self.fleet.fleet.synced:
            return
        targets = self.fleet.targets(snapshot)
        by_key = {t.workload.key: t for t in targets}
        # only the dispatched Workloads go into the worker snapshots (the ledgers hold nothing else)
        workers = self.fleet.views(snapshot, now, {k: t.workload for k, t in by_key.items()})
        if not self.fleet.settled(now):
            return  # workers still connecting: deciding now would back every workload off for nothing
        ledgers = {name: release_worker_ledger(self.ledgers.get(name, Ledger()), w, by_key, now,
                                               self.config.reservation_timeout_seconds)
                   for name, w in workers.items()}
        usable = {name for name, w in workers.items() if not worker_problem(w, self.config, now)}
        freed = any(k not in ledgers.get(name, Ledger()).reservations
                    for name, led in self.ledgers.items() for k in led.reservations)
        free = {name: sum(n.free_gpus for n in w.snapshot.nodes.values()) for name, w in workers.items()}
        grew = any(free[name] > self._free.get(name, 0) for name in usable)
        # capacity came back (a promise released, a worker usable again, GPUs freed on a usable
        # worker by a finished job or a repair): workloads in backoff are tried again now
        if freed or grew or usable - self._usable:
            self.history = {k: replace(h, retry_at=0.0) for k, h in self.history.items()}
        self._usable, self._free = usable, free
        result = decide_dispatch(targets, workers, ledgers, self.history, self.config, now)
        self.ledgers, self.history = dict(result.ledgers), dict(result.history)
        todo = [d for d in result.decisions if d.changes or d.reason in (NO_CLUSTER_FITS, NO_USABLE_CLUSTER)]
        outcomes = await asyncio.gather(*(self._write(d, now) for d in todo))
        self.outcomes = list(zip(todo, outcomes, strict=True))
        for d, outcome in self.outcomes:
            self._account(d, outcome, now)
        self._publish(workers, now)

    async def _write(self, d: DispatchDecision, now: float) -> WriteOutcome:
        if not d.changes:
            return WriteOutcome("unchanged", "")
        async with self._sem:
            try:
                return await self.writer.nominate_clusters(d, now)
            except Exception as exc:  # never let one workload break the pass
                log.exception("nominating %s for %s failed", d.nominate, d.workload)
                return WriteOutcome("error", type(exc).__name__)

    def _account(self, d: DispatchDecision, outcome: WriteOutcome, now: float) -> None:
        if outcome.result not in ("written", "dry_run", "unchanged"):
            for name, led in list(self.ledgers.items()):  # not written: the promises go back
                self.ledgers[name] = led.without(d.workload)
            h = self.history.get(d.workload)
            if h is not None and d.retry_after_seconds is not None:
                self.history[d.workload] = replace(h, attempts=max(0, h.attempts - 1), retry_at=0.0)
            return
        mode = "dry_run" if self.dry_run or outcome.result == "dry_run" else "live"
        key = (d.reason, mode)
        self.published.decisions[key] = self.published.decisions.get(key, 0) + 1
        ref = ObjectRef("kueue.x-k8s.io/v1beta2", "Workload", d.namespace, d.name, d.uid, d.resource_version)
        what = ", ".join(d.nominate or ()) or "no cluster"
        etype: EventType = "Warning" if d.retry_after_seconds is not None else "Normal"
        prefix = "dry-run: would nominate" if mode == "dry_run" else "nominated"
        text = f"{prefix} {what}: {d.message}"[:1024]
        self.writer.post_event(ref, "Normal" if mode == "dry_run" else etype, d.reason, text, now)
        line = f"{'(dry-run) ' if mode == 'dry_run' else ''}{d.workload} [{d.cluster_queue}] {d.reason}: {text}"
        self.ctx.published.remember(line)
        log.info("dispatch %s", line)

    def _publish(self, workers: Mapping[str, WorkerView], now: float) -> None:
        p = self.published
        p.gpus.clear()
        p.largest_block.clear()
        p.up.clear()
        p.capacity_age.clear()
        for name, w in workers.items():
            p.up[name] = 0 if worker_problem(w, self.config, now) else 1
            if w.observed_at is not None:
                p.capacity_age[name] = max(0.0, now - w.observed_at)
            promised_by_node = self.ledgers.get(name, Ledger()).promised_by_node()
            for flavor in w.snapshot.flavors:
                nodes = w.snapshot.flavor_nodes(flavor)
                if not nodes:
                    continue
                promised = sum(promised_by_node.get(n.name, 0) for n in nodes)
                cap = w.snapshot.flavor_capacity(flavor, promised)
                for state, v in (("healthy", cap.healthy), ("unhealthy", cap.unhealthy),
                                 ("allocated", cap.allocated), ("free", cap.free), ("promised", promised)):
                    p.gpus[(name, flavor, state)] = v
                p.largest_block[(name, flavor)] = max(
                    (max(0, n.free_gpus - promised_by_node.get(n.name, 0)) for n in nodes), default=0)

    async def close(self) -> None:
        await self.writer.close()


def fleet_source(ctx: ControllerContext, config: Any, session: Callable[[], Any]) -> FleetSource:
    """The ``FleetSource`` for ``queuepilot controller --multikueue-dispatcher`` (``config`` a
    ``ControllerConfig``; ``session`` returns the controller's aiohttp session once it started).

    GPU health per worker comes from the shared Prometheus (``--gpu-signal prometheus``): the same
    queries as the local GPU signal with ``{<--multikueue-cluster-label>="<cluster>"}`` added to
    ``--prometheus-selector``.  With ``--gpu-signal scrape`` worker exporters are not reachable from
    the manager: worker capacity then comes from Node and Pod objects alone (no GPU health)."""
    from autoscaler.signals.gpu_prometheus import PrometheusGpuSignal

    def gpu(name: str) -> GpuSignalSource:
        def on_error(kind: str) -> None:
            ctx.counters.source_errors.labels(source=f"gpu/{name}", kind=kind).inc()

        return PrometheusGpuSignal(session(), config.prometheus_url, on_error,
                                   selector=cluster_selector(config.prometheus_selector,
                                                             config.multikueue_cluster_label, name),
                                   utilization=config.gpu_utilization_signal)

    return FleetSource(ctx.api_client, ctx.counters, namespace=config.multikueue_namespace,
                       gpu_factory=gpu if config.gpu_signal == "prometheus" else None,
                       on_change=ctx.request_pass, gpu_poll_seconds=config.gpu_poll_seconds,
                       gpu_stale_seconds=config.signal_stale_seconds,
                       allow_insecure_http=getattr(config, "multikueue_allow_insecure_http", False))
