"""Health classification: a table of cases, the clock and history passed in."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from exporter.health import (
    EMPTY_HISTORY,
    FATAL_XID,
    GPU_LOST,
    REASONS,
    RECOVERY_ACTION,
    ROW_REMAP_FAILURE,
    THERMAL_SLOWDOWN,
    UNCORRECTABLE_ECC,
    HealthConfig,
    classify,
)
from exporter.sample import GpuSample

CFG = HealthConfig(xid_window_seconds=600, ecc_window_seconds=600, thermal_sustain_seconds=60)


def gpu(*, xids=(), lost=False, before_start=0, **fields: float) -> GpuSample:
    return GpuSample(index=0, uuid="GPU-x", pci_bus_id="b", model_name="m",
                     fields=MappingProxyType(dict(fields)), lost=lost, xid_events=tuple(xids),
                     xid_before_start=before_start)


def run(samples: list[tuple[float, GpuSample]], config: HealthConfig = CFG):
    """Feed samples in order; return the verdict after each."""
    history, out = EMPTY_HISTORY, []
    for now, g in samples:
        verdict, history = classify(g, history, now, config)
        out.append(verdict)
    return out


@pytest.mark.parametrize("xid", [63, 92, 94, 13, 31, 43, 45])
def test_app_and_ignore_xids_never_make_a_gpu_unhealthy(xid: int) -> None:
    (verdict,) = run([(100.0, gpu(xids=[(xid, 100.0)]))])
    assert verdict.healthy and verdict.reason == ""


@pytest.mark.parametrize("xid", [48, 64, 74, 79, 95, 46, 62, 119, 120, 140, 143, 155])
def test_drain_worthy_xids_make_a_gpu_unhealthy_for_the_window(xid: int) -> None:
    verdicts = run([(100.0, gpu(xids=[(xid, 100.0)])), (699.0, gpu()), (700.0, gpu())])
    assert [v.reason for v in verdicts] == [FATAL_XID, FATAL_XID, ""]
    assert f"XID {xid}" in verdicts[0].message


def test_the_drain_list_is_configurable() -> None:
    cfg = HealthConfig(drain_xids=frozenset({94}))
    assert [v.reason for v in run([(1.0, gpu(xids=[(94, 1.0)])), (2.0, gpu(xids=[(79, 2.0)]))], cfg)] == [
        FATAL_XID,
        FATAL_XID,
    ]
    assert run([(1.0, gpu(xids=[(79, 1.0)]))], cfg)[0].healthy


def test_a_later_fatal_xid_restarts_the_window() -> None:
    verdicts = run([(0.0, gpu(xids=[(79, 0.0)])), (500.0, gpu(xids=[(48, 500.0)])), (900.0, gpu()), (1100.0, gpu())])
    assert [v.reason for v in verdicts] == [FATAL_XID, FATAL_XID, FATAL_XID, ""]
    assert "XID 48" in verdicts[2].message


def test_uncorrectable_ecc_is_an_increase_of_the_volatile_dbe_count() -> None:
    dbe = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
    verdicts = run([
        (0.0, gpu(**{dbe: 2})),  # first value seen: the baseline
        (10.0, gpu(**{dbe: 2})),
        (20.0, gpu(**{dbe: 3})),  # rose
        (619.0, gpu(**{dbe: 3})),
        (620.0, gpu(**{dbe: 3})),
    ])
    assert [v.reason for v in verdicts] == ["", "", UNCORRECTABLE_ECC, UNCORRECTABLE_ECC, ""]


def test_row_remap_failure_and_lost_gpu() -> None:
    assert run([(0.0, gpu(DCGM_FI_DEV_ROW_REMAP_FAILURE=1))])[0].reason == ROW_REMAP_FAILURE
    assert run([(0.0, gpu(DCGM_FI_DEV_ROW_REMAP_FAILURE=0))])[0].healthy
    assert run([(0.0, gpu(lost=True))])[0].reason == GPU_LOST


@pytest.mark.parametrize("bit", [0x20, 0x40, 0x60 | 0x4])
def test_sustained_thermal_slowdown_is_unhealthy_a_brief_one_is_not(bit: int) -> None:
    hot, cool = gpu(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=bit), gpu(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0)
    brief = run([(0.0, hot), (30.0, hot), (59.0, hot), (60.0, cool), (100.0, hot), (130.0, hot)])
    assert all(v.healthy for v in brief)
    sustained = run([(0.0, hot), (30.0, hot), (60.0, hot), (90.0, hot), (100.0, cool)])
    assert [v.reason for v in sustained] == ["", "", THERMAL_SLOWDOWN, THERMAL_SLOWDOWN, ""]


def test_power_cap_and_idle_throttling_are_not_thermal() -> None:
    g = gpu(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x1 | 0x4 | 0x8)
    assert all(v.healthy for v in run([(t, g) for t in (0.0, 100.0, 1000.0)]))


def test_reason_priority_and_bounded_set() -> None:
    g = gpu(xids=[(79, 0.0)], lost=True, DCGM_FI_DEV_ROW_REMAP_FAILURE=1)
    assert run([(0.0, g)])[0].reason == GPU_LOST
    g = gpu(xids=[(79, 0.0)], DCGM_FI_DEV_ROW_REMAP_FAILURE=1)
    assert run([(0.0, g)])[0].reason == FATAL_XID
    assert set(REASONS) == {"", GPU_LOST, FATAL_XID, RECOVERY_ACTION, ROW_REMAP_FAILURE, UNCORRECTABLE_ECC, THERMAL_SLOWDOWN}


def test_classify_is_pure() -> None:
    g = gpu(xids=[(79, 5.0)])
    a = classify(g, EMPTY_HISTORY, 10.0, CFG)
    b = classify(g, EMPTY_HISTORY, 10.0, CFG)
    assert a == b and EMPTY_HISTORY.fatal_xid is None


def test_a_fatal_xid_found_at_start_holds_past_the_window_and_says_so() -> None:
    g = gpu(before_start=79)
    verdicts = run([(0.0, g), (601.0, g), (100_000.0, g)])
    assert [v.reason for v in verdicts] == [FATAL_XID] * 3
    assert "found at exporter start" in verdicts[-1].message and "XID 79" in verdicts[-1].message
    # the source stops reporting it once the GPU is reset or the value clears
    assert run([(0.0, g), (10.0, gpu())])[-1].healthy


@pytest.mark.parametrize("xid", [63, 94, 43])
def test_a_harmless_xid_found_at_start_is_healthy(xid: int) -> None:
    assert run([(0.0, gpu(before_start=xid))])[0].healthy


def test_a_recovery_action_the_driver_asks_for_is_unhealthy_until_done() -> None:
    verdicts = run([(0.0, gpu(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=2)), (10.0, gpu(DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION=0))])
    assert verdicts[0].reason == RECOVERY_ACTION and "node reboot" in verdicts[0].message
    assert verdicts[1].healthy
