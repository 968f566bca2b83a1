"""Queues: pending workloads, oldest pending age, wait quantiles, pending GPUs by flavor, Kueue quota
against healthy capacity, admission-check decisions and retry loops, stalled workloads."""

from __future__ import annotations

from autoscaler import metrics as cm
from dashboards import common as c

UID = "queuepilot-queues"

# Kueue's own series (kubernetes-sigs/kueue pkg/metrics/metrics.go); quota/usage need metrics.enableClusterQueueResources
KUEUE_PENDING = "kueue_pending_workloads"
KUEUE_ADMISSION_WAIT_BUCKET = "kueue_admission_wait_time_seconds_bucket"
KUEUE_NOMINAL_QUOTA = "kueue_cluster_queue_nominal_quota"
KUEUE_RESOURCE_USAGE = "kueue_cluster_queue_resource_usage"
KUEUE_EVICTED = "kueue_evicted_workloads_total"
GPU_RESOURCE = "nvidia.com/gpu"

Q = 'cluster=~"$cluster",cluster_queue=~"$queue"'
KQ = Q + ',replica_role!="follower"'  # Kueue HA: only the leader's numbers
FL = 'cluster=~"$cluster",flavor=~"$flavor"'


def build():
    wait_bucket = f"{cm.QUEUE_WAIT_SECONDS.name}_bucket"
    decisions = cm.ADMISSION_DECISIONS_TOTAL.name
    flavor_gpus = cm.FLAVOR_GPUS.name
    panels = [
        (c.row("Waiting"), 24, 1),
        (c.timeseries(
            "Pending workloads",
            "Workloads waiting for quota or for admission checks, per LocalQueue (queuepilot's count).",
            "none",
            c.targets((
                f"sum by (cluster_queue, namespace, local_queue) ({cm.QUEUE_PENDING_WORKLOADS.name}{{{Q}}})",
                "{{cluster_queue}} / {{namespace}}/{{local_queue}}",
            )),
            stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Kueue pending workloads",
            "Kueue's own count, by status: active (can be tried) or inadmissible (backoff, inactive queue).",
            "none",
            c.targets((f"sum by (cluster_queue, status) ({KUEUE_PENDING}{{{KQ}}})", "{{cluster_queue}} {{status}}")),
            stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Oldest pending workload",
            "Age of the oldest still-pending workload per LocalQueue as its owner sees it: from creation (or from "
            "the eviction of a workload that had been admitted), across Retries and requeues. Kueue records wait "
            "only at admission, so a stuck workload is visible only here. Dashed: Kueue's rule, from the last "
            "requeue (what kueue_admission_wait_time_seconds will record); a Retry restarts it.",
            "s",
            c.targets(
                (
                    f"max by (cluster_queue, namespace, local_queue) ({cm.QUEUE_OLDEST_PENDING.name}{{{Q}}})",
                    "{{cluster_queue}} / {{namespace}}/{{local_queue}}",
                ),
                (
                    f"max by (cluster_queue, namespace, local_queue) "
                    f"({cm.QUEUE_OLDEST_PENDING_SINCE_REQUEUE.name}{{{Q}}})",
                    "since requeue (Kueue) {{cluster_queue}} / {{namespace}}/{{local_queue}}",
                ),
            ),
            dashed="since requeue",
        ), 12, 8),
        (c.timeseries(
            "Wait until admission (quantiles)",
            "p50 / p90 / p99 of the time from creation or requeue to admission, including time held by "
            "admission checks (queuepilot_queue_wait_seconds).",
            "s",
            c.targets(*[
                (
                    f"histogram_quantile({q}, sum by (le, cluster_queue) "
                    f"(rate({wait_bucket}{{{Q}}}[$__rate_interval])))",
                    f"p{int(q * 100)} {{{{cluster_queue}}}}",
                )
                for q in (0.5, 0.9, 0.99)
            ]),
        ), 12, 8),
        (c.timeseries(
            "Kueue admission wait p90",
            "Kueue's own kueue_admission_wait_time_seconds p90, for comparison (its top bucket is 40960 s).",
            "s",
            c.targets((
                f"histogram_quantile(0.9, sum by (le, cluster_queue) "
                f"(rate({KUEUE_ADMISSION_WAIT_BUCKET}{{{KQ}}}[$__rate_interval])))",
                "p90 {{cluster_queue}}",
            )),
        ), 12, 8),
        (c.timeseries(
            "Pending GPUs by flavor",
            "GPUs requested by pending workloads, by the flavor they are assigned or would most likely get.",
            "none",
            c.targets((f"sum by (flavor) ({cm.QUEUE_PENDING_GPUS.name}{{{Q}}})", "{{flavor}}")),
            stacked=True,
        ), 12, 8),
        (c.row("Quota and capacity"), 24, 1),
        (c.timeseries(
            "GPU quota vs healthy capacity",
            "Kueue's nominal GPU quota and GPUs in use (kueue_cluster_queue_*, needs "
            "metrics.enableClusterQueueResources) against the healthy GPUs queuepilot counts on the "
            "flavor's nodes (dashed).",
            "none",
            c.targets(
                (
                    f'sum by (flavor) ({KUEUE_NOMINAL_QUOTA}{{{KQ},resource="{GPU_RESOURCE}",flavor=~"$flavor"}})',
                    "quota {{flavor}}",
                ),
                (
                    f'sum by (flavor) ({KUEUE_RESOURCE_USAGE}{{{KQ},resource="{GPU_RESOURCE}",flavor=~"$flavor"}})',
                    "in use {{flavor}}",
                ),
                (f'max by (flavor) ({flavor_gpus}{{{FL},state="healthy"}})', "capacity healthy {{flavor}}"),
            ),
            capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Flavor GPUs by state",
            "GPUs of each flavor: allocated, free (healthy, unallocated, not promised) and unhealthy; "
            "the dashed line is the nominal quota.",
            "none",
            c.targets(
                (
                    f'max by (flavor, state) ({flavor_gpus}{{{FL},state=~"allocated|free|unhealthy"}})',
                    "{{flavor}} {{state}}",
                ),
                (f'max by (flavor) ({flavor_gpus}{{{FL},state="nominal"}})', "capacity nominal {{flavor}}"),
            ),
            stacked=True, capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Largest free block",
            "Most free healthy GPUs on one node of the flavor: the biggest pod that can be placed now.",
            "none",
            c.targets((f"max by (flavor) ({cm.FLAVOR_LARGEST_FREE_BLOCK.name}{{{FL}}})", "{{flavor}}")),
        ), 12, 8),
        (c.timeseries(
            "Reserved GPUs",
            "GPUs promised to workloads marked Ready whose pods are not running yet (reservation ledger).",
            "none",
            c.targets((f"max by (flavor) ({cm.RESERVED_GPUS.name}{{{FL}}})", "{{flavor}}")),
        ), 12, 8),
        (c.row("Admission checks"), 24, 1),
        (c.timeseries(
            "Admission decisions",
            "AdmissionCheck answers per second by state (Ready, Retry, Rejected). With the controller in "
            "dry-run the series carry mode=dry_run and count what a live controller would have answered.",
            "ops",
            c.targets((
                f"sum by (cluster_queue, state, mode) (rate({decisions}{{{Q}}}[$__rate_interval]))",
                "{{cluster_queue}} {{state}} {{mode}}",
            )),
            stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Retry loops",
            "Retry answers per queue and reason in each interval: a steady stream means the queue's quota "
            "admits work the healthy, placeable GPUs cannot hold (mode=dry_run: would-be Retries).",
            "short",
            c.targets((
                f'sum by (cluster_queue, reason, mode) (increase({decisions}{{{Q},state="Retry"}}[$__rate_interval]))',
                "{{cluster_queue}} {{reason}} {{mode}}",
            )),
            bars=True,
        ), 12, 8),
        (c.timeseries(
            "Decision latency p90",
            "p90 time from QuotaReserved to queuepilot's decision.",
            "s",
            c.targets((
                f"histogram_quantile(0.9, sum by (le) "
                f'(rate({cm.ADMISSION_DECISION_SECONDS.name}_bucket{{cluster=~"$cluster"}}[$__rate_interval])))',
                "p90",
            )),
        ), 12, 8),
        (c.timeseries(
            "Kueue evictions",
            "Kueue evictions per second by reason (AdmissionCheck = a Retry from queuepilot).",
            "ops",
            c.targets((
                f"sum by (cluster_queue, reason) (rate({KUEUE_EVICTED}{{{KQ}}}[$__rate_interval]))",
                "{{cluster_queue}} {{reason}}",
            )),
        ), 12, 8),
        (c.row("Stalled workloads"), 24, 1),
        (c.timeseries(
            "Stalled workloads",
            "Admitted workloads whose GPUs have all stayed under stall.gpu_utilization for stall.window, per "
            "ClusterQueue, and the GPUs (and quota) they hold while computing nothing. Each stall also gives a "
            "Warning Event StalledWorkload on the Workload; alert QueuePilotStalledWorkload.",
            "none",
            c.targets(
                (f"sum by (cluster_queue) ({cm.STALLED_WORKLOADS.name}{{{Q}}})", "workloads {{cluster_queue}}"),
                (f"sum by (cluster_queue) ({cm.STALLED_WORKLOAD_GPUS.name}{{{Q}}})",
                 "GPUs held by stalled workloads {{cluster_queue}}"),
            ),
        ), 12, 8),
        (c.timeseries(
            "Stalled workloads deactivated",
            "Stalled workloads set spec.active: false per interval (only in the ClusterQueues and namespaces "
            "listed in stall.deactivate_*; Kueue evicts them and releases their quota). mode=dry_run: "
            "would-be deactivations, nothing written.",
            "short",
            c.targets((
                f"sum by (cluster_queue, mode) "
                f"(increase({cm.STALL_DEACTIVATIONS_TOTAL.name}{{{Q}}}[$__rate_interval]))",
                "{{cluster_queue}} {{mode}}",
            )),
            bars=True,
        ), 12, 8),
    ]
    variables = [
        c.cluster_variable(cm.QUEUE_PENDING_WORKLOADS.name),
        c.query_variable(
            "queue", "ClusterQueue", f'label_values({cm.QUEUE_PENDING_WORKLOADS.name}{{cluster=~"$cluster"}}, cluster_queue)',
        ),
        c.query_variable("flavor", "Flavor", f'label_values({cm.FLAVOR_GPUS.name}{{cluster=~"$cluster"}}, flavor)'),
    ]
    return c.dashboard(
        "queuepilot / Queues", UID,
        "Kueue queues: what waits, for how long, for which GPUs, and what the capacity check answers.",
        variables, panels,
    )
