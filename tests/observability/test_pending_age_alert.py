"""A workload Retried every 10 minutes for 3 hours: the controller's own gauges, rendered minute by minute
from the Workload as Kueue leaves it (tests/support/kueue_history.py), become promtool's input series, and
QueuePilotPendingWorkloadTooOld fires on them.  Kueue's rule (the since-requeue family) never passes
10 minutes, so an alert on it could never fire for this workload."""

from __future__ import annotations

from pathlib import Path

import yaml
from prometheus_client import CollectorRegistry

from alerts.config import AlertConfig
from autoscaler import metrics as m
from autoscaler.cluster import views
from autoscaler.cluster.source import ClusterObjects
from autoscaler.controller.collector import ControllerCollector
from autoscaler.controller.context import Published
from autoscaler.controller.snapshot_builder import build_snapshot
from autoscaler.signals.gpu import GpuReading
from tests.observability.files import RULE_FILE
from tests.support import kueue_history
from tests.support import objects as o
from tests.support.prometheus import promtool

CREATED = 1_000_000.0
MINUTES = 3 * 60
EVERY = 600.0
LABELS = {"cluster_queue": "cq-a", "namespace": "team-a", "local_queue": "lq-a"}


def _gauges(t: float) -> tuple[float, float]:
    """(person's age, Kueue-rule age) of LocalQueue team-a/lq-a as the collector renders them at ``t``."""
    objects = ClusterObjects(
        workloads={"team-a/starving": views.workload_view(kueue_history.retried(t, created=CREATED, every=EVERY))},
        cluster_queues={"cq-a": views.cluster_queue_view(o.cluster_queue("cq-a", {"a100": 8},
                                                                             checks=(kueue_history.CHECK,)))},
        local_queues={"team-a/lq-a": views.local_queue_view(o.local_queue("lq-a", "team-a", "cq-a"))},
        flavors={"a100": views.resource_flavor_view(o.resource_flavor("a100", {"gpu": "a100"}))},
        admission_checks={}, ray_clusters={}, nodes={}, pods={},
    )
    snap = build_snapshot(objects, GpuReading(), {}, t)
    reg = CollectorRegistry()
    reg.register(ControllerCollector(lambda: snap, Published(), lambda: True, clock=lambda: t))
    person = reg.get_sample_value(m.QUEUE_OLDEST_PENDING.name, LABELS)
    kueue = reg.get_sample_value(m.QUEUE_OLDEST_PENDING_SINCE_REQUEUE.name, LABELS)
    assert person is not None and kueue is not None
    return person, kueue


def test_a_workload_retried_for_hours_fires_the_pending_alert(tmp_path: Path) -> None:
    person, kueue = zip(*(_gauges(CREATED + 60 * i) for i in range(MINUTES + 1)), strict=True)
    assert person[-1] == MINUTES * 60  # the true age
    assert max(kueue) < EVERY  # what the gauge read before: it restarted at every requeue
    objective = AlertConfig().pending_slo_seconds
    first_over = next(i for i, v in enumerate(person) if v > objective)

    def series(name: str, values: tuple[float, ...]) -> dict:
        labels = ",".join(f'{k}="{v}"' for k, v in LABELS.items())
        return {"series": f"{name}{{{labels}}}", "values": " ".join(f"{v:g}" for v in values)}

    alert = "QueuePilotPendingWorkloadTooOld"
    test = {
        "rule_files": [str(RULE_FILE)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [series(m.QUEUE_OLDEST_PENDING.name, person),
                             series(m.QUEUE_OLDEST_PENDING_SINCE_REQUEUE.name, kueue)],
            "alert_rule_test": [
                {"alertname": alert, "eval_time": f"{first_over - 1}m", "exp_alerts": []},
                {"alertname": alert, "eval_time": f"{MINUTES}m", "exp_alerts": [{
                    "exp_labels": {"severity": "warning", **LABELS},
                    "exp_annotations": {
                        "summary": "A workload has been pending longer than the queue's wait objective.",
                        "description": "The oldest pending workload in LocalQueue team-a/lq-a (ClusterQueue cq-a) has "
                                       "waited 3h 0m 0s since it was created (Retries and requeues do not reset "
                                       "this), above the objective of 3600 s.",
                        "runbook_url": f"{AlertConfig().runbook_base_url}#{alert.lower()}",
                    },
                }]},
            ],
        }],
    }
    path = tmp_path / "retried.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False, width=100_000))
    result = promtool("test", "rules", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
