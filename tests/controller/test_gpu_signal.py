"""The GPU signal in both modes: a real Prometheus scraping a static exporter exposition, direct scrapes,
and garbage / failing / slow answers (counted, last good data kept with its old age)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

import aiohttp
import pytest

from autoscaler.core.snapshot import PodKey
from autoscaler.signals.gpu_prometheus import PrometheusGpuSignal
from autoscaler.signals.gpu_scrape import ScrapeGpuSignal
from tests.support.http import serve
from tests.support.ports import free_port
from tests.support.prometheus import run_prometheus


def check_reading(reading):
    by_uuid = {g.uuid: g for g in reading.gpus}
    assert set(by_uuid) == {"GPU-h1-0", "GPU-h1-1", "GPU-h1-2"}
    g0, g1, g2 = by_uuid["GPU-h1-0"], by_uuid["GPU-h1-1"], by_uuid["GPU-h1-2"]
    assert g0.node == "h1" and g0.index == 0 and g0.model == "NVIDIA H100 80GB HBM3"
    assert g0.pod == PodKey("team-a", "w1") and g0.utilization == 0.5 and g0.memory_used_bytes == 1024 * 2**20
    assert g0.healthy and g1.healthy and g1.pod is None and g1.utilization == 0.0
    assert not g2.healthy and g2.health_reason == "xid_fatal" and g2.pod is None


async def test_prometheus_mode_against_a_real_prometheus(answers, tmp_path):
    host = answers.url.removeprefix("http://")
    # Scraped as a ServiceMonitor without honorLabels would: the target's own pod/namespace labels
    # collide with the series', so Prometheus renames the series' labels to exported_pod/exported_namespace.
    scrape = {"job_name": "exporter", "honor_labels": False, "metrics_path": "/metrics",
              "static_configs": [{"targets": [host], "labels": {"pod": "queuepilot-exporter-x1", "namespace": "monitoring"}}]}
    errors: Counter[str] = Counter()
    with run_prometheus(tmp_path, extra_scrape_configs=[scrape]) as prom:
        # (in a thread: the exposition server runs on this event loop)
        await asyncio.to_thread(prom.wait_for, "queuepilot_gpu_allocated")
        await asyncio.to_thread(prom.wait_for, "DCGM_FI_DEV_FB_USED")
        async with aiohttp.ClientSession() as session:
            sig = PrometheusGpuSignal(session, prom.url, (lambda k: errors.update([k])))
            await sig.poll(now=123.0)
            assert not errors, errors
            assert sig.reading.observed_at == 123.0
            check_reading(sig.reading)
            # Prometheus goes away: the error is counted, the last good data kept with its old time
            sig._url = answers.url
            answers.mode = "500"
            await sig.poll(now=200.0)
            assert errors == Counter({"server": 1})
            check_reading(sig.reading)
            assert sig.reading.observed_at == 123.0
            # a selector narrows every query
            none = PrometheusGpuSignal(session, prom.url, (lambda k: errors.update([k])), selector='{job="absent"}')
            await none.poll(now=124.0)
            assert none.reading.gpus == () and none.reading.observed_at == 124.0


@pytest.mark.parametrize(("mode", "kind"), [("500", "server"), ("garbage", "bad_response"),
                                            ("wrong_shape", "bad_response"), ("ok", "bad_response"),
                                            ("slow", "timeout")])
async def test_prometheus_bad_answers_are_counted_and_old_data_kept(answers, mode, kind):
    errors: Counter[str] = Counter()
    async with aiohttp.ClientSession() as session:
        sig = PrometheusGpuSignal(session, answers.url, (lambda k: errors.update([k])), timeout=0.5)
        answers.mode = mode
        await sig.poll(now=10.0)
        assert sig.reading.observed_at is None and sig.reading.gpus == ()
        assert set(errors) == {kind} and errors[kind] >= 1


async def test_scrape_mode_and_its_failures(answers):
    errors: Counter[str] = Counter()
    targets = [("monitoring/exporter-h1", answers.url)]

    async def discover():
        return targets

    async with aiohttp.ClientSession() as session:
        sig = ScrapeGpuSignal(session, discover, (lambda k: errors.update([k])), timeout=1.0)
        await sig.poll(now=100.0)
        assert not errors
        check_reading(sig.reading)
        assert sig.reading.observed_at == 100.0
        for mode, kind in (("500", "server"), ("garbage", "bad_response")):
            answers.mode = mode
            await sig.poll(now=200.0)
            assert errors[kind] == 1
            check_reading(sig.reading)  # last good data kept ...
            assert sig.reading.observed_at == 100.0  # ... with its old age, so it turns stale
            assert sig.last_error is not None and sig.last_error.startswith(
                f"scraping exporter monitoring/exporter-h1 failed: {kind}")
            assert sig.status()["failed_exporters"] == ["monitoring/exporter-h1"]
        answers.mode = "ok"
        targets.append(("monitoring/exporter-dead", "http://127.0.0.1:1"))
        await sig.poll(now=300.0)
        assert errors["connection"] == 1
        assert sig.reading.observed_at == 300.0  # the dead exporter never answered: nothing to age
        targets.pop()
        await sig.poll(now=400.0)
        assert sig.reading.observed_at == 400.0
        assert sig.last_error is None and sig.status()["ok"]


async def test_scrape_discovery_failure_is_counted():
    errors: Counter[str] = Counter()

    async def discover():
        raise ConnectionError("API server away")

    async with aiohttp.ClientSession() as session:
        sig = ScrapeGpuSignal(session, discover, (lambda k: errors.update([k])))
        await sig.poll(now=1.0)
        assert errors == Counter({"connection": 1}) and sig.reading.observed_at is None


class FakePrometheus:
    """An HTTP server answering /api/v1/query as scripted: an HTML page (a proxy or Grafana at the
    configured URL), or an empty success vector."""

    def __init__(self) -> None:
        self.mode = "html"
        self.url = ""

    async def query(self, _):
        from aiohttp import web

        if self.mode == "html":
            return web.Response(text="<html><body>Grafana</body></html>", content_type="text/html")
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": []}})


@pytest.fixture
async def fake_prometheus():
    from aiohttp import web

    fp = FakePrometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", fp.query)
    async with serve(app) as fp.url:
        yield fp


async def test_an_unreachable_prometheus_is_named_once_then_on_change_and_its_recovery_once(fake_prometheus, caplog):
    errors: Counter[str] = Counter()
    dead = f"http://127.0.0.1:{free_port()}"
    async with aiohttp.ClientSession() as session:
        sig = PrometheusGpuSignal(session, dead, (lambda k: errors.update([k])), timeout=1.0)
        with caplog.at_level(logging.INFO, logger="queuepilot.gpu"):
            for i in range(20):  # 20 polls in a row: one line, not twenty
                await sig.poll(now=100.0 + i)
        assert errors == Counter({"connection": 20})  # every failure is still counted
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1, lines
        assert lines[0].startswith(f"GPU signal from Prometheus {dead}: cannot connect (")
        assert lines[0].endswith("; no GPU data read yet (connection)")
        assert sig.last_error is not None and sig.last_error.startswith(f"Prometheus {dead}: cannot connect")
        st = sig.status()
        assert (st["ok"], st["error"], st["failing_since"], st["failures"], st["observed_at"]) == (
            False, "connection", 100.0, 20, None)

        # the URL now answers, but it is not Prometheus (an HTML page): named, with a hint
        caplog.clear()
        sig._url = fake_prometheus.url
        with caplog.at_level(logging.INFO, logger="queuepilot.gpu"):
            await sig.poll(now=200.0)
            await sig.poll(now=201.0)
        (line,) = [r.getMessage() for r in caplog.records]
        assert "is not JSON (text/html; charset=utf-8); is this a Prometheus server? check --prometheus-url" in line
        assert line.endswith("(bad_response); the problem changed")
        assert errors["bad_response"] == 2 and sig.status()["failing_since"] == 100.0

        caplog.clear()
        fake_prometheus.mode = "ok"
        with caplog.at_level(logging.INFO, logger="queuepilot.gpu"):
            await sig.poll(now=300.0)
            await sig.poll(now=301.0)
        (line,) = [r.getMessage() for r in caplog.records]
        assert line.startswith(f"GPU signal from Prometheus {dead}: recovered after 22 failed attempts")
        assert sig.last_error is None and sig.status()["ok"] and sig.reading.observed_at == 301.0


async def test_a_404_names_the_url_as_not_prometheus(caplog):
    from aiohttp import web

    app = web.Application()  # a web server without the Prometheus API: every path is 404
    errors: Counter[str] = Counter()
    async with serve(app) as url, aiohttp.ClientSession() as session:
        sig = PrometheusGpuSignal(session, url, (lambda k: errors.update([k])))
        with caplog.at_level(logging.WARNING, logger="queuepilot.gpu"):
            await sig.poll(now=1.0)
    assert errors == Counter({"not_found": 1})
    assert "HTTP 404 for /api/v1/query; is this a Prometheus server? check --prometheus-url" in caplog.text
