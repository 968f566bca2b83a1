"""The controller's metric catalog.

One table names every family the controller exposes; ``autoscaler/controller/collector.py`` renders them
from the latest ``ClusterSnapshot`` and the decision/self counters, dashboards and alerts import
the names from here, and docs/metrics.md is generated from it.  Label values are bounded:
reasons come from ``autoscaler.core.reasons``; there are no per-workload or per-task series.
"""

from __future__ import annotations

from exporter.metrics import MetricSpec

# Buckets past Kueue's 40 960 s top (Kueue: 1s * 2^n up to 40960 s); ours go to ~2 days.
WAIT_BUCKETS: tuple[float, ...] = (
    1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 28800, 40960, 86400, 172800,
)
DECISION_BUCKETS: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600)
RECONCILE_BUCKETS: tuple[float, ...] = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# --- queues -------------------------------------------------------------------------------------------
QUEUE_PENDING_WORKLOADS = MetricSpec(
    "queuepilot_queue_pending_workloads", "gauge",
    "Workloads waiting for quota or admission (not admitted, not finished, active).",
    "count", ("cluster_queue", "namespace", "local_queue"), "STABLE", "Kueue Workloads",
)
QUEUE_OLDEST_PENDING = MetricSpec(
    "queuepilot_queue_oldest_pending_seconds", "gauge",
    "Age of the oldest pending workload as a person sees it: from its creation (or, for a workload admitted and "
    "evicted later, from that eviction), across Retries and requeues.",
    "seconds", ("cluster_queue", "namespace", "local_queue"), "STABLE", "Kueue Workloads",
)
QUEUE_OLDEST_PENDING_SINCE_REQUEUE = MetricSpec(
    "queuepilot_queue_oldest_pending_since_requeue_seconds", "gauge",
    "Age of the oldest pending workload by Kueue's rule: from creation or its last Requeued transition (what "
    "kueue_admission_wait_time_seconds will record at admission); a Retry restarts it.",
    "seconds", ("cluster_queue", "namespace", "local_queue"), "STABLE", "Kueue Workloads",
)
QUEUE_PENDING_GPUS = MetricSpec(
    "queuepilot_queue_pending_gpus", "gauge",
    "GPUs requested by pending workloads, by the flavor they are assigned or would most likely get.",
    "count", ("cluster_queue", "flavor"), "STABLE", "Kueue Workloads",
)
QUEUE_WAIT_SECONDS = MetricSpec(
    "queuepilot_queue_wait_seconds", "histogram",
    "Time from creation or last requeue to admission, including time held by admission checks.",
    "seconds", ("cluster_queue",), "STABLE", "Kueue Workloads (Admitted transition)",
)

# --- capacity -----------------------------------------------------------------------------------------
FLAVOR_GPUS = MetricSpec(
    "queuepilot_flavor_gpus", "gauge",
    "GPUs of a ResourceFlavor by state: nominal quota, healthy, unhealthy, allocated, free (healthy, unallocated, unpromised).",
    "count", ("flavor", "state"), "STABLE", "Nodes + exporter GPU signal + ClusterQueues",
)
FLAVOR_LARGEST_FREE_BLOCK = MetricSpec(
    "queuepilot_flavor_largest_free_block_gpus", "gauge",
    "Largest number of free healthy GPUs on one node of the flavor (the biggest pod that can be placed).",
    "count", ("flavor",), "STABLE", "Nodes + exporter GPU signal",
)

