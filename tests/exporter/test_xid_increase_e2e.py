"""A real Prometheus sees the first XID of a GPU in ``increase(queuepilot_gpu_xid_errors_total[...])``.

``increase()`` needs a sample before the first event; the exporter shows a new (GPU, xid) series at 0
for a while before its count (the hold is shortened here to keep the test quick).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from exporter.server import ExporterApp
from exporter.sources.sim import SimSource
from tests.support.prometheus import run_prometheus

pytestmark = pytest.mark.e2e


async def test_increase_sees_the_first_xid_of_a_gpu(tmp_path: Path) -> None:
    source = SimSource("node-a", gpus=2, pods=0, fault_script=())
    async with ExporterApp(source, listen="127.0.0.1:0", interval=0.5) as app:
        app.agent.xid_zero_hold = 3.0  # at least two of Prometheus' 1 s scrapes
        cm = run_prometheus(tmp_path / "prom", targets=[f"127.0.0.1:{app.port}"], scrape_interval="1s")
        prom = await asyncio.to_thread(cm.__enter__)
        try:
            await asyncio.to_thread(prom.wait_for, "up == 1", 30.0)
            source.inject_xid(1, 79)
            counter = 'queuepilot_gpu_xid_errors_total{gpu="1", xid="79"}'
            await asyncio.to_thread(prom.wait_for, f"{counter} == 1", 30.0)
            result = await asyncio.to_thread(prom.query, f"increase({counter}[1m])")
            assert len(result) == 1 and float(result[0]["value"][1]) > 0.5, result
            # the series was scraped at 0 before it counted
            history = await asyncio.to_thread(prom.query, f"min_over_time({counter}[1m])")
            assert float(history[0]["value"][1]) == 0.0
        finally:
            await asyncio.to_thread(cm.__exit__, None, None, None)
