"""A static exporter exposition and a tiny HTTP server answering /metrics and /api/v1/query as scripted."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web

from tests.support.http import serve


def gpu_line(family: str, node: str, i: int, value: float, pod: str | None = None, extra: str = "") -> str:
    """One series labelled as the exporter labels it (exporter/metrics.py): dcgm-exporter's names on
    DCGM_* families, the snake_case identity on queuepilot_* families."""
    if family.startswith("queuepilot_"):
        labels = (f'gpu="{i}",uuid="GPU-{node}-{i}",pci_bus_id="00000000:{i:02d}:00.0",device="nvidia{i}",'
                  f'model_name="NVIDIA H100 80GB HBM3",hostname="{node}"')
    else:
        labels = (f'gpu="{i}",UUID="GPU-{node}-{i}",pci_bus_id="00000000:{i:02d}:00.0",device="nvidia{i}",'
                  f'modelName="NVIDIA H100 80GB HBM3",Hostname="{node}"')
    if pod:
        labels += f',container="main",namespace="team-a",pod="{pod}"'
    return f"{family}{{{labels}{extra}}} {value}\n"


def exposition(node: str = "h1") -> str:
    """Node with 3 GPUs: 0 allocated to w1 at 50 %, 1 free and idle, 2 unhealthy (XID 79), free."""
    t = "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
    t += gpu_line("DCGM_FI_DEV_GPU_UTIL", node, 0, 50, "w1") + gpu_line("DCGM_FI_DEV_GPU_UTIL", node, 1, 0)
    t += gpu_line("DCGM_FI_DEV_GPU_UTIL", node, 2, 0)
    t += "# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).\n# TYPE DCGM_FI_DEV_FB_USED gauge\n"
    t += gpu_line("DCGM_FI_DEV_FB_USED", node, 0, 1024, "w1")
    t += "# HELP queuepilot_gpu_healthy 1 if healthy.\n# TYPE queuepilot_gpu_healthy gauge\n"
    t += gpu_line("queuepilot_gpu_healthy", node, 0, 1, extra=',reason=""')
    t += gpu_line("queuepilot_gpu_healthy", node, 1, 1, extra=',reason=""')
    t += gpu_line("queuepilot_gpu_healthy", node, 2, 0, extra=',reason="xid_fatal"')
    t += "# HELP queuepilot_gpu_allocated 1 if allocated.\n# TYPE queuepilot_gpu_allocated gauge\n"
    t += gpu_line("queuepilot_gpu_allocated", node, 0, 1, "w1")
    t += gpu_line("queuepilot_gpu_allocated", node, 1, 0) + gpu_line("queuepilot_gpu_allocated", node, 2, 0)
    return t


class Answers:
    """A tiny HTTP server whose /metrics and /api/v1/query answers the test scripts."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.text = exposition()

    async def metrics(self, _: web.Request) -> web.StreamResponse:
        if self.mode == "500":
            return web.Response(status=500, text="oops")
        if self.mode == "garbage":
            return web.Response(text="{this is not an exposition\x00")
        return web.Response(body=self.text.encode(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    async def query(self, _: web.Request) -> web.StreamResponse:
        if self.mode == "500":
            return web.Response(status=503, text="unavailable")
        if self.mode == "garbage":
            return web.Response(text="<html>proxy error</html>")
        if self.mode == "wrong_shape":
            return web.json_response({"status": "success", "data": {"resultType": "matrix", "result": []}})
        if self.mode == "slow":
            await asyncio.sleep(1.5)
        return web.json_response({"status": "error", "errorType": "bad_data", "error": "nope"})


@pytest.fixture
async def answers():
    a = Answers()
    app = web.Application()
    app.router.add_get("/metrics", a.metrics)
    app.router.add_get("/api/v1/query", a.query)
    async with serve(app) as a.url:
        yield a