# --- admission ----------------------------------------------------------------------------------------
ADMISSION_DECISIONS_TOTAL = MetricSpec(
    "queuepilot_admission_decisions_total", "counter",
    "AdmissionCheck decisions written, by state and reason (state=Pending: the entry left Pending with a new "
    "message, e.g. waiting for GPUs with quota reserved); mode=dry_run counts the state a live controller would "
    "have written (in dry-run every check is set Ready).",
    "count", ("cluster_queue", "state", "reason", "mode"), "STABLE", "admission policy",
)
ADMISSION_DECISION_SECONDS = MetricSpec(
    "queuepilot_admission_decision_seconds", "histogram",
    "Time from QuotaReserved=True to our decision on the workload.",
    "seconds", (), "STABLE", "admission policy",
)
RESERVED_GPUS = MetricSpec(
    "queuepilot_admission_reserved_gpus", "gauge",
    "GPUs promised to workloads marked Ready whose pods are not yet running (the reservation ledger).",
    "count", ("flavor",), "ALPHA", "admission ledger",
)

# --- Ray ------------------------------------------------------------------------------------------------
RAY_WORKERS = MetricSpec(
    "queuepilot_raycluster_workers", "gauge",
    "Worker replicas of a RayCluster worker group: current, desired (our recommendation), min, max.",
    "count", ("namespace", "raycluster", "group", "kind"), "STABLE", "RayCluster spec/status + scaler",
)
RAY_PENDING_GPUS = MetricSpec(
    "queuepilot_raycluster_pending_gpus", "gauge",
    "GPUs requested by Ray demand (tasks, actors, placement groups) that is not yet scheduled.",
    "count", ("namespace", "raycluster", "group"), "STABLE", "Ray dashboard API",
)
RAY_GPU_UTILIZATION = MetricSpec(
    "queuepilot_raycluster_gpu_utilization_ratio", "gauge",
    "Mean GPU utilization (0-1) of the group's workers' GPUs.",
    "ratio", ("namespace", "raycluster", "group"), "STABLE", "exporter GPU signal joined by pod",
)
RAY_IDLE_GPUS = MetricSpec(
    "queuepilot_raycluster_idle_gpus", "gauge",
    "GPUs held by workers that are idle (utilization under the threshold for the idle window, no Ray work).",
    "count", ("namespace", "raycluster", "group"), "STABLE", "scaler",
)

# --- scaling --------------------------------------------------------------------------------------------
SCALE_DECISIONS_TOTAL = MetricSpec(
    "queuepilot_scale_decisions_total", "counter",
    "Worker-group scaling decisions by direction and reason; mode=dry_run counts what a live controller would have "
    "done (nothing is written in dry-run).",
    "count", ("namespace", "raycluster", "group", "direction", "reason", "mode"), "STABLE", "scaling policy",
)

RECLAIMED_WORKERS_TOTAL = MetricSpec(
    "queuepilot_reclaimed_workers_total", "counter",
    "Ray workers queuepilot deleted by name (workersToDelete), by why: reason=empty (nothing ran on it) or "
    "reason=idle_actor (Ray actors/tasks on it were killed: killed work); mode=dry_run counts the would-be deletions.",
    "count", ("namespace", "raycluster", "group", "reason", "mode"), "ALPHA", "scaling policy",
)

# --- stalled workloads ------------------------------------------------------------------------------------
STALLED_WORKLOADS = MetricSpec(
    "queuepilot_stalled_workloads", "gauge",
    "Admitted workloads whose GPUs have all stayed under the stall threshold for the stall window, per ClusterQueue.",
    "count", ("cluster_queue",), "ALPHA", "stall detector",
)
STALLED_WORKLOAD_GPUS = MetricSpec(
    "queuepilot_stalled_workload_gpus", "gauge",
    "GPUs held by stalled workloads, per ClusterQueue.",
    "count", ("cluster_queue",), "ALPHA", "stall detector",
)
STALL_DEACTIVATIONS_TOTAL = MetricSpec(
    "queuepilot_stall_deactivations_total", "counter",
    "Stalled workloads deactivated (spec.active: false) in opted-in ClusterQueues or namespaces; mode=dry_run counts "
    "the would-be deactivations (nothing is written in dry-run).",
    "count", ("cluster_queue", "mode"), "ALPHA", "stall detector",
)

