"""The nvml source over the real pynvml and the fake C library (tests/nvml/fake_nvml.c)."""

from __future__ import annotations

import asyncio
import ctypes.util
import threading
from collections.abc import Callable

import pynvml
import pytest

from exporter.metrics import DCGM_FAMILIES
from exporter.sample import FleetSample
from exporter.sources.base import SourceError, SourceUnavailable
from exporter.sources.nvml import DRIVER_NOT_LOADED, NvmlSource
from tests.nvml.fake_library import FakeNvml, reset_pynvml

MiB = 1 << 20
GiB = 1 << 30
XID = "DCGM_FI_DEV_XID_ERRORS"

HEALTHY = f"""
gpus 2
driver 550.54.15
gpu 0 name NVIDIA H100 80GB HBM3
gpu 0 uuid GPU-0a1b2c3d-0000-4000-8000-000000000001
gpu 0 bus 0x8D
gpu 0 util_gpu 87
gpu 0 util_mem 31
gpu 0 mem_total {80 * GiB}
gpu 0 mem_reserved {512 * MiB}
gpu 0 mem_used {10 * GiB}
gpu 0 temp 61
gpu 0 mem_temp 72
gpu 0 power_mw 250000
gpu 0 energy_mj 123456789
gpu 0 sm_clock 1980
gpu 0 mem_clock 2619
gpu 0 pcie_replay 7
gpu 0 ecc_sbe_vol 11
gpu 0 ecc_dbe_vol 2
gpu 0 ecc_sbe_agg 113
gpu 0 ecc_dbe_agg 5
gpu 0 remap_corr 3
gpu 0 remap_unc 1
gpu 0 remap_failure 1
gpu 0 remap_pending 1
gpu 0 retired_sbe 4
gpu 0 retired_dbe 2
gpu 0 retired_pending 1
gpu 0 recovery_action 1
gpu 0 nvlink_crc_flit 21
gpu 0 nvlink_crc_data 22
gpu 0 nvlink_replay 23
gpu 0 nvlink_recovery 24
gpu 0 clocks_event 0x44
gpu 0 enc_util 12
gpu 0 dec_util 9
gpu 0 gpm 1
gpm 0 -1 1 71.5
gpm 0 -1 2 64
gpm 0 -1 3 30
gpm 0 -1 5 41
gpm 0 -1 10 55
gpu 1 name NVIDIA H100 80GB HBM3
gpu 1 uuid GPU-0a1b2c3d-0000-4000-8000-000000000002
gpu 1 bus 0x9D
gpu 1 power_mw 71250
"""

# what the source must report for GPU 0, written out from the control file above in DCGM units
GPU0_FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": 87.0,
    "DCGM_FI_DEV_MEM_COPY_UTIL": 31.0,
    "DCGM_FI_DEV_FB_USED": 10240.0,
    "DCGM_FI_DEV_FB_RESERVED": 512.0,
    "DCGM_FI_DEV_FB_FREE": 81920.0 - 512.0 - 10240.0,
    "DCGM_FI_DEV_GPU_TEMP": 61.0,
    "DCGM_FI_DEV_MEMORY_TEMP": 72.0,
    "DCGM_FI_DEV_POWER_USAGE": 250.0,
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 123456789.0,
    "DCGM_FI_DEV_SM_CLOCK": 1980.0,
    "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 7.0,
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 11.0,
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2.0,
    "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL": 113.0,
    "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL": 5.0,
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 3.0,
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 1.0,
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0,
    "DCGM_FI_DEV_ROW_REMAP_PENDING": 1.0,
    "DCGM_FI_DEV_RETIRED_SBE": 4.0,
    "DCGM_FI_DEV_RETIRED_DBE": 2.0,
    "DCGM_FI_DEV_RETIRED_PENDING": 1.0,
    "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION": 1.0,
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": 21.0,
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": 22.0,
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": 23.0,
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": 24.0,
    # GPM (percent -> ratio); the metrics the device does not answer are left out
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.715,
    "DCGM_FI_PROF_SM_ACTIVE": 0.64,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.30,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.41,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.55,
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(0x44),  # SwPowerCap | HwThermalSlowdown
    "DCGM_FI_DEV_ENC_UTIL": 12.0,
    "DCGM_FI_DEV_DEC_UTIL": 9.0,
    XID: 0.0,  # events watched, none seen
}


