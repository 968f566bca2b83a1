"""Fleet: the MultiKueue worker clusters as the dispatcher sees them (manager cluster,
``--multikueue-dispatcher``): which workers may be nominated, healthy / free / unhealthy / promised GPUs
and the largest free block per worker and flavor, how old each worker's Nodes/Pods view is, and the
dispatch decisions with their reasons.

On these families ``cluster`` names the *worker* cluster (the MultiKueueCluster), set by the
controller, so the dashboard filters them with ``$worker`` and never with the ``cluster`` variable the
other dashboards use for a Prometheus external label. Gauges are the leader's: a replica that lost the
lease keeps exporting its last values, so each gauge is joined with the replica that leads now.
"""

from __future__ import annotations

from autoscaler import metrics as cm
from dashboards import common as c

UID = "queuepilot-fleet"

GPUS = cm.WORKER_CLUSTER_GPUS.name
BLOCK = cm.WORKER_CLUSTER_LARGEST_FREE_BLOCK.name
UP = cm.WORKER_CLUSTER_UP.name
AGE = cm.WORKER_CLUSTER_CAPACITY_AGE.name
DECISIONS = cm.DISPATCH_DECISIONS_TOTAL.name

W = 'cluster=~"$worker"'
WF = 'cluster=~"$worker",flavor=~"$flavor"'
# capacity older than this makes a worker unusable (DispatchConfig.stale_seconds, docs/multicluster.md)
USABLE_AGE_SECONDS = 120
SHOWN_STATES = "free|healthy|unhealthy|promised"


def leader(expr: str) -> str:
    """``expr`` as exported by the replica that holds the leader lease now (same scrape target)."""
    return f"({expr}) and on (job, instance) ({cm.IS_LEADER.name} == 1)"


def _gpus(state: str, op: str = "=") -> str:
    return GPUS + "{" + WF + ',state' + op + '"' + state + '"}'


def build():
    panels = [
        (c.row("Workers"), 24, 1),
        (c.stat(
            "Usable worker clusters",
            "Worker clusters the dispatcher may nominate now: MultiKueueCluster Active, caches reachable and "
            f"making progress, Nodes/Pods and GPU health no older than {USABLE_AGE_SECONDS} s.",
            "none", f"sum(max by (cluster) ({leader(f'{UP}{{{W}}}')}))",
        ), 4, 4),
        (c.stat(
            "Worker clusters",
            "Worker clusters named by the MultiKueueConfigs of ClusterQueues that dispatch through MultiKueue.",
            "none", f"count(max by (cluster) ({leader(f'{UP}{{{W}}}')}))",
        ), 4, 4),
        (c.stat(
            "Free GPUs",
            "Healthy, unallocated, unpromised GPUs of the selected flavors on the selected worker clusters.",
            "none", f"sum({leader(_gpus('free'))})",
        ), 4, 4),
        (c.stat(
            "Promised GPUs",
            "GPUs reserved for workloads nominated to a worker and not yet placed there (one promise per "
            "nominated worker).",
            "none", f"sum({leader(_gpus('promised'))})",
        ), 4, 4),
        (c.stat(
            "Unhealthy GPUs",
            "GPUs of the selected flavors that the shared Prometheus' GPU series mark unhealthy on the workers.",
            "none", f"sum({leader(_gpus('unhealthy'))})",
        ), 4, 4),
        (c.stat(
            "Nominations written",
            "Nominations written over the dashboard's time range (reason Nominated; dry-run excluded).",
            "none", f'sum(increase({DECISIONS}{{reason="Nominated",mode!="dry_run"}}[$__range]))',
        ), 4, 4),
        (c.state_timeline(
            "Worker clusters usable",
            "queuepilot_worker_cluster_up per worker: 1 usable (may be nominated), 0 inactive, unreachable or "
            "stale (never nominated; nominations to it are re-dispatched).",
            "bool",
            c.targets((f"max by (cluster) ({leader(f'{UP}{{{W}}}')})", "{{cluster}}")),
        ), 24, 6),
        (c.row("Capacity per cluster"), 24, 1),
        (c.timeseries(
            "Free / healthy / unhealthy / promised GPUs per cluster",
            "GPUs of the selected flavors per worker cluster by state: healthy, unhealthy, free (healthy, "
            "unallocated, unpromised) and promised (reserved for nominated workloads), from the worker's Nodes "
            "and Pods and its GPU series in the shared Prometheus.",
            "none",
            c.targets((
                f"sum by (cluster, state) ({leader(_gpus(SHOWN_STATES, '=~'))})",
                "{{cluster}} {{state}}",
            )),
        ), 12, 8),
        (c.timeseries(
            "Largest free block",
            "Most free, healthy, unpromised GPUs on one node per worker cluster and flavor: the largest pod "
            "that can still be placed there.",
            "none",
            c.targets((f"max by (cluster, flavor) ({leader(f'{BLOCK}{{{WF}}}')})", "{{cluster}} {{flavor}}")),
        ), 12, 8),
        (c.timeseries(
            "Allocated GPUs per cluster",
            "GPUs of the selected flavors allocated to pods per worker cluster; the dashed line is each worker's "
            "healthy GPUs.",
            "none",
            c.targets(
                (f"sum by (cluster) ({leader(_gpus('allocated'))})", "{{cluster}}"),
                (f"sum by (cluster) ({leader(_gpus('healthy'))})", "capacity {{cluster}}"),
            ),
            capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Capacity age",
            "Seconds since each worker's Nodes and Pods caches were last known current. Past the dashed line "
            f"({USABLE_AGE_SECONDS} s) the worker is not nominated; the QueuePilotWorkerCapacityStale alert "
            "fires past 300 s by default.",
            "s",
            c.targets(
                (f"max by (cluster) ({leader(f'{AGE}{{{W}}}')})", "{{cluster}}"),
                (f"vector({USABLE_AGE_SECONDS})", "max usable age"),
            ),
            capacity=True,
        ), 12, 8),
        (c.row("Dispatch"), 24, 1),
        (c.timeseries(
            "Dispatch decisions and their reasons",
            "Nominations written and nothing-fits verdicts per interval, by reason: Nominated, NoClusterFits "
            "(nominations withdrawn, backoff), NoUsableCluster (every worker unusable; nominations kept), "
            "FlavorNotAssigned, NoGpusRequested. Kept nominations are not counted. Live decisions only.",
            "short",
            c.targets((
                f'sum by (reason) (increase({DECISIONS}{{mode!="dry_run"}}[$__rate_interval]))', "{{reason}}",
            )),
            bars=True, stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Dry-run dispatch decisions",
            "What a dry-run controller would have nominated (mode=dry_run: nothing was written), by reason.",
            "short",
            c.targets((
                f'sum by (reason) (increase({DECISIONS}{{mode="dry_run"}}[$__rate_interval]))', "{{reason}}",
            )),
            bars=True, stacked=True,
        ), 12, 8),
    ]
    variables = [
        c.query_variable("worker", "Worker cluster", f"label_values({UP}, cluster)"),
        c.query_variable("flavor", "Flavor", f'label_values({GPUS}{{cluster=~"$worker"}}, flavor)'),
    ]
    return c.dashboard(
        "queuepilot / Fleet", UID,
        "MultiKueue worker clusters as queuepilot's dispatcher sees them: usable workers, GPUs per cluster and "
        "flavor, largest free blocks, capacity age and dispatch decisions (manager cluster, dispatcher mode).",
        variables, panels,
    )
