"""GPU signal from the Prometheus HTTP API: one instant query per exporter family.

``GET <url>/api/v1/query?query=<family>`` for ``queuepilot_gpu_healthy``,
``queuepilot_gpu_allocated``, ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED``; the vectors
are folded per (``Hostname``, ``UUID``) by ``autoscaler.signals.gpu.fold_series``.  An optional
``selector`` (e.g. ``{cluster="a"}``) narrows every query.  Any failure -- connection, timeout,
non-200, a body that is not a Prometheus success vector -- is counted in
``queuepilot_source_errors_total{source="gpu", kind}`` (kinds from ``servicekit.errors``) and the
last good reading is kept with its old ``observed_at`` (so it turns stale, which the signal-age
metric shows), never raised.

A Prometheus that cannot be reached, or a URL that is not a Prometheus HTTP API (an HTML page, a
404), is named in the log with the URL and what to check -- once when it starts, again when the
problem changes and then with a doubling interval, not on every poll -- and once when it recovers.
``last_error`` / ``status()`` describe the current problem for a health endpoint.

At 32 000 GPUs the four answers are 3-7 MB of JSON each; decoding them and folding the series is
~0.3 s of CPU, so when the answers of a poll add up to ``PARSE_IN_THREAD_BYTES`` or more that work
runs in a worker thread (the event loop keeps serving probes and watches); smaller answers are
decoded inline.  The reading is the same either way.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp

from autoscaler.signals.gpu import DEFAULT_UTILIZATION, FAMILIES, GpuReading, check_utilization, fold_series
from servicekit.errors import BAD_RESPONSE, CONNECTION, NOT_FOUND, TIMEOUT, error_kind, status_kind
from servicekit.logthrottle import ProblemLog

log = logging.getLogger("queuepilot.gpu")
QUERY_PATH = "/api/v1/query"
PARSE_IN_THREAD_BYTES = 256 * 1024  # a poll's answers at least this large are decoded in a worker thread
NOT_JSON_HINT = "is this a Prometheus server? check --prometheus-url"


class BadAnswer(ValueError):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _parse_vector(body: Any) -> list[tuple[dict[str, str], float]]:
    if not isinstance(body, dict) or body.get("status") != "success":
        raise BadAnswer(BAD_RESPONSE, f"not a success answer: {str(body)[:200]}")
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise BadAnswer(BAD_RESPONSE, "answer is not an instant vector")
    out = []
    for s in data["result"]:
        if not isinstance(s, dict) or not isinstance(s.get("metric"), dict):
            raise BadAnswer(BAD_RESPONSE, "vector sample without labels")
        v = s.get("value")
        if not isinstance(v, list) or len(v) != 2:
            raise BadAnswer(BAD_RESPONSE, "vector sample without a value")
        out.append(({str(k): str(x) for k, x in s["metric"].items()}, float(v[1])))
    return out


def _decode(body: bytes, encoding: str, content_type: str) -> list[tuple[dict[str, str], float]]:
    """One answer's body -> its vector, as ``resp.json(content_type=None)`` + ``_parse_vector`` (pure)."""
    stripped = body.strip()
    parsed: Any = None  # an empty body reads as JSON null, as aiohttp has it
    if stripped:
        try:
            parsed = json.loads(stripped.decode(encoding))
        except ValueError:
            raise BadAnswer(BAD_RESPONSE, f"the answer to {QUERY_PATH} is not JSON ({content_type}); "
                            f"{NOT_JSON_HINT}") from None
    return _parse_vector(parsed)


def _decode_all(answers: list[tuple[bytes, str, str]]) -> list[list[tuple[dict[str, str], float]]]:
    return [_decode(*a) for a in answers]


