"""What an nvml exporter that (re)starts can know about a GPU's fatal state, through the real pynvml.

NVML has no "last XID" call: XID events reach only a process that was listening.  What the driver
keeps across an exporter restart, and the source reads at every collection, is: a GPU that fell off
the bus keeps failing its calls (lost), the recovery action the driver asks for (field 230), pending
row remaps and page retirements, and the row-remap failure flag.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.agent import Agent
from exporter.collector import ExporterCollector
from exporter.health import GPU_LOST, RECOVERY_ACTION, ROW_REMAP_FAILURE
from exporter.sources.nvml import NvmlSource
from tests.nvml.fake_library import FakeNvml


def agent_for(source: NvmlSource) -> Agent:
    now = iter(range(0, 100_000, 10))
    return Agent(source, ExporterCollector(), hostname="node-a", interval=10.0, clock=lambda: float(next(now)))


async def test_fatal_states_the_driver_keeps_are_unhealthy_from_the_first_collection(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    # as a freshly started exporter finds them: no XID event will ever arrive for what happened before
    fake_nvml.write(
        "gpus 4\n"
        "gpu 0 recovery_action 1\n"  # NVML_GPU_RECOVERY_ACTION_GPU_RESET
        "gpu 1 error 15\n"  # fell off the bus (XID 79): every call says GPU is lost
        "gpu 2 remap_failure 1\n"
        "gpu 3 remap_pending 1\n"  # pending remap: a reset applies it, the GPU keeps working
    )
    fake_nvml.load()
    source = make_source()
    await source.start()
    agent = agent_for(source)
    for _ in range(70):  # well past any time window: these hold as long as the driver says so
        state = await agent.collect_once()
        reasons = [g.health.reason for g in state.sample.gpus]
        assert reasons == [RECOVERY_ACTION, GPU_LOST, ROW_REMAP_FAILURE, ""]
    g0, _, _, g3 = state.sample.gpus
    assert "GPU reset" in g0.health.message
    assert g0.fields["DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"] == 1.0
    assert g3.fields["DCGM_FI_DEV_ROW_REMAP_PENDING"] == 1.0

    fake_nvml.write("gpus 4\n")  # the GPUs were reset / replaced
    state = await agent.collect_once()
    assert all(g.health.healthy for g in state.sample.gpus)


async def test_fields_the_driver_does_not_support_are_skipped_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    # Ampere and newer retire no pages (they remap rows): the batch answers NOT_SUPPORTED per field
    fake_nvml.write("gpus 1\ngpu 0 not_supported field_29,field_30,field_31,field_230\n")
    fake_nvml.load()
    source = make_source(gpm=False)
    await source.start()
    first = await source.collect(1.0)
    second = await source.collect(2.0)
    fields = first.gpus[0].fields
    assert "DCGM_FI_DEV_RETIRED_PENDING" not in fields and "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION" not in fields
    assert fields["DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"] == 0.0
    assert first.errors["not_supported"] == 2  # the two reads, each counted once
    assert "not_supported" not in second.errors
