"""Which NVML call fills which DCGM field, and the unit conversion: one row per per-cycle read.

Every read takes the ``pynvml`` module as an argument (only ``exporter.sources.nvml`` imports it)
and a device handle, and returns ``{DCGM field name: value}`` in dcgm-exporter's units.  A read
may list alternatives: when a newer symbol is missing from an older driver
(``NVMLError_FunctionNotFound``) the next alternative is used (e.g. the deprecated
``nvmlDeviceGetCurrentClocksThrottleReasons``).  ``benchmarks/nvml_latency.py`` times these
same reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIB = 1 << 20

Call = Callable[[Any, Any], dict[str, float]]


@dataclass(frozen=True, slots=True)
class Read:
    """One per-cycle NVML read: ``calls`` are alternatives, newest symbol first."""

    name: str
    fields: tuple[str, ...]
    calls: tuple[Call, ...]
    symbols: tuple[str, ...]  # the C symbol each alternative resolves (for docs and the benchmark)


def _memory_v2(nv: Any, h: Any) -> dict[str, float]:
    m = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)
    return {
        "DCGM_FI_DEV_FB_USED": float(m.used // MIB),
        "DCGM_FI_DEV_FB_FREE": float(m.free // MIB),
        "DCGM_FI_DEV_FB_RESERVED": float(m.reserved // MIB),
    }


def _memory_v1(nv: Any, h: Any) -> dict[str, float]:
    # pre-R510 drivers have no _v2; v1 has no separate "reserved"
    m = nv.nvmlDeviceGetMemoryInfo(h)
    return {"DCGM_FI_DEV_FB_USED": float(m.used // MIB), "DCGM_FI_DEV_FB_FREE": float(m.free // MIB)}


def _utilization(nv: Any, h: Any) -> dict[str, float]:
    u = nv.nvmlDeviceGetUtilizationRates(h)
    return {"DCGM_FI_DEV_GPU_UTIL": float(u.gpu), "DCGM_FI_DEV_MEM_COPY_UTIL": float(u.memory)}


def _gpu_temp_v(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_GPU_TEMP": float(nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU))}


def _gpu_temp(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_GPU_TEMP": float(nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))}


_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(nv: Any, v: Any) -> float:
    """The number in one ``c_nvmlFieldValue_t``; raises the field's own NVML error if it has one."""
    if v.nvmlReturn != nv.NVML_SUCCESS:
        raise nv.NVMLError(v.nvmlReturn)
    attr = _VALUE_ATTR.get(int(v.valueType))
    if attr is None:
        raise nv.NVMLError(nv.NVML_ERROR_UNKNOWN)
    return float(getattr(v.value, attr))


def field_batch(nv: Any, h: Any, ids: dict[int, str]) -> dict[str, float]:
    """Several NVML fields in one ``nvmlDeviceGetFieldValues`` call: ``{field id: DCGM name}``.

    A field that fails on its own is left out; when every field fails, the first field's error is
    raised (so a read NVML does not support at all is skipped once, like any other).
    """
    values = nv.nvmlDeviceGetFieldValues(h, list(ids))
    out: dict[str, float] = {}
    first: Exception | None = None
    for (_fid, name), v in zip(ids.items(), values, strict=True):
        try:
            out[name] = field_value(nv, v)
        except nv.NVMLError as e:
            first = first or e
    if not out and first is not None:
        raise first
    return out


def _memory_temp(nv: Any, h: Any) -> dict[str, float]:
    (v,) = nv.nvmlDeviceGetFieldValues(h, [nv.NVML_FI_DEV_MEMORY_TEMP])
    return {"DCGM_FI_DEV_MEMORY_TEMP": field_value(nv, v)}


