"""A small async client for the Prometheus HTTP API (instant and range queries, the rule list), with errors
a person can act on: an unreachable server, an answer that is not from a Prometheus API, a refused query.

Every answer is read as untrusted input (a proxy, another service on the URL, a broken Prometheus): it is
read up to ``max_bytes`` (an answer over it is refused while it arrives), decoded with a bound on the
JSON values it may build (``servicekit.boundedjson``: nesting too deep, bytes that are not UTF-8,
syntax errors are refused too), and its shape is checked before anything uses it: a result that is not
a list of series, labels that are not text, timestamps or values that are not finite numbers (``NaN``,
``+Inf``: a report cannot add them up) are each one :class:`ReportError` line naming the query.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from servicekit.boundedjson import NotJson, TooLarge, loads_bounded

# What one answer may be: a week of 60 s points is ~10 000 points, ~22 bytes each, per series; this
# holds about 1 000 such series
MAX_ANSWER_BYTES = 256 * 2**20
MIN_BYTES_PER_VALUE = 4  # the densest real answer (``[t,"v"]`` points) spends about 7 bytes per JSON value


class ReportError(Exception):
    """A failure to report on, as one line."""


def check_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ReportError(f"--prometheus-url must be an http:// or https:// URL, got {url!r}")
    return url.rstrip("/")


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]  # (unix seconds, value); one point for an instant query


class PrometheusClient:
    def __init__(self, url: str, session: aiohttp.ClientSession, timeout_s: float = 60.0,
                 max_bytes: int = MAX_ANSWER_BYTES) -> None:
        self.url = check_url(url)
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._max_bytes = max_bytes

    async def _read(self, resp: aiohttp.ClientResponse, path: str) -> bytes:
        declared = resp.content_length
        if declared is not None and declared > self._max_bytes:
            raise ReportError(self._too_large(path))
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(2**16):
            size += len(chunk)
            if size > self._max_bytes:
                raise ReportError(self._too_large(path))
            chunks.append(chunk)
        return b"".join(chunks)

    def _too_large(self, path: str) -> str:
        n = self._max_bytes
        size = f"{n // 2**20} MiB" if n >= 2**20 else f"{n // 2**10} KiB"
        return (f"Prometheus at {self.url} answered {path} with more than {size}; narrow --window or "
                "--namespace, or raise --step")

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}{path}"
        try:
            async with self._session.get(url, params=params, timeout=self._timeout) as resp:
                raw = await self._read(resp, path)
                content_type = resp.headers.get("Content-Type", "")
                status = resp.status
        except TimeoutError:
            raise ReportError(f"Prometheus at {self.url} did not answer {path} in time") from None
        except aiohttp.ClientError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {_one_line(exc)}") from None
        why = ""
        try:
            body = loads_bounded(raw, max(1000, len(raw) // MIN_BYTES_PER_VALUE))
        except TooLarge as exc:
            raise ReportError(f"{url} answered JSON far denser than a Prometheus answer ({exc})") from None
        except NotJson as exc:
            body, why = None, f": {exc}"
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            raise ReportError(
                f"{url} did not answer like a Prometheus API (HTTP {status}, {content_type or 'no content type'})"
                f"{why}; is --prometheus-url the Prometheus server's base URL?"
            )
        if body["status"] == "error":
            raise ReportError(f"Prometheus refused {path}: {_text(body.get('errorType'))}: {_text(body.get('error'))}")
        return body.get("data")

    async def query(self, expr: str, at: float) -> list[Series]:
        data = await self._get("/api/v1/query", {"query": expr, "time": repr(float(at))})
        return _series(data, expr)

    async def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        params = {"query": expr, "start": repr(float(start)), "end": repr(float(end)), "step": repr(float(step))}
        data = await self._get("/api/v1/query_range", params)
        return _series(data, expr)

    async def metric_names(self) -> list[str]:
        """Every metric name the server holds (its whole retention)."""
        data = await self._get("/api/v1/label/__name__/values")
        if data is None:
            return []
        if not isinstance(data, list) or not all(isinstance(n, str) for n in data):
            raise ReportError("Prometheus answered the metric names with something other than a list of names")
        return list(data)

    async def rule_intervals(self) -> dict[str, float]:
        """Recording rule name -> its group's evaluation interval in seconds (what this server evaluates)."""
        data = await self._get("/api/v1/rules", {"type": "record"})
        groups = data.get("groups", []) if isinstance(data, dict) else None
        if not isinstance(groups, list):
            raise ReportError("Prometheus answered the rule list without a list of groups")
        out: dict[str, float] = {}
        for group in groups:
            if not isinstance(group, dict) or not isinstance(group.get("rules", []), list):
                raise ReportError("Prometheus answered the rule list with a group that is not one")
            interval = group.get("interval")
            if interval is None:
                continue
            seconds = _finite(interval, "the rule group interval")
            if seconds <= 0:
                raise ReportError(f"Prometheus answered a rule group interval of {seconds!r} seconds")
            for rule in group.get("rules", []):
                if isinstance(rule, dict) and isinstance(rule.get("name"), str) and rule["name"]:
                    out[rule["name"]] = seconds
        return out


def _one_line(value: object, limit: int = 200) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _text(value: object) -> str:
    return _one_line(value if isinstance(value, str) else "" if value is None else repr(value))


def _finite(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ReportError(f"Prometheus answered {what} with {_one_line(repr(value), 60)}, not a number")
    try:
        number = float(value)
    except (ValueError, OverflowError):
        raise ReportError(f"Prometheus answered {what} with {_one_line(repr(value), 60)}, not a number") from None
    if not math.isfinite(number):
        raise ReportError(f"Prometheus answered {what} with {value}, not a finite number; the report sums and "
                          "divides these values (check the recording rules for a division by zero)")
    return number


def _point(pair: Any, expr: str) -> tuple[float, float]:
    if not isinstance(pair, list) or len(pair) != 2:
        raise ReportError(f"Prometheus answered {expr!r} with a sample that is not a [time, value] pair")
    return _finite(pair[0], f"{expr!r} a sample time"), _finite(pair[1], f"{expr!r} a value")


def _series(data: Any, expr: str) -> list[Series]:
    if not isinstance(data, dict) or "result" not in data:
        raise ReportError(f"Prometheus answered {expr!r} without a result")
    result = data["result"]
    if not isinstance(result, list):
        raise ReportError(f"Prometheus answered {expr!r} with a result that is not a list of series")
    out = []
    for r in result:
        if not isinstance(r, dict):
            raise ReportError(f"Prometheus answered {expr!r} with a series that is not an object")
        metric = r.get("metric", {})
        if not isinstance(metric, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in metric.items()):
            raise ReportError(f"Prometheus answered {expr!r} with series labels that are not text")
        if "values" in r:
            if not isinstance(r["values"], list):
                raise ReportError(f"Prometheus answered {expr!r} with series values that are not a list")
            points = [_point(p, expr) for p in r["values"]]
        elif "value" in r:
            points = [_point(r["value"], expr)]
        else:
            raise ReportError(f"Prometheus answered {expr!r} with a series without values")
        labels = {k: v for k, v in metric.items() if k != "__name__"}
        out.append(Series(labels, points))
    return out
