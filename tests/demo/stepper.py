"""The demo, stepped headless: what ``simulator.demo.app`` does in real time, without sleeping.

Each step of ``STEP_S`` real seconds (``STEP_S * speed`` simulated) advances the world, lets every real
exporter collect (their own loops do every 0.5 real seconds), polls the controller's GPU signal (a real
scrape of the exporters over HTTP) and Ray signal, and runs one controller pass: the real exporters and
the real ``Controller`` over the demo's world, on the demo's clock, as ``queuepilot demo`` runs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

from autoscaler.controller.loop import Controller
from autoscaler.signals.gpu_scrape import ScrapeGpuSignal
from exporter.server import ExporterApp
from servicekit.listen import ListenAddress
from simulator.demo.app import STEP_S, demo_controller, demo_exporters
from simulator.demo.world import DemoConfig, DemoWorld


@dataclass
class Demo:
    world: DemoWorld
    controller: Controller
    exporters: list[ExporterApp]
    gpu: ScrapeGpuSignal
    session: aiohttp.ClientSession

    @property
    def urls(self) -> list[str]:
        return [app.metrics_url for app in self.exporters] + [f"http://127.0.0.1:{self.controller.port}/metrics"]

    @property
    def real_seconds(self) -> float:
        """Real seconds since the hand-over, at the demo's speed."""
        start = self.world.handed_over_at or 0.0
        return (self.world.sim_now - start) / self.world.cfg.speed

    async def step(self, before_pass: Hook | None = None) -> None:
        """One step; ``before_pass(self)`` runs once the exporters and the signals have seen the world and
        before the controller's pass (whose snapshot is of that moment, before its own writes)."""
        c = self.controller
        await self.world.step_to(self.world.sim_now + STEP_S * self.world.cfg.speed)
        for app in self.exporters:
            await app.agent.collect_once()
        await self.gpu.poll(c.clock())
        await c.ray.poll(c.source.ray_targets(), c.clock())
        await _call(before_pass, self)
        await c.run_pass()

    async def run(self, real_seconds: float, before_pass: Hook | None = None, after_pass: Hook | None = None) -> None:
        """Step for ``real_seconds`` (at the demo's speed), calling the hooks at every step."""
        until = self.real_seconds + real_seconds
        while self.real_seconds < until - 1e-9:
            await self.step(before_pass)
            await _call(after_pass, self)


Hook = Callable[[Demo], Awaitable[None] | None]


async def _call(hook: Hook | None, demo: Demo) -> None:
    if hook is not None:
        out = hook(demo)
        if out is not None:
            await out


@asynccontextmanager
async def stepped_demo(cfg: DemoConfig | None = None) -> AsyncIterator[Demo]:
    """The demo's world warmed up and handed over to a real controller; its exporters serving on loopback."""
    world = DemoWorld(cfg or DemoConfig())
    await world.warm_up()
    exporters = demo_exporters(world, ["127.0.0.1:0"] * len(world.sources))
    session = aiohttp.ClientSession()

    async def discover() -> list[tuple[str, str]]:
        return [(app.hostname, app.metrics_url.removesuffix("/metrics")) for app in exporters]

    gpu = ScrapeGpuSignal(session, discover, lambda kind: None)
    c = demo_controller(world, ListenAddress("127.0.0.1", 0), exporters, gpu_signal=gpu)
    world.hand_over(c.published, c.counters, lambda: None)
    started: list[ExporterApp] = []
    try:
        for app in exporters:
            await app.start()
            started.append(app)
        yield Demo(world, c, exporters, gpu, session)
    finally:
        for app in started:
            await app.stop()
        await c.shutdown()
        await session.close()