class PrometheusGpuSignal:
    name = "gpu"

    def __init__(
        self,
        session: aiohttp.ClientSession,
        url: str,
        on_error: Callable[[str], None],
        selector: str = "",
        timeout: float = 10.0,
        utilization: str = DEFAULT_UTILIZATION,
    ) -> None:
        self.utilization = check_utilization(utilization)
        self._session = session
        self._url = url.rstrip("/")
        self._on_error = on_error
        self._selector = selector
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._reading = GpuReading()
        self._problems = ProblemLog(log, f"GPU signal from Prometheus {self._url}")
        self._failing_since: float | None = None

    @property
    def reading(self) -> GpuReading:
        return self._reading

    @property
    def url(self) -> str:
        return self._url

    @property
    def last_error(self) -> str | None:
        """What went wrong in the latest poll, one line naming the URL (None after a success)."""
        if self._problems.problem is None:
            return None
        return f"Prometheus {self._url}: {self._problems.detail} ({self._problems.problem})"

    def status(self) -> dict[str, Any]:
        """For a health endpoint: ``ok``, ``url``, ``error`` (kind), ``detail``, ``failing_since`` (the
        ``now`` of the first failed poll), ``failures`` (consecutive), ``observed_at``."""
        return {
            "ok": self._problems.problem is None,
            "url": self._url,
            "error": self._problems.problem,
            "detail": self._problems.detail or None,
            "failing_since": self._failing_since,
            "failures": self._problems.failures,
            "observed_at": self._reading.observed_at,
        }

    async def _query(self, family: str) -> tuple[bytes, str, str]:
        """One family's answer: (body, its text encoding, its content type); raises ``BadAnswer`` on a non-200."""
        async with self._session.get(
            f"{self._url}{QUERY_PATH}", params={"query": f"{family}{self._selector}"}, timeout=self._timeout
        ) as resp:
            if resp.status != 200:
                kind = status_kind(resp.status)
                hint = "; is this a Prometheus server? check --prometheus-url" if kind == NOT_FOUND else ""
                raise BadAnswer(kind, f"HTTP {resp.status} for {QUERY_PATH}{hint}")
            body = await resp.read()
            try:
                encoding = resp.get_encoding()
            except (LookupError, RuntimeError):  # an unknown charset: decoded as UTF-8, or reported as not JSON
                encoding = "utf-8"
            return body, encoding, resp.headers.get("Content-Type", "no content type")

    async def poll(self, now: float) -> None:
        try:
            answers = await asyncio.gather(*(self._query(f) for f in FAMILIES))
            big = sum(len(a[0]) for a in answers) >= PARSE_IN_THREAD_BYTES
            results = await asyncio.to_thread(_decode_all, answers) if big else _decode_all(answers)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            kind = e.kind if isinstance(e, BadAnswer) else error_kind(e)
            self._on_error(kind)
            if self._problems.problem is None:
                self._failing_since = now
            self._problems.failing(kind, self._describe(kind, e))
            return
        series = [(fam, labels, value) for fam, res in zip(FAMILIES, results, strict=True) for labels, value in res]
        if big:
            gpus = await asyncio.to_thread(fold_series, series, utilization=self.utilization)
        else:
            gpus = fold_series(series, utilization=self.utilization)
        self._reading = GpuReading(gpus=gpus, observed_at=now)
        self._failing_since = None
        self._problems.ok()

    def _describe(self, kind: str, e: Exception) -> str:
        seen = self._reading.observed_at
        kept = ("no GPU data read yet" if seen is None else
                f"keeping the GPU data read at {datetime.fromtimestamp(seen, UTC):%Y-%m-%d %H:%M:%S}Z")
        if isinstance(e, BadAnswer):
            what = str(e)
        elif kind == CONNECTION:
            os_error = getattr(e, "os_error", None)
            what = f"cannot connect ({(os_error.strerror if os_error else None) or type(e).__name__})"
        elif kind == TIMEOUT:
            what = f"no answer within {self._timeout.total:g}s"
        else:
            what = f"{type(e).__name__}: {e}"
        return f"{' '.join(what.split())[:300]}; {kept}"

    async def close(self) -> None:
        return None
