"""Metric names the dashboards and alert rules read that no queuepilot catalog defines, with their source.

DCGM names are not listed: ``exporter.metrics`` catalogs them (queuepilot's exporter is a drop-in).
A name used by a dashboard or rule must be in a catalog or here (tests/observability/test_metric_names.py).
"""

from __future__ import annotations

KNOWN_EXTERNAL: dict[str, str] = {
    # Prometheus itself
    "up": "Prometheus: scrape health of every target",
    # Kueue (kubernetes-sigs/kueue pkg/metrics/metrics.go)
    "kueue_pending_workloads": "Kueue: gauge [cluster_queue, status, replica_role]",
    "kueue_admission_wait_time_seconds_bucket": "Kueue: histogram [cluster_queue, priority_class, replica_role]",
    "kueue_cluster_queue_nominal_quota": (
        "Kueue: gauge [cohort, cluster_queue, flavor, resource, replica_role]; needs "
        "metrics.enableClusterQueueResources: true"
    ),
    "kueue_cluster_queue_resource_usage": (
        "Kueue: gauge [cohort, cluster_queue, flavor, resource, replica_role]; needs "
        "metrics.enableClusterQueueResources: true"
    ),
    "kueue_evicted_workloads_total": (
        "Kueue: counter [cluster_queue, reason, underlying_cause, priority_class, replica_role]"
    ),
    # Ray (node metrics on port 8080, scraped by KubeRay's PodMonitor which adds ray_io_cluster)
    "ray_tasks": "Ray: gauge [State, Name, JobId, IsRetry, Source] (sum by State)",
    "ray_object_store_used_memory": "Ray: gauge, bytes",
    "ray_object_store_available_memory": "Ray: gauge, bytes",
    "ray_resources": "Ray: gauge [Name, State=USED|AVAILABLE, NodeAddress] logical slots",
    "ray_scheduler_unscheduleable_tasks": "Ray: gauge [Reason]",
    # kube-state-metrics
    "kube_pod_labels": (
        "kube-state-metrics: pod labels as label_<name>; the queue labels Kueue sets on pods need "
        "--metric-labels-allowlist=pods=[kueue.x-k8s.io/local-queue-name,kueue.x-k8s.io/cluster-queue-name]"
    ),
}
