"""GPU Performance Monitoring (GPM, Hopper and newer): DCGM's profiling fields from the driver alone.

NVML's GPM API turns two samples of a device's (or a MIG GPU instance's) performance counters into
rates over the time between them: ``nvmlGpmSampleGet`` / ``nvmlGpmMigSampleGet`` fill a sample,
``nvmlGpmMetricsGet`` compares two.  Each collection of the ``nvml`` source takes one new sample
per device and per MIG instance, in its worker thread, and asks for the metrics between it and the
previous collection's sample: so the two samples of an interval are its start and its end, and
every value is an average over the whole collection interval (never a 1 ms glimpse), for the cost
of one sample and one metrics call per device.  The very first sample is taken at start, so the
first collection already has values.  Nothing here runs on a scrape.

:data:`GPM_FIELDS` is the mapping GPM metric -> DCGM field (name and unit): GPM gives utilizations in
percent and throughputs in MiB/s; dcgm-exporter's ``DCGM_FI_PROF_*`` are ratios 0-1 and bytes/s, so
the values are scaled (and ratios clipped to 0-1).  GPM metrics without a DCGM field (DMMA tensor,
per-link NVLink, C2C, NVDEC/NVJPG/NVOFA) are not read.

The bindings module is passed in: only ``exporter.sources.nvml`` imports ``pynvml``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MIB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class GpmField:
    metric_id: int  # NVML_GPM_METRIC_*
    gpm_name: str
    dcgm_field: str
    scale: float  # GPM value * scale = DCGM value
    ratio: bool  # clip to 0..1

    def convert(self, value: float) -> float:
        v = value * self.scale
        return min(1.0, max(0.0, v)) if self.ratio else max(0.0, v)


def _pct(metric_id: int, gpm_name: str, dcgm_field: str) -> GpmField:
    return GpmField(metric_id, gpm_name, dcgm_field, 0.01, True)


def _mib(metric_id: int, gpm_name: str, dcgm_field: str) -> GpmField:
    return GpmField(metric_id, gpm_name, dcgm_field, MIB, False)


GPM_FIELDS: tuple[GpmField, ...] = (
    _pct(1, "NVML_GPM_METRIC_GRAPHICS_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE"),
    _pct(2, "NVML_GPM_METRIC_SM_UTIL", "DCGM_FI_PROF_SM_ACTIVE"),
    _pct(3, "NVML_GPM_METRIC_SM_OCCUPANCY", "DCGM_FI_PROF_SM_OCCUPANCY"),
    _pct(4, "NVML_GPM_METRIC_INTEGER_UTIL", "DCGM_FI_PROF_PIPE_INT_ACTIVE"),
    _pct(5, "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    _pct(6, "NVML_GPM_METRIC_DFMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE"),
    _pct(7, "NVML_GPM_METRIC_HMMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE"),
    _pct(9, "NVML_GPM_METRIC_IMMA_TENSOR_UTIL", "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE"),
    _pct(10, "NVML_GPM_METRIC_DRAM_BW_UTIL", "DCGM_FI_PROF_DRAM_ACTIVE"),
    _pct(11, "NVML_GPM_METRIC_FP64_UTIL", "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    _pct(12, "NVML_GPM_METRIC_FP32_UTIL", "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    _pct(13, "NVML_GPM_METRIC_FP16_UTIL", "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
    _mib(20, "NVML_GPM_METRIC_PCIE_TX_PER_SEC", "DCGM_FI_PROF_PCIE_TX_BYTES"),
    _mib(21, "NVML_GPM_METRIC_PCIE_RX_PER_SEC", "DCGM_FI_PROF_PCIE_RX_BYTES"),
    _mib(60, "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC", "DCGM_FI_PROF_NVLINK_RX_BYTES"),
    _mib(61, "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC", "DCGM_FI_PROF_NVLINK_TX_BYTES"),
)
BY_ID: dict[int, GpmField] = {f.metric_id: f for f in GPM_FIELDS}
GPM_DCGM_FIELDS: frozenset[str] = frozenset(f.dcgm_field for f in GPM_FIELDS)


class GpmUnsupported(Exception):
    """GPM cannot work on this device (the caller logs and counts it once, as ``kind``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind  # "function_not_found" (the driver has no GPM), "not_supported" or "no_permission"


@dataclass(slots=True)
class GpmStream:
    """The rolling pair of GPM samples of one device (``gpu_instance_id`` None) or MIG instance."""

    key: str  # the UUID of the device or MIG instance (for logs and once-counting)
    handle: Any  # the parent GPU's handle (nvmlGpmMigSampleGet takes the parent and the GI id)
    gpu_instance_id: int | None
    prev: Any = None  # the sample taken at the previous collection (None: not primed)
    spare: Any = None
    request: Any = None  # a reused c_nvmlGpmMetricsGet_t
    skip: set[int] = field(default_factory=set)  # metric ids this device does not support
    allocated: list[Any] = field(default_factory=list)

    # --- lifecycle ------------------------------------------------------------------------------
    def allocate(self, nv: Any) -> None:
        while len(self.allocated) < 2:
            self.allocated.append(nv.nvmlGpmSampleAlloc())
        self.prev, self.spare = None, self.allocated[0]
        self.request = nv.c_nvmlGpmMetricsGet_t()

    def free(self, nv: Any) -> None:
        """Give the samples back (errors ignored: the library may already be shut down)."""
        for s in self.allocated:
            try:
                nv.nvmlGpmSampleFree(s)
            except nv.NVMLError:
                pass
        self.allocated.clear()
        self.prev = self.spare = None

    # --- one collection -------------------------------------------------------------------------
    def _take(self, nv: Any, sample: Any) -> None:
        if self.gpu_instance_id is None:
            nv.nvmlGpmSampleGet(self.handle, sample)
        else:
            nv.nvmlGpmMigSampleGet(self.handle, self.gpu_instance_id, sample)

    def prime(self, nv: Any) -> None:
        """Take the first sample (the start of the first interval)."""
        sample = self.allocated[0]
        self._take(nv, sample)
        self.prev, self.spare = sample, self.allocated[1]

    def read(self, nv: Any) -> tuple[dict[str, float], list[GpmField]]:
        """Sample now and return ``({DCGM field: value}, newly unsupported fields)``.

        Raises the NVML error of a failed sample or metrics call (the caller classifies it); an
        unprimed stream is primed and returns nothing.
        """
        if self.prev is None:
            self.prime(nv)
            return {}, []
        try:
            self._take(nv, self.spare)
        except nv.NVMLError:
            self.prev = None  # re-prime on the next collection
            raise
        wanted = [f for f in GPM_FIELDS if f.metric_id not in self.skip]
        req = self.request
        req.version = nv.NVML_GPM_METRICS_GET_VERSION
        req.numMetrics = len(wanted)
        req.sample1, req.sample2 = self.prev, self.spare
        for i, f in enumerate(wanted):
            req.metrics[i].metricId = f.metric_id
        self.prev, self.spare = self.spare, self.prev  # this sample starts the next interval
        nv.nvmlGpmMetricsGet(req)
        out: dict[str, float] = {}
        newly: list[GpmField] = []
        for i, f in enumerate(wanted):
            m = req.metrics[i]
            if m.nvmlReturn == nv.NVML_SUCCESS:
                out[f.dcgm_field] = f.convert(float(m.value))
            elif m.nvmlReturn in (nv.NVML_ERROR_NOT_SUPPORTED, nv.NVML_ERROR_INVALID_ARGUMENT):
                self.skip.add(f.metric_id)
                newly.append(f)
        return out, newly


def device_supported(nv: Any, handle: Any) -> bool:
    """``nvmlGpmQueryDeviceSupport``; raises GpmUnsupported with the reason when it says no."""
    try:
        support = nv.nvmlGpmQueryDeviceSupport(handle)
    except nv.NVMLError_FunctionNotFound:
        raise GpmUnsupported("function_not_found", "the driver has no GPM (R520 or newer needed)") from None
    except nv.NVMLError_NotSupported:
        raise GpmUnsupported("not_supported", "GPM not supported (Hopper or newer needed; not in vGPU guests)") from None
    except nv.NVMLError_NoPermission:
        raise GpmUnsupported(
            "no_permission", "GPM refused: profiling counters restricted to admin users by the driver"
        ) from None
    if not support.isSupportedDevice:
        raise GpmUnsupported("not_supported", "GPM not supported on this GPU (Hopper or newer needed; not in vGPU guests)")
    return True
