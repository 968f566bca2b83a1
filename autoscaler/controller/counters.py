"""Event-driven controller metrics (counters and histograms), created from the catalog.

Gauges that describe the cluster are rendered per scrape from the latest snapshot by
``autoscaler.controller.collector``; what happens *between* snapshots (decisions, writes, errors, watch
restarts, admissions observed, workers reclaimed, workloads deactivated) is counted here, and so are
the number of objects whose writes are held back after failures (set by the writers' guard as it
changes) and the stalled workloads per ClusterQueue (set by the stall reconciler each pass).  One instance per process, on a private registry.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from autoscaler import metrics as m
from exporter.metrics import MetricSpec


def _counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.name, spec.help, labelnames=spec.labels, registry=registry)


def _gauge(spec: MetricSpec, registry: CollectorRegistry) -> Gauge:
    return Gauge(spec.name, spec.help, labelnames=spec.labels, registry=registry)


def _histogram(spec: MetricSpec, registry: CollectorRegistry, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(spec.name, spec.help, labelnames=spec.labels, buckets=buckets, registry=registry)


class ControllerCounters:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.queue_wait = _histogram(m.QUEUE_WAIT_SECONDS, registry, m.WAIT_BUCKETS)
        self.admission_decisions = _counter(m.ADMISSION_DECISIONS_TOTAL, registry)
        self.admission_decision_seconds = _histogram(m.ADMISSION_DECISION_SECONDS, registry, m.DECISION_BUCKETS)
        self.scale_decisions = _counter(m.SCALE_DECISIONS_TOTAL, registry)
        self.reclaimed_workers = _counter(m.RECLAIMED_WORKERS_TOTAL, registry)
        self.stall_deactivations = _counter(m.STALL_DEACTIVATIONS_TOTAL, registry)
        self.stalled_workloads = _gauge(m.STALLED_WORKLOADS, registry)
        self.stalled_workload_gpus = _gauge(m.STALLED_WORKLOAD_GPUS, registry)
        self.reconcile_seconds = _histogram(m.RECONCILE_SECONDS, registry, m.RECONCILE_BUCKETS)
        self.watch_restarts = _counter(m.WATCH_RESTARTS_TOTAL, registry)
        self.source_errors = _counter(m.SOURCE_ERRORS_TOTAL, registry)
        self.write_errors = _counter(m.WRITE_ERRORS_TOTAL, registry)
        self.writes = _counter(m.WRITES_TOTAL, registry)
        self.webhook_reviews = _counter(m.WEBHOOK_REVIEWS_TOTAL, registry)
        self.events_deduplicated = _counter(m.EVENTS_DEDUPLICATED_TOTAL, registry)
        self.write_backoff = _gauge(m.OBJECTS_IN_WRITE_BACKOFF, registry)
        for resource in m.WRITE_RESOURCES:  # a series at 0 for each, not "no data"
            self.write_backoff.labels(resource=resource).set(0)

    # the cluster layer's WatchReporter: caches report through these, never touching the metrics
    def watch_restarted(self, resource: str) -> None:
        self.watch_restarts.labels(resource=resource).inc()

    def source_error(self, source: str, kind: str) -> None:
        self.source_errors.labels(source=source, kind=kind).inc()

    # the act layer's WriteCounters: the writers count through these
    def write_done(self, resource: str, verb: str) -> None:
        self.writes.labels(resource=resource, verb=verb).inc()

    def write_failed(self, resource: str, kind: str) -> None:
        self.write_errors.labels(resource=resource, kind=kind).inc()

    def objects_in_backoff(self, resource: str, count: int) -> None:
        self.write_backoff.labels(resource=resource).set(count)

    def event_deduplicated(self) -> None:
        self.events_deduplicated.inc()
