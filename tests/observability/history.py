"""Three hours of realistic series, as OpenMetrics text with explicit timestamps, for backfilling a real
Prometheus (``promtool tsdb create-blocks-from openmetrics``).

The fleet: two GPU nodes of four GPUs.  node-a's exporter is scraped with ``honorLabels: true`` (pod
labels arrive as ``pod``/``namespace``); node-b's without it (``exported_pod``/``exported_namespace``,
while ``pod``/``namespace`` name the exporter pod).  One idle allocated GPU on each node, one GPU with
a fatal XID.  Controller, Kueue and Ray series describe two ClusterQueues and two RayClusters.  Every
series carries ``cluster="prod"`` (an external label, as in a multi-cluster setup), except the MultiKueue
dispatcher's worker-cluster families, whose own ``cluster`` label names the worker.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from autoscaler import metrics as cm
from exporter import metrics as em

STEP = 30  # seconds between samples (a 30 s scrape interval)
DURATION = 3 * 3600
CLUSTER = "prod"

Labels = dict[str, str]
ValueFn = Callable[[float], float]  # seconds since start -> value


@dataclass
class History:
    families: dict[str, list[tuple[Labels, ValueFn]]] = field(default_factory=dict)

    def add(self, name: str, labels: Labels, fn: ValueFn) -> None:
        self.families.setdefault(name, []).append(({"cluster": CLUSTER, **labels}, fn))

    def histogram(self, name: str, labels: Labels, buckets: Iterable[float], rate: float, typical: float) -> None:
        """Cumulative buckets of a histogram observing ``rate`` events/s, exponentially spread around ``typical``."""
        bounds = [*buckets, math.inf]
        for le in bounds:
            share = 1.0 if math.isinf(le) else 1 - math.exp(-le / typical)
            le_text = "+Inf" if math.isinf(le) else repr(float(le))
            self.add(f"{name}_bucket", {**labels, "le": le_text}, lambda t, s=share: math.floor(rate * t * s))
        self.add(f"{name}_count", labels, lambda t: math.floor(rate * t))
        self.add(f"{name}_sum", labels, lambda t: rate * t * typical)

    def openmetrics(self, end: float) -> str:
        start = end - DURATION
        out: list[str] = []
        for name, series in self.families.items():
            out.append(f"# TYPE {name} gauge")
            for labels, fn in series:
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                for i in range(DURATION // STEP + 1):
                    t = i * STEP
                    out.append(f"{name}{{{text}}} {_num(fn(t))} {int(start + t)}")
        out.append("# EOF")
        return "\n".join(out) + "\n"


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.6g}"


def wave(base: float, amp: float, period: float = 1800, phase: float = 0) -> ValueFn:
    return lambda t: max(0.0, base + amp * math.sin(2 * math.pi * t / period + phase))


def const(v: float) -> ValueFn:
    return lambda t: v


def counter(per_second: float) -> ValueFn:
    return lambda t: math.floor(per_second * t)


def steps(every: float) -> ValueFn:
    """A counter that goes up by one every ``every`` seconds."""
    return lambda t: math.floor(t / every)


def gpu_history(start: float) -> History:
    h = History()
    # (node, gpu, pod or None, util function); node-b is scraped without honorLabels
    gpus = [
        ("node-a", 0, ("team-a", "ray-worker-0", "ray-worker"), wave(80, 15)),
        ("node-a", 1, ("team-a", "ray-worker-1", "ray-worker"), const(0)),  # allocated, idle
        ("node-a", 2, ("team-a", "trainer-0", "trainer"), wave(95, 4, phase=1)),
        ("node-a", 3, None, const(0)),
        ("node-b", 0, ("team-b", "notebook-0", "notebook"), const(2)),  # allocated, idle
        ("node-b", 1, ("team-b", "trainer-1", "trainer"), wave(70, 20, phase=2)),
        ("node-b", 2, None, const(0)),
        ("node-b", 3, None, const(0)),  # fatal XID
    ]
    for node, idx, pod, util in gpus:
        uuid, model, bus = f"GPU-{node}-{idx}", "NVIDIA H100 80GB HBM3", f"00000000:{idx + 0x18:02X}:00.0"
        # the identity under both spellings; each family takes the names its catalog entry lists
        identity = {
            "gpu": str(idx), "UUID": uuid, "uuid": uuid, "pci_bus_id": bus, "device": f"nvidia{idx}",
            "modelName": model, "model_name": model, "Hostname": node, "hostname": node,
            "DCGM_FI_DRIVER_VERSION": "550.144.03",
        }
        target = {"job": "queuepilot-exporter", "instance": f"{node}:9400"}
        if node == "node-b":  # ServiceMonitor without honorLabels: target labels win, the exporter's get renamed
            target |= {"namespace": "queuepilot", "pod": f"queuepilot-exporter-{node}", "container": "exporter"}
        pod_labels: Labels = {}
        if pod:
            ns, name, container = pod
            pod_labels = (
                {"exported_namespace": ns, "exported_pod": name, "exported_container": container}
                if node == "node-b" else {"namespace": ns, "pod": name, "container": container}
            )
            h.add("kube_pod_labels", {
                "job": "kube-state-metrics", "namespace": ns, "pod": name, "uid": f"uid-{name}",
                "label_kueue_x_k8s_io_local_queue_name": f"{ns}-queue",
                "label_kueue_x_k8s_io_cluster_queue_name": f"cq-{ns}",
            }, const(1))

        def labels(spec: em.MetricSpec, extra: Labels | None = None, pod_labels: Labels = pod_labels,
                   target: Labels = target, identity: Labels = identity) -> Labels:
            own = {k: v for k, v in identity.items() if k in spec.labels}
            return {**own, **(extra or {}), **target, **pod_labels}

        spec = em.BY_NAME
        h.add("DCGM_FI_DEV_GPU_UTIL", labels(spec["DCGM_FI_DEV_GPU_UTIL"]), util)
        h.add("DCGM_FI_DEV_FB_USED", labels(spec["DCGM_FI_DEV_FB_USED"]), (lambda t, u=util: 1000 + 700 * u(t)))
        h.add("DCGM_FI_DEV_FB_FREE", labels(spec["DCGM_FI_DEV_FB_FREE"]), (lambda t, u=util: 80000 - 700 * u(t)))
        h.add("DCGM_FI_DEV_POWER_USAGE", labels(spec["DCGM_FI_DEV_POWER_USAGE"]), (lambda t, u=util: 70 + 6 * u(t)))
        h.add("DCGM_FI_DEV_GPU_TEMP", labels(spec["DCGM_FI_DEV_GPU_TEMP"]), (lambda t, u=util: 32 + 0.5 * u(t)))
        h.add(em.GPU_ALLOCATED.name, labels(em.GPU_ALLOCATED), const(1 if pod else 0))
        broken = node == "node-b" and idx == 3
        # a healthy GPU's reason is "" (no label); queuepilot_gpu_healthy carries no pod labels
        health = {k: v for k, v in labels(em.GPU_HEALTHY).items() if k not in pod_labels}
        h.add(em.GPU_HEALTHY.name, {**health, "reason": "FatalXid"} if broken else health, const(0 if broken else 1))
        xid_labels = {k: v for k, v in labels(em.GPU_XID_ERRORS_TOTAL).items() if k not in pod_labels}
        if broken:
            h.add(em.GPU_XID_ERRORS_TOTAL.name, {**xid_labels, "xid": "79"}, steps(1200))
        if node == "node-a" and idx == 2:
            h.add(em.GPU_XID_ERRORS_TOTAL.name, {**xid_labels, "xid": "13"}, steps(600))
    for node in ("node-a", "node-b"):
        target = {"job": "queuepilot-exporter", "instance": f"{node}:9400"}
        self_labels = {**target, "hostname": node, "source": "nvml"}
        assert set(em.EXPORTER_GPUS.labels) == {"hostname", "source"}, "catalog changed: update the history"
        h.add(em.EXPORTER_LAST_SUCCESS.name, self_labels, lambda t: start + t - (t % 10))
        h.add(em.EXPORTER_COLLECT_SECONDS.name, self_labels, wave(0.02, 0.01, period=600))
        h.add(em.EXPORTER_GPUS.name, self_labels, const(4))
        h.add(em.EXPORTER_SOURCE_ERRORS_TOTAL.name, {**self_labels, "kind": "timeout"}, steps(900))
        h.add(em.EXPORTER_POD_RESOURCES_UP.name, {**target, "hostname": node}, const(1))
        h.add("up", target, const(1))
    return h


def controller_history(h: History) -> None:
    ctl = {"job": "queuepilot-controller", "instance": "10.0.1.1:8080"}
    queues = [("cq-team-a", "team-a-queue", "h100"), ("cq-team-b", "team-b-queue", "h100")]
    for i, (cq, lq, flavor) in enumerate(queues):
        q = {**ctl, "cluster_queue": cq}
        lq_labels = {**q, "namespace": lq.removesuffix("-queue"), "local_queue": lq}
        h.add(cm.QUEUE_PENDING_WORKLOADS.name, lq_labels, wave(4 + 2 * i, 3, phase=i))
        h.add(cm.QUEUE_OLDEST_PENDING.name, lq_labels, lambda t, i=i: (t % (2400 + 600 * i)))
        h.add(cm.QUEUE_OLDEST_PENDING_SINCE_REQUEUE.name, lq_labels, lambda t: t % 600)
        h.add(cm.QUEUE_PENDING_GPUS.name, {**q, "flavor": flavor}, wave(8, 6, phase=i))
        h.histogram(cm.QUEUE_WAIT_SECONDS.name, q, cm.WAIT_BUCKETS, rate=0.05, typical=600 * (i + 1))
        h.add(cm.ADMISSION_DECISIONS_TOTAL.name, {**q, "state": "Ready", "reason": "CapacityConfirmed", "mode": "live"},
              counter(0.04))
        h.add(cm.ADMISSION_DECISIONS_TOTAL.name, {**q, "state": "Retry", "reason": "NoPlaceableCapacity", "mode": "live"},
              counter(0.02 * (i + 1)))
        h.add(cm.ADMISSION_DECISIONS_TOTAL.name, {**q, "state": "Rejected", "reason": "NeverFits", "mode": "live"}, steps(3600))
        kq = {"job": "kueue", "cluster_queue": cq, "replica_role": "leader"}
        h.add("kueue_pending_workloads", {**kq, "status": "active"}, wave(3, 2, phase=i))
        h.add("kueue_pending_workloads", {**kq, "status": "inadmissible"}, const(1))
        h.histogram("kueue_admission_wait_time_seconds", {**kq, "priority_class": ""},
                    [1 * 2.5 ** k for k in range(12)], rate=0.05, typical=900)
        res = {**kq, "cohort": "gpus", "flavor": flavor, "resource": "nvidia.com/gpu"}
        h.add("kueue_cluster_queue_nominal_quota", res, const(4))
        h.add("kueue_cluster_queue_resource_usage", res, wave(3, 1, phase=i))
        h.add("kueue_evicted_workloads_total", {
            **kq, "reason": "AdmissionCheck", "underlying_cause": "", "priority_class": "",
        }, counter(0.01))
        # stalled workloads (the leader publishes them, 0 for a queue with none): cq-team-a (opted in to
        # deactivation) had one holding 4 GPUs from 1h, deactivated at 1.5h; cq-team-b has one holding 2
        # GPUs from 2h to the end (reported only)
        stalled = (3600, 5400, 4) if i == 0 else (7200, math.inf, 2)
        h.add(cm.STALLED_WORKLOADS.name, q, lambda t, s=stalled: 1 if s[0] <= t < s[1] else 0)
        h.add(cm.STALLED_WORKLOAD_GPUS.name, q, lambda t, s=stalled: s[2] if s[0] <= t < s[1] else 0)
        h.add(cm.STALL_DEACTIVATIONS_TOTAL.name, {**q, "mode": "live"},
              lambda t, i=i: 1 if i == 0 and t >= 5400 else 0)
    fl = {**ctl, "flavor": "h100"}
    for state, value in (("nominal", 8), ("healthy", 7), ("unhealthy", 1), ("allocated", 4), ("free", 3)):
        h.add(cm.FLAVOR_GPUS.name, {**fl, "state": state}, const(value))
    h.add(cm.FLAVOR_LARGEST_FREE_BLOCK.name, fl, const(2))
    h.add(cm.RESERVED_GPUS.name, fl, wave(1, 1))
    h.histogram(cm.ADMISSION_DECISION_SECONDS.name, ctl, cm.DECISION_BUCKETS, rate=0.06, typical=0.5)
    for ns, rc in (("team-a", "rc-tune"), ("team-b", "rc-serve")):
        g = {**ctl, "namespace": ns, "raycluster": rc, "group": "gpu-workers"}
        for kind, fn in (("current", wave(3, 1)), ("desired", wave(3, 1.5)), ("min", const(1)), ("max", const(4))):
            h.add(cm.RAY_WORKERS.name, {**g, "kind": kind}, fn)
        h.add(cm.RAY_PENDING_GPUS.name, g, wave(2, 2))
        h.add(cm.RAY_GPU_UTILIZATION.name, g, wave(0.5, 0.3))
        h.add(cm.RAY_IDLE_GPUS.name, g, wave(1, 1))
        h.add(cm.SCALE_DECISIONS_TOTAL.name, {**g, "direction": "up", "reason": "PendingDemand", "mode": "live"}, steps(900))
        h.add(cm.SCALE_DECISIONS_TOTAL.name, {**g, "direction": "down", "reason": "IdleWorkers", "mode": "live"}, steps(1300))
        h.add(cm.SCALE_DECISIONS_TOTAL.name, {**g, "direction": "hold", "reason": "Stable", "mode": "live"}, counter(0.1))
        # workers deleted by name: rc-tune (reclaim_idle_actors on) loses one with idle Ray actors every
        # 10 minutes (6 an hour: over the default budget of 4) and an empty one every 20; rc-serve only empty ones
        if rc == "rc-tune":
            h.add(cm.RECLAIMED_WORKERS_TOTAL.name, {**g, "reason": "idle_actor", "mode": "live"}, steps(600))
        h.add(cm.RECLAIMED_WORKERS_TOTAL.name, {**g, "reason": "empty", "mode": "live"}, steps(1200))
        ray = {"job": "ray-head", "namespace": ns, "ray_io_cluster": rc, "SessionName": "session_1"}
        for state, fn in (("RUNNING", wave(6, 3)), ("PENDING_NODE_ASSIGNMENT", wave(2, 2)), ("FINISHED", counter(0.3))):
            h.add("ray_tasks", {**ray, "State": state, "Name": "train_step"}, fn)
        h.add("ray_object_store_used_memory", ray, wave(2e9, 1e9))
        h.add("ray_object_store_available_memory", ray, wave(6e9, 1e9, phase=math.pi))
        h.add("ray_resources", {**ray, "Name": "GPU", "State": "USED"}, wave(3, 1))
        h.add("ray_resources", {**ray, "Name": "GPU", "State": "AVAILABLE"}, wave(1, 1, phase=math.pi))
        h.add("ray_scheduler_unscheduleable_tasks", {**ray, "Reason": "WaitingForResources"}, wave(2, 2))
    h.add(cm.IS_LEADER.name, ctl, const(1))
    h.add(cm.IS_LEADER.name, {**ctl, "instance": "10.0.1.2:8080"}, const(0))
    for loop in ("admission", "scaler"):
        h.histogram(cm.RECONCILE_SECONDS.name, {**ctl, "loop": loop}, cm.RECONCILE_BUCKETS, rate=0.2, typical=0.05)
    for resource in ("workloads", "rayclusters", "nodes"):
        h.add(cm.WATCH_RESTARTS_TOTAL.name, {**ctl, "resource": resource}, steps(1800))
        h.add(cm.WRITES_TOTAL.name, {**ctl, "resource": resource, "verb": "patch"}, counter(0.05))
        h.add(cm.WRITE_ERRORS_TOTAL.name, {**ctl, "resource": resource, "kind": "conflict"}, counter(0.002))
    for signal in ("gpu", "ray"):
        h.add(cm.SIGNAL_AGE_SECONDS.name, {**ctl, "signal": signal}, lambda t: t % 30)
        h.add(cm.SIGNAL_STALE.name, {**ctl, "signal": signal}, const(0))
        h.add(cm.SOURCE_ERRORS_TOTAL.name, {**ctl, "source": signal, "kind": "timeout"}, counter(0.003))


def fleet_history(h: History) -> None:
    """The MultiKueue dispatcher's families (the same controller target, the leader): two worker clusters
    whose ``cluster`` label names the worker (it wins over the external label). worker-a stays usable;
    worker-b's API server is unreachable from 2h to 2.5h (up 0, its Nodes/Pods view ages)."""
    ctl = {"job": "queuepilot-controller", "instance": "10.0.1.1:8080"}
    partition = (7200, 9000)

    def down(t: float) -> bool:
        return partition[0] <= t < partition[1]

    for worker, flavors in (("worker-a", ("h100", "a100")), ("worker-b", ("h100",))):
        w = {**ctl, "cluster": worker}
        b = worker == "worker-b"
        h.add(cm.WORKER_CLUSTER_UP.name, w, (lambda t: 0 if down(t) else 1) if b else const(1))
        h.add(cm.WORKER_CLUSTER_CAPACITY_AGE.name, w,
              (lambda t: t - partition[0] + 5 if down(t) else t % 15) if b else (lambda t: t % 15))
        for i, flavor in enumerate(flavors):
            f = {**w, "flavor": flavor}
            states = {"healthy": const(16 - 2 * i), "unhealthy": const(1 if b else 0),
                      "allocated": wave(9, 4, phase=i), "promised": wave(2, 2, period=900, phase=i)}
            states["free"] = (lambda t, s=states: max(0, s["healthy"](t) - s["allocated"](t) - s["promised"](t)))
            for state in ("healthy", "unhealthy", "allocated", "free", "promised"):
                h.add(cm.WORKER_CLUSTER_GPUS.name, {**f, "state": state}, states[state])
            h.add(cm.WORKER_CLUSTER_LARGEST_FREE_BLOCK.name, f, (lambda t, s=states: min(8, math.floor(s["free"](t)))))
    assert set(cm.DISPATCH_DECISIONS_TOTAL.labels) == {"reason", "mode"}, "catalog changed: update the history"
    for reason, every in (("Nominated", 120), ("NoClusterFits", 600), ("NoUsableCluster", 1800)):
        h.add(cm.DISPATCH_DECISIONS_TOTAL.name, {**ctl, "reason": reason, "mode": "live"}, steps(every))
    h.add(cm.DISPATCH_DECISIONS_TOTAL.name, {**ctl, "reason": "Nominated", "mode": "dry_run"}, steps(900))


def build(end: float) -> str:
    """OpenMetrics text of DURATION seconds of history ending at ``end`` (Unix seconds)."""
    h = gpu_history(end - DURATION)
    controller_history(h)
    fleet_history(h)
    return h.openmetrics(end)
