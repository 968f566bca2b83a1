"""Immutable GPU samples: what a source saw at one instant.

Every source (``nvml``, ``dcgm``, ``sim``) produces a :class:`FleetSample`; pod attribution and
health classification return *new* samples (``dataclasses.replace``), never mutate one.  The
collector renders the latest sample; the controller reads the same shapes back from Prometheus
or from a scrape.  This module is the contract between the exporter's parts and is imported by
``autoscaler`` (the dependency arrows run autoscaler -> exporter).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

EMPTY: Mapping[str, float] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class PodRef:
    """The container a GPU (or MIG instance) is allocated to, per the kubelet PodResources API."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG GPU instance on a parent GPU (labels ``GPU_I_PROFILE`` / ``GPU_I_ID``)."""

    gpu_instance_id: int
    profile: str  # e.g. "1g.10gb"
    uuid: str  # "MIG-..." as the device plugin reports it
    fields: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    pod: PodRef | None = None


@dataclass(frozen=True, slots=True)
class GpuHealth:
    """Health verdict for one GPU. ``reason`` is one of ``exporter.health.REASONS`` ("" when healthy)."""

    healthy: bool
    reason: str = ""
    message: str = ""


HEALTHY = GpuHealth(True)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU at one instant.

    ``fields`` maps DCGM field names (``DCGM_FI_DEV_GPU_UTIL`` ...) to values in dcgm-exporter's
    units (MiB, W, mJ, MHz, percent 0-100; ``DCGM_FI_PROF_*`` ratios 0-1).  A field the source
    could not read is absent, never zero.  ``lost`` means the GPU stopped answering (fell off the
    bus / NVML errors); its last fields may be empty.
    """

    index: int
    uuid: str  # "GPU-..."
    pci_bus_id: str
    model_name: str
    fields: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    driver_version: str = ""
    mig: tuple[MigInstance, ...] = ()
    pod: PodRef | None = None
    health: GpuHealth = HEALTHY
    lost: bool = False
    # XID events seen since the previous sample: tuple of (xid, unix time seen)
    xid_events: tuple[tuple[int, float], ...] = ()
    # Source-specific extra series to pass through unchanged (the dcgm source's DCGM_FI_PROF_* etc.)
    extra: Mapping[str, float] = field(default_factory=lambda: EMPTY)
    # The last XID the device already reported when the exporter first saw it (0: none, or the source
    # cannot tell).  Sources keep it on every sample until the GPU is reset or the value clears, so a
    # fatal state found at start survives an exporter restart.
    xid_before_start: int = 0

    @property
    def device(self) -> str:
        return f"nvidia{self.index}"


@dataclass(frozen=True, slots=True)
class FleetSample:
    """All GPUs of one node at one instant, plus how the collection went."""

    taken_at: float  # unix seconds
    hostname: str
    gpus: tuple[GpuSample, ...]
    source: str  # "nvml" | "dcgm" | "sim"
    # errors during this collection by bounded kind (e.g. "function_not_found", "gpu_lost", "timeout")
    errors: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    collect_seconds: float = 0.0
    stale: bool = False  # True when this is the last good sample re-served after a failed collection