# --- self -----------------------------------------------------------------------------------------------
IS_LEADER = MetricSpec(
    "queuepilot_controller_is_leader", "gauge",
    "1 if this replica holds the leader Lease and acts, 0 if it only serves metrics.",
    "bool", (), "STABLE", "leader election",
)
RECONCILE_SECONDS = MetricSpec(
    "queuepilot_reconcile_seconds", "histogram",
    "Time one pass of a control loop took.",
    "seconds", ("loop",), "STABLE", "controller",
)
WATCH_RESTARTS_TOTAL = MetricSpec(
    "queuepilot_watch_restarts_total", "counter",
    "Watch streams restarted (dropped connection, 410 Gone relist, error backoff), by resource.",
    "count", ("resource",), "STABLE", "cluster view",
)
SIGNAL_AGE_SECONDS = MetricSpec(
    "queuepilot_signal_age_seconds", "gauge",
    "Age of the newest data from each input signal (gpu, ray, and each watched resource).",
    "seconds", ("signal",), "STABLE", "signals",
)
SIGNAL_STALE = MetricSpec(
    "queuepilot_signal_stale", "gauge",
    "1 when a signal is older than its staleness limit and decisions treat it as missing.",
    "bool", ("signal",), "ALPHA", "signals",
)
SOURCE_ERRORS_TOTAL = MetricSpec(
    "queuepilot_source_errors_total", "counter",
    "Errors reading an input (malformed object, bad HTTP answer, timeout), by source and bounded kind.",
    "count", ("source", "kind"), "STABLE", "cluster view + signals",
)
WRITE_ERRORS_TOTAL = MetricSpec(
    "queuepilot_write_errors_total", "counter",
    "Failed writes to the API server (after retries), by resource and bounded kind (conflict, invalid, forbidden, server).",
    "count", ("resource", "kind"), "STABLE", "actuators",
)
WRITES_TOTAL = MetricSpec(
    "queuepilot_writes_total", "counter",
    "Writes made to the API server, by resource and verb (only writes that were made: in dry-run the Ready check "
    "states, the Active condition and Events).",
    "count", ("resource", "verb"), "ALPHA", "actuators",
)
OBJECTS_IN_WRITE_BACKOFF = MetricSpec(
    "queuepilot_objects_in_write_backoff", "gauge",
    "Objects whose last write failed and whose writes are held back (per-object exponential backoff), by resource.",
    "count", ("resource",), "ALPHA", "actuators",
)
EVENTS_DEDUPLICATED_TOTAL = MetricSpec(
    "queuepilot_events_deduplicated_total", "counter",
    "Events not sent because the same Event already exists (posted before, e.g. by the previous leader).",
    "count", (), "ALPHA", "actuators",
)
WEBHOOK_REVIEWS_TOTAL = MetricSpec(
    "queuepilot_webhook_reviews_total", "counter",
    "AdmissionReviews answered by the queue-name webhook, by object kind and result (autoscaler.webhook.server.RESULTS).",
    "count", ("kind", "result"), "ALPHA", "queue-name webhook",
)
CACHE_OBJECTS = MetricSpec(
    "queuepilot_cache_objects", "gauge",
    "Objects held in the watch cache, by resource.",
    "count", ("resource",), "ALPHA", "cluster view",
)
CACHE_SYNCED = MetricSpec(
    "queuepilot_cache_synced", "gauge",
    "1 once the resource's initial list has completed.",
    "bool", ("resource",), "ALPHA", "cluster view",
)

