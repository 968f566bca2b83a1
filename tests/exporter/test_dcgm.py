"""The dcgm source against a dcgm-exporter served by a real aiohttp server, good and bad."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.agent import Agent
from exporter.collector import ExporterCollector, new_registry, render_text
from exporter.sources.base import SourceError
from exporter.sources.dcgm import DcgmSource, parse_exposition
from tests.exporter.expo import by_gpu, families, header_lines, series

U0 = "GPU-5fd2bb4c-2b38-3d5a-a27b-a2b1f0e2ac1e"
U1 = "GPU-8a9b0c1d-2e3f-4a5b-8c6d-7e8f9a0b1c2d"
ID0 = f'gpu="0",UUID="{U0}",pci_bus_id="00000000:8D:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3"'
ID1 = f'gpu="1",UUID="{U1}",pci_bus_id="00000000:9A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3"'
HOST = 'Hostname="node-a",DCGM_FI_DRIVER_VERSION="550.144.03"'
POD = 'container="c",namespace="ns",pod="p"'


def exposition(util0: float = 87.0, xid0: int = 0, energy0: int = 48712345678) -> str:
    """dcgm-exporter 4.x text as its gpuMetricsFormat template writes it."""
    return f"""# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{{{ID0},{HOST},{POD}}} 1980