async def collect_until(
    source: NvmlSource, done: Callable[[list[FleetSample]], bool], *, start: float = 1000.0
) -> list[FleetSample]:
    """Collect (now = start, start+1, ...) until ``done(samples)``; fail after 10 s of trying."""
    samples: list[FleetSample] = []
    async with asyncio.timeout(10):
        while True:
            samples.append(await source.collect(start + len(samples)))
            if done(samples):
                return samples
            await asyncio.sleep(0.02)


async def test_healthy_gpus_report_every_field_in_dcgm_units(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(HEALTHY)
    fake_nvml.load()
    source = make_source()
    await source.start()
    sample = await source.collect(1700000000.0)

    assert (sample.source, sample.hostname, sample.taken_at) == ("nvml", "node-a", 1700000000.0)
    # counted once: GPU 1 has no GPM, GPU 0's GPM lacks 11 of the 16 metrics
    assert dict(sample.errors) == {"not_supported": 2}
    assert sample.collect_seconds > 0
    g0, g1 = sample.gpus
    assert (g0.index, g0.device, g0.uuid) == (0, "nvidia0", "GPU-0a1b2c3d-0000-4000-8000-000000000001")
    assert (g0.model_name, g0.pci_bus_id, g0.driver_version) == (
        "NVIDIA H100 80GB HBM3",
        "00000000:8D:00.0",
        "550.54.15",
    )
    assert (g1.index, g1.pci_bus_id) == (1, "00000000:9D:00.0")
    assert dict(g0.fields) == pytest.approx(GPU0_FIELDS)
    # every dcgm-exporter default field NVML can give is there, under its exact DCGM name
    assert set(g1.fields) == {m.name for m in DCGM_FAMILIES}
    assert g1.fields["DCGM_FI_DEV_POWER_USAGE"] == 71.25
    assert not g0.lost and not g1.lost and g0.mig == () and g0.xid_events == ()


async def test_failing_gpu_is_lost_while_others_report_and_it_recovers(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    base = "gpus 3\ngpu 1 power_mw 300000\n"
    fake_nvml.write(base)
    fake_nvml.load()
    source = make_source()
    await source.start()
    before = await source.collect(1.0)
    assert [g.lost for g in before.gpus] == [False, False, False]

    for code in (15, 999):  # NVML_ERROR_GPU_IS_LOST, NVML_ERROR_UNKNOWN
        fake_nvml.write(base + f"gpu 1 error {code}\n")
        during = await source.collect(2.0)
        g0, g1, g2 = during.gpus
        assert g1.lost and dict(g1.fields) == {}
        assert g1.uuid == before.gpus[1].uuid  # still identified, so health and pods can name it
        assert not g0.lost and not g2.lost
        assert dict(g0.fields) == dict(before.gpus[0].fields)
        assert dict(g2.fields) == dict(before.gpus[2].fields)
        assert during.errors["gpu_lost"] == 1

    fake_nvml.write(base)
    after = await source.collect(3.0)
    assert not after.gpus[1].lost
    assert after.gpus[1].fields["DCGM_FI_DEV_POWER_USAGE"] == 300.0
    assert "gpu_lost" not in after.errors


async def test_failing_core_getter_marks_gpu_lost(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    # the framebuffer read is the core getter: any error other than "not supported" means the GPU is gone
    fake_nvml.write("gpus 2\n")
    fake_nvml.load()
    source = make_source()
    await source.start()
    fake_nvml.write("gpus 2\ngpu 0 error 2\n")  # NVML_ERROR_INVALID_ARGUMENT on every call of GPU 0
    sample = await source.collect(1.0)
    assert sample.gpus[0].lost and dict(sample.gpus[0].fields) == {}
    assert not sample.gpus[1].lost and sample.gpus[1].fields["DCGM_FI_DEV_FB_USED"] == 10240.0
    assert sample.errors["gpu_lost"] == 1


async def test_xid_events_arrive_on_their_gpu(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 3\n")
    fake_nvml.load()
    source = make_source(clock=lambda: 4242.5)
    await source.start()
    first = await source.collect(1.0)
    assert [g.fields[XID] for g in first.gpus] == [0.0, 0.0, 0.0]

    fake_nvml.write("gpus 3\nxid 1 1 79\nxid 2 0 13\nxid 3 1 48\nxid 4 1 31\n")
    samples = await collect_until(source, lambda ss: sum(len(g.xid_events) for s in ss for g in s.gpus) >= 4)
    seen: dict[int, list[tuple[int, float]]] = {0: [], 1: [], 2: []}
    for s in samples:
        for g in s.gpus:
            seen[g.index].extend(g.xid_events)
    assert seen == {0: [(13, 4242.5)], 1: [(79, 4242.5), (48, 4242.5), (31, 4242.5)], 2: []}
    last = samples[-1]
    assert [g.fields[XID] for g in last.gpus] == [13.0, 31.0, 0.0]

    # events are delivered once; the last XID stays (dcgm-exporter semantics)
    again = await source.collect(2000.0)
    assert [g.xid_events for g in again.gpus] == [(), (), ()]
    assert [g.fields[XID] for g in again.gpus] == [13.0, 31.0, 0.0]


async def test_xid_on_a_lost_gpu_is_still_delivered(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 2\n")
    fake_nvml.load()
    source = make_source()
    await source.start()
    fake_nvml.write("gpus 2\nxid 1 1 79\n")
    await collect_until(source, lambda ss: bool(ss[-1].gpus[1].xid_events))
    fake_nvml.write("gpus 2\ngpu 1 error 15\nxid 1 1 79\nxid 2 1 79\n")
    samples = await collect_until(source, lambda ss: bool(ss[-1].gpus[1].xid_events))
    lost = samples[-1].gpus[1]
    assert [xid for xid, _ in lost.xid_events] == [79]
    assert lost.lost and XID not in lost.fields  # a lost GPU's fields are empty; the event is still there


async def test_missing_function_on_old_driver_is_skipped_and_counted_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 2\ngpu 0 temp 66\ngpu 0 clocks_event 0x20\n")
    fake_nvml.load("old")
    source = make_source()
    await source.start()
    samples = [await source.collect(float(t)) for t in range(3)]

    # nvmlDeviceGetTotalEnergyConsumption is not exported: the field is absent on every GPU, every time
    for s in samples:
        for g in s.gpus:
            assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" not in g.fields
            assert set(g.fields) == {m.name for m in DCGM_FAMILIES} - {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}
            assert not g.lost
    assert samples[0].errors["function_not_found"] == 1 + 2  # the energy read, and GPM on each GPU
    assert "function_not_found" not in samples[1].errors and "function_not_found" not in samples[2].errors
    # the newer symbols are missing too, and their deprecated fallbacks give the same facts
    g0 = samples[-1].gpus[0]
    assert g0.fields["DCGM_FI_DEV_GPU_TEMP"] == 66.0
    assert g0.fields["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == float(0x20)
    assert fake_nvml.calls("nvmlDeviceGetTemperature", 0) == 3
    assert fake_nvml.calls("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 3


async def test_unsupported_field_is_skipped_counted_once_and_not_called_again(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(
        "gpus 2\ngpu 0 not_supported nvmlDeviceGetTotalEccErrors,nvmlDeviceGetPcieReplayCounter,memory_temp\n"
    )
    fake_nvml.load()
    source = make_source(gpm=False)  # GPM's own skips: test_nvml_gpm.py
    await source.start()
    samples = [await source.collect(float(t)) for t in range(4)]

    ecc = {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"}
    ecc |= {"DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"}
    skipped = ecc | {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_MEMORY_TEMP"}
    for s in samples:
        g0, g1 = s.gpus
        assert not g0.lost
        assert set(g0.fields) == {m.name for m in DCGM_FAMILIES} - skipped
        assert set(g1.fields) == {m.name for m in DCGM_FAMILIES}
    assert samples[0].errors["not_supported"] == 6  # four ECC counters, PCIe replays, memory temperature
    assert all("not_supported" not in s.errors for s in samples[1:])
    # asked once per counter, then never again; GPU 1 is asked every cycle
    assert fake_nvml.calls("nvmlDeviceGetTotalEccErrors", 0) == 4
    assert fake_nvml.calls("nvmlDeviceGetTotalEccErrors", 1) == 4 * 4
    assert fake_nvml.calls("nvmlDeviceGetPcieReplayCounter", 0) == 1


async def test_mig_instances_carry_their_own_memory(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(
        "gpus 2\n"
        "gpu 1 mig_mode 1\n"
        "gpu 0 mig_mode 0\n"
        f"mig 1 0 5 1g.10gb MIG-11111111-2222-3333-4444-555555555555 {10 * GiB} {3 * GiB}\n"
        f"mig 1 2 2 3g.40gb MIG-66666666-7777-8888-9999-000000000000 {40 * GiB} {GiB // 2}\n"
    )
    fake_nvml.load()
    source = make_source(gpm=False)  # MIG utilization through GPM: test_nvml_gpm.py
    await source.start()
    samples = [await source.collect(float(t)) for t in range(2)]
    g0, g1 = samples[-1].gpus
    assert g0.mig == ()
    assert [(m.gpu_instance_id, m.profile, m.uuid) for m in g1.mig] == [
        (5, "1g.10gb", "MIG-11111111-2222-3333-4444-555555555555"),
        (2, "3g.40gb", "MIG-66666666-7777-8888-9999-000000000000"),
    ]
    assert dict(g1.mig[0].fields) == {
        "DCGM_FI_DEV_FB_USED": 3072.0,
        "DCGM_FI_DEV_FB_FREE": 7168.0,
        "DCGM_FI_DEV_FB_RESERVED": 0.0,
    }
    assert dict(g1.mig[1].fields)["DCGM_FI_DEV_FB_USED"] == 512.0
    # a MIG-enabled parent has no utilization in NVML: skipped (counted once), the rest is reported
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL"}.isdisjoint(g1.fields)
    assert g1.fields["DCGM_FI_DEV_FB_USED"] == 10240.0 and not g1.lost
    assert samples[0].errors["not_supported"] == 3
    assert "not_supported" not in samples[1].errors


async def test_driver_gone_reinitialises_with_backoff(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 2\n")
    fake_nvml.load()
    source = make_source()
    await source.start()
    assert len((await source.collect(100.0)).gpus) == 2
    inits = fake_nvml.calls("nvmlInitWithFlags")

    fake_nvml.write("gpus 2\ndriver_not_loaded 1\n")
    with pytest.raises(SourceError) as err:
        await source.collect(101.0)  # notices; re-init due at 102
    assert err.value.kind == DRIVER_NOT_LOADED
    for now in (101.5, 102.0, 103.0, 103.9):  # 102: tried and failed; next due at 104
        with pytest.raises(SourceError):
            await source.collect(now)
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 1

    fake_nvml.write("gpus 3\n")  # the driver is back (with another GPU)
    with pytest.raises(SourceError):
        await source.collect(103.95)  # still backing off: not tried
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 1
    back = await source.collect(104.0)
    assert fake_nvml.calls("nvmlInitWithFlags") == inits + 2
    assert [g.index for g in back.gpus] == [0, 1, 2]
    assert all(g.fields["DCGM_FI_DEV_POWER_USAGE"] == 250.0 for g in back.gpus)
    # the XID watcher was restarted on the new session
    await collect_until(source, lambda ss: all(XID in g.fields for g in ss[-1].gpus), start=105.0)


async def test_xid_registration_refused_is_retried_with_backoff(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 1\nxid_register 3\n")  # NVML_ERROR_NOT_SUPPORTED
    fake_nvml.load()
    source = make_source(xid_backoff=(0.05, 0.2))
    await source.start()
    refused = await collect_until(
        source, lambda ss: sum(s.errors.get("xid_registration", 0) for s in ss) >= 3
    )
    assert all(XID not in g.fields for s in refused for g in s.gpus)  # not watched: unknown, not zero
    assert all(not g.lost and g.fields["DCGM_FI_DEV_GPU_UTIL"] == 40.0 for s in refused for g in s.gpus)

    fake_nvml.write("gpus 1\nxid 1 0 94\n")
    samples = await collect_until(source, lambda ss: bool(ss[-1].gpus[0].xid_events), start=2000.0)
    assert samples[-1].gpus[0].xid_events[0][0] == 94
    assert samples[-1].gpus[0].fields[XID] == 94.0


async def test_close_stops_the_xid_thread_and_shuts_nvml_down(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.load()
    source = make_source(xid_wait_ms=300)
    await source.start()
    assert any(t.name == "nvml-xid" for t in threading.enumerate())
    await source.collect(1.0)
    await source.close()
    assert not any(t.name == "nvml-xid" for t in threading.enumerate())
    assert fake_nvml.calls("nvmlShutdown") == 1
    assert fake_nvml.calls("nvmlEventSetFree") == 1
    with pytest.raises(pynvml.NVMLError_Uninitialized):  # the fake's init count is back to zero
        pynvml.nvmlDeviceGetCount()
    with pytest.raises(SourceError):
        await source.collect(2.0)
    await source.close()  # idempotent


async def test_driver_not_loaded_at_start_is_retried_on_collection(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    # e.g. the GPU operator's driver container is still loading: start, then re-init on a later cycle
    fake_nvml.write("gpus 1\ndriver_not_loaded 1\n")
    fake_nvml.load()
    source = make_source()
    await source.start()
    with pytest.raises(SourceError) as err:
        await source.collect(10.0)
    assert err.value.kind == DRIVER_NOT_LOADED
    fake_nvml.write("gpus 1\n")
    with pytest.raises(SourceError):
        await source.collect(10.5)  # backing off until 11
    sample = await source.collect(11.0)
    assert [g.fields["DCGM_FI_DEV_GPU_UTIL"] for g in sample.gpus] == [40.0]


async def test_other_init_failure_is_unavailable_with_the_reason(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("init_error 4\n")  # NVML_ERROR_NO_PERMISSION
    fake_nvml.load()
    with pytest.raises(SourceUnavailable, match="NVML could not initialise: Insufficient Permissions"):
        await make_source().start()


async def test_gpu_lost_at_start_is_identified_once_it_answers(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write("gpus 2\ngpu 1 error 15\ngpu 1 uuid GPU-late\n")
    fake_nvml.load()
    source = make_source()
    await source.start()
    early = await source.collect(1.0)
    assert early.gpus[1].lost and early.gpus[1].index == 1 and dict(early.gpus[1].fields) == {}
    assert not early.gpus[0].lost and early.errors["gpu_lost"] == 1

    fake_nvml.write("gpus 2\ngpu 1 uuid GPU-late\nxid 1 1 31\n")
    samples = await collect_until(source, lambda ss: bool(ss[-1].gpus[1].xid_events), start=2.0)
    g1 = samples[-1].gpus[1]
    assert (g1.uuid, g1.pci_bus_id, g1.lost) == ("GPU-late", "00000000:19:00.0", False)
    assert g1.fields[XID] == 31.0  # registered for XID events once it was known


async def test_a_loaded_fake_does_not_leak_to_later_pynvml_users(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed here, so pynvml would rightly load it")
    fake_nvml.load()
    source = make_source()
    await source.start()
    await source.collect(1.0)
    await source.close()
    reset_pynvml()  # what the fixture does after every test
    # the fake stays mapped in this process, yet pynvml's own lookup by soname must not find it
    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()
