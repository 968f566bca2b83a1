"""The exporter's metric catalog: every family the node agent exposes, in one table.

Dashboards, alert rules, docs/metrics.md and the tests read this table (kube-state-metrics style:
object -> metric families with stable, documented names).  Changing a STABLE entry's name or
labels is a breaking change.

GPU families keep dcgm-exporter's exact names, help texts, units and label order so that
dashboards and alerts written for dcgm-exporter keep working.
DCGM counter families are rendered *without* a ``_total`` suffix, exactly as dcgm-exporter does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram", "info"]
Stability = Literal["STABLE", "ALPHA"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """One metric family: the single source of truth for its name, type, help, unit and labels."""

    name: str
    type: MetricType
    help: str
    unit: str  # "percent", "MiB", "W", "mJ", "MHz", "celsius", "seconds", "bytes", "ratio", "count", "bool", ...
    labels: tuple[str, ...]
    stability: Stability = "ALPHA"
    source: str = ""  # where the value comes from (NVML call, DCGM, computed)
    # label names that are only present on some series (e.g. pod labels only when a GPU is allocated)
    optional_labels: tuple[str, ...] = ()

    @property
    def exposed_name(self) -> str:
        """The sample name as it appears in the exposition (counters from prometheus_client get ``_total``)."""
        return self.name


# dcgm-exporter label order (its render_metrics.go template): gpu, UUID, pci_bus_id, device, modelName,
# [GPU_I_PROFILE, GPU_I_ID], Hostname, DCGM_FI_DRIVER_VERSION, then container, namespace, pod.
GPU_LABELS: tuple[str, ...] = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
MIG_LABELS: tuple[str, ...] = ("GPU_I_PROFILE", "GPU_I_ID")
DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
POD_LABELS: tuple[str, ...] = ("container", "namespace", "pod")
DCGM_SERIES_LABELS: tuple[str, ...] = (*GPU_LABELS, DRIVER_LABEL, *POD_LABELS)
DCGM_OPTIONAL_LABELS: tuple[str, ...] = (*MIG_LABELS, DRIVER_LABEL, *POD_LABELS)

# queuepilot's own families follow Prometheus naming (promtool check metrics: snake_case labels),
# so they carry the same identity in snake_case. Join them to DCGM series on (instance, gpu) -- both
# come from the same scrape target -- or label_replace(..., "hostname", "$1", "Hostname", "(.*)").
QP_GPU_LABELS: tuple[str, ...] = ("gpu", "uuid", "pci_bus_id", "device", "model_name", "hostname")


def _dcgm(name: str, type_: MetricType, help_: str, unit: str, source: str) -> MetricSpec:
    return MetricSpec(
        name=name,
        type=type_,
        help=help_,
        unit=unit,
        labels=DCGM_SERIES_LABELS,
        stability="STABLE",
        source=source,
        optional_labels=DCGM_OPTIONAL_LABELS,
    )


# --- dcgm-exporter drop-in families (help texts verbatim from etc/default-counters.csv) -------------
DCGM_FAMILIES: tuple[MetricSpec, ...] = (
    _dcgm("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "MHz", "nvmlDeviceGetClockInfo(SM)"),
    _dcgm("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).", "MHz", "nvmlDeviceGetClockInfo(MEM)"),
    _dcgm("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", "celsius", "NVML field 82"),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "celsius", "nvmlDeviceGetTemperatureV"),
    _dcgm("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "W", "nvmlDeviceGetPowerUsage / 1000"),
    _dcgm(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        "mJ",
        "nvmlDeviceGetTotalEnergyConsumption",
    ),
    _dcgm("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries.", "count", "nvmlDeviceGetPcieReplayCounter"),
    _dcgm("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", "percent", "nvmlDeviceGetUtilizationRates.gpu"),
    _dcgm("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %).", "percent", "nvmlDeviceGetUtilizationRates.memory"),
    _dcgm("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", "percent", "nvmlDeviceGetEncoderUtilization"),
    _dcgm("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", "percent", "nvmlDeviceGetDecoderUtilization"),
    _dcgm("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered.", "count", "nvmlEventSetWait_v2 (XID events)"),
    _dcgm("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", "MiB", "nvmlDeviceGetMemoryInfo_v2.free"),
    _dcgm("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", "MiB", "nvmlDeviceGetMemoryInfo_v2.used"),
    _dcgm("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB).", "MiB", "nvmlDeviceGetMemoryInfo_v2.reserved"),
    _dcgm(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        "count",
        "nvmlDeviceGetRemappedRows",
    ),
    _dcgm(
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        "count",
        "nvmlDeviceGetRemappedRows",
    ),
    _dcgm("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed", "bool", "nvmlDeviceGetRemappedRows"),
    _dcgm(
        "DCGM_FI_DEV_ROW_REMAP_PENDING",
        "gauge",
        "Whether remapping of rows is pending (a GPU reset applies it).",
        "bool",
        "nvmlDeviceGetRemappedRows",
    ),
    _dcgm(
        "DCGM_FI_DEV_RETIRED_SBE",
        "counter",
        "Total number of retired pages due to single-bit errors.",
        "count",
        "NVML field 29 (pre-Ampere)",
    ),
    _dcgm(
        "DCGM_FI_DEV_RETIRED_DBE",
        "counter",
        "Total number of retired pages due to double-bit errors.",
        "count",
        "NVML field 30 (pre-Ampere)",
    ),
    _dcgm(
        "DCGM_FI_DEV_RETIRED_PENDING",
        "counter",
        "Total number of pages pending retirement.",
        "count",
        "NVML field 31 (pre-Ampere)",
    ),
    _dcgm(
        "DCGM_FI_DEV_GET_GPU_RECOVERY_ACTION",
        "gauge",
        "GPU recovery action the driver asks for (0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset).",
        "enum",
        "NVML field 230",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink flow-control CRC errors.",
        "count",
        "NVML field 38",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink data CRC errors.",
        "count",
        "NVML field 45",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink retries.",
        "count",
        "NVML field 52",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "counter",
        "Total number of NVLink recovery errors.",
        "count",
        "NVML field 59",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "counter",
        "Total number of single-bit volatile ECC errors.",
        "count",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "counter",
        "Total number of double-bit volatile ECC errors.",
        "count",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
        "counter",
        "Total number of single-bit persistent ECC errors.",
        "count",
        "nvmlDeviceGetTotalEccErrors(CORRECTED, AGGREGATE)",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
        "counter",
        "Total number of double-bit persistent ECC errors.",
        "count",
        "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)",
    ),
    _dcgm(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        "gauge",
        "Current clock throttle reasons (bitmask of DCGM_CLOCKS_THROTTLE_REASON_*).",
        "bitmask",
        "nvmlDeviceGetCurrentClocksEventReasons",
    ),
)

# DCGM profiling families (DCP): from GPM in the nvml source (Hopper and newer), passed through from a
# co-located dcgm-exporter (dcgm source), simulated (sim source).  Help texts as dcgm-exporter's CSVs.
_PROF_SOURCE = "nvml: GPM {gpm}; dcgm: dcgm-exporter; sim"


def _prof(name: str, help_: str, unit: str, gpm: str) -> MetricSpec:
    return _dcgm(name, "gauge", help_, unit, _PROF_SOURCE.format(gpm=gpm))


DCGM_PROF_FAMILIES: tuple[MetricSpec, ...] = (
    _prof("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active.", "ratio", "GRAPHICS_UTIL / 100"),
    _prof("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.", "ratio", "ANY_TENSOR_UTIL / 100"),
    _prof(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        "ratio",
        "DRAM_BW_UTIL / 100",
    ),
    _prof("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", "ratio", "SM_UTIL / 100"),
    _prof("DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", "ratio", "SM_OCCUPANCY / 100"),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "Ratio of cycles the HMMA tensor pipe is active.",
        "ratio",
        "HMMA_TENSOR_UTIL / 100",
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "Ratio of cycles the IMMA tensor pipe is active.",
        "ratio",
        "IMMA_TENSOR_UTIL / 100",
    ),
    _prof(
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "Ratio of cycles the DFMA tensor pipe is active.",
        "ratio",
        "DFMA_TENSOR_UTIL / 100",
    ),
    _prof("DCGM_FI_PROF_PIPE_INT_ACTIVE", "Ratio of cycles the integer pipe is active.", "ratio", "INTEGER_UTIL / 100"),
    _prof("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "Ratio of cycles the fp64 pipes are active.", "ratio", "FP64_UTIL / 100"),
    _prof("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "Ratio of cycles the fp32 pipes are active.", "ratio", "FP32_UTIL / 100"),
    _prof("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "Ratio of cycles the fp16 pipes are active.", "ratio", "FP16_UTIL / 100"),
    _prof(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        "bytes_per_second",
        "PCIE_TX_PER_SEC * 2^20",
    ),
    _prof(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.",
        "bytes_per_second",
        "PCIE_RX_PER_SEC * 2^20",
    ),
    _prof(
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "The rate of data transmitted over NVLink, not including protocol headers, in bytes per second.",
        "bytes_per_second",
        "NVLINK_TOTAL_TX_PER_SEC * 2^20",
    ),
    _prof(
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "The rate of data received over NVLink, not including protocol headers, in bytes per second.",
        "bytes_per_second",
        "NVLINK_TOTAL_RX_PER_SEC * 2^20",
    ),
)

# --- queuepilot's own per-GPU families --------------------------------------------------------------
GPU_HEALTHY = MetricSpec(
    name="queuepilot_gpu_healthy",
    type="gauge",
    help="1 if the GPU is healthy, 0 if not; reason says why (one of exporter.health.REASONS).",
    unit="bool",
    labels=(*QP_GPU_LABELS, "reason"),
    stability="STABLE",
    source="exporter.health",
)
GPU_ALLOCATED = MetricSpec(
    name="queuepilot_gpu_allocated",
    type="gauge",
    help="1 if the kubelet has allocated the GPU to a pod container (pod labels present), 0 if free.",
    unit="bool",
    labels=(*QP_GPU_LABELS, *POD_LABELS),
    stability="STABLE",
    source="kubelet PodResources v1 List",
    optional_labels=POD_LABELS,
)
GPU_XID_ERRORS_TOTAL = MetricSpec(
    name="queuepilot_gpu_xid_errors_total",
    type="counter",
    help=(
        "XID errors seen on the GPU since the exporter started, by XID code (dcgm-exporter keeps only the last); "
        "a new series reads 0 for its first minute so that increase() sees the first XID."
    ),
    unit="count",
    labels=(*QP_GPU_LABELS, "xid"),
    stability="STABLE",
    source="nvmlEventSetWait_v2",
)

# --- self-metrics ------------------------------------------------------------------------------------
EXPORTER_COLLECT_SECONDS = MetricSpec(
    name="queuepilot_exporter_collect_duration_seconds",
    type="gauge",
    help="Wall-clock time the last collection cycle took.",
    unit="seconds",
    labels=("hostname", "source"),
    source="computed",
)
EXPORTER_SOURCE_ERRORS_TOTAL = MetricSpec(
    name="queuepilot_exporter_source_errors_total",
    type="counter",
    help="Errors met while collecting, by source and bounded kind.",
    unit="count",
    labels=("hostname", "source", "kind"),
    source="computed",
)
EXPORTER_LAST_SUCCESS = MetricSpec(
    name="queuepilot_exporter_last_success_timestamp_seconds",
    type="gauge",
    help="Unix time of the last successful collection.",
    unit="seconds",
    labels=("hostname", "source"),
    source="computed",
)
EXPORTER_GPUS = MetricSpec(
    name="queuepilot_exporter_gpus",
    type="gauge",
    help="GPUs the exporter sees on this node.",
    unit="count",
    labels=("hostname", "source"),
    source="computed",
)
EXPORTER_SNAPSHOT_AGE = MetricSpec(
    name="queuepilot_exporter_sample_age_seconds",
    type="gauge",
    help="Age of the sample being served at scrape time (grows when collection stalls).",
    unit="seconds",
    labels=("hostname", "source"),
    source="computed",
)
EXPORTER_POD_RESOURCES_UP = MetricSpec(
    name="queuepilot_exporter_pod_resources_up",
    type="gauge",
    help="1 if the last kubelet PodResources List call succeeded, 0 if not.",
    unit="bool",
    labels=("hostname",),
    source="kubelet PodResources v1",
)

QUEUEPILOT_GPU_FAMILIES: tuple[MetricSpec, ...] = (GPU_HEALTHY, GPU_ALLOCATED, GPU_XID_ERRORS_TOTAL)
SELF_FAMILIES: tuple[MetricSpec, ...] = (
    EXPORTER_COLLECT_SECONDS,
    EXPORTER_SOURCE_ERRORS_TOTAL,
    EXPORTER_LAST_SUCCESS,
    EXPORTER_GPUS,
    EXPORTER_SNAPSHOT_AGE,
    EXPORTER_POD_RESOURCES_UP,
)

CATALOG: tuple[MetricSpec, ...] = (*DCGM_FAMILIES, *DCGM_PROF_FAMILIES, *QUEUEPILOT_GPU_FAMILIES, *SELF_FAMILIES)
BY_NAME: dict[str, MetricSpec] = {m.name: m for m in CATALOG}
DCGM_FIELD_NAMES: frozenset[str] = frozenset(m.name for m in (*DCGM_FAMILIES, *DCGM_PROF_FAMILIES))