DCGM_FI_DEV_SM_CLOCK{{{ID1},{HOST}}} 345
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{{{ID0},{HOST},{POD}}} {util0:g}
DCGM_FI_DEV_GPU_UTIL{{{ID1},{HOST}}} 0
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{{{ID0},{HOST},{POD}}} 612.982000
DCGM_FI_DEV_POWER_USAGE{{{ID1},{HOST}}} 71.250000
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{ID0},{HOST},{POD}}} {energy0}
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{ID1},{HOST}}} 1234567890
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{{{ID0},{HOST},{POD},err_code="{xid0}",err_msg="x"}} {xid0}
DCGM_FI_DEV_XID_ERRORS{{{ID1},{HOST}}} 0
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{{{ID0},{HOST},{POD}}} 61234
DCGM_FI_DEV_FB_USED{{{ID1},GPU_I_PROFILE="1g.10gb",GPU_I_ID="9",{HOST},container="m",namespace="ns2",pod="mig-pod"}} 812
DCGM_FI_DEV_FB_USED{{{ID1},{HOST}}} 0
# HELP DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL Total number of NVLink bandwidth counters for all lanes.
# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{ID0},{HOST},{POD}}} 99887766
# HELP DCGM_FI_PROF_GR_ENGINE_ACTIVE Ratio of time the graphics engine is active.
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{ID0},{HOST},{POD}}} 0.912345
DCGM_FI_PROF_GR_ENGINE_ACTIVE{{{ID1},{HOST}}} 0.000000
# HELP DCGM_FI_PROF_PIPE_TENSOR_ACTIVE Ratio of cycles the tensor (HMMA) pipe is active.
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{ID0},{HOST},{POD}}} 0.421000
# HELP DCGM_EXP_XID_ERRORS_COUNT Count of XID Errors within user-specified time window (see xid-count-window-size flag).
# TYPE DCGM_EXP_XID_ERRORS_COUNT gauge
DCGM_EXP_XID_ERRORS_COUNT{{{ID0},{HOST},window_size_in_ms="300000",xid="43"}} 1
"""


class Upstream:
    """A fake dcgm-exporter whose answer each test sets."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.util0 = 87.0
        self.xid0 = 0
        self.energy0 = 48712345678

    async def handle(self, request: web.Request) -> web.Response:
        if self.mode == "ok":
            return web.Response(text=exposition(self.util0, self.xid0, self.energy0), content_type="text/plain")
        if self.mode == "http500":
            return web.Response(status=500, text="internal error")
        if self.mode == "html":
            return web.Response(text="<html><body><h1>Welcome to nginx!</h1></body></html>", content_type="text/html")
        if self.mode == "html_as_text":
            return web.Response(text="<!DOCTYPE html>\n<html><body>login</body></html>\n", content_type="text/plain")
        if self.mode == "malformed":
            good = exposition(self.util0)
            return web.Response(text=good.replace("DCGM_FI_DEV_GPU_UTIL{gpu=\"1\"", "DCGM_FI_DEV_GPU_UTIL{gpu=\"1\" broken"),
                                content_type="text/plain")
        if self.mode == "empty":
            return web.Response(text="# nothing here\n", content_type="text/plain")
        await asyncio.sleep(1.0)  # "slow"
        return web.Response(text=exposition(), content_type="text/plain")


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, TestServer]]:
    up = Upstream()
    app = web.Application()
    app.router.add_get("/metrics", up.handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield up, server
    finally:
        await server.close()


def make(server: TestServer, start: int = 0) -> tuple[Agent, DcgmSource, object]:
    source = DcgmSource("node-a", str(server.make_url("/metrics")), timeout=0.3)
    collector = ExporterCollector(clock=lambda: 50.0)
    now = iter(range(start, start + 100_000, 10))
    agent = Agent(source, collector, hostname="node-a", interval=10.0, clock=lambda: float(next(now)))
    return agent, source, new_registry(collector)


async def test_dcgm_series_map_to_gpus_and_keep_profiling_and_unknown_fields(upstream) -> None:
    _up, server = upstream
    agent, source, registry = make(server)
    state = await agent.collect_once()
    g0, g1 = state.sample.gpus
    assert (g0.index, g0.uuid, g0.pci_bus_id, g0.driver_version) == (0, U0, "00000000:8D:00.0", "550.144.03")
    assert g0.fields["DCGM_FI_DEV_GPU_UTIL"] == 87.0
    assert g0.fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 48712345678
    assert g0.fields["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(0.421)
    assert g0.extra == {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 99887766}
    assert (g0.pod.namespace, g0.pod.pod, g0.pod.container) == ("ns", "p", "c")
    assert g1.pod is None
    (mig,) = g1.mig
    assert (mig.gpu_instance_id, mig.profile, mig.fields["DCGM_FI_DEV_FB_USED"], mig.pod.pod) == (9, "1g.10gb", 812, "mig-pod")

    text = render_text(registry).decode()
    types = header_lines(text)
    assert types["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert types["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == "untyped"
    assert types["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == "gauge"
    assert "DCGM_EXP_XID_ERRORS_COUNT" not in types
    assert by_gpu(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")["0"]["pod"] == "p"
    mig_series = [lab for lab, _ in series(text, "DCGM_FI_DEV_FB_USED") if "GPU_I_ID" in lab]
    assert list(mig_series[0]) == ["gpu", "UUID", "pci_bus_id", "device", "modelName", "GPU_I_PROFILE", "GPU_I_ID",
                                   "Hostname", "DCGM_FI_DRIVER_VERSION", "container", "namespace", "pod"]
    await source.close()


@pytest.mark.parametrize(
    ("mode", "kind"),
    [("http500", "http_status"), ("html", "parse"), ("html_as_text", "parse"), ("malformed", "parse"),
     ("empty", "parse"), ("slow", "timeout"), ("down", "connect")],
)
async def test_bad_upstream_is_counted_and_the_last_good_sample_served_stale(upstream, mode: str, kind: str) -> None:
    up, server = upstream
    agent, source, registry = make(server)
    await agent.collect_once()
    up.mode = mode
    if mode == "down":
        await server.close()
    state = await agent.collect_once()
    assert state.errors_total[("dcgm", kind)] == 1
    assert sum(v for (src, _), v in state.errors_total.items() if src == "dcgm") == 1
    assert state.sample.stale
    assert state.sample.gpus[0].fields["DCGM_FI_DEV_GPU_UTIL"] == 87.0  # last good data, still served
    text = render_text(registry).decode()
    assert by_gpu(text, "DCGM_FI_DEV_GPU_UTIL")["0"]["UUID"] == U0
    errors = {(lab["source"], lab["kind"]): v for lab, v in series(text, "queuepilot_exporter_source_errors")}
    assert errors[("dcgm", kind)] == 1.0
    ok, body = agent.status(now=state.last_success + 10)  # within 3 intervals: still ok, the error is visible
    assert ok and body["sample_stale"]
    ok, body = agent.status(now=state.last_success + 31)
    assert not ok and kind in body["reasons"][-1]
    if mode != "down":  # the upstream recovers: fresh data again
        up.mode, up.util0 = "ok", 12.0
        state = await agent.collect_once()
        assert not state.sample.stale and state.sample.gpus[0].fields["DCGM_FI_DEV_GPU_UTIL"] == 12.0
    await source.close()


async def test_a_new_last_xid_is_an_event_counted_per_xid(upstream) -> None:
    up, server = upstream
    agent, source, registry = make(server)  # the agent's clock moves 10 s per collection

    def counts() -> dict[tuple[str, str], float]:
        text = render_text(registry).decode()
        assert families(text)["queuepilot_gpu_xid_errors"].type == "counter"
        return {(lab["gpu"], lab["xid"]): v for lab, v in series(text, "queuepilot_gpu_xid_errors")}

    await agent.collect_once()  # baseline: XID 0
    assert counts() == {}
    up.xid0 = 79
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.reason == "FatalXid"
    # the new series shows 0 first, so that increase() over it sees the first XID
    assert counts() == {("0", "79"): 0.0}
    await agent.collect_once()  # the same last XID again is not a new event
    up.xid0 = 43
    await agent.collect_once()
    assert counts() == {("0", "79"): 0.0, ("0", "43"): 0.0}
    for _ in range(6):  # 60 s later both counts show
        await agent.collect_once()
    assert counts() == {("0", "79"): 1.0, ("0", "43"): 1.0}
    up.xid0 = 79
    await agent.collect_once()  # a known series counts at once
    assert counts() == {("0", "79"): 2.0, ("0", "43"): 1.0}
    await source.close()


async def test_a_fatal_xid_survives_an_exporter_restart(upstream, caplog: pytest.LogCaptureFixture) -> None:
    up, server = upstream
    agent, source, _ = make(server)
    await agent.collect_once()
    up.xid0 = 79
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.reason == "FatalXid"
    await source.close()

    # a new process (DaemonSet rollout, OOM kill): it first sees DCGM_FI_DEV_XID_ERRORS already at 79
    agent, source, registry = make(server, start=10_000)
    for _ in range(80):  # far past the fatal-XID window: the time of a found XID is unknown
        state = await agent.collect_once()
        g0, g1 = state.sample.gpus
        assert (g0.health.healthy, g0.health.reason) == (False, "FatalXid")
        assert "found at exporter start" in g0.health.message
        assert g1.health.healthy
    text = render_text(registry).decode()
    assert series(text, "queuepilot_gpu_xid_errors") == []  # not an event of this process: not counted
    healthy = {lab["gpu"]: (lab["reason"], v) for lab, v in series(text, "queuepilot_gpu_healthy")}
    assert healthy["0"] == ("FatalXid", 0.0)
    _, body = agent.status()
    assert body["unhealthy_gpus"] == {U0: "FatalXid"} and "found at exporter start" in body["unhealthy_gpu_messages"][U0]
    said = [r.getMessage() for r in caplog.records if "found at exporter start" in r.getMessage()]
    assert len(said) == 1  # logged once when the verdict changed, not every collection

    up.xid0 = 0  # the value clears (the hostengine restarted, or it was cleared)
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.healthy
    await source.close()


async def test_a_fatal_xid_found_at_start_clears_when_the_gpu_is_reset(upstream) -> None:
    up, server = upstream
    up.xid0 = 48
    agent, source, _ = make(server)
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.reason == "FatalXid"
    up.energy0 = 1_000  # the energy counter restarts: the GPU was reset (the last XID value stays 48)
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.healthy
    up.energy0 = 2_000
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.healthy and state.sample.gpus[0].xid_before_start == 0
    await source.close()


async def test_a_harmless_last_xid_at_start_keeps_the_gpu_healthy(upstream) -> None:
    up, server = upstream
    up.xid0 = 43  # an application fault
    agent, source, _ = make(server)
    state = await agent.collect_once()
    assert state.sample.gpus[0].health.healthy and state.sample.gpus[0].xid_before_start == 43
    await source.close()


def test_parse_raises_on_garbage() -> None:
    for bad in ("<html>", 'DCGM_FI_DEV_GPU_UTIL{gpu="0" 5', "go_goroutines 5\n"):
        with pytest.raises(ValueError):
            parse_exposition(bad)


async def test_unreachable_at_start_is_not_fatal() -> None:
    source = DcgmSource("node-a", "http://127.0.0.1:9/metrics", timeout=0.3)
    await source.start()
    with pytest.raises(SourceError) as e:
        await source.collect(1.0)
    assert e.value.kind == "connect"
    await source.close()
