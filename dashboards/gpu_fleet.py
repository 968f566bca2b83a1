"""GPU fleet: utilization, memory, power and temperature per node and GPU; allocated-but-idle GPUs by
namespace and queue; health and XID timeline; the idlest allocated pods."""

from __future__ import annotations

from dashboards import common as c
from exporter import metrics as em

UID = "queuepilot-gpu-fleet"
IDLE_PERCENT = 5  # a GPU under this utilization is idle (the GPUAllocatedIdle alert's default)

UTIL = em.BY_NAME["DCGM_FI_DEV_GPU_UTIL"].name
FB_USED = em.BY_NAME["DCGM_FI_DEV_FB_USED"].name
FB_FREE = em.BY_NAME["DCGM_FI_DEV_FB_FREE"].name
POWER = em.BY_NAME["DCGM_FI_DEV_POWER_USAGE"].name
TEMP = em.BY_NAME["DCGM_FI_DEV_GPU_TEMP"].name
HEALTHY = em.GPU_HEALTHY.name
ALLOCATED = em.GPU_ALLOCATED.name
XIDS = em.GPU_XID_ERRORS_TOTAL.name

# kube-state-metrics pod label series. Kueue labels the pods of admitted workloads with
# kueue.x-k8s.io/local-queue-name and kueue.x-k8s.io/cluster-queue-name (the queue-name label is on the
# job object only); kube-state-metrics exports them with
# --metric-labels-allowlist=pods=[kueue.x-k8s.io/local-queue-name,kueue.x-k8s.io/cluster-queue-name]
KSM_POD_LABELS = "kube_pod_labels"
LOCAL_QUEUE_LABEL = "label_kueue_x_k8s_io_local_queue_name"
CLUSTER_QUEUE_LABEL = "label_kueue_x_k8s_io_cluster_queue_name"

NODE = 'cluster=~"$cluster",Hostname=~"$node"'  # DCGM families: dcgm-exporter's Hostname
QP_NODE = 'cluster=~"$cluster",hostname=~"$node"'  # queuepilot's GPU families: snake_case hostname
PER_GPU = "{{Hostname}} gpu {{gpu}}"
QP_PER_GPU = "{{hostname}} gpu {{gpu}}"


def _idle_allocated() -> str:
    """Allocated GPUs (pod labels normalised) whose utilization is under IDLE_PERCENT right now."""
    util = c.gpu_pod_series(UTIL, NODE, wrap=f"({{series}} < {IDLE_PERCENT})")
    return f"{util} and on (Hostname, UUID) {_allocated()}"


def _allocated() -> str:
    return c.dcgm_identity(f"{ALLOCATED}{{{QP_NODE}}} == 1")


