"""The HTTP side in-process: /metrics, /healthz, port 0, a source that fails."""

from __future__ import annotations

import aiohttp
import pytest

from exporter.sample import FleetSample
from exporter.server import ExporterApp, parse_listen
from exporter.sources.base import SourceError, SourceUnavailable
from exporter.sources.sim import SimSource
from tests.exporter.expo import by_gpu


class FlakySim(SimSource):
    """A sim whose collections can be made to fail."""

    failing = False

    async def collect(self, now: float) -> FleetSample:
        if self.failing:
            raise SourceError("timeout", "simulated timeout")
        return await super().collect(now)


class Broken(SimSource):
    async def start(self) -> None:
        raise SourceUnavailable("no GPUs here")


async def test_metrics_and_healthz_on_a_free_port() -> None:
    t = [1_000.0]
    source = FlakySim("node-a", gpus=2, fault_script=())
    async with ExporterApp(source, listen="127.0.0.1:0", interval=10.0, clock=lambda: t[0]) as app, \
            aiohttp.ClientSession() as http:
        assert app.port != 0 and app.metrics_url == f"http://127.0.0.1:{app.port}/metrics"
        async with http.get(app.metrics_url) as r:
            assert r.status == 200
            assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = await r.text()
        assert set(by_gpu(text, "DCGM_FI_DEV_GPU_UTIL")) == {"0", "1"}
        assert by_gpu(text, "DCGM_FI_DEV_GPU_UTIL")["0"]["Hostname"] == "node-a"
        async with http.get(f"{app.url}/healthz") as r:
            assert r.status == 200 and (await r.json())["status"] == "ok"

        source.failing = True
        t[0] += 10
        await app.agent.collect_once()
        async with http.get(f"{app.url}/healthz") as r:
            assert r.status == 200  # one failure within 3 intervals: still ok
        t[0] += 25
        await app.agent.collect_once()
        async with http.get(f"{app.url}/healthz") as r:
            body = await r.json()
            assert r.status == 503 and body["status"] == "degraded"
            assert "no successful sim collection for 35s" in body["reasons"][0]
            assert body["last_error"]["kind"] == "timeout" and body["sample_stale"]
        async with http.get(app.metrics_url) as r:
            assert "DCGM_FI_DEV_GPU_UTIL{" in await r.text()  # the last good sample is still served

        source.failing = False
        t[0] += 10
        await app.agent.collect_once()
        async with http.get(f"{app.url}/healthz") as r:
            assert r.status == 200


async def test_a_source_that_cannot_start_raises_and_leaves_nothing_listening() -> None:
    app = ExporterApp(Broken("node-a"), listen="127.0.0.1:0")
    with pytest.raises(SourceUnavailable):
        await app.start()
    assert app.port == 0


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen(":9400") == ("0.0.0.0", 9400)
    assert parse_listen("[::1]:0") == ("::1", 0)
    for bad in ("9400", "host:", "host:http", "h:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)
