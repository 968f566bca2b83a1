"""The GPU signal in both modes: a real Prometheus scraping a static exporter exposition, direct scrapes,
and garbage / failing / slow answers (counted, last good data kept with its old age)."""

from __future__ import annotations

import asyncio
from collections import Counter

import aiohttp
import pytest

from autoscaler.core.snapshot import PodKey
from autoscaler.signals.gpu_prometheus import PrometheusGpuSignal
from autoscaler.signals.gpu_scrape import ScrapeGpuSignal
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
        answers.mode = "ok"
        targets.append(("monitoring/exporter-dead", "http://127.0.0.1:1"))
        await sig.poll(now=300.0)
        assert errors["connection"] == 1
        assert sig.reading.observed_at == 300.0  # the dead exporter never answered: nothing to age
        targets.pop()
        await sig.poll(now=400.0)
        assert sig.reading.observed_at == 400.0


async def test_scrape_discovery_failure_is_counted():
    errors: Counter[str] = Counter()

    async def discover():
        raise ConnectionError("API server away")

    async with aiohttp.ClientSession() as session:
        sig = ScrapeGpuSignal(session, discover, (lambda k: errors.update([k])))
        await sig.poll(now=1.0)
        assert errors == Counter({"connection": 1}) and sig.reading.observed_at is None