# --- economics ------------------------------------------------------------------------------------------
POD_INFO = MetricSpec(
    "queuepilot_pod_info", "gauge",
    "1 for every pod holding GPUs that the controller knows, with the keys that attribute its GPU series "
    "to a namespace, a LocalQueue and ClusterQueue, a Kueue flavor and job kind, and a Ray worker group.",
    "bool", ("namespace", "pod", "raycluster", "group", "cluster_queue", "local_queue", "flavor", "job_kind"),
    "ALPHA", "snapshot: Ray workers, Kueue pods and Workloads, exporter GPU attribution",
)
RECOMMENDATION_GPUS_PER_WORKER = MetricSpec(
    "queuepilot_recommendation_gpus_per_worker", "gauge",
    "Recommended GPUs per worker of a Ray worker group, from the GPUs its workers kept active.",
    "count", ("namespace", "raycluster", "group"), "ALPHA", "right-sizing recommender",
)
RECOMMENDATION_MIN_REPLICAS = MetricSpec(
    "queuepilot_recommendation_min_replicas", "gauge",
    "Recommended minReplicas of a Ray worker group, from a low percentile of its busy workers.",
    "count", ("namespace", "raycluster", "group"), "ALPHA", "right-sizing recommender",
)
RECOMMENDATION_MAX_REPLICAS = MetricSpec(
    "queuepilot_recommendation_max_replicas", "gauge",
    "Recommended maxReplicas of a Ray worker group, from a high percentile of its busy workers plus a margin.",
    "count", ("namespace", "raycluster", "group"), "ALPHA", "right-sizing recommender",
)
RECOMMENDATION_SAVED_GPU_SECONDS = MetricSpec(
    "queuepilot_recommendation_saved_gpu_seconds", "gauge",
    "Idle GPU-seconds the recommendation would have saved over the group's recorded history.",
    "seconds", ("namespace", "raycluster", "group"), "ALPHA", "right-sizing recommender",
)
RECOMMENDATION_WITHHELD = MetricSpec(
    "queuepilot_recommendation_withheld", "gauge",
    "1 for a Ray worker group that gets no recommendation, with the reason (too little history, no data, no GPUs).",
    "bool", ("namespace", "raycluster", "group", "reason"), "ALPHA", "right-sizing recommender",
)

# --- MultiKueue dispatcher (manager cluster, --multikueue-dispatcher) ---------------------------------
WORKER_CLUSTER_GPUS = MetricSpec(
    "queuepilot_worker_cluster_gpus", "gauge",
    "GPUs of a ResourceFlavor in a MultiKueue worker cluster by state: healthy, unhealthy, allocated, free "
    "(healthy, unallocated, unpromised), promised (reserved for nominated workloads).",
    "count", ("cluster", "flavor", "state"), "ALPHA", "worker Nodes/Pods + shared Prometheus GPU series",
)
WORKER_CLUSTER_LARGEST_FREE_BLOCK = MetricSpec(
    "queuepilot_worker_cluster_largest_free_block_gpus", "gauge",
    "Largest number of free, healthy, unpromised GPUs on one node of the flavor in a worker cluster.",
    "count", ("cluster", "flavor"), "ALPHA", "worker Nodes/Pods + shared Prometheus GPU series",
)
WORKER_CLUSTER_UP = MetricSpec(
    "queuepilot_worker_cluster_up", "gauge",
    "1 when the worker cluster may be nominated (MultiKueueCluster Active, reachable, capacity fresh), else 0.",
    "bool", ("cluster",), "ALPHA", "MultiKueueClusters + worker caches",
)
WORKER_CLUSTER_CAPACITY_AGE = MetricSpec(
    "queuepilot_worker_cluster_capacity_age_seconds", "gauge",
    "Seconds since the worker cluster's Nodes and Pods caches were last known current.",
    "seconds", ("cluster",), "ALPHA", "worker caches",
)
WORKER_CLUSTER_CONNECT_FAILING = MetricSpec(
    "queuepilot_worker_cluster_connect_failing", "gauge",
    "1 while the worker cluster cannot be connected, by the kind of failure (forbidden, missing, malformed, "
    "unsupported, insecure, unavailable, exception: autoscaler.cluster.remote.FLEET_ERROR_KINDS); no series "
    "while it is connected.",
    "bool", ("cluster", "kind"), "ALPHA", "MultiKueueCluster kubeconfig Secrets",
)
DISPATCH_DECISIONS_TOTAL = MetricSpec(
    "queuepilot_dispatch_decisions_total", "counter",
    "MultiKueue nominations written (or, with mode=dry_run, that would have been) and nothing-fits verdicts, by reason.",
    "count", ("reason", "mode"), "ALPHA", "dispatch policy",
)

