"""The GPU signal: per-GPU state read back from the exporter's series, common to both modes.

Two modes produce the same :class:`GpuReading` (chosen by ``--gpu-signal``):

- ``prometheus`` (``autoscaler.signals.gpu_prometheus``): instant queries over the Prometheus
  HTTP API;
- ``scrape`` (``autoscaler.signals.gpu_scrape``): the controller scrapes the exporter pods.

Both fold the families below into one :class:`~autoscaler.core.snapshot.GpuState` per GPU, keyed
by node and GPU UUID (``Hostname``/``UUID`` on DCGM families, ``hostname``/``uuid`` on ours).  A failed poll keeps the last good reading with its old
``observed_at``, so the signal ages and turns stale (``SignalStatus``) instead of vanishing.

Utilization: ``DCGM_FI_DEV_GPU_UTIL`` only says whether *any* kernel ran in the sample period (a
loop of tiny kernels reads 100 %).  The profiling fields say how much of the GPU did work:
``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` (the share of time the graphics/compute engine was busy; what
NVIDIA's KEDA example scales on) or, stricter, ``DCGM_FI_PROF_SM_ACTIVE`` (the share of cycles
SMs had work).  Per GPU, :func:`fold_series` takes the preferred profiling field when the GPU has
it (the exporter's nvml source on Hopper and newer, a dcgm-exporter with profiling, the sim
source) and falls back to ``GPU_UTIL`` otherwise, and says which in
``GpuState.utilization_source`` (``gr_engine_active``, ``sm_active`` or ``gpu_util``).  Series of
MIG instances (``GPU_I_ID`` set) describe a slice, not the GPU, and are not folded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from autoscaler.core.snapshot import GpuState, PodKey
from servicekit.errors import error_kind as _error_kind

UTIL = "DCGM_FI_DEV_GPU_UTIL"
GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
SM_ACTIVE = "DCGM_FI_PROF_SM_ACTIVE"
FB_USED = "DCGM_FI_DEV_FB_USED"
HEALTHY = "queuepilot_gpu_healthy"
ALLOCATED = "queuepilot_gpu_allocated"
FAMILIES: tuple[str, ...] = (HEALTHY, ALLOCATED, UTIL, GR_ENGINE_ACTIVE, SM_ACTIVE, FB_USED)
MIB = 1024.0 * 1024.0

# GpuState.utilization_source values, and the family each reads (ratio 0-1, or percent for gpu_util)
SOURCE_GR_ENGINE_ACTIVE = "gr_engine_active"
SOURCE_SM_ACTIVE = "sm_active"
SOURCE_GPU_UTIL = "gpu_util"
UTILIZATION_SOURCES: tuple[str, ...] = (SOURCE_GR_ENGINE_ACTIVE, SOURCE_SM_ACTIVE, SOURCE_GPU_UTIL)
PROFILING_FAMILY: dict[str, str] = {SOURCE_GR_ENGINE_ACTIVE: GR_ENGINE_ACTIVE, SOURCE_SM_ACTIVE: SM_ACTIVE}
DEFAULT_UTILIZATION = SOURCE_GR_ENGINE_ACTIVE


def check_utilization(preferred: str) -> str:
    """The preferred utilization source, validated (a clear error for a bad flag value)."""
    if preferred not in UTILIZATION_SOURCES:
        raise ValueError(f"GPU utilization signal must be one of {', '.join(UTILIZATION_SOURCES)}, not {preferred!r}")
    return preferred


@dataclass(frozen=True, slots=True)
class GpuReading:
    """All GPUs the signal knows, as of ``observed_at`` (None: never read successfully), and the same
    by node (``by_node``: grouped here unless the producer hands its own per-node tuples, which a
    snapshot builder may find unchanged from the last reading by identity)."""

    gpus: tuple[GpuState, ...] = ()
    observed_at: float | None = None
    by_node: Mapping[str, tuple[GpuState, ...]] = field(default_factory=lambda: MappingProxyType({}), compare=False,
                                                        repr=False)

    def __post_init__(self) -> None:
        if self.gpus and not self.by_node:
            grouped: dict[str, list[GpuState]] = {}
            for g in self.gpus:
                grouped.setdefault(g.node, []).append(g)
            object.__setattr__(self, "by_node", MappingProxyType({n: tuple(gs) for n, gs in grouped.items()}))


class GpuSignalSource(Protocol):
    """What the controller polls; ``poll`` never raises for bad answers (it counts them)."""

    name: str

    @property
    def reading(self) -> GpuReading: ...

    async def poll(self, now: float) -> None: ...

    async def close(self) -> None: ...


@dataclass
class _Gpu:
    node: str
    uuid: str
    index: int = 0
    model: str = ""
    healthy: bool | None = None
    reason: str = ""
    util: float | None = None
    profiling: dict[str, float] = field(default_factory=dict)  # PROFILING_FAMILY value -> ratio
    fb_used: float | None = None
    pod: PodKey | None = None
    allocated: bool | None = None
    seen: set[str] = field(default_factory=set)


def pod_of(labels: Mapping[str, str]) -> PodKey | None:
    """The workload pod a series is attributed to.

    With a ServiceMonitor without ``honorLabels``, Prometheus renames the series' own ``pod`` /
    ``namespace`` to ``exported_pod`` / ``exported_namespace`` and puts the *exporter's* pod in
    ``pod``; so ``exported_*`` wins when present.
    """
    if labels.get("exported_pod"):
        return PodKey(labels.get("exported_namespace", ""), labels["exported_pod"])
    if labels.get("pod"):
        return PodKey(labels.get("namespace", ""), labels["pod"])
    return None


def _identity(labels: Mapping[str, str]) -> tuple[str, str]:
    """(node, GPU UUID) of a series: DCGM families carry dcgm-exporter's ``Hostname``/``UUID``,
    queuepilot's own families the snake_case ``hostname``/``uuid`` (exporter/metrics.py)."""
    return (labels.get("Hostname") or labels.get("hostname", ""), labels.get("UUID") or labels.get("uuid", ""))


