"""Controller test fixtures: the fake API server and an in-process controller against it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp

from autoscaler.cluster.client import make_api_client
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import Controller
from autoscaler.signals.gpu import GpuReading
from tests.controller.exporter_stub import answers
from tests.fakeapi.plugin import fake_api, kube_client
from tests.fakeapi.server import FakeApiServer

__all__ = ["answers", "fake_api", "kube_client"]



class StaticGpu:
    """A GPU signal whose reading the test sets."""

    name = "gpu"

    def __init__(self, reading: GpuReading | None = None) -> None:
        self.reading = reading or GpuReading()

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


async def eventually(
    predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05  # noqa: ASYNC109
) -> Any:
    """Poll ``predicate`` (sync or async) until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


async def http_get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.get(url) as r:
        return r.status, await r.text()
