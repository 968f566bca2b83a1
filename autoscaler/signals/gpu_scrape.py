"""GPU signal by scraping the exporter pods directly (no Prometheus needed).

Exporter pods are found by label (default ``app.kubernetes.io/name=queuepilot-exporter``, one list
call per poll, ``pods/list`` is in the RBAC contract) and scraped at ``http://<podIP>:<port>/metrics``
concurrently (bounded).  Expositions are parsed with ``prometheus_client.parser``.  Each exporter's
last good scrape is kept with its own time; the signal's ``observed_at`` is the *oldest* of them, so
one silent exporter makes the signal stale after the limit (decisions then hold or fail open as
configured) rather than silently dropping that node's GPUs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.signals.gpu import DEFAULT_UTILIZATION, FAMILIES, GpuReading, check_utilization, fold_series
from servicekit.errors import error_kind, status_kind
from servicekit.logthrottle import ProblemLog, ThrottledLog

log = logging.getLogger("queuepilot.gpu")
DEFAULT_SELECTOR = "app.kubernetes.io/name=queuepilot-exporter"
DEFAULT_PORT = 9400

# discover() -> list of (pod key "ns/name", base URL "http://ip:port")
Discover = Callable[[], Awaitable[list[tuple[str, str]]]]


@dataclass(frozen=True, slots=True)
class _Scrape:
    series: tuple[tuple[str, dict[str, str], float], ...]
    observed_at: float


def parse_exposition(text: str) -> tuple[tuple[str, dict[str, str], float], ...]:
    """The four GPU families out of an exposition text (raises ValueError on garbage)."""
    out = []
    wanted = set(FAMILIES)
    for fam in text_string_to_metric_families(text):
        if fam.name not in wanted:
            continue
        for s in fam.samples:
            if s.name == fam.name:
                out.append((fam.name, dict(s.labels), float(s.value)))
    return tuple(out)


class ScrapeGpuSignal:
    name = "gpu"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        discover: Discover,
        on_error: Callable[[str], None],
        timeout: float = 5.0,
        concurrency: int = 32,
        utilization: str = DEFAULT_UTILIZATION,
    ) -> None:
        self.utilization = check_utilization(utilization)
        self._session = session
        self._discover = discover
        self._on_error = on_error
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._sem = asyncio.Semaphore(concurrency)
        self._last: dict[str, _Scrape] = {}
        self._reading = GpuReading()
        self._discovery = ProblemLog(log, "GPU signal: listing exporter pods")
        self._scrape_log = ThrottledLog(log, interval=300.0)  # per exporter: one line per 5 min at most
        self._failed: dict[str, str] = {}  # exporter pod -> last failure, one line

    @property
    def reading(self) -> GpuReading:
        return self._reading

    @property
    def last_error(self) -> str | None:
        """The current problem, one line (None when discovery and every scrape of the last poll worked)."""
        if self._discovery.problem is not None:
            return f"cannot list exporter pods: {self._discovery.detail} ({self._discovery.problem})"
        if self._failed:
            key, why = next(iter(sorted(self._failed.items())))
            more = f" and {len(self._failed) - 1} more" if len(self._failed) > 1 else ""
            return f"scraping exporter {key} failed: {why}{more}"
        return None

    def status(self) -> dict[str, Any]:
        """For a health endpoint: ``ok``, ``error`` (one line or None), ``failed_exporters``, ``observed_at``."""
        return {"ok": self.last_error is None, "error": self.last_error, "failed_exporters": sorted(self._failed),
                "observed_at": self._reading.observed_at}

    async def _scrape(self, key: str, base: str, now: float) -> None:
        async with self._sem:
            try:
                async with self._session.get(f"{base}/metrics", timeout=self._timeout) as resp:
                    if resp.status != 200:
                        raise _HttpError(status_kind(resp.status), resp.status)
                    text = await resp.text()
                self._last[key] = _Scrape(parse_exposition(text), now)
                self._failed.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                kind = e.kind if isinstance(e, _HttpError) else error_kind(e)
                self._on_error(kind)
                why = f"{kind} ({' '.join(str(e).split())[:200] or type(e).__name__})"
                if self._failed.get(key) != why:  # a new problem for this exporter is always logged
                    self._scrape_log.log(f"{key}:{why}", logging.WARNING,
                                         "GPU signal: scraping exporter %s at %s failed: %s", key, base, why)
                self._failed[key] = why

    async def poll(self, now: float) -> None:
        try:
            targets = await self._discover()
        except asyncio.CancelledError:
            raise
        except Exception as e:
            kind = error_kind(e)
            self._on_error(kind)
            self._discovery.failing(kind, " ".join(str(e).split())[:300] or type(e).__name__)
            return
        self._discovery.ok()
        await asyncio.gather(*(self._scrape(k, url, now) for k, url in targets))
        live = {k for k, _ in targets}
        self._last = {k: v for k, v in self._last.items() if k in live}
        self._failed = {k: v for k, v in self._failed.items() if k in live}
        if not self._last:
            return
        series = [s for sc in self._last.values() for s in sc.series]
        self._reading = GpuReading(
            gpus=fold_series(series, utilization=self.utilization), observed_at=min(sc.observed_at for sc in self._last.values())
        )

    async def close(self) -> None:
        return None


class _HttpError(Exception):
    def __init__(self, kind: str, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.kind = kind
