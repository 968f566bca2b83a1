"""Three fake API servers (a MultiKueue manager and two workers) and the controller in dispatcher mode
(the ``fleet3`` fixture in conftest.py starts them)."""

from __future__ import annotations

import base64
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import yaml

from autoscaler.cluster.client import make_api_client
from autoscaler.controller.dispatch import FleetSource
from autoscaler.controller.loop import Controller
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.core.policy.dispatch import DispatchConfig
from autoscaler.core.snapshot import GpuState
from autoscaler.signals.gpu import GpuReading
from tests.controller.harness import StaticGpu, StubRay, config_for
from tests.fakeapi.server import FakeApiServer
from tests.support.objects import (
    KUEUE,
    admission,
    admission_check,
    cluster_queue,
    condition,
    local_queue,
    multikueue_cluster,
    multikueue_config,
    node,
    pod,
    resource_flavor,
    secret,
    workload,
)

NS = "kueue-system"
MK_CHECK = "mk"
MK_CONFIG = "mk-config"
WORKERS = ("worker-a", "worker-b")
FROZEN: set[str] = set()  # workers whose GPU series stop arriving in the shared Prometheus


class WorkerGpu:
    """The shared Prometheus's answer for one worker: a fresh reading with the GPUs the test marks unhealthy."""

    name = "gpu"

    def __init__(self, cluster: str, unhealthy: dict[str, dict[str, int]]) -> None:
        self.cluster = cluster
        self._unhealthy = unhealthy  # cluster -> node -> unhealthy GPUs (the test edits it)
        self.reading = GpuReading()

    async def poll(self, now: float) -> None:
        if self.cluster in FROZEN:
            return
        gpus = tuple(GpuState(uuid=f"{n}-{i}", node=n, index=i, healthy=False)
                     for n, k in self._unhealthy.get(self.cluster, {}).items() for i in range(k))
        self.reading = GpuReading(gpus=gpus, observed_at=now)

    async def close(self) -> None:
        return None


def mk_objects(secret_of: dict[str, str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [multikueue_cluster(name, secret) for name, secret in secret_of.items()]
    out.append(multikueue_config(MK_CONFIG, list(secret_of)))
    out.append(admission_check(MK_CHECK, "kueue.x-k8s.io/multikueue",
                               parameters={"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": MK_CONFIG}))
    out += [resource_flavor("a100", {"gpu": "a100"}), cluster_queue("cq", {"a100": 64}, checks=(MK_CHECK,)),
            local_queue("lq-a", "team-a", "cq")]
    return out


def mk_workload(name: str, gpus_per_pod: int = 8, count: int = 1, at: float = 2000.0) -> dict[str, Any]:
    return workload(
        name, pod_sets=[("main", count, gpus_per_pod)],
        conditions=[condition("QuotaReserved", True, at)],
        admission=admission("cq", [("main", "a100", count)]),
        checks=[{"name": MK_CHECK, "state": "Pending", "lastTransitionTime": "2026-01-01T00:00:00Z", "message": ""}],
    )


def gpu_node(name: str, gpus: int = 8) -> dict[str, Any]:
    return node(name, gpus, labels={"gpu": "a100"})


def gpu_pod(name: str, node_name: str, gpus: int) -> dict[str, Any]:
    return pod(name, "default", node=node_name, gpus=gpus)


class Fleet3:
    """manager + worker-a + worker-b, the controller running in dispatcher mode on the manager."""

    def __init__(self, manager: FakeApiServer, workers: dict[str, FakeApiServer]) -> None:
        self.manager = manager
        self.workers = workers
        self.unhealthy: dict[str, dict[str, int]] = {}
        self.controller: Controller | None = None
        self.fleet: FleetSource | None = None

    def secret(self, cluster: str) -> dict[str, Any]:
        kc = yaml.safe_dump(self.workers[cluster].kubeconfig()).encode()
        return secret(f"{cluster}-kubeconfig", NS, {"kubeconfig": base64.b64encode(kc).decode()})

    def setup_manager(self) -> None:
        for c in self.workers:
            self.manager.create(self.secret(c))
        for obj in mk_objects({c: f"{c}-kubeconfig" for c in self.workers}):
            self.manager.create(obj, field_manager="kueue")

    def nominated(self, name: str) -> list[str] | None:
        wl = self.manager.get(KUEUE, "Workload", name, "team-a")
        return (wl.get("status") or {}).get("nominatedClusterNames")

    @contextlib.asynccontextmanager
    async def running(self, *, config: DispatchConfig | None = None, dry_run: bool = False) -> AsyncIterator[Controller]:
        cfg = config_for(self.manager, multikueue_dispatcher=True, multikueue_namespace=NS, dry_run=dry_run)
        client = await make_api_client(cfg.kubeconfig)

        def reconcilers(ctx: Any) -> list[Any]:
            self.fleet = FleetSource(ctx.api_client, ctx.counters, namespace=NS, on_change=ctx.request_pass,
                                     gpu_factory=lambda name: WorkerGpu(name, self.unhealthy),
                                     refresh_seconds=0.3, gpu_poll_seconds=0.2, stale_after=3.0,
                                     allow_insecure_http=True)  # the fake API servers speak plain http
            out = build_reconcilers(ctx, self.fleet)
            if config is not None:
                out[-1].config = config
            return out

        controller = Controller(cfg, client, gpu_signal=StaticGpu(), ray_client=StubRay(), build_reconcilers=reconcilers)
        self.controller = controller
        await controller.start()
        assert self.fleet is not None
        await self.fleet.start()
        try:
            yield controller
        finally:
            await self.fleet.stop()
            await controller.shutdown()
            await client.close()
