"""The one narrow protocol every GPU source implements (nvml, dcgm, sim).

A source produces an immutable ``FleetSample`` per ``collect``; the agent loop
(``exporter.agent``) then adds pod attribution and health, and hands the result to the
collector, which only renders it.  A source never raises for one GPU's failure: it marks that
GPU ``lost`` (or skips a field) and counts the error kind in ``FleetSample.errors``.
"""

from __future__ import annotations

from typing import Protocol

from exporter.sample import FleetSample


class SourceUnavailable(RuntimeError):
    """The source cannot start at all (no NVML library, no dcgm-exporter URL...). One clear line."""


class SourceError(RuntimeError):
    """A whole collection failed (e.g. the dcgm-exporter answered garbage); ``kind`` is a bounded label."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class GpuSource(Protocol):
    name: str  # "nvml" | "dcgm" | "sim"

    async def start(self) -> None:
        """Initialise once (nvmlInit, XID thread...). Raise SourceUnavailable when it can never work."""
        ...

    async def collect(self, now: float) -> FleetSample:
        """One sample of every GPU. Blocking calls run in threads; raise SourceError only if nothing was read."""
        ...

    async def close(self) -> None: ...
