"""The GPU signal: per-GPU state read back from the exporter's series, common to both modes.

Two modes produce the same :class:`GpuReading` (chosen by ``--gpu-signal``):

- ``prometheus`` (``autoscaler.signals.gpu_prometheus``): instant queries over the Prometheus
  HTTP API;
- ``scrape`` (``autoscaler.signals.gpu_scrape``): the controller scrapes the exporter pods.

Both fold the four families below into one :class:`~autoscaler.core.snapshot.GpuState` per GPU, keyed
by node and GPU UUID (``Hostname``/``UUID`` on DCGM families, ``hostname``/``uuid`` on ours).  A failed poll keeps the last good reading with its old
``observed_at``, so the signal ages and turns stale (``SignalStatus``) instead of vanishing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.core.snapshot import GpuState, PodKey

UTIL = "DCGM_FI_DEV_GPU_UTIL"
FB_USED = "DCGM_FI_DEV_FB_USED"
HEALTHY = "queuepilot_gpu_healthy"
ALLOCATED = "queuepilot_gpu_allocated"
FAMILIES: tuple[str, ...] = (HEALTHY, ALLOCATED, UTIL, FB_USED)
MIB = 1024.0 * 1024.0


@dataclass(frozen=True, slots=True)
class GpuReading:
    """All GPUs the signal knows, as of ``observed_at`` (None: never read successfully)."""

    gpus: tuple[GpuState, ...] = ()
    observed_at: float | None = None


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


def fold_series(series: Iterable[tuple[str, Mapping[str, str], float]]) -> tuple[GpuState, ...]:
    """(family, labels, value) samples -> one GpuState per (node, GPU UUID).

    Pod attribution comes from ``queuepilot_gpu_allocated`` only: its value says whether the GPU is
    allocated, so an exporter pod's own ``pod`` target label is never mistaken for a workload pod.
    Series without a node or a UUID label are ignored (they cannot be joined to a node).
    """
    gpus: dict[tuple[str, str], _Gpu] = {}
    for family, labels, value in series:
        node, uuid = _identity(labels)
        if not node or not uuid or value != value:  # NaN
            continue
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
        elif family == FB_USED:
            g.fb_used = value * MIB
    out = []
    for g in gpus.values():
        out.append(
            GpuState(
                uuid=g.uuid,
                node=g.node,
                index=g.index,
                model=g.model,
                healthy=g.healthy is not False,
                health_reason=g.reason,
                utilization=g.util,
                memory_used_bytes=g.fb_used,
                pod=g.pod,
            )
        )
    out.sort(key=lambda s: (s.node, s.index, s.uuid))
    return tuple(out)


def error_kind(exc: BaseException) -> str:
    """A bounded error kind for ``queuepilot_source_errors_total{kind}``."""
    name = type(exc).__name__
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError | OSError) or "Connect" in name or "Connection" in name:
        return "connection"
    if isinstance(exc, ValueError | KeyError | TypeError | UnicodeDecodeError):
        return "bad_response"
    return "other"
