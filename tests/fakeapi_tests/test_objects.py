"""Every builder in tests/support/objects.py makes an object the fake API server accepts: valid against the
real Kueue, KubeRay and core schemas it checks on every write."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.fakeapi import ApiError, FakeApiServer
from tests.support import kueue_history
from tests.support import objects as o

SPEC = o.ray_cluster_spec([o.ray_group("gpu", 2, 0, 4, gpus=8, image=o.RAY_IMAGE)], ray_version="2.40.0",
                          image=o.RAY_IMAGE)
OBJECTS: dict[str, dict[str, Any]] = {
    "Namespace": o.namespace("team-b"),
    "Secret": o.secret("kc", "team-a", {"kubeconfig": base64.b64encode(b"x").decode()}, type_="Opaque"),
    "Node": o.node("n1", 8, {"gpu": "h100"}, unschedulable=True),
    "Pod": o.ray_worker_pod("rc", "gpu", "rc-gpu-worker-1", node="n1", gpus=4, ip="10.0.0.2"),
    "head Pod": o.ray_head_pod("rc"),
    "Workload": o.workload("w", pod_sets=[("main", 2, 8), ("aux", 1, 0)], active=True, labels={o.QUEUE_NAME_LABEL: "lq-a"},
                           conditions=[o.condition("QuotaReserved", True, 1000.0)],
                           admission=o.admission("cq", [("main", "h100", 2), ("aux", "h100", 1)]),
                           checks=[o.check_state("gpu-capacity", "Pending", when=1000.0)]),
    "client Workload": o.workload("w2", created=None),
    "retried Workload": kueue_history.retried(1000.0 + 3 * 600 + 45, created=1000.0),
    "PyTorchJob Workload": o.pytorchjob_workload("bert", workers=3),
    "TrainJob Workload": o.trainjob_workload("llm", nodes=4),
    "preempted Workload": kueue_history.evicted_after_admission(9000.0 + 700, 1000.0, 2000.0, 9000.0),
    "ClusterQueue": o.cluster_queue("cq", {"h100": 16, "a100": 8}, cohort="all", checks=("gpu-capacity",),
                                    used={"h100": 8}),
    "LocalQueue": o.local_queue("lq-a", "team-a", "cq"),
    "ResourceFlavor": o.resource_flavor("h100", {"gpu": "h100"}),
    "AdmissionCheck": o.admission_check("gpu-capacity"),
    "MultiKueue AdmissionCheck": o.admission_check(
        "mk", "kueue.x-k8s.io/multikueue", parameters={"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                                       "name": "mk-config"}),
    "MultiKueueCluster": o.multikueue_cluster("worker-a", "worker-a-kubeconfig"),
    "MultiKueueConfig": o.multikueue_config("mk-config", ["worker-a"]),
    "RayCluster": o.ray_cluster("rc", annotations=o.OPT_IN, autoscaler=True, dashboard_port=8265, ray_version="2.40.0",
                                groups=[o.ray_group("gpu", 1, 0, 4, gpus=2, start_params={"num-gpus": "2"},
                                                    workers_to_delete=["rc-gpu-worker-0"])]),
    "RayJob": o.ray_job("train", "team-a", SPEC, labels={"team": "a"}),
    "generated RayJob": o.ray_job(None, "team-a", SPEC, generate_name="train-"),
}


@pytest.mark.parametrize("what", sorted(OBJECTS))
def test_the_fake_api_server_accepts_what_the_builder_makes(fake_api: FakeApiServer, what: str) -> None:
    obj = OBJECTS[what]
    stored = fake_api.create(obj)
    # stored as built: nothing pruned as unknown, nothing the schema would not keep
    assert {k: v for k, v in stored.items() if k != "metadata"} == {k: v for k, v in obj.items() if k != "metadata"}
    for key, value in obj["metadata"].items():
        if key not in ("uid", "generateName"):  # the server sets the uid, and the name from generateName
            assert stored["metadata"][key] == value, key


@pytest.mark.parametrize("field", ["spec.queueName", "metadata.name"])
def test_a_workload_the_schema_refuses_is_refused(fake_api: FakeApiServer, field: str) -> None:
    """The builders are checked by something that can say no."""
    obj = o.workload("w")
    part, key = field.split(".")
    obj[part][key] = 7
    with pytest.raises(ApiError):
        fake_api.create(obj)
