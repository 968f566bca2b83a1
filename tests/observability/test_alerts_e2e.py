"""End to end: the real exporter (simulated fleet) -> a real Prometheus evaluating the generated rules ->
a real Alertmanager running the example configuration -> a webhook receiver (an aiohttp server here).

The rules are generated with short ``for`` durations through ``--set``-style settings so a scenario
takes seconds; everything else (expressions, labels, annotations, routing, inhibition) is what ships.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from alerts.cli import render
from alerts.config import AlertConfig
from exporter.health import HealthConfig
from exporter.server import ExporterApp
from exporter.sources.sim import SimSource
from tests.observability.files import AM_EXAMPLE
from tests.support.eventually import eventually
from tests.support.http import serve
from tests.support.prometheus import Alertmanager, Prometheus, run_alertmanager, run_prometheus

pytestmark = pytest.mark.e2e
NODE = "node-e2e"


@dataclass
class Webhook:
    url: str
    received: list[tuple[str, dict]] = field(default_factory=list)  # (receiver path, alert)

    def alerts(self, name: str, status: str) -> list[tuple[str, dict]]:
        return [(r, a) for r, a in self.received if a["labels"]["alertname"] == name and a["status"] == status]


@asynccontextmanager
async def webhook_server() -> AsyncIterator[Webhook]:
    hook = Webhook(url="")

    async def receive(request: web.Request) -> web.Response:
        body = await request.json()
        assert body["version"] == "4"
        for alert in body["alerts"]:
            hook.received.append((request.match_info["receiver"], alert))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/{receiver}", receive)
    async with serve(app) as hook.url:
        yield hook


def alertmanager_config(hook: Webhook) -> dict:
    """The shipped example, its receivers pointed at the test webhook and its waits shortened."""
    config = yaml.safe_load(AM_EXAMPLE.read_text())
    for receiver in config["receivers"]:
        for webhook in receiver.get("webhook_configs", []):
            webhook["url"] = f"{hook.url}/{receiver['name']}"
    config["route"] |= {"group_wait": "1s", "group_interval": "1s", "repeat_interval": "1h"}
    return config


@dataclass
class Stack:
    source: SimSource
    exporter: ExporterApp
    prom: Prometheus
    am: Alertmanager
    hook: Webhook


@asynccontextmanager
async def stack(tmp_path: Path, settings: list[str], xid_window: float) -> AsyncIterator[Stack]:
    """Exporter + Alertmanager + Prometheus with rules generated from ``settings``, and the webhook."""
    config = AlertConfig().with_settings(['exporter_selector=job="queuepilot"', *settings])
    rules = tmp_path / "rules.yaml"
    rules.write_text(render(config))
    source = SimSource(NODE, gpus=4, seed=1, fault_script=())
    exporter = ExporterApp(
        source, listen="127.0.0.1:0", hostname=NODE, interval=0.5, health=HealthConfig(xid_window_seconds=xid_window),
    )
    async with webhook_server() as hook, exporter:
        with run_alertmanager(tmp_path / "am", alertmanager_config(hook)) as am, run_prometheus(
            tmp_path / "prom", targets=[f"127.0.0.1:{exporter.port}"], rule_files=[rules], alertmanager=am.address,
        ) as prom:
            await eventually(lambda: prom.query('queuepilot_gpu_healthy{reason=""} == 1'), "the exporter's first scrape", timeout=20, interval=0.25, in_thread=True)
            yield Stack(source, exporter, prom, am, hook)


def _am_alerts(am_url: str) -> list[dict]:
    with urllib.request.urlopen(f"{am_url}/api/v2/alerts", timeout=5) as r:
        return json.load(r)


async def test_gpu_faults_page_and_resolve(tmp_path):
    settings = ["for.GPUFatalXid=1s", "for.GPULost=1s", "node_unhealthy_gpus=3"]
    async with stack(tmp_path, settings, xid_window=4) as s:
        source, prom, hook = s.source, s.prom, s.hook
        assert not hook.received, "nothing fires on a healthy fleet"
        source.inject_xid(0, 79)
        source.set_lost(1, True)

        await eventually(lambda: hook.alerts("GPUFatalXid", "firing"), "GPUFatalXid at the webhook", timeout=30, interval=0.25, in_thread=True)
        await eventually(lambda: hook.alerts("GPULost", "firing"), "GPULost at the webhook", timeout=30, interval=0.25, in_thread=True)
        receiver, fatal = hook.alerts("GPUFatalXid", "firing")[0]
        assert receiver == "platform-pager"  # critical -> the pager route of the example
        uuid0 = source.uuids[0]
        assert fatal["labels"] | {"instance": "-"} == {
            "alertname": "GPUFatalXid", "severity": "critical", "reason": "FatalXid", "job": "queuepilot",
            "instance": "-", "gpu": "0", "uuid": uuid0, "UUID": uuid0, "hostname": NODE, "Hostname": NODE,
            "device": "nvidia0", "pci_bus_id": fatal["labels"]["pci_bus_id"],
            "model_name": "NVIDIA H100 80GB HBM3",
        }
        assert fatal["annotations"]["description"].startswith(f"GPU 0 ({uuid0}) on node {NODE} reported an XID")
        assert fatal["annotations"]["runbook_url"].endswith("/docs/runbooks.md#gpufatalxid")
        _, lost = hook.alerts("GPULost", "firing")[0]
        assert (lost["labels"]["gpu"], lost["labels"]["UUID"]) == ("1", source.uuids[1])
        assert f"on node {NODE} is lost" in lost["annotations"]["description"]
        firing = await asyncio.to_thread(prom.get, "/api/v1/alerts")
        assert {"GPUFatalXid", "GPULost"} <= {
            a["labels"]["alertname"] for a in firing["data"]["alerts"] if a["state"] == "firing"
        }

        source.set_lost(1, False)  # the GPU is back; the XID ages out of the exporter's 4 s window
        await eventually(lambda: hook.alerts("GPULost", "resolved"), "GPULost resolved", timeout=30, interval=0.25, in_thread=True)
        await eventually(lambda: hook.alerts("GPUFatalXid", "resolved"), "GPUFatalXid resolved", timeout=30, interval=0.25, in_thread=True)
        _, resolved = hook.alerts("GPUFatalXid", "resolved")[0]
        assert resolved["labels"] == fatal["labels"]
        assert resolved["endsAt"] > resolved["startsAt"]


async def test_node_level_alert_inhibits_per_gpu_alerts(tmp_path):
    """Two unhealthy GPUs on one node: one GPUNodeUnhealthy page; the per-GPU alerts are inhibited."""
    settings = ["node_unhealthy_gpus=2", "for.GPUNodeUnhealthy=1s", "for.GPUFatalXid=3s", "for.GPULost=3s"]
    async with stack(tmp_path, settings, xid_window=600) as s:
        source, am, hook = s.source, s.am, s.hook
        source.inject_xid(0, 79)
        source.set_lost(1, True)
        await eventually(lambda: hook.alerts("GPUNodeUnhealthy", "firing"), "GPUNodeUnhealthy at the webhook", timeout=30, interval=0.25, in_thread=True)
        receiver, node_alert = hook.alerts("GPUNodeUnhealthy", "firing")[0]
        assert receiver == "platform-pager"
        assert node_alert["labels"]["Hostname"] == NODE
        assert node_alert["annotations"]["description"].startswith(f"2 GPUs on node {NODE} are unhealthy")

        def suppressed() -> set[str]:
            return {
                a["labels"]["alertname"] for a in _am_alerts(am.url)
                if a["status"]["state"] == "suppressed" and a["status"]["inhibitedBy"]
            }

        await eventually(lambda: {"GPUFatalXid", "GPULost"} <= suppressed(), "per-GPU alerts inhibited", timeout=30, interval=0.25, in_thread=True)
        await asyncio.sleep(2.5)  # longer than group_wait + group_interval: an uninhibited alert would be sent
        assert not hook.alerts("GPUFatalXid", "firing") and not hook.alerts("GPULost", "firing")


async def test_exporter_down_names_its_node(tmp_path):
    """The exporter stops answering: QueuePilotExporterDown reaches the platform queue, naming the node
    from the exporter's last hour of queuepilot_exporter_gpus."""
    async with stack(tmp_path, ["for.QueuePilotExporterDown=1s"], xid_window=600) as s:
        prom, hook = s.prom, s.hook
        await eventually(lambda: prom.query("queuepilot_exporter_gpus"), "exporter self-metrics scraped", timeout=20, interval=0.25, in_thread=True)
        await s.exporter.stop()
        await eventually(lambda: hook.alerts("QueuePilotExporterDown", "firing"), "QueuePilotExporterDown", timeout=30, interval=0.25, in_thread=True)
        receiver, down = hook.alerts("QueuePilotExporterDown", "firing")[0]
        assert receiver == "platform-queue"  # a warning without a team label
        assert (down["labels"]["Hostname"], down["labels"]["job"]) == (NODE, "queuepilot")
        assert down["annotations"]["description"].startswith(
            f"The exporter at {down['labels']['instance']} (node {NODE}) has not answered scrapes"
        )