def _power(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_POWER_USAGE": nv.nvmlDeviceGetPowerUsage(h) / 1000.0}  # mW -> W


def _energy(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(nv.nvmlDeviceGetTotalEnergyConsumption(h))}  # mJ


def _sm_clock(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_SM_CLOCK": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))}


def _mem_clock(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_MEM_CLOCK": float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM))}


def _pcie_replay(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": float(nv.nvmlDeviceGetPcieReplayCounter(h))}


def _ecc(field: str, error_type: str, counter_type: str) -> Call:
    def call(nv: Any, h: Any) -> dict[str, float]:
        n = nv.nvmlDeviceGetTotalEccErrors(h, getattr(nv, error_type), getattr(nv, counter_type))
        return {field: float(n)}

    return call


def _remapped_rows(nv: Any, h: Any) -> dict[str, float]:
    corr, unc, pending, failure = nv.nvmlDeviceGetRemappedRows(h)
    return {
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": float(corr),
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": float(unc),
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 1.0 if pending else 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 1.0 if failure else 0.0,
    }


# NVML field ids (nvml.h NVML_FI_DEV_*), literal so that the table reads without the bindings
FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING = 29, 30, 31
FI_NVLINK_CRC_FLIT_TOTAL, FI_NVLINK_CRC_DATA_TOTAL = 38, 45
FI_NVLINK_REPLAY_TOTAL, FI_NVLINK_RECOVERY_TOTAL = 52, 59
FI_GPU_RECOVERY_ACTION = 230

RETIRED_PAGES = {
    FI_RETIRED_SBE: "DCGM_FI_DEV_RETIRED_SBE",
    FI_RETIRED_DBE: "DCGM_FI_DEV_RETIRED_DBE",
    FI_RETIRED_PENDING: "DCGM_FI_DEV_RETIRED_PENDING",
}
NVLINK_ERRORS = {
    FI_NVLINK_CRC_FLIT_TOTAL: "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
    FI_NVLINK_CRC_DATA_TOTAL: "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
    FI_NVLINK_REPLAY_TOTAL: "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
    FI_NVLINK_RECOVERY_TOTAL: "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
}
RECOVERY = {FI_GPU_RECOVERY_ACTION: "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"}


def _fields(ids: dict[int, str]) -> Call:
    def call(nv: Any, h: Any) -> dict[str, float]:
        return field_batch(nv, h, ids)

    return call


def _clock_events(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(nv.nvmlDeviceGetCurrentClocksEventReasons(h))}


def _clock_throttle(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": float(nv.nvmlDeviceGetCurrentClocksThrottleReasons(h))}


def _encoder(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_ENC_UTIL": float(nv.nvmlDeviceGetEncoderUtilization(h)[0])}


def _decoder(nv: Any, h: Any) -> dict[str, float]:
    return {"DCGM_FI_DEV_DEC_UTIL": float(nv.nvmlDeviceGetDecoderUtilization(h)[0])}


_FB = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")

# The core read: if it fails with anything but "not supported", the GPU is reported lost.
MEMORY = Read(
    "memory", _FB, (_memory_v2, _memory_v1), ("nvmlDeviceGetMemoryInfo_v2", "nvmlDeviceGetMemoryInfo")
)

GPU_READS: tuple[Read, ...] = (
    MEMORY,
    Read(
        "utilization",
        ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL"),
        (_utilization,),
        ("nvmlDeviceGetUtilizationRates",),
    ),
    Read(
        "gpu_temp",
        ("DCGM_FI_DEV_GPU_TEMP",),
        (_gpu_temp_v, _gpu_temp),
        ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"),
    ),
    Read("memory_temp", ("DCGM_FI_DEV_MEMORY_TEMP",), (_memory_temp,), ("nvmlDeviceGetFieldValues",)),
    Read("power", ("DCGM_FI_DEV_POWER_USAGE",), (_power,), ("nvmlDeviceGetPowerUsage",)),
    Read(
        "energy",
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",),
        (_energy,),
        ("nvmlDeviceGetTotalEnergyConsumption",),
    ),
    Read("sm_clock", ("DCGM_FI_DEV_SM_CLOCK",), (_sm_clock,), ("nvmlDeviceGetClockInfo",)),
    Read("mem_clock", ("DCGM_FI_DEV_MEM_CLOCK",), (_mem_clock,), ("nvmlDeviceGetClockInfo",)),
    Read(
        "pcie_replay",
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER",),
        (_pcie_replay,),
        ("nvmlDeviceGetPcieReplayCounter",),
    ),
    Read(
        "ecc_sbe_vol",
        ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",),
        (_ecc("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),),
        ("nvmlDeviceGetTotalEccErrors",),
    ),
    Read(
        "ecc_dbe_vol",
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
        (_ecc("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),),
        ("nvmlDeviceGetTotalEccErrors",),
    ),
    Read(
        "ecc_sbe_agg",
        ("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",),
        (_ecc("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),),
        ("nvmlDeviceGetTotalEccErrors",),
    ),
    Read(
        "ecc_dbe_agg",
        ("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",),
        (_ecc("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),),
        ("nvmlDeviceGetTotalEccErrors",),
    ),
    Read(
        "remapped_rows",
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "DCGM_FI_DEV_ROW_REMAP_PENDING",
            "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        ),
        (_remapped_rows,),
        ("nvmlDeviceGetRemappedRows",),
    ),
    Read(
        "clock_events",
        ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",),
        (_clock_events, _clock_throttle),
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
    ),
    Read(
        "recovery_action",
        tuple(RECOVERY.values()),
        (_fields(RECOVERY),),
        ("nvmlDeviceGetFieldValues",),
    ),
    # retired pages: pre-Ampere (Ampere and newer remap rows instead and say NOT_SUPPORTED)
    Read("retired_pages", tuple(RETIRED_PAGES.values()), (_fields(RETIRED_PAGES),), ("nvmlDeviceGetFieldValues",)),
    Read("nvlink_errors", tuple(NVLINK_ERRORS.values()), (_fields(NVLINK_ERRORS),), ("nvmlDeviceGetFieldValues",)),
    Read("encoder", ("DCGM_FI_DEV_ENC_UTIL",), (_encoder,), ("nvmlDeviceGetEncoderUtilization",)),
    Read("decoder", ("DCGM_FI_DEV_DEC_UTIL",), (_decoder,), ("nvmlDeviceGetDecoderUtilization",)),
)

# On a MIG instance handle NVML gives memory; its utilization comes from GPM (``nvml_gpm``).
MIG_READS: tuple[Read, ...] = (MEMORY,)

# Static per-GPU calls made once at start (and after a re-init), for the benchmark table.
STATIC_SYMBOLS: tuple[str, ...] = (
    "nvmlDeviceGetCount_v2",
    "nvmlDeviceGetHandleByIndex_v2",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetName",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetMigMode",
)

XID_FIELD = "DCGM_FI_DEV_XID_ERRORS"
