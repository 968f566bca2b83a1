"""The controller process: watch caches, signal pollers, leader election, the pass loop, the HTTP server.

A *pass* builds one ``ClusterSnapshot`` from the caches and signals and, on the leader only, hands
it to every reconciler from ``autoscaler.controller.reconcilers.build_reconcilers`` (each one's exceptions
are caught, logged and counted, so one broken decider never stops the others).  Passes run every
``--resync-seconds`` and ``--debounce-seconds`` after any watch event or signal refresh (but never sooner
after a pass than that pass took, so passes use at most half the time), so a
Workload whose check turns Pending is decided in the next pass, not at the next resync.
No pass acts before every cache has synced.

Every replica serves ``/metrics``, ``/healthz`` (the loop is alive) and ``/readyz`` (200 once all
caches have synced).  ``stop()`` (SIGTERM) ends the watches, releases the Lease and closes sessions.

Where a pass's inputs come from is injectable, so the embedded demo runs this same loop over a
simulated cluster: the objects come from a ``ClusterSource`` (by default ``WatchSource``, the
list-then-watch caches over the API server), the decisions reach the world through a ``Writer``
(by default the ``KubeWriter``), and the signals are the GPU signal (``gpu_signal``, or the
exporter scrape / Prometheus per the config; ``discover_exporters`` names the exporters to scrape
when there is no API server to list their pods) and the Ray client (``ray_client``).

The event loop answers ``/healthz`` within a few milliseconds at 100 000 Workloads because no pass
holds it for long: for a large cluster (``context.OFFLOAD_MIN_OBJECTS``) the snapshot build
(incremental, ``SnapshotBuilder``, over copies of the caches taken on the loop), the queue-wait
accounting, each reconciler's pure decision and the ``/metrics`` render run in worker threads, one
at a time, while the loop goes on with watch events, probes and the Lease; and once synced the
process's long-lived objects are frozen out of the cyclic garbage collector (``_freeze_gc``).  Small
clusters (the demo, the tests) run all of it inline, with the same results.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from kubernetes_asyncio.client import ApiClient
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from autoscaler.act.writer import Writer
from autoscaler.cluster import resources as res
from autoscaler.cluster.cache import WatchCache
from autoscaler.cluster.client import request_json
from autoscaler.cluster.secrets import SecretTokens
from autoscaler.cluster.source import (
    PARSERS,
    CacheStats,
    ClusterObjects,
    ClusterSource,
    RayDashboardTarget,
    WatchSource,
)
from autoscaler.cluster.views import EMPTY, object_key
from autoscaler.controller import context as context_module
from autoscaler.controller import reconcilers as reconcilers_module
from autoscaler.controller.collector import ControllerCollector
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.context import ControllerContext, Published, Reconciler, offload, snapshot_size
from autoscaler.controller.counters import ControllerCounters
from autoscaler.controller.dispatch import FleetSource, fleet_source
from autoscaler.controller.leader import LeaderElector
from autoscaler.controller.snapshot_builder import BuildConfig, SnapshotBuilder
from autoscaler.core.policy.stall import ray_clusters_to_watch, stall_config
from autoscaler.core.queue_wait import new_admissions
from autoscaler.core.snapshot import ClusterSnapshot
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.gpu_prometheus import PrometheusGpuSignal
from autoscaler.signals.gpu_scrape import ScrapeGpuSignal
from autoscaler.signals.ray import RayClient, RayHeadClient, RaySignals
from servicekit.http import HttpServer, start_server
from servicekit.tasks import cancel_tasks, every

log = logging.getLogger("queuepilot.controller")

# Once the caches hold this many objects (Workloads + RayClusters + Nodes) after the first synced
# pass, the process's objects are frozen out of the cyclic garbage collector (``gc.freeze``) and
# young collections are made rarer: the caches' views live as long as the process, and without it
# every full collection walks all of them (0.1-0.3 s at 100 000 Workloads, with the loop held).
# Once per process; small controllers (tests, the demo) never freeze.
GC_FREEZE_MIN_OBJECTS = 20_000
GC_THRESHOLDS = (50_000, 20, 10)
_gc_frozen = False


def _freeze_gc(size: int) -> bool:
    """Freeze the heap once per process when ``size`` reaches ``GC_FREEZE_MIN_OBJECTS``; True if it did now.

    No full collection first (at 100 000 Workloads it would hold the loop for a second): the young
    generations are collected, and what cyclic garbage is older stays, once."""
    global _gc_frozen
    if _gc_frozen or size < GC_FREEZE_MIN_OBJECTS:
        return False
    _gc_frozen = True
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
    return True


def _objects_size(objects: ClusterObjects) -> int:
    return len(objects.workloads) + len(objects.ray_clusters) + len(objects.nodes)


class _NoGpuSignal:
    name = "gpu"
    reading = GpuReading()

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        api: ApiClient | None,
        *,
        clock: Callable[[], float] = time.time,
        gpu_signal: Any = None,
        ray_client: RayClient | None = None,
        session: aiohttp.ClientSession | None = None,
        build_reconcilers: Callable[[ControllerContext], list[Reconciler]] | None = None,
        source: ClusterSource | None = None,
        writer: Writer | None = None,
        discover_exporters: Callable[[], Awaitable[list[tuple[str, str]]]] | None = None,
    ) -> None:
        self.config = config
        self.api = api
        self.clock = clock
        self.started_at = clock()
        self.registry = CollectorRegistry()
        self.counters = ControllerCounters(self.registry)
        self.published = Published()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._session = session
        self._own_session = session is None
        self.snapshot: ClusterSnapshot | None = None
        self._previous: ClusterSnapshot | None = None
        self.passes = 0
        self.context = ControllerContext(
            api_client=api,
            registry=self.registry,
            counters=self.counters,
            dry_run=config.dry_run,
            settings=dict(config.settings),
            published=self.published,
            request_pass=self.request_pass,
            writer=writer,
            stall_owners=(config.lease_namespace, config.stall_owners_configmap) if config.stall_owners_configmap else None,
        )
        self.caches: dict[str, WatchCache[Any]] = {}
        if source is None:
            self.caches = {
                spec.name: WatchCache(api, spec, PARSERS[spec.name], self.counters, on_change=self.request_pass,
                                      clock=clock)
                for spec in res.watched_resources(config.pods)
            }
            source = WatchSource(self.caches)
        self.source: ClusterSource = source
        self._discover = discover_exporters
        self.leader: LeaderElector | None = None
        if config.leader_elect and api is not None:
            self.leader = LeaderElector(
                api, config.lease_namespace, config.lease_name, config.identity,
                lease_duration=config.lease_duration_seconds, renew_deadline=config.renew_deadline_seconds,
                retry_period=config.retry_period_seconds, clock=clock,
                on_change=lambda leading: self.request_pass("leader"),
            )
        self._gpu = gpu_signal
        self._ray_client = ray_client
        self.ray = RaySignals(ray_client, self._ray_error, config.ray_concurrency, config.ray_timeout_seconds) \
            if ray_client is not None else None
        self._stall = stall_config(config.settings)  # which clusters' Ray view the stall detector needs
        self._no_head: dict[str, str] = {}  # cluster key -> why its head cannot be asked (logged once)
        self.fleet: FleetSource | None = None

        def _build(ctx: ControllerContext) -> list[Reconciler]:
            if getattr(config, "multikueue_dispatcher", False) and api is not None:
                self.fleet = fleet_source(ctx, config, lambda: self._session)
            return reconcilers_module.build_reconcilers(ctx, self.fleet)

        self.reconcilers = (build_reconcilers or _build)(self.context)
        self.collector = ControllerCollector(
            lambda: self.snapshot, self.published, lambda: self.is_leader, self.cache_stats, clock=clock
        )
        self.registry.register(self.collector)
        self._build_config = BuildConfig(
            gpu_stale_seconds=config.signal_stale_seconds, ray_stale_seconds=config.signal_stale_seconds
        )
        self._builder = SnapshotBuilder(self._build_config)  # keeps the views it completed between passes
        self._tasks: list[asyncio.Task[Any]] = []
        self._http: HttpServer | None = None
        self._webhook: Any = None
        self.port: int | None = None

    # ------------------------------------------------------------------------------ state
    @property
    def is_leader(self) -> bool:
        return self.leader.is_leader if self.leader is not None else True

    @property
    def synced(self) -> bool:
        return self.source.synced

    def cache_stats(self) -> list[CacheStats]:
        return self.source.stats()

    def request_pass(self, _reason: str = "") -> None:
        self._wake.set()

    def _gpu_error(self, kind: str) -> None:
        self.counters.source_errors.labels(source="gpu", kind=kind).inc()

    def _ray_error(self, kind: str) -> None:
        self.counters.source_errors.labels(source="ray", kind=kind).inc()

    def objects(self) -> ClusterObjects:
        return self.source.objects()

    # ------------------------------------------------------------------------------- a pass
    async def run_pass(self) -> ClusterSnapshot | None:
        now = self.clock()
        t0 = time.perf_counter()
        try:
            watch_observed = self.source.observed_at(now)
            objects = self.objects()
            size = _objects_size(objects)
            if size >= context_module.OFFLOAD_MIN_OBJECTS:
                objects = objects.copied()  # one instant, taken here; watch events go on during the build
            snap = await offload(
                size,
                self._builder.build,
                objects,
                self._gpu.reading if self._gpu is not None else GpuReading(),
                dict(self.ray.observations) if self.ray is not None else EMPTY,
                now,
                watch_observed,
            )
        except Exception:
            log.exception("building the snapshot failed")
            self.counters.source_errors.labels(source="snapshot", kind="exception").inc()
            return None
        self.snapshot = snap
        self.passes += 1
        self.counters.reconcile_seconds.labels(loop="snapshot").observe(time.perf_counter() - t0)
        if not self.synced:
            return snap
        _freeze_gc(snapshot_size(snap))
        leader = self.is_leader
        if leader:
            admitted = await offload(snapshot_size(snap), new_admissions, self._previous, snap,
                                     not_before=self.started_at)
            for cq, wait in admitted:
                self.counters.queue_wait.labels(cluster_queue=cq).observe(wait)
        self._previous = snap
        if leader:
            for r in self.reconcilers:
                await asyncio.sleep(0)  # between deciders, let watches, /metrics and the Lease renewal run
                if self.leader is not None and not self.leader.holds():
                    break  # the Lease may have passed on while this pass ran: stop acting at once
                t = time.perf_counter()
                try:
                    await r.reconcile(snap, now)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("reconciler %s failed", getattr(r, "name", r))
                    self.counters.source_errors.labels(source=f"reconciler/{getattr(r, 'name', 'unknown')}",
                                                       kind="exception").inc()
                self.counters.reconcile_seconds.labels(loop=getattr(r, "name", "unknown")).observe(
                    time.perf_counter() - t)
        return snap

    async def pass_loop(self, iterations: int | None = None) -> None:
        i = 0
        last_pass_s = 0.0
        while iterations is None or i < iterations:
            i += 1
            try:
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
                # races with the timeout, and shutdown would then wait out a whole resync period.
                async with asyncio.timeout(self.config.resync_seconds):
                    await self._wake.wait()
                # at least as long as the last pass took: passes use at most half of the process's
                # time, however busy the watches are, so /metrics, /healthz and the Lease keep theirs
                await asyncio.sleep(max(self.config.debounce_seconds, last_pass_s))
            except TimeoutError:
                pass
            self._wake.clear()
            t0 = time.perf_counter()
            await self.run_pass()
            last_pass_s = time.perf_counter() - t0

    async def _poll_gpu(self) -> None:
        await self._gpu.poll(self.clock())
        self.request_pass("gpu")

    async def _poll_ray(self) -> None:
        assert self.ray is not None
        await self.ray.poll(await self.ray_targets(), self.clock())
        self.request_pass("ray")

    async def ray_targets(self) -> dict[str, RayDashboardTarget | None]:
        """The heads the Ray signal asks this round, in this order: every RayCluster opted in to scaling;
        then, on the leader only, each other cluster whose Ray view the stall detector needs
        (``ray_clusters_to_watch`` on the last snapshot: a workload opted in to deactivation, every GPU
        idle).  Every other cluster maps to None and is not asked.  A needed cluster whose head cannot
        be derived (``RayClusterView.head_error``) is counted (``source_errors{source="ray",
        kind="target"}``) and logged once; the stall detector then holds for want of Ray's view."""
        targets = self.source.ray_targets()
        out: dict[str, RayDashboardTarget | None] = {
            k: t for k, t in targets.items() if t is not None and not t.evidence_only}
        snap = self.snapshot
        wanted: frozenset[str] = frozenset()
        if snap is not None and self.synced and self.is_leader:
            wanted = await offload(snapshot_size(snap), ray_clusters_to_watch, snap, self._stall)
        views = self.source.objects().ray_clusters if wanted else {}
        for key in sorted(wanted - out.keys()):
            target = targets.get(key)
            if target is not None:
                out[key] = target
                continue
            error = getattr(views.get(key), "head_error", "")
            if error:
                self._ray_error("target")
                if self._no_head.get(key) != error:
                    self._no_head[key] = error
                    log.warning("Ray's view of RayCluster %s is needed by the stall detector, but its head "
                                "cannot be asked: %s", key, error)
        self._no_head = {k: v for k, v in self._no_head.items() if k in wanted}
        for key in targets:
            out.setdefault(key, None)
        return out

    async def _discover_exporters(self) -> list[tuple[str, str]]:
        assert self.api is not None
        body = await request_json(
            self.api, "GET", "/api/v1/pods",
            [("labelSelector", self.config.exporter_selector), ("fieldSelector", "status.phase=Running")],
        )
        out = []
        for p in body.get("items") or []:
            ip = (p.get("status") or {}).get("podIP")
            if ip:
                host = f"[{ip}]" if ":" in ip else ip
                out.append((object_key(p), f"http://{host}:{self.config.exporter_port}"))
        return out

    # ------------------------------------------------------------------------------ HTTP
    def app(self) -> web.Application:
        app = web.Application(client_max_size=self.config.http_limits.max_body_bytes)

        async def metrics(_: web.Request) -> web.Response:
            # a large cluster's render (0.3 s at 100 000 Workloads) goes to a worker thread: the collectors
            # read the immutable snapshot and copies of the published values
            snap = self.snapshot
            body = await offload(snapshot_size(snap) if snap is not None else 0, generate_latest, self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(_: web.Request) -> web.Response:
            stale = self.source.stale(self.clock())
            if stale:
                return web.Response(status=503, text="watches not current: " + ", ".join(stale) + "\n")
            return web.Response(text="ok\n")

        async def readyz(_: web.Request) -> web.Response:
            missing = self.source.not_synced()
            if missing:
                return web.Response(status=503, text="caches not synced: " + ", ".join(missing) + "\n")
            err = getattr(self._gpu, "last_error", None)
            return web.Response(text="ok\n" + (f"GPU signal degraded: {err}\n" if err else ""))

        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/readyz", readyz)
        return app

    async def start_http(self) -> int:
        self._http = await start_server(self.app(), (self.config.listen_host, self.config.listen_port),
                                        limits=self.config.http_limits, name="metrics")
        self.port = self._http.port
        return self.port

    # ---------------------------------------------------------------------------- lifecycle
    def _make_signals(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        if self._gpu is None:
            if self.config.gpu_signal == "scrape" and (self._discover is not None or self.api is not None):
                self._gpu = ScrapeGpuSignal(self._session, self._discover or self._discover_exporters,
                                            self._gpu_error, utilization=self.config.gpu_utilization_signal)
            elif self.config.gpu_signal == "prometheus":
                self._gpu = PrometheusGpuSignal(
                    self._session, self.config.prometheus_url, self._gpu_error, self.config.prometheus_selector,
                    utilization=self.config.gpu_utilization_signal,
                )
            else:
                self._gpu = _NoGpuSignal()
        if self.ray is None:
            client = self._ray_client or _default_ray_client(self._session, self.config, self.api)
            if client is not None:
                self._ray_client = client
                self.ray = RaySignals(client, self._ray_error, self.config.ray_concurrency,
                                      self.config.ray_timeout_seconds)

    async def start(self) -> None:
        """Start the HTTP server, the watches, the pollers, the election and the pass loop."""
        self._make_signals()
        await self.start_http()
        if self.config.webhook_listen:
            await self.start_webhook()
        spawn = self._tasks.append
        for name, coro in self.source.runners():
            spawn(asyncio.create_task(coro, name=name))
        spawn(asyncio.create_task(every(self.config.gpu_poll_seconds, self._poll_gpu, name="GPU signal poll",
                                        logger=log), name="gpu"))
        if self.ray is not None:
            spawn(asyncio.create_task(every(self.config.ray_poll_seconds, self._poll_ray, name="Ray signal poll",
                                            logger=log), name="ray"))
        if self.leader is not None:
            spawn(asyncio.create_task(self.leader.run(), name="leader"))
        spawn(asyncio.create_task(self.pass_loop(), name="passes"))
        if self.fleet is not None:
            await self.fleet.start()

    async def start_webhook(self) -> None:
        """The queue-name webhook (``autoscaler.webhook.server``), served by every replica, over TLS."""
        from autoscaler.webhook.server import start_webhook, webhook_settings
        from autoscaler.webhook.tls import cert_paths

        wh = webhook_settings(self.config.settings)
        certfile, keyfile = cert_paths(self.config.webhook_cert_dir)
        try:
            self._webhook = await start_webhook(
                self.config.webhook_listen, certfile, keyfile, wh.namespace_queues,
                opt_out_annotation=wh.opt_out_annotation,
                on_review=lambda kind, result: self.counters.webhook_reviews.labels(kind=kind, result=result).inc(),
                dry_run=self.config.dry_run, limits=self.config.webhook_limits,
            )
        except OSError as e:  # ssl.SSLError is an OSError too
            raise ValueError(f"webhook on {self.config.webhook_listen} with {certfile}, {keyfile}: {e}") from e

    async def wait_synced(self) -> None:
        await self.source.wait_synced()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        await self.start()
        try:
            await self._stop.wait()
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks.clear()
        if self.ray is not None:
            await self.ray.close()
        if self.fleet is not None:
            await self.fleet.stop()
        if self.leader is not None:
            await self.leader.release()
        if self._gpu is not None:
            await self._gpu.close()
        if self._webhook is not None:
            await self._webhook.close()
            self._webhook = None
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None


def _default_ray_client(session: aiohttp.ClientSession, config: ControllerConfig, api: Any) -> RayClient | None:
    """The Ray client: each polled cluster's own head, with the token Secret the cluster names (read
    through the API server, cached), or, for clusters opted in to scaling, the shared ``--ray-token-file``
    token; https heads verified against ``--ray-ca-file``.  None (Ray demand off, logged once) when it
    cannot be loaded."""
    try:
        from autoscaler.signals.ray_demand import RayDashboardClient
    except ImportError as e:
        log.warning("Ray demand signal unavailable (%s); Ray clusters are reported without demand", e)
        return None
    token = None
    if config.ray_token_file:
        token = Path(config.ray_token_file).read_text(encoding="utf-8").strip()
    dashboard = RayDashboardClient(session, timeout=config.ray_timeout_seconds)
    tokens = SecretTokens(api) if api is not None and token is None else None
    return RayHeadClient(dashboard, read_secret=tokens.token if tokens else None, shared_token=token,
                         ca_file=config.ray_ca_file, forget_secrets=tokens.forget if tokens else None)
