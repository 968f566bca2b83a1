"""The controller's gauges rendered from a snapshot, the queue-wait transitions, and promtool's lint."""

from __future__ import annotations

import dataclasses

from prometheus_client import CollectorRegistry, generate_latest

from autoscaler import metrics as m
from autoscaler.cluster.source import CacheStats
from autoscaler.controller.collector import ControllerCollector
from autoscaler.controller.context import Published
from autoscaler.controller.counters import ControllerCounters
from autoscaler.core.queue_wait import new_admissions
from autoscaler.core.snapshot import RayDemand
from autoscaler.signals.ray import RayObservation
from tests.controller import scenario
from tests.controller.scenario import FakeRayStatus, build
from tests.support.prometheus import promtool

NOW = scenario.NOW


def render(snap, published=None, leader=True, stats=None, counters=None):
    reg = CollectorRegistry()
    counters_out = ControllerCounters(reg)
    if counters is not None:
        counters.append(counters_out)
    reg.register(ControllerCollector(lambda: snap, published or Published(), lambda: leader,
                                     (lambda: stats) if stats is not None else None))
    return reg


def value(reg, name, **labels):
    return reg.get_sample_value(name, labels)


def test_queue_gauges():
    reg = render(build())
    assert value(reg, "queuepilot_queue_pending_workloads", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a") == 2
    assert value(reg, "queuepilot_queue_pending_workloads", cluster_queue="cq-b", namespace="team-b", local_queue="lq-b") == 1
    assert value(reg, "queuepilot_queue_oldest_pending_seconds", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a") == 300
    # wl-b1 was created 5000 s ago and requeued 60 s ago: a person has waited 5000 s; Kueue's T0 is the requeue
    lq_b = {"cluster_queue": "cq-b", "namespace": "team-b", "local_queue": "lq-b"}
    assert value(reg, "queuepilot_queue_oldest_pending_seconds", **lq_b) == 5000
    assert value(reg, "queuepilot_queue_oldest_pending_since_requeue_seconds", **lq_b) == 60
    lq_a = {"cluster_queue": "cq-a", "namespace": "team-a", "local_queue": "lq-a"}
    assert value(reg, "queuepilot_queue_oldest_pending_since_requeue_seconds", **lq_a) == 300
    # unassigned: the ClusterQueue's first GPU flavor; assigned: its flavor
    assert value(reg, "queuepilot_queue_pending_gpus", cluster_queue="cq-a", flavor="h100") == 16
    assert value(reg, "queuepilot_queue_pending_gpus", cluster_queue="cq-a", flavor="a100") == 4
    assert value(reg, "queuepilot_queue_pending_gpus", cluster_queue="cq-b", flavor="h100") == 8


def _idle(snap):
    """``snap`` with no pending workload left (every workload finished or admitted)."""
    kept = {k: w for k, w in snap.workloads.items() if not w.pending}
    assert len(kept) < len(snap.workloads)  # the scenario did have pending work
    return dataclasses.replace(snap, workloads=kept)


def test_idle_queues_report_zero_not_nothing():
    reg = render(_idle(build()))
    for cq, ns, lq in (("cq-a", "team-a", "lq-a"), ("cq-b", "team-b", "lq-b")):
        labels = {"cluster_queue": cq, "namespace": ns, "local_queue": lq}
        assert value(reg, "queuepilot_queue_pending_workloads", **labels) == 0
        assert value(reg, "queuepilot_queue_oldest_pending_seconds", **labels) == 0
        assert value(reg, "queuepilot_queue_oldest_pending_since_requeue_seconds", **labels) == 0
    text = generate_latest(reg).decode()
    assert text.count("queuepilot_queue_pending_workloads{") == 2  # one per LocalQueue, nothing else


def test_cluster_queue_without_local_queue_reports_zero():
    snap = _idle(build())
    cq_c = dataclasses.replace(snap.cluster_queues["cq-a"], name="cq-c")
    snap = dataclasses.replace(snap, cluster_queues={**snap.cluster_queues, "cq-c": cq_c})
    reg = render(snap)
    labels = {"cluster_queue": "cq-c", "namespace": "", "local_queue": ""}
    assert value(reg, "queuepilot_queue_pending_workloads", **labels) == 0
    assert value(reg, "queuepilot_queue_oldest_pending_seconds", **labels) == 0
    # queues that have LocalQueues get no such queue-only series
    assert value(reg, "queuepilot_queue_pending_workloads", cluster_queue="cq-a", namespace="", local_queue="") is None


def test_busy_queue_next_to_an_idle_one():
    snap = build()
    kept = {k: w for k, w in snap.workloads.items() if not (w.pending and w.namespace == "team-b")}
    reg = render(dataclasses.replace(snap, workloads=kept))
    assert value(reg, "queuepilot_queue_pending_workloads", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a") == 2
    assert value(reg, "queuepilot_queue_pending_workloads", cluster_queue="cq-b", namespace="team-b", local_queue="lq-b") == 0
    assert value(reg, "queuepilot_queue_oldest_pending_seconds", cluster_queue="cq-b", namespace="team-b", local_queue="lq-b") == 0


def test_capacity_gauges_take_reserved_gpus_off_free():
    reg = render(build(), Published(reserved_gpus={"h100": 2}))
    got = {s: value(reg, "queuepilot_flavor_gpus", flavor="h100", state=s) for s in m.FLAVOR_STATES}
    assert got == {"nominal": 24, "healthy": 15, "unhealthy": 1, "allocated": 6, "free": 7}
    assert value(reg, "queuepilot_flavor_largest_free_block_gpus", flavor="h100") == 5
    assert value(reg, "queuepilot_flavor_gpus", flavor="a100", state="unhealthy") == 8
    assert value(reg, "queuepilot_admission_reserved_gpus", flavor="h100") == 2


def test_ray_gauges():
    status = FakeRayStatus(
        demand=(RayDemand("task", {"GPU": 4.0, "CPU": 1.0}, count=2),
                RayDemand("placement_group", {"GPU": 8.0}, count=1, infeasible=True),  # no group holds it
                RayDemand("actor", {"CPU": 2.0}, count=3)),
        nodes=(),
    )
    snap = build(ray={"team-a/rc": RayObservation(status, NOW - 5)})
    key = ("team-a", "rc", "gpu")
    reg = render(snap, Published(desired_replicas={key: 3}, idle_gpus={key: 4}))
    lab = {"namespace": "team-a", "raycluster": "rc", "group": "gpu"}
    assert [value(reg, "queuepilot_raycluster_workers", **lab, kind=k) for k in m.WORKER_KINDS] == [1, 3, 0, 4]
    assert value(reg, "queuepilot_raycluster_pending_gpus", **lab) == 8
    assert abs(value(reg, "queuepilot_raycluster_gpu_utilization_ratio", **lab) - 0.25) < 1e-9
    assert value(reg, "queuepilot_raycluster_idle_gpus", **lab) == 4
    # without a published desired count, desired falls back to current
    assert value(render(snap), "queuepilot_raycluster_workers", **lab, kind="desired") == 1


def test_self_gauges():
    snap = build(ray={"team-a/rc": RayObservation(None, NOW - 500)})
    reg = render(snap, leader=False, stats=[CacheStats("workloads", 5, True), CacheStats("pods", 0, False)])
    assert value(reg, "queuepilot_controller_is_leader") == 0
    assert value(reg, "queuepilot_signal_age_seconds", signal="gpu") == 30
    assert value(reg, "queuepilot_signal_stale", signal="gpu") == 0
    assert value(reg, "queuepilot_signal_stale", signal="ray/team-a/rc") == 1
    assert value(reg, "queuepilot_signal_age_seconds", signal="ray") == 500
    assert value(reg, "queuepilot_cache_objects", resource="workloads") == 5
    assert value(reg, "queuepilot_cache_synced", resource="pods") == 0


def test_no_snapshot_yet_renders_only_self_metrics():
    reg = render(None, stats=[CacheStats("workloads", 0, False)])
    text = generate_latest(reg).decode()
    assert "queuepilot_controller_is_leader 1.0" in text
    assert "queuepilot_queue_pending_workloads{" not in text


def test_promtool_finds_nothing_to_lint():
    status = FakeRayStatus(demand=(RayDemand("task", {"GPU": 4.0}, count=1),), nodes=())
    made: list[ControllerCounters] = []
    reg = render(build(ray={"team-a/rc": RayObservation(status, NOW)}), Published(reserved_gpus={"h100": 1}),
                 stats=[CacheStats("workloads", 5, True)], counters=made)
    counters = made[0]
    counters.queue_wait.labels(cluster_queue="cq").observe(12)
    counters.watch_restarts.labels(resource="pods").inc()
    counters.source_errors.labels(source="gpu", kind="timeout").inc()
    text = generate_latest(reg).decode()
    fleet = {spec.name for spec in m.FLEET_FAMILIES}  # the dispatcher's own collector, --multikueue-dispatcher only
    for spec in m.CATALOG:
        if spec.type == "gauge" and spec.name not in ("queuepilot_raycluster_idle_gpus", *fleet):
            assert f"# TYPE {spec.name} gauge" in text, spec.name
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_new_admissions_once_per_admission():
    base = build()
    assert new_admissions(None, base) == []  # first snapshot: a baseline
    # wl-b2 was admitted at NOW-960, before a process that started at NOW-500: not counted again
    assert new_admissions(None, base, not_before=NOW - 500) == []
    assert new_admissions(None, base, not_before=NOW - 2000) == [("cq-b", 40.0)]

    wl = base.workloads["team-a/wl-a2"]
    admitted = dataclasses.replace(wl, admitted=True, admitted_at=NOW + 10)
    later = dataclasses.replace(base, workloads={**base.workloads, wl.key: admitted})
    # queued since creation (NOW-100) until admission (NOW+10), check time included
    assert new_admissions(base, later) == [("cq-a", 110.0)]
    assert new_admissions(later, later) == []  # the same admission seen again
    # evicted, requeued at NOW+100, admitted again at NOW+130: a second observation from the requeue
    again = dataclasses.replace(admitted, requeued_at=NOW + 100, admitted_at=NOW + 130)
    third = dataclasses.replace(base, workloads={**base.workloads, wl.key: again})
    assert new_admissions(later, third) == [("cq-a", 30.0)]


def test_ages_are_measured_at_scrape_time_when_a_clock_is_given():
    snap = build()
    reg = CollectorRegistry()
    reg.register(ControllerCollector(lambda: snap, Published(), lambda: True, clock=lambda: NOW + 20))
    assert value(reg, "queuepilot_queue_oldest_pending_seconds", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a") == 320
    assert value(reg, "queuepilot_signal_age_seconds", signal="gpu") == 50
