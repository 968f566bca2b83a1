"""The controller's gauges, rendered per scrape from the latest snapshot (a custom Collector).

Nothing here reads the API server or a signal: ``collect()`` walks the newest ``ClusterSnapshot``
(from ``snapshot_provider``), what the deciders ``Published``, the leader flag and the watch-cache
statistics.  It needs no Kubernetes, so the embedded demo and the simulator use it as it is.
Counters and histograms (decisions, errors, queue wait) live in ``autoscaler.controller.counters``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from autoscaler import metrics as m
from autoscaler.cluster.source import CacheStats
from autoscaler.controller.context import Published
from autoscaler.controller.pod_info import pod_info
from autoscaler.core.policy.rightsizing import recommendation_series
from autoscaler.core.snapshot import GPU_RESOURCE, ClusterSnapshot, RayClusterState, WorkerGroupState
from exporter.metrics import MetricSpec

NO_FLAVOR = "none"  # pending GPUs of a workload whose ClusterQueue has no GPU flavor (or is unknown)


def _gauge(spec: MetricSpec) -> GaugeMetricFamily:
    return GaugeMetricFamily(spec.name, spec.help, labels=spec.labels)


GAUGE_SPECS: tuple[MetricSpec, ...] = (
    m.QUEUE_PENDING_WORKLOADS, m.QUEUE_OLDEST_PENDING, m.QUEUE_OLDEST_PENDING_SINCE_REQUEUE, m.QUEUE_PENDING_GPUS,
    m.FLAVOR_GPUS, m.FLAVOR_LARGEST_FREE_BLOCK, m.RESERVED_GPUS,
    m.RAY_WORKERS, m.RAY_PENDING_GPUS, m.RAY_GPU_UTILIZATION, m.RAY_IDLE_GPUS,
    m.IS_LEADER, m.SIGNAL_AGE_SECONDS, m.SIGNAL_STALE, m.CACHE_OBJECTS, m.CACHE_SYNCED, *m.ECONOMICS_FAMILIES,
)


def _holds(g: WorkerGroupState, shape: Mapping[str, float]) -> bool:
    """Whether one worker of ``g`` offers every resource of the bundle (CPU/memory unknown: assumed)."""
    for k, v in shape.items():
        if v <= 0:
            continue
        cap = g.ray_resources.get(k)
        if k == "GPU":
            cap = max(cap or 0.0, float(g.gpus_per_worker))
        elif cap is None:
            if k in ("CPU", "memory", "object_store_memory") or k.startswith("node:"):
                continue
            return False
        if cap < v:
            return False
    return True


def _group_for_bundle(rc: RayClusterState, shape: Mapping[str, float], hint: str | None) -> WorkerGroupState | None:
    """The worker group a bundle would land on: Ray's hint, else the first group whose worker holds it."""
    if hint:
        for g in rc.groups:
            if g.name == hint:
                return g
    for g in rc.groups:
        if _holds(g, shape):
            return g
    return None


def ray_pending_gpus(rc: RayClusterState) -> dict[str, float]:
    """Pending GPUs per worker group: each unscheduled bundle asking for GPUs, on the group that can hold it.

    Bundles no group can hold (infeasible for this cluster) are not attributed to any group.
    """
    out: dict[str, float] = defaultdict(float)
    for d in rc.demand:
        gpus = float(d.shape.get("GPU", 0.0))
        if gpus <= 0:
            continue
        g = _group_for_bundle(rc, d.shape, d.group)
        if g is not None:
            out[g.name] += gpus * d.count
    return out


