"""GPU signal from the Prometheus HTTP API: one instant query per exporter family.

``GET <url>/api/v1/query?query=<family>`` for ``queuepilot_gpu_healthy``,
``queuepilot_gpu_allocated``, ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED``; the vectors
are folded per (``Hostname``, ``UUID``) by ``autoscaler.signals.gpu.fold_series``.  An optional
``selector`` (e.g. ``{cluster="a"}``) narrows every query.  Any failure -- connection, timeout,
non-200, a body that is not a Prometheus success vector -- is counted in
``queuepilot_source_errors_total{source="gpu", kind}`` and the last good reading is kept with its
old ``observed_at`` (so it turns stale), never raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import aiohttp

from autoscaler.signals.gpu import FAMILIES, GpuReading, error_kind, fold_series

log = logging.getLogger("queuepilot.gpu")


class BadAnswer(ValueError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _parse_vector(body: Any) -> list[tuple[dict[str, str], float]]:
    if not isinstance(body, dict) or body.get("status") != "success":
        raise BadAnswer("bad_response", f"not a success answer: {str(body)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise BadAnswer("bad_response", "answer is not an instant vector")
    out = []
    for s in data["result"]:
        if not isinstance(s, dict) or not isinstance(s.get("metric"), dict):
            raise BadAnswer("bad_response", "vector sample without labels")
        v = s.get("value")
        if not isinstance(v, list) or len(v) != 2:
            raise BadAnswer("bad_response", "vector sample without a value")
        out.append(({str(k): str(x) for k, x in s["metric"].items()}, float(v[1])))
    return out


class PrometheusGpuSignal:
    name = "gpu"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        on_error: Callable[[str], None],
        selector: str = "",
        timeout: float = 10.0,
    ) -> None:
        self._session = session
        self._url = url.rstrip("/")
        self._on_error = on_error
        self._selector = selector
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._reading = GpuReading()

    @property
    def reading(self) -> GpuReading:
        return self._reading

    async def _query(self, family: str) -> list[tuple[dict[str, str], float]]:
        async with self._session.get(
            f"{self._url}/api/v1/query", params={"query": f"{family}{self._selector}"}, timeout=self._timeout
        ) as resp:
            if resp.status != 200:
                kind = "http_5xx" if resp.status >= 500 else "http_4xx"
                raise BadAnswer(kind, f"HTTP {resp.status} for {family}")
            try:
                body = await resp.json(content_type=None)
            except ValueError as e:
                raise BadAnswer("bad_response", f"answer for {family} is not JSON") from e
        return _parse_vector(body)

    async def poll(self, now: float) -> None:
        try:
            results = await asyncio.gather(*(self._query(f) for f in FAMILIES))
        except asyncio.CancelledError:
            raise
        except Exception as e:
            kind = e.kind if isinstance(e, BadAnswer) else error_kind(e)
            self._on_error(kind)
            log.warning("GPU signal from Prometheus %s: %s (%s); keeping data from %s",
                        self._url, kind, e, self._reading.observed_at)
            return
        series = [(fam, labels, value) for fam, res in zip(FAMILIES, results, strict=True) for labels, value in res]
        self._reading = GpuReading(gpus=fold_series(series), observed_at=now)

    async def close(self) -> None:
        return None
