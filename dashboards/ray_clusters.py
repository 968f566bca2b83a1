"""Ray clusters: workers current / desired / min / max, pending GPU demand, GPU utilization and idle GPUs
per group, scale decisions (with reasons, also as annotations), workers reclaimed by name (empty or
holding idle Ray actors), and Ray's own task throughput and object-store use (Ray's series, scraped by KubeRay's PodMonitor, which sets ``ray_io_cluster``)."""

from __future__ import annotations

from autoscaler import metrics as cm
from dashboards import common as c

UID = "queuepilot-ray-clusters"

# Ray's series (node metrics, scraped by KubeRay's PodMonitor, which adds ray_io_cluster)
RAY_TASKS = "ray_tasks"
RAY_OBJECT_STORE_USED = "ray_object_store_used_memory"
RAY_OBJECT_STORE_AVAILABLE = "ray_object_store_available_memory"
RAY_RESOURCES = "ray_resources"
RAY_UNSCHEDULABLE = "ray_scheduler_unscheduleable_tasks"

G = 'cluster=~"$cluster",namespace=~"$namespace",raycluster=~"$raycluster"'
R = 'cluster=~"$cluster",namespace=~"$namespace",ray_io_cluster=~"$raycluster"'
GROUP = "namespace, raycluster, group"
LEGEND = "{{raycluster}}/{{group}}"


def scale_annotation() -> dict:
    """Each non-hold scale decision as a Grafana annotation whose text carries the reason."""
    return {
        "name": "Scale decisions",
        "datasource": c.DS,
        "enable": True,
        "iconColor": "rgba(255, 152, 48, 1)",
        "expr": (
            f"sum by ({GROUP}, direction, reason, mode) "
            f'(changes({cm.SCALE_DECISIONS_TOTAL.name}{{{G},direction!="hold"}}[$__rate_interval])) > 0'
        ),
        "step": "1m",
        "titleFormat": "scale {{direction}} {{mode}}: {{raycluster}}/{{group}}",
        "textFormat": "{{reason}}",
        "tagKeys": "namespace,raycluster,group,direction,reason,mode",
        "useValueForTime": False,
    }


