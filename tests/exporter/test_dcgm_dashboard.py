"""NVIDIA's stock dcgm-exporter Grafana dashboard works unchanged on ``queuepilot exporter --source sim``.

The dashboard ("NVIDIA DCGM Exporter Dashboard", grafana/dcgm-exporter-dashboard.json in
NVIDIA/dcgm-exporter) has two template variables and eight panels; its queries are listed here as
it writes them.  The real command serves; a real Prometheus scrapes it; every query must return a
series for every GPU.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.support.eventually import eventually
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.prometheus import run_prometheus

pytestmark = pytest.mark.e2e

GPUS = 4
SELECTOR = '{instance=~"$instance", gpu=~"$gpu"}'
# (panel title, expression as in the dashboard JSON)
PANELS: tuple[tuple[str, str], ...] = (
    ("GPU Temperature", f"DCGM_FI_DEV_GPU_TEMP{SELECTOR}"),
    ("GPU Avg. Temp", f"avg(DCGM_FI_DEV_GPU_TEMP{SELECTOR})"),
    ("GPU Power Usage", f"DCGM_FI_DEV_POWER_USAGE{SELECTOR}"),
    ("GPU Power Total", f"sum(DCGM_FI_DEV_POWER_USAGE{SELECTOR})"),
    ("GPU SM Clocks", f"DCGM_FI_DEV_SM_CLOCK{SELECTOR} * 1000000"),
    ("GPU Utilization", f"DCGM_FI_DEV_GPU_UTIL{SELECTOR}"),
    ("GPU Framebuffer Mem Used", f"DCGM_FI_DEV_FB_USED{SELECTOR}"),
    ("Tensor Core Utilization", f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{SELECTOR}"),
)
VARIABLES: tuple[tuple[str, str], ...] = (("instance", "DCGM_FI_DEV_GPU_TEMP"), ("gpu", "DCGM_FI_DEV_GPU_TEMP"))


async def test_the_stock_dcgm_exporter_dashboard_has_data_for_every_gpu(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "exporter", "--source", "sim", "--sim-gpus", str(GPUS), "--interval", "1",
        "--listen", f"127.0.0.1:{port}", "--pod-resources-socket", "", "--node-name", "node-a",
        cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with aiohttp.ClientSession() as http:

            async def serving_or_gone() -> bool:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/metrics") as r:
                        if r.status == 200 and "DCGM_FI_DEV_GPU_TEMP{" in await r.text():
                            return True
                except aiohttp.ClientError:
                    pass
                return proc.returncode is not None  # gone: the assertion below says why

            await eventually(serving_or_gone, "the exporter's /metrics", timeout=20, interval=0.1)
        assert proc.returncode is None, (await proc.stderr.read()).decode()

        cm = run_prometheus(tmp_path / "prom", targets=[f"127.0.0.1:{port}"], scrape_interval="1s")
        prom = await asyncio.to_thread(cm.__enter__)
        try:
            await asyncio.to_thread(prom.wait_for, f"count(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE) == {GPUS}", 30.0)
            instance = f"127.0.0.1:{port}"
            for var, family in VARIABLES:  # label_values(family, var)
                values = {r["metric"][var] for r in await asyncio.to_thread(prom.query, f"count by ({var}) ({family})")}
                assert values == ({instance} if var == "instance" else {str(i) for i in range(GPUS)}), var
            for title, expr in PANELS:
                query = expr.replace("$instance", ".*").replace("$gpu", ".*")
                result = await asyncio.to_thread(prom.query, query)
                aggregated = not query.startswith("DCGM_")
                if aggregated:
                    assert len(result) == 1, title
                else:
                    assert sorted(r["metric"]["gpu"] for r in result) == [str(i) for i in range(GPUS)], title
                for r in result:
                    assert float(r["value"][1]) >= 0, title
        finally:
            await asyncio.to_thread(cm.__exit__, None, None, None)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 30)
