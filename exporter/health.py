"""GPU health classification (pure: the clock and the history are passed in and returned).

``classify(gpu, history, now, config) -> (GpuHealth, GpuHistory)``.  Reasons, first match wins:

==================== ===============================================================================
``GpuLost``          the source lost the GPU (NVML errors, fell off the bus)
``FatalXid``         an XID in ``config.drain_xids`` within the last ``config.xid_window_seconds``
                     (NVIDIA's XID catalog: RESET_GPU / RESTART_BM / RESTART_VM / workflow buckets;
                     13, 31, 32, 43, 45, 63, 92, 94 and other app or IGNORE XIDs are counted but never
                     make a GPU unhealthy); or a drain-worthy XID that was already the device's last
                     XID when the exporter started (``GpuSample.xid_before_start``): its time is
                     unknown, so it holds until the source sees the GPU reset or the value clear, and
                     the message says it was found at start
``RecoveryAction``   the driver asks for a recovery action (``DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION``
                     non-zero: GPU reset, node reboot, drain...); the driver keeps it until the action
                     is done, so it also survives an exporter restart
``RowRemapFailure``  ``DCGM_FI_DEV_ROW_REMAP_FAILURE`` is set (the GPU ran out of spare rows)
``UncorrectableEcc`` ``DCGM_FI_DEV_ECC_DBE_VOL_TOTAL`` rose within the last ``config.ecc_window_seconds``
                     (the first value seen is the baseline)
``ThermalSlowdown``  the HW or SW thermal-slowdown bit of ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` has
                     been set continuously for at least ``config.thermal_sustain_seconds``
==================== ===============================================================================
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from exporter.sample import HEALTHY, GpuHealth, GpuSample

HEALTHY_REASON = ""
GPU_LOST = "GpuLost"
FATAL_XID = "FatalXid"
RECOVERY_ACTION = "RecoveryAction"
ROW_REMAP_FAILURE = "RowRemapFailure"
UNCORRECTABLE_ECC = "UncorrectableEcc"
THERMAL_SLOWDOWN = "ThermalSlowdown"
REASONS: tuple[str, ...] = (
    HEALTHY_REASON,
    GPU_LOST,
    FATAL_XID,
    RECOVERY_ACTION,
    ROW_REMAP_FAILURE,
    UNCORRECTABLE_ECC,
    THERMAL_SLOWDOWN,
)

# NVIDIA's XID catalog, drain-worthy buckets (RESET_GPU, RESTART_BM, RESTART_VM, workflows).
DEFAULT_DRAIN_XIDS: frozenset[int] = frozenset(
    {46, 48, 54, 62, 64, 74, 78, 79, 95, 109, 110, 119, 120, 136, 140, 143, *range(144, 151), 151, 155, 156, 158, 160}
)
XID_NAMES: dict[int, str] = {
    46: "GPU timeout",
    48: "double-bit ECC error",
    62: "PMU halt",
    63: "row remap / page retirement event",
    64: "DRAM retirement failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}

THROTTLE_FIELD = "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
RECOVERY_ACTION_FIELD = "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION"
# nvmlDeviceGpuRecoveryAction_t
RECOVERY_ACTIONS: dict[int, str] = {
    1: "GPU reset",
    2: "node reboot",
    3: "drain peer-to-peer traffic",
    4: "drain and reset",
    5: "recover the IMEX domain",
    6: "bus reset",
    7: "system reboot",
}
SW_THERMAL = 0x20
HW_THERMAL = 0x40
THERMAL_BITS = SW_THERMAL | HW_THERMAL


@dataclass(frozen=True, slots=True)
class HealthConfig:
    drain_xids: frozenset[int] = DEFAULT_DRAIN_XIDS
    xid_window_seconds: float = 600.0  # a fatal XID keeps the GPU unhealthy this long
    ecc_window_seconds: float = 600.0  # a DBE increase keeps the GPU unhealthy this long
    thermal_sustain_seconds: float = 60.0  # thermal slowdown must last this long to count


@dataclass(frozen=True, slots=True)
class GpuHistory:
    """What classification remembers about one GPU between samples."""

    fatal_xid: tuple[int, float] | None = None  # (xid, unix time) of the latest drain-worthy XID
    dbe_volatile: float | None = None  # last DCGM_FI_DEV_ECC_DBE_VOL_TOTAL seen
    dbe_increase_at: float | None = None
    thermal_since: float | None = None


EMPTY_HISTORY = GpuHistory()


def xid_name(xid: int) -> str:
    return XID_NAMES.get(xid, f"XID {xid}")


def _update(gpu: GpuSample, h: GpuHistory, now: float, config: HealthConfig) -> GpuHistory:
    fatal = h.fatal_xid
    for xid, at in gpu.xid_events:
        if xid in config.drain_xids and (fatal is None or at >= fatal[1]):
            fatal = (xid, at)
    dbe = gpu.fields.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")
    dbe_at = h.dbe_increase_at
    if dbe is not None and h.dbe_volatile is not None and dbe > h.dbe_volatile:
        dbe_at = now
    throttle = gpu.fields.get(THROTTLE_FIELD)
    thermal = throttle is not None and (int(throttle) & THERMAL_BITS) != 0
    since = (h.thermal_since if h.thermal_since is not None else now) if thermal else None
    return replace(
        h,
        fatal_xid=fatal,
        dbe_volatile=dbe if dbe is not None else h.dbe_volatile,
        dbe_increase_at=dbe_at,
        thermal_since=since,
    )


def classify(
    gpu: GpuSample, history: GpuHistory, now: float, config: HealthConfig = HealthConfig()
) -> tuple[GpuHealth, GpuHistory]:
    """The GPU's health at ``now`` and the history to pass to the next call."""
    h = _update(gpu, history, now, config)
    if gpu.lost:
        return GpuHealth(False, GPU_LOST, f"{gpu.uuid} stopped answering (lost)"), h
    if h.fatal_xid is not None and now - h.fatal_xid[1] < config.xid_window_seconds:
        xid, at = h.fatal_xid
        left = config.xid_window_seconds - (now - at)
        return GpuHealth(False, FATAL_XID, f"XID {xid} ({xid_name(xid)}) {now - at:.0f}s ago; unhealthy for {left:.0f}s more"), h
    if gpu.xid_before_start in config.drain_xids:
        xid = gpu.xid_before_start
        return GpuHealth(
            False,
            FATAL_XID,
            f"XID {xid} ({xid_name(xid)}) found at exporter start as the last XID (time unknown); "
            "unhealthy until the GPU is reset or the value clears",
        ), h
    action = int(gpu.fields.get(RECOVERY_ACTION_FIELD, 0) or 0)
    if action:
        what = RECOVERY_ACTIONS.get(action, f"action {action}")
        return GpuHealth(False, RECOVERY_ACTION, f"the driver asks for a recovery action: {what}"), h
    if gpu.fields.get("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0) >= 1:
        return GpuHealth(False, ROW_REMAP_FAILURE, "row remapping failed: reset or replace the GPU"), h
    if h.dbe_increase_at is not None and now - h.dbe_increase_at < config.ecc_window_seconds:
        return GpuHealth(False, UNCORRECTABLE_ECC, f"double-bit (uncorrectable) ECC errors rose {now - h.dbe_increase_at:.0f}s ago"), h
    if h.thermal_since is not None and now - h.thermal_since >= config.thermal_sustain_seconds:
        return GpuHealth(False, THERMAL_SLOWDOWN, f"thermal slowdown for {now - h.thermal_since:.0f}s"), h
    return HEALTHY, h
