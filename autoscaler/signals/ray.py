"""Ray demand for every RayCluster: poll each head's dashboard concurrently, bounded, with ages.

The dashboard client itself (``autoscaler.signals.ray_demand.RayDashboardClient``: which endpoints,
v1/v2 parsing, token auth) is separate; this module only decides *which* clusters to ask, how
many at once, and keeps the last good ``RayStatus`` of each with its ``observed_at`` so a failing
dashboard turns its ``ray/<ns>/<name>`` signal stale instead of erasing the demand.  Failures are
counted in ``queuepilot_source_errors_total{source="ray", kind}`` (``RaySignalError.kind``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.signals.gpu import error_kind

log = logging.getLogger("queuepilot.ray")


@dataclass(frozen=True, slots=True)
class RayObservation:
    """The last good Ray status of one RayCluster (``status``: a ``RayStatus``) and when it was read."""

    status: Any = None
    observed_at: float | None = None
    error: str = ""  # bounded kind of the last failure, "" after a success


class RayClient(Protocol):
    async def fetch_status(self, base_url: str, now: float) -> Any: ...


class RaySignals:
    """Per-cluster Ray observations, refreshed by :meth:`poll` over the clusters' dashboard URLs."""

    def __init__(
        self,
        client: RayClient,
        on_error: Callable[[str], None],
        concurrency: int = 16,
        timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._on_error = on_error
        self._sem = asyncio.Semaphore(concurrency)
        self._timeout = timeout
        self._obs: dict[str, RayObservation] = {}
        self._logged: dict[str, str] = {}

    @property
    def observations(self) -> Mapping[str, RayObservation]:
        return self._obs

    async def _one(self, key: str, url: str, now: float) -> None:
        async with self._sem:
            try:
                async with asyncio.timeout(self._timeout):
                    status = await self._client.fetch_status(url, now)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                kind = str(getattr(e, "kind", "") or error_kind(e))
                self._on_error(kind)
                old = self._obs.get(key, RayObservation())
                self._obs[key] = RayObservation(old.status, old.observed_at, kind)
                if self._logged.get(key) != kind:  # once per cluster and kind, not every poll
                    self._logged[key] = kind
                    log.warning("Ray demand of %s from %s: %s (%s)", key, url, kind, e)
                return
            self._logged.pop(key, None)
            self._obs[key] = RayObservation(status, getattr(status, "observed_at", None) or now, "")

    async def poll(self, targets: Mapping[str, str | None], now: float) -> None:
        """``targets``: RayCluster key "ns/name" -> dashboard base URL (None: no head yet, skipped)."""
        self._obs = {k: v for k, v in self._obs.items() if k in targets}
        await asyncio.gather(*(self._one(k, url, now) for k, url in targets.items() if url))
