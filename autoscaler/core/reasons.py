"""Every reason a queuepilot decision can give: fixed CamelCase constants (bounded metric label values).

Each constant is used as the ``reason`` of a decision, the ``reason`` label of
``queuepilot_admission_decisions_total`` / ``queuepilot_scale_decisions_total`` and the ``reason`` of
the Kubernetes Event.  ``MEANING`` gives the one-line meaning of each (docs/admission.md and
docs/autoscaling.md say what to do about each).
"""

from __future__ import annotations

# --- admission: Ready -------------------------------------------------------------------------------
CAPACITY_CONFIRMED = "CapacityConfirmed"
NO_GPUS_REQUESTED = "NoGpusRequested"
READY_GPU_SIGNAL_STALE = "ReadyGpuSignalStale"
# --- admission: Retry -------------------------------------------------------------------------------
INSUFFICIENT_GPUS = "InsufficientGpus"
FRAGMENTED = "Fragmented"
FLAVOR_HAS_NO_NODES = "FlavorHasNoNodes"
FLAVOR_NOT_ASSIGNED = "FlavorNotAssigned"
# --- admission: Rejected ----------------------------------------------------------------------------
POD_LARGER_THAN_NODE = "PodLargerThanNode"
EXCEEDS_FLAVOR_CAPACITY = "ExceedsFlavorCapacity"
RETRY_LIMIT_EXCEEDED = "RetryLimitExceeded"
# --- admission: left Pending ------------------------------------------------------------------------
GPU_SIGNAL_STALE = "GpuSignalStale"  # also used by the scaler (hold)

# --- scaling -----------------------------------------------------------------------------------------
PENDING_DEMAND = "PendingDemand"
IDLE_WORKERS = "IdleWorkers"
IDLE_WORKERS_QUEUE_PRESSURE = "IdleWorkersQueuePressure"
IDLE_ACTORS_RECLAIMED = "IdleActorsReclaimed"
IDLE_WORKERS_REPLACED = "IdleWorkersReplaced"
RECENT_SCALE_UP = "RecentScaleUp"
KEPT_FOR_UTILIZATION_TARGET = "KeptForUtilizationTarget"
WITHIN_TARGET = "WithinTarget"
BELOW_MIN_REPLICAS = "BelowMinReplicas"
ABOVE_MAX_REPLICAS = "AboveMaxReplicas"
AT_MAX_REPLICAS = "AtMaxReplicas"
QUOTA_HEADROOM_LIMIT = "QuotaHeadroomLimit"
INFEASIBLE_DEMAND = "InfeasibleDemand"
SCALE_UP_STABILIZED = "ScaleUpStabilized"
SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
SCALE_UP_LIMIT = "ScaleUpLimit"
SCALE_DOWN_LIMIT = "ScaleDownLimit"
SCALING_DISABLED = "ScalingDisabled"
RAY_SIGNAL_STALE = "RaySignalStale"
NOT_SCALABLE_UNDER_KUEUE = "NotScalableUnderKueue"
CLUSTER_SUSPENDED = "ClusterSuspended"
WAITING_FOR_WORKER_DELETION = "WaitingForWorkerDeletion"
WORKERS_DELETED = "WorkersDeleted"
MALFORMED_ANNOTATION = "MalformedAnnotation"
SCHEDULED_MIN_REPLICAS = "ScheduledMinReplicas"
SCHEDULED_MAX_REPLICAS = "ScheduledMaxReplicas"

# --- stalled workloads -------------------------------------------------------------------------------
STALLED_WORKLOAD = "StalledWorkload"
STALLED_WORKLOAD_DEACTIVATED = "StalledWorkloadDeactivated"
STALL_DEACTIVATION_HELD = "StallDeactivationHeld"

# --- right-sizing recommendations -------------------------------------------------------------------
RECOMMENDATION_CHANGED = "RecommendationChanged"