QUEUE_FAMILIES = (QUEUE_PENDING_WORKLOADS, QUEUE_OLDEST_PENDING, QUEUE_OLDEST_PENDING_SINCE_REQUEUE, QUEUE_PENDING_GPUS,
                  QUEUE_WAIT_SECONDS)
CAPACITY_FAMILIES = (FLAVOR_GPUS, FLAVOR_LARGEST_FREE_BLOCK)
ADMISSION_FAMILIES = (ADMISSION_DECISIONS_TOTAL, ADMISSION_DECISION_SECONDS, RESERVED_GPUS)
RAY_FAMILIES = (RAY_WORKERS, RAY_PENDING_GPUS, RAY_GPU_UTILIZATION, RAY_IDLE_GPUS)
SCALING_FAMILIES = (SCALE_DECISIONS_TOTAL, RECLAIMED_WORKERS_TOTAL)
ECONOMICS_FAMILIES = (
    POD_INFO, RECOMMENDATION_GPUS_PER_WORKER, RECOMMENDATION_MIN_REPLICAS, RECOMMENDATION_MAX_REPLICAS,
    RECOMMENDATION_SAVED_GPU_SECONDS, RECOMMENDATION_WITHHELD,
)
# rendered by autoscaler.controller.dispatch.FleetCollector (dispatcher mode only); joins CATALOG once
# tools/gen_metrics_doc.py has a section for them
FLEET_FAMILIES = (
    WORKER_CLUSTER_GPUS, WORKER_CLUSTER_LARGEST_FREE_BLOCK, WORKER_CLUSTER_UP, WORKER_CLUSTER_CAPACITY_AGE,
    WORKER_CLUSTER_CONNECT_FAILING, DISPATCH_DECISIONS_TOTAL,
)
STALL_FAMILIES = (STALLED_WORKLOADS, STALLED_WORKLOAD_GPUS, STALL_DEACTIVATIONS_TOTAL)
SELF_FAMILIES = (
    IS_LEADER, RECONCILE_SECONDS, WATCH_RESTARTS_TOTAL, SIGNAL_AGE_SECONDS, SIGNAL_STALE,
    SOURCE_ERRORS_TOTAL, WRITE_ERRORS_TOTAL, WRITES_TOTAL, OBJECTS_IN_WRITE_BACKOFF, EVENTS_DEDUPLICATED_TOTAL,
    WEBHOOK_REVIEWS_TOTAL, CACHE_OBJECTS, CACHE_SYNCED,
)

CATALOG: tuple[MetricSpec, ...] = (
    *QUEUE_FAMILIES, *CAPACITY_FAMILIES, *ADMISSION_FAMILIES, *RAY_FAMILIES, *SCALING_FAMILIES, *STALL_FAMILIES,
    *SELF_FAMILIES, *ECONOMICS_FAMILIES, *FLEET_FAMILIES,
)
BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}

FLAVOR_STATES = ("nominal", "healthy", "unhealthy", "allocated", "free")
WORKER_KINDS = ("current", "desired", "min", "max")
DIRECTIONS = ("up", "down", "hold")
MODES = ("live", "dry_run")  # the ``mode`` label of the decision counters
WRITE_RESOURCES = ("workloads/status", "workloads", "admissionchecks/status", "rayclusters", "events")
RECLAIM_KINDS = ("empty", "idle_actor")  # the ``reason`` label of queuepilot_reclaimed_workers_total  # ``resource`` of writes