def build():
    idle = _idle_allocated()
    queue_labels = f"{LOCAL_QUEUE_LABEL}, {CLUSTER_QUEUE_LABEL}"
    by_queue = (
        f"count by (namespace, {queue_labels}) (({idle}) * on (namespace, pod) group_left ({queue_labels}) "
        f"max by (namespace, pod, {queue_labels}) "
        f'({KSM_POD_LABELS}{{cluster=~"$cluster",{LOCAL_QUEUE_LABEL}!=""}}))'
    )
    idlest = c.gpu_pod_series(UTIL, NODE, wrap="avg_over_time({series}[$__range])")
    panels = [
        (c.row("Fleet"), 24, 1),
        (c.stat("GPUs", "GPUs reporting metrics on the selected nodes.", "none", f"count({UTIL}{{{NODE}}})"), 4, 4),
        (c.stat(
            "Allocated GPUs", "GPUs the kubelet has allocated to a pod container.", "none",
            f"sum({ALLOCATED}{{{QP_NODE}}})",
        ), 4, 4),
        (c.stat(
            "Allocated but idle", f"Allocated GPUs below {IDLE_PERCENT}% utilization right now.", "none",
            f"count({idle})",
        ), 4, 4),
        (c.stat(
            "Unhealthy GPUs", "GPUs the exporter's health classifier marks unhealthy (XID, ECC, lost, ...).",
            "none", f"count({HEALTHY}{{{QP_NODE}}} == 0)",
        ), 4, 4),
        (c.stat(
            "Mean utilization", "Mean GPU utilization over the selected nodes.", "percent",
            f"avg({UTIL}{{{NODE}}})",
        ), 4, 4),
        (c.stat(
            "Power draw", "Total power draw of the selected GPUs.", "watt", f"sum({POWER}{{{NODE}}})",
        ), 4, 4),
        (c.timeseries(
            "GPUs allocated vs fleet",
            "Allocated GPUs, stacked by namespace; the dashed line is every GPU on the selected nodes.",
            "none",
            c.targets(
                (f"sum by (namespace) ({c.gpu_pod_series(ALLOCATED, QP_NODE)} == 1)", "{{namespace}}"),
                (f"count({UTIL}{{{NODE}}})", "capacity"),
            ),
            stacked=True, capacity=True,
        ), 24, 8),
        (c.row("Per GPU"), 24, 1),
        (c.timeseries(
            "GPU utilization", "DCGM_FI_DEV_GPU_UTIL per GPU: time the GPU was busy in the sample period.",
            "percent", c.targets((f"{UTIL}{{{NODE}}}", PER_GPU)),
        ), 12, 8),
        (c.timeseries(
            "Framebuffer memory used", "DCGM_FI_DEV_FB_USED per GPU (MiB).", "decmbytes",
            c.targets((f"{FB_USED}{{{NODE}}}", PER_GPU)),
        ), 12, 8),
        (c.timeseries(
            "Power draw", "DCGM_FI_DEV_POWER_USAGE per GPU.", "watt", c.targets((f"{POWER}{{{NODE}}}", PER_GPU)),
        ), 12, 8),
        (c.timeseries(
            "Temperature", "DCGM_FI_DEV_GPU_TEMP per GPU.", "celsius", c.targets((f"{TEMP}{{{NODE}}}", PER_GPU)),
        ), 12, 8),
        (c.timeseries(
            "Fleet framebuffer memory",
            "Framebuffer memory used on the selected GPUs; the dashed line is their total memory.",
            "decmbytes",
            c.targets(
                (f"sum({FB_USED}{{{NODE}}})", "used"),
                (f"sum({FB_USED}{{{NODE}}}) + sum({FB_FREE}{{{NODE}}})", "capacity"),
            ),
            capacity=True,
        ), 24, 8),
        (c.row("Allocated but idle"), 24, 1),
        (c.timeseries(
            "Idle allocated GPUs by namespace",
            f"GPUs allocated to pods but under {IDLE_PERCENT}% utilization, by the pod's namespace. "
            "Works with pod labels as pod/namespace or exported_pod/exported_namespace.",
            "none", c.targets((f"count by (namespace) ({idle})", "{{namespace}}")), stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Idle allocated GPUs by queue",
            f"GPUs allocated to pods but under {IDLE_PERCENT}% utilization, by the pod's Kueue LocalQueue and "
            "ClusterQueue, from the labels Kueue puts on the pods of admitted workloads (kube-state-metrics "
            "kube_pod_labels with kueue.x-k8s.io/local-queue-name and kueue.x-k8s.io/cluster-queue-name "
            "allowlisted: docs/install.md).",
            "none",
            c.targets((by_queue, "{{namespace}}/{{" + LOCAL_QUEUE_LABEL + "}} ({{" + CLUSTER_QUEUE_LABEL + "}})")),
            stacked=True,
        ), 12, 8),
        (c.table(
            "Idlest allocated pods",
            "The 10 allocated GPUs with the lowest mean utilization over the dashboard's time range, "
            "with the pod holding each.",
            "percent",
            f"bottomk(10, {idlest} and on (Hostname, UUID) {_allocated()})",
        ), 24, 8),
        (c.row("Health"), 24, 1),
        (c.state_timeline(
            "GPU health",
            "queuepilot_gpu_healthy per GPU: 1 healthy, 0 unhealthy (the reason is in the tooltip).",
            "bool",
            c.targets((f"min by (hostname, gpu, reason) ({HEALTHY}{{{QP_NODE}}})", QP_PER_GPU + " {{reason}}")),
        ), 12, 8),
        (c.timeseries(
            "XID errors",
            "XID errors per GPU and XID code (queuepilot_gpu_xid_errors_total; dcgm-exporter keeps only the last).",
            "short",
            c.targets((
                f"sum by (hostname, gpu, xid) (increase({XIDS}{{{QP_NODE}}}[$__rate_interval])) > 0",
                QP_PER_GPU + " xid {{xid}}",
            )),
            bars=True,
        ), 12, 8),
    ]
    variables = [
        c.cluster_variable(UTIL),
        c.query_variable("node", "Node", f'label_values({UTIL}{{cluster=~"$cluster"}}, Hostname)'),
        # namespaces of pods holding GPUs, whichever spelling the pod labels arrive in
        c.query_result_variable(
            "namespace", "Namespace",
            "count by (namespace) ("
            + c.normalize_pod_labels(f'{ALLOCATED}{{cluster=~"$cluster",hostname=~"$node"}} == 1')
            + ")",
            "namespace",
        ),
    ]
    return c.dashboard(
        "queuepilot / GPU fleet", UID,
        "GPU utilization, memory, power, health and allocated-but-idle GPUs (queuepilot exporter or dcgm-exporter).",
        variables, panels,
    )