def _utilization(g: _Gpu, preferred: str) -> tuple[float | None, str]:
    family = PROFILING_FAMILY.get(preferred)
    if family is not None and family in g.profiling:
        return max(0.0, min(1.0, g.profiling[family])), preferred
    if g.util is not None:
        return g.util, SOURCE_GPU_UTIL
    return None, ""


def fold_series(
    series: Iterable[tuple[str, Mapping[str, str], float]], *, utilization: str = DEFAULT_UTILIZATION
) -> tuple[GpuState, ...]:
    """(family, labels, value) samples -> one GpuState per (node, GPU UUID).

    Pod attribution comes from ``queuepilot_gpu_allocated`` only: its value says whether the GPU is
    allocated, so an exporter pod's own ``pod`` target label is never mistaken for a workload pod.
    Series without a node or a UUID label are ignored (they cannot be joined to a node), and so are
    MIG instance series.  ``utilization`` is the preferred signal (one of ``UTILIZATION_SOURCES``):
    the profiling field when the GPU has it, else ``DCGM_FI_DEV_GPU_UTIL``.
    """
    check_utilization(utilization)
    gpus: dict[tuple[str, str], _Gpu] = {}
    for family, labels, value in series:
        node, uuid = _identity(labels)
        if not node or not uuid or value != value:  # NaN
            continue
        if labels.get("GPU_I_ID"):
            continue  # a MIG instance: not the whole GPU
        g = gpus.get((node, uuid))
        if g is None:
            g = gpus[(node, uuid)] = _Gpu(node=node, uuid=uuid)
        try:
            g.index = int(labels.get("gpu", g.index))
        except ValueError:
            pass
        g.model = labels.get("modelName") or labels.get("model_name") or g.model
        if family == HEALTHY:
            g.healthy = value >= 0.5
            g.reason = "" if g.healthy else labels.get("reason", "")
        elif family == ALLOCATED:
            g.allocated = value >= 0.5
            g.pod = pod_of(labels) if g.allocated else None
        elif family == UTIL:
            g.util = max(0.0, min(1.0, value / 100.0))
        elif family in (GR_ENGINE_ACTIVE, SM_ACTIVE):
            g.profiling[family] = value
        elif family == FB_USED:
            g.fb_used = value * MIB
    out = []
    for g in gpus.values():
        util, source = _utilization(g, utilization)
        out.append(
            GpuState(
                uuid=g.uuid,
                node=g.node,
                index=g.index,
                model=g.model,
                healthy=g.healthy is not False,
                health_reason=g.reason,
                utilization=util,
                utilization_source=source,
                memory_used_bytes=g.fb_used,
                pod=g.pod,
            )
        )
    out.sort(key=lambda s: (s.node, s.index, s.uuid))
    return tuple(out)


error_kind = _error_kind  # the one vocabulary (servicekit.errors); kept here for existing importers
