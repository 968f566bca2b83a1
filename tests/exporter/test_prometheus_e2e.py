"""A real Prometheus scrapes the exporter (sim source + a fake kubelet); promtool lints our families."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from exporter.server import ExporterApp
from exporter.sources.sim import SimSource
from tests.exporter.kubelet import KubeletServer, pod
from tests.support.prometheus import promtool, run_prometheus

pytestmark = pytest.mark.e2e


def queuepilot_families_only(text: str) -> str:
    keep = []
    for line in text.splitlines():
        name = line.split(" ")[2] if line.startswith("#") else line.split("{")[0].split(" ")[0]
        if name.startswith("queuepilot_"):
            keep.append(line)
    return "\n".join(keep) + "\n"


async def test_prometheus_sees_per_pod_gpu_utilization(kubelet: KubeletServer, tmp_path: Path) -> None:
    source = SimSource("node-a", gpus=4, pods=0, fault_script=())
    for index, load in enumerate((0.8, 0.6, 0.3, 0.0)):
        source.set_load(index, load)
    u = source.uuids
    kubelet.servicer.pods = [
        pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0], u[1]),
        pod("infer-0", "team-b", "server", "nvidia.com/gpu", u[2]),
    ]
    async with ExporterApp(source, listen="127.0.0.1:0", interval=0.5,
                           pod_resources_socket=str(kubelet.socket_path)) as app:
        cm = run_prometheus(tmp_path / "prom", targets=[f"127.0.0.1:{app.port}"], scrape_interval="1s")
        prom = await asyncio.to_thread(cm.__enter__)
        try:
            expr = 'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{pod!=""})'
            result = await asyncio.to_thread(prom.wait_for, expr, 30.0)
            per_pod = {(r["metric"]["namespace"], r["metric"]["pod"]): float(r["value"][1]) for r in result}
            assert per_pod == {("team-a", "train-0"): 70.0, ("team-b", "infer-0"): 30.0}
            free = await asyncio.to_thread(prom.query, 'DCGM_FI_DEV_GPU_UTIL{pod=""}')
            assert [r["metric"]["gpu"] for r in free] == ["3"]
            up = await asyncio.to_thread(prom.query, "queuepilot_exporter_pod_resources_up")
            assert [r["value"][1] for r in up] == ["1"]
            energy = await asyncio.to_thread(prom.query, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION")
            assert len(energy) == 4  # the counter kept its dcgm-exporter name

            kubelet.servicer.pods = kubelet.servicer.pods[:1]  # infer-0 is gone
            await asyncio.to_thread(
                prom.wait_for, 'count(DCGM_FI_DEV_GPU_UTIL{pod="infer-0"})', 30.0, lambda r: not r
            )
        finally:
            await asyncio.to_thread(cm.__exit__, None, None, None)

        async with aiohttp.ClientSession() as http, http.get(app.metrics_url) as r:
            text = await r.text()
    ours = queuepilot_families_only(text)
    assert "queuepilot_gpu_healthy{" in ours and "queuepilot_exporter_gpus{" in ours
    checked = await asyncio.to_thread(promtool, "check", "metrics", stdin=ours)
    assert checked.returncode == 0 and checked.stdout.strip() == "" and checked.stderr.strip() == "", checked
    # the whole exposition does not pass: dcgm-exporter's own names are kept on purpose
    full = await asyncio.to_thread(promtool, "check", "metrics", stdin=text)
    complaints = (full.stdout + full.stderr).strip().splitlines()
    assert 'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter metrics should have "_total" suffix' in complaints
    assert not [c for c in complaints if "queuepilot_" in c]