MEANING: dict[str, str] = {
    CAPACITY_CONFIRMED: "Ready: every GPU pod of the workload fits on free, healthy, unpromised GPUs of its flavor.",
    NO_GPUS_REQUESTED: "Ready: the workload requests no nvidia.com/gpu; nothing to confirm.",
    READY_GPU_SIGNAL_STALE: "Ready on quota alone: the GPU signal is stale and stale_signal_mode is fail-open.",
    INSUFFICIENT_GPUS: "Retry: fewer free healthy GPUs on the flavor than the workload needs now.",
    FRAGMENTED: "Retry: enough free GPUs in total, but not in blocks large enough for the pods.",
    FLAVOR_HAS_NO_NODES: "Retry: the assigned ResourceFlavor selects no nodes (yet).",
    FLAVOR_NOT_ASSIGNED: "Retry: a GPU pod set has no flavor assignment, or the flavor is unknown.",
    POD_LARGER_THAN_NODE: "Rejected: a pod asks for more GPUs than any node of its flavor has.",
    EXCEEDS_FLAVOR_CAPACITY: "Rejected: the workload asks for more GPUs than all nodes of the flavor have.",
    RETRY_LIMIT_EXCEEDED: "Rejected: the workload was sent to Retry more often than admission.max_retries.",
    GPU_SIGNAL_STALE: "Hold: the GPU signal is stale or missing; no promise (admission) or no scale change.",
    PENDING_DEMAND: "Scale up: Ray reports resource demand that no current worker can take.",
    IDLE_WORKERS: "Scale down: workers idle (low GPU/CPU use, no Ray work) for the idle window.",
    IDLE_WORKERS_QUEUE_PRESSURE: "Scale down: idle workers, with the shorter idle window while other queues wait.",
    IDLE_ACTORS_RECLAIMED: ("Scale down (reclaim-idle-actors on): among the idle workers some hold Ray actors/tasks "
                            "with the GPU under the idle threshold for the idle window; those are killed."),
    IDLE_WORKERS_REPLACED: ("Replace (reclaim-idle-actors and reclaim-replace on, Ray demand for the group queued): workers whose GPUs "
                            "stayed under the idle threshold for the reclaim window are deleted by name and fresh "
                            "ones launched for the queued work; Ray actors/tasks on them are killed."),
    RECENT_SCALE_UP: "Hold: no worker is removed within down-after-up of queuepilot launching workers in the group.",
    KEPT_FOR_UTILIZATION_TARGET: "Scale down of idle workers limited so the rest stay under the utilization target.",
    WITHIN_TARGET: "Hold: no pending demand and no idle worker past its window.",
    BELOW_MIN_REPLICAS: "Scale up: replicas below minReplicas.",
    ABOVE_MAX_REPLICAS: "Scale down: replicas above maxReplicas.",
    AT_MAX_REPLICAS: "Demand left unmet: the group is at maxReplicas.",
    QUOTA_HEADROOM_LIMIT: "Demand left unmet: the ClusterQueue has no GPU headroom for more workers.",
    INFEASIBLE_DEMAND: "Demand no worker of the group can ever hold (reported, never scaled for).",
    SCALE_UP_STABILIZED: "Scale up held back by the scale-up stabilization window.",
    SCALE_DOWN_STABILIZED: "Scale down held back by the scale-down stabilization window.",
    SCALE_UP_LIMIT: "Scale up limited by the scale-up policies (Pods/Percent per period).",
    SCALE_DOWN_LIMIT: "Scale down limited by the scale-down policies (Pods/Percent per period).",
    SCALING_DISABLED: "The selectPolicy of this direction is Disabled.",
    RAY_SIGNAL_STALE: "Hold: Ray's demand signal for this cluster is stale or missing.",
    NOT_SCALABLE_UNDER_KUEUE: "No write: Kueue manages this RayCluster and it is not an elastic job.",
    CLUSTER_SUSPENDED: "No write: the RayCluster is suspended.",
    WAITING_FOR_WORKER_DELETION: "Hold: pods named in workersToDelete still exist; waiting for the operator.",
    WORKERS_DELETED: "Clear workersToDelete: the pods named there are gone.",
    MALFORMED_ANNOTATION: "A queuepilot.io/* annotation could not be parsed; the default is used.",
    SCHEDULED_MIN_REPLICAS: ("A time window in force (queuepilot.io/schedule or the ClusterQueue's schedule) "
                             "keeps at least its min workers: raised to it, or idle workers kept."),
    SCHEDULED_MAX_REPLICAS: ("A time window in force (queuepilot.io/schedule or the ClusterQueue's schedule) "
                             "allows at most its max workers: a scale-up capped (busy workers are never removed "
                             "for it; those above it go when idle)."),
    STALLED_WORKLOAD: ("Warning: every GPU of an admitted workload stayed under the stall threshold for the stall "
                       "window (hung job, notebook left open, actor holding GPUs)."),
    STALLED_WORKLOAD_DEACTIVATED: ("A stalled workload of an opted-in ClusterQueue or namespace was deactivated "
                                   "(spec.active: false) so that Kueue releases its quota."),
    STALL_DEACTIVATION_HELD: ("A stalled workload's deactivation was due but held: Ray shows it at work (paused), it "
                              "serves, or there is no verdict without Ray's view."),
    RECOMMENDATION_CHANGED: ("A worker group's right-sizing recommendation (GPUs per worker, min/max replicas, "
                             "or the idle GPU-hours it would save) changed materially."),
}

ADMISSION_REASONS: frozenset[str] = frozenset(
    {CAPACITY_CONFIRMED, NO_GPUS_REQUESTED, READY_GPU_SIGNAL_STALE, INSUFFICIENT_GPUS, FRAGMENTED,
     FLAVOR_HAS_NO_NODES, FLAVOR_NOT_ASSIGNED, POD_LARGER_THAN_NODE, EXCEEDS_FLAVOR_CAPACITY,
     RETRY_LIMIT_EXCEEDED, GPU_SIGNAL_STALE}
)
STALL_REASONS: frozenset[str] = frozenset({STALLED_WORKLOAD, STALLED_WORKLOAD_DEACTIVATED, STALL_DEACTIVATION_HELD})
RECOMMENDATION_REASONS: frozenset[str] = frozenset({RECOMMENDATION_CHANGED})
SCALING_REASONS: frozenset[str] = frozenset(
    set(MEANING) - ADMISSION_REASONS - STALL_REASONS - RECOMMENDATION_REASONS | {GPU_SIGNAL_STALE})
ALL_REASONS: frozenset[str] = frozenset(MEANING)
