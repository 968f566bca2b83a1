"""Kubeflow job kinds through the AdmissionCheck: the real controller (watches and server-side apply through
the real kubernetes-asyncio client) against the fake API server, which checks every object against the
real Kueue CRDs.  The test plays Kueue: it creates the Workloads Kueue's pytorchjob and trainjob
integrations make (owned by a ``kubeflow.org/v1`` PyTorchJob with pod sets ``master`` and ``worker``, or
by a ``trainer.kubeflow.org/v1alpha1`` TrainJob with the pod sets of its runtime's JobSet: two
initializers without GPUs and ``node``) and reserves quota; queuepilot sizes each from its pod sets and
answers Ready, waits (Pending), Retry or Rejected."""

from __future__ import annotations

import time
from typing import Any

from autoscaler.core.snapshot import GpuState
from autoscaler.signals.gpu import GpuReading
from tests.controller.harness import http_get, running_controller
from tests.support import objects as o
from tests.support.eventually import eventually

CHECK = "gpu-capacity"
NODES = ("n0", "n1", "n2", "n3")  # 4 x 8 a100 GPUs


class FleetGpus:
    """Every GPU of ``NODES`` healthy and free, read now."""

    name = "gpu"

    @property
    def reading(self) -> GpuReading:
        return GpuReading(tuple(GpuState(uuid=f"GPU-{n}-{i}", node=n, index=i) for n in NODES for i in range(8)),
                          time.time())

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


def reserve(fake_api: Any, name: str, flavor: str = "a100", cq: str = "cq-a") -> None:
    """Kueue's scheduler: quota reserved for every pod set on ``flavor``, our check Pending."""
    w = fake_api.get(o.KUEUE, "Workload", name, "team-a")
    now = time.time()
    w["status"] = {
        "conditions": [o.condition("QuotaReserved", True, now), o.condition("Admitted", False, now,
                                                                            "UnsatisfiedAdmissionChecks")],
        "admission": o.admission(cq, [(ps["name"], flavor, ps["count"]) for ps in w["spec"]["podSets"]]),
        "admissionChecks": [o.check_state(CHECK, "Pending", "", now)],
    }
    fake_api.update_status(w)


def entry(fake_api: Any, name: str) -> dict[str, Any]:
    w = fake_api.get(o.KUEUE, "Workload", name, "team-a")
    return next(c for c in (w.get("status") or {}).get("admissionChecks", []) if c["name"] == CHECK)


def decided(fake_api: Any, name: str) -> bool:
    return entry(fake_api, name)["state"] != "Pending"


async def test_pytorchjob_and_trainjob_workloads_are_sized_from_their_pod_sets(fake_api):
    fake_api.create(o.namespace("team-a"))
    fake_api.load([
        o.resource_flavor("a100", {"gpu": "a100"}),
        o.cluster_queue("cq-a", {"a100": 64}, checks=(CHECK,)),
        o.local_queue("lq-a", "team-a", "cq-a"),
        o.admission_check(CHECK),
        *(o.node(n, 8, {"gpu": "a100"}) for n in NODES),
    ])
    bert = o.pytorchjob_workload("bert", workers=1)  # master 1 x 8 + worker 1 x 8: 16 GPUs
    llm = o.trainjob_workload("llm", nodes=2)  # initializers (no GPU) + node 2 x 8: 16 GPUs
    late = o.trainjob_workload("late", nodes=1, initializers=False)  # node 1 x 8, when none is left
    huge = o.pytorchjob_workload("huge", workers=2, gpus_per_pod=16, master_gpus=8)  # 16 per pod > 8 per node
    for w in (bert, llm, late, huge):
        fake_api.create(w)
    names = {k: w["metadata"]["name"] for k, w in (("bert", bert), ("llm", llm), ("late", late), ("huge", huge))}
    async with running_controller(fake_api, gpu=FleetGpus()) as c:
        await eventually(lambda: c.synced)
        reserve(fake_api, names["bert"])
        await eventually(lambda: decided(fake_api, names["bert"]), timeout=20)
        reserve(fake_api, names["llm"])
        await eventually(lambda: decided(fake_api, names["llm"]), timeout=20)
        # both Ready: 32 GPUs promised, none for the initializers
        for key in ("bert", "llm"):
            e = entry(fake_api, names[key])
            assert e["state"] == "Ready", (key, e)
        _, text = await http_get(f"http://127.0.0.1:{c.port}/metrics")
        assert 'queuepilot_admission_reserved_gpus{flavor="a100"} 32.0' in text

        # the fleet is promised: a one-node TrainJob has to wait (Pending, with its quota), and the message
        # names its pod set
        reserve(fake_api, names["late"])
        await eventually(lambda: "waiting with quota" in entry(fake_api, names["late"]).get("message", ""), timeout=20)
        e = entry(fake_api, names["late"])
        assert e["state"] == "Pending", e
        assert e["message"].startswith("needs 1 pod x 8 GPUs (node) on flavor a100; not enough free healthy GPUs"), e

        # a PyTorchJob whose workers ask 16 GPUs each can never fit 8-GPU nodes
        reserve(fake_api, names["huge"])
        await eventually(lambda: decided(fake_api, names["huge"]), timeout=20)
        e = entry(fake_api, names["huge"])
        assert e["state"] == "Rejected", e
        assert e["message"] == "pod set worker needs 16 GPUs per pod; the largest node of flavor a100 has 8"

        # the snapshot knows each workload's owner kind (queuepilot_pod_info's job_kind, the report's job kinds)
        owners = {(w.owner_kind, w.owner_name) for w in c.snapshot.workloads.values()}
        assert owners == {("PyTorchJob", "bert"), ("TrainJob", "llm"), ("TrainJob", "late"), ("PyTorchJob", "huge")}
