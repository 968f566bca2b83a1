"""queuepilot's Prometheus alert rules, written as data.

Naming: alerts about a GPU device are ``GPU…``; alerts about what queuepilot measures or runs
(exporter, queues, Ray groups, the controller) are ``QueuePilot…``.  Every alert carries
``severity`` (critical = page now, warning = work queue, info = context), a ``for``, a
``summary`` without label values, a ``description`` with them and a ``runbook_url`` to the
alert's anchor in docs/runbooks.md (``<base>#<lowercased alert name>``).

Metric names come from the catalogs (``exporter.metrics``, ``autoscaler.metrics``); GPU health
reasons from the exporter's health module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from alerts.config import AlertConfig, chart_template, fmt_number, for_token
from autoscaler import metrics as cm
from exporter import metrics as em
from exporter.health import FATAL_XID as REASON_FATAL_XID
from exporter.health import GPU_LOST as REASON_GPU_LOST

SEVERITIES = ("critical", "warning", "info")

# dcgm-exporter's clock-event bitmask: bit 5 = SW thermal slowdown (0x20), bit 6 = HW thermal (0x40)
_THERMAL_BITS = "(floor({m} / 32) % 4) > 0"

# queuepilot's own GPU families use snake_case identity labels (hostname, uuid); every GPU alert also
# carries dcgm-exporter's Hostname / UUID so routing and inhibition match across both kinds of alert.
def _dcgm_identity(expr: str) -> str:
    return f'label_replace(label_replace({expr}, "Hostname", "$1", "hostname", "(.+)"), "UUID", "$1", "uuid", "(.+)")'


def _dcgm_host(expr: str) -> str:
    return f'label_replace({expr}, "Hostname", "$1", "hostname", "(.+)")'


# decisions a dry-run controller only reports (mode="dry_run") changed nothing: no workload was sent
# back or deactivated, so the admission alerts count the others (live, or from before the label existed)
LIVE = 'mode!="dry_run"'

# pod labels arrive as pod/namespace (honorLabels) or exported_pod/exported_namespace (without)
_POD_NORMALIZE = (
    'label_replace(label_replace({expr}, "pod", "$1", "exported_pod", "(.+)"), '
    '"namespace", "$1", "exported_namespace", "(.+)")'
)


def _leader_only(expr: str, selector: str) -> str:
    """``expr`` as exported by the replica holding the leader lease (same scrape target)."""
    return f"({expr}) and on (job, instance) ({cm.IS_LEADER.name}{{{selector}}} == 1)"


# where a description names how long the condition has held: replaced by the alert's `for`
FOR_MARK = "%FOR%"


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    group: str

    def to_rule(self, config: AlertConfig) -> dict:
        for_ = config.for_overrides.get(self.name, self.for_)
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description.replace(FOR_MARK, for_),
                "runbook_url": f"{config.runbook_base_url}#{self.name.lower()}",
            },
        }


GROUP_ORDER = (
    "queuepilot-gpu",
    "queuepilot-allocation",
    "queuepilot-queues",
    "queuepilot-ray",
    "queuepilot-controller",
)


def alerts(c: AlertConfig) -> list[Alert]:
    """Every alert, rendered with the thresholds in ``c``."""
    n = fmt_number
    healthy = em.GPU_HEALTHY.name
    gpu_where = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on node {{ $labels.Hostname }}"
    by_group = "namespace, raycluster, group"
    workers = cm.RAY_WORKERS.name
    nominal = f'max by (flavor) ({cm.FLAVOR_GPUS.name}{{state="nominal"}})'
    shortfall = f'{nominal} - max by (flavor) ({cm.FLAVOR_GPUS.name}{{state="healthy"}})'
    return [
        # --- GPU -------------------------------------------------------------------------------
        Alert(
            "GPUFatalXid", "critical",
            _dcgm_identity(f'{healthy}{{reason="{REASON_FATAL_XID}"}} == 0'),
            "1m",
            "A GPU reported a fatal XID error and is marked unhealthy.",
            f"{gpu_where} reported an XID that needs a GPU reset or node reboot; queuepilot no longer "
            "counts it as capacity. The last XID code is in DCGM_FI_DEV_XID_ERRORS.",
            "queuepilot-gpu",
        ),
        Alert(
            "GPUUncorrectableEccErrors", "critical",
            f"increase({em.BY_NAME['DCGM_FI_DEV_ECC_DBE_VOL_TOTAL'].name}[{c.ecc_window}]) > 0",
            "1m",
            "A GPU has uncorrectable (double-bit) ECC memory errors.",
            f"{gpu_where} counted {{{{ printf \"%.0f\" $value }}}} uncorrectable ECC errors in the last "
            f"{c.ecc_window}; jobs on it may have computed on corrupt memory.",
            "queuepilot-gpu",
        ),
        Alert(
            "GPURowRemapFailure", "critical",
            f"{em.BY_NAME['DCGM_FI_DEV_ROW_REMAP_FAILURE'].name} > 0",
            "1m",
            "A GPU failed to remap a memory row and must be serviced.",
            f"{gpu_where} reports a row-remapping failure: it has run out of spare rows and needs an RMA "
            "or field diagnostics.",
            "queuepilot-gpu",
        ),
        Alert(
            "GPULost", "critical",
            _dcgm_identity(f'{healthy}{{reason="{REASON_GPU_LOST}"}} == 0'),
            "1m",
            "A GPU fell off the bus or stopped answering NVML.",
            f"{gpu_where} is lost (NVML cannot reach it); pods on it are stuck and the node needs a reboot.",
            "queuepilot-gpu",
        ),
        Alert(
            "GPUNodeUnhealthy", "critical",
            f"count by (Hostname) ({_dcgm_host(f'{healthy} == 0')}) >= {n(c.node_unhealthy_gpus)}",
            "5m",
            "Several GPUs on one node are unhealthy.",
            "{{ printf \"%.0f\" $value }} GPUs on node {{ $labels.Hostname }} are unhealthy; treat the node "
            "as failed (cordon and drain) rather than each GPU.",
            "queuepilot-gpu",
        ),
        Alert(
            "GPUThermalThrottling", "warning",
            f"{em.BY_NAME['DCGM_FI_DEV_GPU_TEMP'].name} and on (Hostname, UUID) "
            f"({_THERMAL_BITS.format(m=em.BY_NAME['DCGM_FI_DEV_CLOCK_THROTTLE_REASONS'].name)})",
            "15m",
            "A GPU has been slowed down for heat for a long time.",
            f"{gpu_where} has had its clocks cut for thermal reasons for %FOR%; its temperature is "
            "{{ printf \"%.0f\" $value }} C.",
            "queuepilot-gpu",
        ),
        Alert(
            "QueuePilotExporterDown", "warning",
            f"(up{{{c.exporter_selector}}} == 0) + on (job, instance) group_left (Hostname) "
            f"(0 * max by (job, instance, Hostname) ({_dcgm_host(f'max_over_time({em.EXPORTER_GPUS.name}[1h])')})) "
            f"or on (job, instance) (up{{{c.exporter_selector}}} == 0)",
            "5m",
            "A queuepilot GPU exporter cannot be scraped.",
            "The exporter at {{ $labels.instance }}{{ with $labels.Hostname }} (node {{ . }}){{ end }} has not answered scrapes "
            "for %FOR%: GPU health and utilization on that node are unknown.",
            "queuepilot-gpu",
        ),
        Alert(
            "QueuePilotExporterStale", "warning",
            _dcgm_host(f"time() - {em.EXPORTER_LAST_SUCCESS.name} > {n(c.exporter_stale_seconds)}"),
            "5m",
            "A queuepilot GPU exporter serves old GPU data.",
            "The exporter on node {{ $labels.Hostname }} (source {{ $labels.source }}) last collected "
            "{{ humanizeDuration $value }} ago; its GPU metrics are stale.",
            "queuepilot-gpu",
        ),
        # --- allocation ---------------------------------------------------------------------------
        Alert(
            "GPUAllocatedIdle", "warning",
            "count by (namespace, pod, Hostname) ("
            + _POD_NORMALIZE.format(
                expr=f"max_over_time({em.BY_NAME['DCGM_FI_DEV_GPU_UTIL'].name}[{c.idle_window}]) "
                f"< {n(c.idle_util_percent)}"
            )
            + f" and on (Hostname, UUID) {_dcgm_identity(f'{em.GPU_ALLOCATED.name} == 1')})",
            "1h",
            "GPUs allocated to a pod have been idle for a long time.",
            "{{ printf \"%.0f\" $value }} GPU(s) allocated to pod {{ $labels.namespace }}/{{ $labels.pod }} on node "
            f"{{{{ $labels.Hostname }}}} stayed below {n(c.idle_util_percent)}% utilization for all of the last "
            f"{c.idle_window}; other teams may be waiting for them.",
            "queuepilot-allocation",
        ),
        # --- queues -------------------------------------------------------------------------------
        Alert(
            "QueuePilotPendingWorkloadTooOld", "warning",
            f"max by (cluster_queue, namespace, local_queue) ({cm.QUEUE_OLDEST_PENDING.name}) > {n(c.pending_slo_seconds)}",
            "15m",
            "A workload has been pending longer than the queue's wait objective.",
            "The oldest pending workload in LocalQueue {{ $labels.namespace }}/{{ $labels.local_queue }} (ClusterQueue "
            "{{ $labels.cluster_queue }}) has waited {{ humanizeDuration $value }} since it was created (Retries and "
            f"requeues do not reset this), above the objective of {n(c.pending_slo_seconds)} s.",
            "queuepilot-queues",
        ),
        Alert(
            "QueuePilotAdmissionRetryLoop", "warning",
            f'sum by (cluster_queue) (increase({cm.ADMISSION_DECISIONS_TOTAL.name}{{state="Retry",{LIVE}}}'
            f"[{c.retry_window}])) > {n(c.retry_loop_count)}",
            "15m",
            "Workloads keep being sent back by the GPU capacity check.",
            "queuepilot answered Retry {{ printf \"%.0f\" $value }} times in "
            f"{c.retry_window} for ClusterQueue {{{{ $labels.cluster_queue }}}}: its quota admits work that the "
            "healthy, placeable GPUs cannot hold, so workloads cycle through evict and requeue.",
            "queuepilot-queues",
        ),
        Alert(
            "QueuePilotWorkloadsRejected", "warning",
            f'sum by (cluster_queue, reason) (increase({cm.ADMISSION_DECISIONS_TOTAL.name}{{state="Rejected",{LIVE}}}'
            f"[{c.rejected_window}])) > 0",
            "1m",
            "Workloads were rejected as impossible to place.",
            "ClusterQueue {{ $labels.cluster_queue }} rejected {{ printf \"%.0f\" $value }} workload(s) "
            f"in the last {c.rejected_window} (reason {{{{ $labels.reason }}}}); Kueue deactivated them and "
            "their owners must change the request.",
            "queuepilot-queues",
        ),
        Alert(
            "QueuePilotHealthyCapacityBelowQuota", "warning",
            f"({shortfall}) > {n(c.capacity_shortfall_gpus)} "
            f"and on (flavor) ({shortfall}) > {n(c.capacity_shortfall_ratio)} * {nominal}",
            "30m",
            "A flavor has clearly fewer healthy GPUs than its nominal quota.",
            "Flavor {{ $labels.flavor }} is {{ printf \"%.0f\" $value }} healthy GPUs short of the nominal quota "
            f"its ClusterQueues promise (more than {n(c.capacity_shortfall_gpus)} GPUs and more than "
            f"{n(c.capacity_shortfall_ratio)} of the quota); admitted work will wait or be retried.",
            "queuepilot-queues",
        ),
        Alert(
            "QueuePilotStalledWorkload", "warning",
            # the leader's gauge only: a replica that lost the lease keeps its last values
            "sum by (cluster_queue) ("
            + _leader_only(f"{cm.STALLED_WORKLOADS.name}{{{c.controller_selector}}}", c.controller_selector)
            + ") > 0",
            "5m",
            "Admitted workloads hold GPUs that have done no work for the stall window.",
            "ClusterQueue {{ $labels.cluster_queue }} has {{ printf \"%.0f\" $value }} stalled workload(s) (every "
            "GPU under the stall threshold for the stall window); see the StalledWorkload Events.",
            "queuepilot-queues",
        ),
        # --- Ray ----------------------------------------------------------------------------------
        Alert(
            "QueuePilotRayScalerPinnedAtMax", "warning",
            f'(max by ({by_group}) ({workers}{{kind="current"}}) '
            f'>= max by ({by_group}) ({workers}{{kind="max"}})) '
            f"and on ({by_group}) (max by ({by_group}) ({cm.RAY_PENDING_GPUS.name}) > 0)",
            "30m",
            "A Ray worker group is at its maximum size while Ray still waits for GPUs.",
            "Worker group {{ $labels.group }} of RayCluster {{ $labels.namespace }}/{{ $labels.raycluster }} "
            "has run {{ printf \"%.0f\" $value }} workers, its maxReplicas, for %FOR% while Ray tasks "
            "still wait for GPUs.",
            "queuepilot-ray",
        ),
        Alert(
            "QueuePilotRayDesiredNotReached", "warning",
            f'max by ({by_group}) ({workers}{{kind="desired"}}) '
            f'- max by ({by_group}) ({workers}{{kind="current"}}) != 0',
            "30m",
            "A Ray worker group has not reached the size queuepilot asked for.",
            "Worker group {{ $labels.group }} of RayCluster {{ $labels.namespace }}/{{ $labels.raycluster }} "
            "has differed from its desired size by {{ printf \"%.0f\" $value }} workers for %FOR% "
            "(positive: workers missing, negative: extra workers).",
            "queuepilot-ray",
        ),
        Alert(
            "QueuePilotIdleActorsKilled", "info",
            f'sum by (namespace, raycluster) (increase({cm.RECLAIMED_WORKERS_TOTAL.name}{{reason="idle_actor",{LIVE}}}[1h])) '
            f">= {n(c.idle_actors_killed_count)}",
            "1m",
            "queuepilot reclaimed many GPU workers whose Ray actors or tasks sat idle, killing that work.",
            "queuepilot deleted {{ printf \"%.0f\" $value }} workers of RayCluster {{ $labels.namespace }}/"
            "{{ $labels.raycluster }} in the last hour whose GPUs stayed idle while Ray actors/tasks held them; "
            f"that work was killed (alert threshold {n(c.idle_actors_killed_count)} per hour; past "
            "scaling.reclaim_budget_per_hour, 4 by default, a cluster's reclaims wait). The "
            "IdleActorsReclaimed / IdleWorkersReplaced Events name the pods.",
            "queuepilot-ray",
        ),
        # --- controller ---------------------------------------------------------------------------
        Alert(
            "QueuePilotControllerNoLeader", "critical",
            f"max({cm.IS_LEADER.name}{{{c.controller_selector}}}) < 1 "
            f"or absent({cm.IS_LEADER.name}{{{c.controller_selector}}})",
            "5m",
            "No queuepilot controller replica holds the leader lease.",
            "{{ if $labels.job }}No target of job {{ $labels.job }} exports queuepilot_controller_is_leader"
            "{{ else }}No queuepilot controller replica holds the leader lease{{ end }}: admission checks are "
            "not answered (Kueue admits nothing through the GPU capacity check) and no Ray group is scaled.",
            "queuepilot-controller",
        ),
        Alert(
            "QueuePilotControllerWatchRestarts", "warning",
            f"sum by (resource) (increase({cm.WATCH_RESTARTS_TOTAL.name}[{c.watch_restart_window}])) "
            f"> {n(c.watch_restart_count)}",
            "15m",
            "The controller keeps restarting a watch.",
            "The controller's watch on {{ $labels.resource }} restarted {{ printf \"%.0f\" $value }} times in "
            f"{c.watch_restart_window}; its view of the cluster may lag.",
            "queuepilot-controller",
        ),
        Alert(
            "QueuePilotControllerSignalStale", "warning",
            f"max by (signal) ({cm.SIGNAL_AGE_SECONDS.name}) "
            f"and on (signal) (max by (signal) ({cm.SIGNAL_STALE.name}) == 1)",
            "10m",
            "A controller input signal is stale; decisions that need it hold.",
            "The controller's {{ $labels.signal }} signal is {{ humanizeDuration $value }} old, past its "
            "staleness limit; scaling holds and admission follows the stale-signal policy.",
            "queuepilot-controller",
        ),
        Alert(
            "QueuePilotControllerWriteErrors", "warning",
            f"sum by (resource, kind) (increase({cm.WRITE_ERRORS_TOTAL.name}[{c.write_error_window}])) "
            f"> {n(c.write_error_count)}",
            "10m",
            "The controller fails to write to the API server.",
            "{{ printf \"%.0f\" $value }} writes to {{ $labels.resource }} failed with {{ $labels.kind }} "
            f"errors in {c.write_error_window} after retries; decisions are not being applied.",
            "queuepilot-controller",
        ),
        # --- MultiKueue dispatcher (manager cluster) -------------------------------------------------
        # only the leader's view: a replica that lost the lease keeps exporting its last values
        Alert(
            "QueuePilotWorkerClusterUnreachable", "warning",
            _leader_only(f"{cm.WORKER_CLUSTER_UP.name}{{{c.controller_selector}}} == 0", c.controller_selector),
            "5m",
            "A MultiKueue worker cluster cannot be nominated.",
            "Worker cluster {{ $labels.cluster }} has been inactive, unreachable or stale for %FOR%; "
            "queuepilot nominates no workload to it.",
            "queuepilot-controller",
        ),
        Alert(
            "QueuePilotWorkerCapacityStale", "warning",
            _leader_only(
                f"{cm.WORKER_CLUSTER_CAPACITY_AGE.name}{{{c.controller_selector}}} > {n(c.worker_capacity_stale_seconds)}",
                c.controller_selector,
            ),
            "5m",
            "The dispatcher's view of a worker cluster's Nodes and Pods is old.",
            "Nodes/Pods of {{ $labels.cluster }} were last current {{ printf \"%.0f\" $value }}s ago; check its "
            "API server and the MultiKueue kubeconfig Secret.",
            "queuepilot-controller",
        ),
    ]


def rule_file(config: AlertConfig) -> dict:
    """The Prometheus rule file (``groups:``) as a plain dict, groups in a fixed order."""
    by_group: dict[str, list[dict]] = {g: [] for g in GROUP_ORDER}
    for alert in alerts(config):
        by_group[alert.group].append(alert.to_rule(config))
    return {"groups": [{"name": g, "rules": rules} for g, rules in by_group.items() if rules]}


def chart_rule_file() -> dict:
    """The rule file with tokens for every chart-settable value (job names, runbook URL, thresholds,
    ``for`` durations with their defaults); the chart's PrometheusRule template replaces them."""
    base = chart_template()
    overrides = {a.name: for_token(a.name, a.for_) for a in alerts(base)}
    return rule_file(dataclasses.replace(base, for_overrides=overrides))
