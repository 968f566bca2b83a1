"""An in-process controller against the fake API server, with the GPU and Ray signals the test sets."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from autoscaler.cluster.client import make_api_client
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import Controller
from autoscaler.core.snapshot import GpuState
from autoscaler.signals.gpu import GpuReading
from tests.fakeapi.server import FakeApiServer
from tests.support.eventually import eventually


class StaticGpu:
    """A GPU signal whose reading the test sets."""

    name = "gpu"

    def __init__(self, reading: GpuReading | None = None) -> None:
        self.reading = reading or GpuReading()

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


class FreshGpus:
    """A GPU signal that always reads fresh: ``count`` healthy, free GPUs on ``node``, observed now."""

    name = "gpu"

    def __init__(self, node: str = "n0", count: int = 8) -> None:
        self.node, self.count = node, count

    @property
    def reading(self) -> GpuReading:
        return GpuReading(tuple(GpuState(uuid=f"{self.node}-{i}", node=self.node, index=i) for i in range(self.count)),
                          time.time())

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


class StubRay:
    """A Ray client answering from a dict base_url -> status (or exception), keyed by the target's
    ``base_url`` (the address the controller chose for that head)."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[str] = []

    async def fetch_status(self, target: Any, now: float) -> Any:
        base_url = target if isinstance(target, str) else target.base_url
        self.calls.append(base_url)
        a = self.answers.get(base_url)
        if isinstance(a, Exception):
            raise a
        if a is None:
            raise ConnectionError(f"no Ray head at {base_url}")
        return a


def config_for(api: FakeApiServer, **overrides: Any) -> ControllerConfig:
    base: dict[str, Any] = dict(
        listen_host="127.0.0.1", listen_port=0, kubeconfig=str(api.kubeconfig_path), gpu_signal="prometheus",
        resync_seconds=1.0, debounce_seconds=0.05, leader_elect=False, identity="test-0",
        lease_namespace="default", lease_duration_seconds=3.0, renew_deadline_seconds=2.0,
        retry_period_seconds=0.3, gpu_poll_seconds=0.5, ray_poll_seconds=0.5,
    )
    base.update(overrides)
    return ControllerConfig(**base)


@contextlib.asynccontextmanager
async def running_controller(
    api: FakeApiServer, *, gpu: Any = "static", ray: Any = None, **overrides: Any
) -> AsyncIterator[Controller]:
    """``gpu``: a GPU signal object, "static" (an empty StaticGpu) or None (the configured real one)."""
    config = config_for(api, **overrides)
    client = await make_api_client(config.kubeconfig)
    controller = Controller(config, client, gpu_signal=StaticGpu() if gpu == "static" else gpu, ray_client=ray or StubRay())
    await controller.start()
    try:
        yield controller
    finally:
        await controller.shutdown()
        await client.close()


async def http_get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.text()


async def ready(base_url: str) -> bool:
    """Whether the controller at ``base_url`` answers /readyz with 200 (False while it does not listen yet)."""
    try:
        return (await http_get(f"{base_url}/readyz"))[0] == 200
    except OSError:
        return False


async def synced_snapshot(c: Controller) -> None:
    """Wait for the caches to sync and then for a snapshot built wholly after that: passes run (and
    publish a snapshot) before the caches sync, and the pass under way at sync time may have read
    half-listed caches, so the second pass to finish from then on is the first one a test may read."""
    await eventually(lambda: c.synced)
    first = c.passes
    await eventually(lambda: c.passes >= first + 2)