def build():
    workers = cm.RAY_WORKERS.name
    panels = [
        (c.row("Workers"), 24, 1),
        (c.timeseries(
            "Workers: current / desired / min / max",
            "Worker replicas per group: current, queuepilot's desired count, and the group's min and max "
            "(dashed). Scale decisions appear as annotations.",
            "none",
            c.targets(
                (f'max by ({GROUP}) ({workers}{{{G},kind="current"}})', "current " + LEGEND),
                (f'max by ({GROUP}) ({workers}{{{G},kind="desired"}})', "desired " + LEGEND),
                (f'max by ({GROUP}) ({workers}{{{G},kind="min"}})', "min " + LEGEND),
                (f'max by ({GROUP}) ({workers}{{{G},kind="max"}})', "max " + LEGEND),
            ),
            capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Pending GPU demand",
            "GPUs requested by Ray tasks, actors and placement groups that are not scheduled yet.",
            "none",
            c.targets((f"sum by ({GROUP}) ({cm.RAY_PENDING_GPUS.name}{{{G}}})", LEGEND)),
            stacked=True,
        ), 12, 8),
        (c.timeseries(
            "GPU utilization per group",
            "Mean GPU utilization of each group's workers (exporter GPU metrics joined by pod).",
            "percentunit",
            c.targets((f"max by ({GROUP}) ({cm.RAY_GPU_UTILIZATION.name}{{{G}}})", LEGEND)),
        ), 12, 8),
        (c.timeseries(
            "Idle GPUs",
            "GPUs held by workers idle for the idle window (no Ray work, utilization under the threshold): "
            "what a scale-down would free.",
            "none",
            c.targets((f"sum by ({GROUP}) ({cm.RAY_IDLE_GPUS.name}{{{G}}})", LEGEND)),
            stacked=True,
        ), 12, 8),
        (c.timeseries(
            "Scale decisions",
            "Scaling decisions per interval by direction and reason (hold included); mode=dry_run marks "
            "what a dry-run controller would have written.",
            "short",
            c.targets((
                f"sum by (raycluster, group, direction, reason, mode) "
                f"(increase({cm.SCALE_DECISIONS_TOTAL.name}{{{G}}}[$__rate_interval]))",
                LEGEND + " {{direction}} {{reason}} {{mode}}",
            )),
            bars=True,
        ), 24, 8),
        (c.timeseries(
            "Workers reclaimed (idle_actor = killed work)",
            "Workers queuepilot deleted by name (workersToDelete) per interval: reason=empty, nothing ran on "
            "it; reason=idle_actor, its GPU sat idle while Ray actors/tasks held it and that work was killed "
            "(reclaim_idle_actors, at most reclaim_budget_per_hour per RayCluster). mode=dry_run: would-be "
            "deletions.",
            "short",
            c.targets((
                f"sum by ({GROUP}, reason, mode) "
                f"(increase({cm.RECLAIMED_WORKERS_TOTAL.name}{{{G}}}[$__rate_interval]))",
                LEGEND + " {{reason}} {{mode}}",
            )),
            stacked=True, bars=True,
        ), 24, 8),
        (c.row("Ray"), 24, 1),
        (c.timeseries(
            "Ray tasks by state",
            "Ray's ray_tasks summed by state (series are deltas and must be summed).",
            "short",
            c.targets((f"sum by (State) ({RAY_TASKS}{{{R}}})", "{{State}}")),
        ), 12, 8),
        (c.timeseries(
            "Ray task throughput",
            "Tasks finished per second (rate of the summed FINISHED count).",
            "ops",
            c.targets((
                f'clamp_min(deriv(sum by (ray_io_cluster) ({RAY_TASKS}{{{R},State="FINISHED"}})[$__rate_interval:]), 0)',
                "{{ray_io_cluster}}",
            )),
        ), 12, 8),
        (c.timeseries(
            "Object store memory",
            "Plasma object-store bytes in use; the dashed line is used + available.",
            "bytes",
            c.targets(
                (f"sum by (ray_io_cluster) ({RAY_OBJECT_STORE_USED}{{{R}}})", "used {{ray_io_cluster}}"),
                (
                    f"sum by (ray_io_cluster) ({RAY_OBJECT_STORE_USED}{{{R}}}) + "
                    f"sum by (ray_io_cluster) ({RAY_OBJECT_STORE_AVAILABLE}{{{R}}})",
                    "capacity {{ray_io_cluster}}",
                ),
            ),
            capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Ray logical GPUs",
            "GPU slots Ray has handed to tasks and actors; the dashed line is all GPU slots in the cluster.",
            "none",
            c.targets(
                (f'sum by (ray_io_cluster) ({RAY_RESOURCES}{{{R},Name="GPU",State="USED"}})', "used {{ray_io_cluster}}"),
                (f'sum by (ray_io_cluster) ({RAY_RESOURCES}{{{R},Name="GPU"}})', "capacity {{ray_io_cluster}}"),
            ),
            capacity=True,
        ), 12, 8),
        (c.timeseries(
            "Unschedulable Ray tasks",
            "Tasks the raylets cannot schedule, by reason (Infeasible, WaitingForResources, ...).",
            "short",
            c.targets((f"sum by (Reason) ({RAY_UNSCHEDULABLE}{{{R}}})", "{{Reason}}")),
        ), 24, 8),
    ]
    variables = [
        c.cluster_variable(workers),
        c.query_variable("namespace", "Namespace", f'label_values({workers}{{cluster=~"$cluster"}}, namespace)'),
        c.query_variable(
            "raycluster", "RayCluster",
            f'label_values({workers}{{cluster=~"$cluster",namespace=~"$namespace"}}, raycluster)',
        ),
    ]
    return c.dashboard(
        "queuepilot / Ray clusters", UID,
        "RayCluster worker groups as queuepilot scales them, with Ray's own demand and task series.",
        variables, panels, annotations=[scale_annotation()],
    )