class ControllerCollector(Collector):
    """Renders the queue, capacity, Ray and self gauges of ``autoscaler.metrics`` at scrape time."""

    def __init__(
        self,
        snapshot_provider: Callable[[], ClusterSnapshot | None],
        published: Published,
        leader_provider: Callable[[], bool],
        cache_stats_provider: Callable[[], list[CacheStats]] | None = None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """``clock``: ages (oldest pending, signal ages) are measured at scrape time when given, else
        at the snapshot's ``taken_at`` (the demo and simulator pass their simulated clock or none)."""
        self._snapshot = snapshot_provider
        self._published = published
        self._leader = leader_provider
        self._cache_stats = cache_stats_provider
        self._clock = clock

    def describe(self) -> Iterator[GaugeMetricFamily]:
        for spec in GAUGE_SPECS:
            yield _gauge(spec)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # The controller may render in a worker thread while the deciders update ``published`` on the
        # event loop: read copies (each a C-level copy, whole under the GIL), never the live containers.
        published = Published(
            desired_replicas=dict(self._published.desired_replicas),
            idle_gpus=dict(self._published.idle_gpus),
            reserved_gpus=dict(self._published.reserved_gpus),
            recommendations=list(self._published.recommendations),
        )
        snap = self._snapshot()
        fams = {spec.name: _gauge(spec) for spec in GAUGE_SPECS}
        fams[m.IS_LEADER.name].add_metric([], 1.0 if self._leader() else 0.0)
        for st in (self._cache_stats() if self._cache_stats else []):
            fams[m.CACHE_OBJECTS.name].add_metric([st.resource], float(st.objects))
            fams[m.CACHE_SYNCED.name].add_metric([st.resource], 1.0 if st.synced else 0.0)
        for flavor, n in sorted(published.reserved_gpus.items()):
            fams[m.RESERVED_GPUS.name].add_metric([flavor], float(n))
        if snap is not None:
            now = max(snap.taken_at, self._clock()) if self._clock is not None else snap.taken_at
            self._queues(snap, now, fams)
            self._capacity(snap, published, fams)
            self._ray(snap, published, fams)
            self._signals(snap, now, fams)
            for labels in pod_info(snap):
                fams[m.POD_INFO.name].add_metric([labels[k] for k in m.POD_INFO.labels], 1.0)
        for name, samples in recommendation_series(published.recommendations).items():
            for labels, value in samples:
                fams[name].add_metric([labels[k] for k in m.BY_NAME[name].labels], value)
        yield from fams.values()

    # ------------------------------------------------------------------------------------ queues
    def _queues(self, snap: ClusterSnapshot, now: float, fams: dict[str, GaugeMetricFamily]) -> None:
        # (cluster_queue, namespace, local_queue); every known queue starts at 0, as Kueue's own gauges
        # do, so an idle queue shows 0 rather than no data. A ClusterQueue no LocalQueue points at
        # gets one series with empty namespace/local_queue.
        # oldest: the age a person sees (from creation, across Retries and requeues); kueue_oldest: Kueue's
        # rule (from the last requeue)
        count: dict[tuple[str, str, str], int] = {}
        oldest: dict[tuple[str, str, str], float] = {}
        kueue_oldest: dict[tuple[str, str, str], float] = {}
        with_local: set[str] = set()
        for lq in snap.local_queues.values():
            key = (lq.cluster_queue, lq.namespace, lq.name)
            count[key], oldest[key], kueue_oldest[key] = 0, 0.0, 0.0
            with_local.add(lq.cluster_queue)
        for cq_name in snap.cluster_queues:
            if cq_name not in with_local:
                key = (cq_name, "", "")
                count[key], oldest[key], kueue_oldest[key] = 0, 0.0, 0.0
        gpus: dict[tuple[str, str], float] = defaultdict(float)
        for w in snap.workloads.values():
            if not w.pending:
                continue
            cq = w.cluster_queue or ""
            key = (cq, w.namespace, w.local_queue)
            count[key] = count.get(key, 0) + 1
            oldest[key] = max(oldest.get(key, 0.0), max(0.0, now - w.pending_since))
            kueue_oldest[key] = max(kueue_oldest.get(key, 0.0), max(0.0, now - w.queued_since))
            cq_state = snap.cluster_queues.get(cq)
            default_flavor = cq_state.flavor_order[0] if cq_state and cq_state.flavor_order else NO_FLAVOR
            for ps in w.pod_sets:
                n = ps.count * ps.gpus_per_pod
                if n:
                    flavor = w.flavors.get(ps.name, {}).get(GPU_RESOURCE) or default_flavor
                    gpus[(cq, flavor)] += n
        for key in sorted(count):
            fams[m.QUEUE_PENDING_WORKLOADS.name].add_metric(list(key), float(count[key]))
            fams[m.QUEUE_OLDEST_PENDING.name].add_metric(list(key), oldest[key])
            fams[m.QUEUE_OLDEST_PENDING_SINCE_REQUEUE.name].add_metric(list(key), kueue_oldest[key])
        for key in sorted(gpus):
            fams[m.QUEUE_PENDING_GPUS.name].add_metric(list(key), gpus[key])

    # ---------------------------------------------------------------------------------- capacity
    def _capacity(self, snap: ClusterSnapshot, pub: Published, fams: dict[str, GaugeMetricFamily]) -> None:
        fam = fams[m.FLAVOR_GPUS.name]
        for flavor in sorted(snap.flavors):
            cap = snap.flavor_capacity(flavor, promised=pub.reserved_gpus.get(flavor, 0))
            for state in m.FLAVOR_STATES:
                fam.add_metric([flavor, state], float(getattr(cap, state)))
            fams[m.FLAVOR_LARGEST_FREE_BLOCK.name].add_metric([flavor], float(cap.largest_free_block))

    # --------------------------------------------------------------------------------------- Ray
    def _ray(self, snap: ClusterSnapshot, pub: Published, fams: dict[str, GaugeMetricFamily]) -> None:
        for key in sorted(snap.ray_clusters):
            rc = snap.ray_clusters[key]
            pending = ray_pending_gpus(rc)
            for g in rc.groups:
                labels = [rc.namespace, rc.name, g.name]
                gk = (rc.namespace, rc.name, g.name)
                current = sum(1 for w in g.workers if not w.deleting)
                kinds = {
                    "current": current,
                    "desired": pub.desired_replicas.get(gk, current),
                    "min": g.min_replicas * g.num_of_hosts,
                    "max": g.max_replicas * g.num_of_hosts,
                }
                for kind in m.WORKER_KINDS:
                    fams[m.RAY_WORKERS.name].add_metric([*labels, kind], float(kinds[kind]))
                fams[m.RAY_PENDING_GPUS.name].add_metric(labels, pending.get(g.name, 0.0))
                utils = [w.gpu_utilization for w in g.workers if w.gpu_utilization is not None]
                if utils:
                    fams[m.RAY_GPU_UTILIZATION.name].add_metric(labels, sum(utils) / len(utils))
                if gk in pub.idle_gpus:
                    fams[m.RAY_IDLE_GPUS.name].add_metric(labels, float(pub.idle_gpus[gk]))

    # ----------------------------------------------------------------------------------- signals
    def _signals(self, snap: ClusterSnapshot, now: float, fams: dict[str, GaugeMetricFamily]) -> None:
        ray_oldest: float | None = None
        ray_any = False
        for name in sorted(snap.signals):
            sig = snap.signals[name]
            age = sig.age(now)
            if age is not None:
                fams[m.SIGNAL_AGE_SECONDS.name].add_metric([name], age)
            fams[m.SIGNAL_STALE.name].add_metric([name], 1.0 if sig.is_stale(now) else 0.0)
            if name.startswith("ray/"):
                ray_any = True
                if age is not None:
                    ray_oldest = age if ray_oldest is None else max(ray_oldest, age)
        if ray_any and ray_oldest is not None:
            fams[m.SIGNAL_AGE_SECONDS.name].add_metric(["ray"], ray_oldest)
