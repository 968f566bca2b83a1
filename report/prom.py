"""A small async client for the Prometheus HTTP API (instant and range queries, the rule list), with errors
a person can act on: an unreachable server, an answer that is not from a Prometheus API, a refused query."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp


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
    def __init__(self, url: str, session: aiohttp.ClientSession, timeout_s: float = 60.0) -> None:
        self.url = check_url(url)
        self._session = session
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)

    async def _get(self, path: str, params: dict[str, str] | None = None) -> Any:
        url = f"{self.url}{path}"
        try:
            async with self._session.get(url, params=params, timeout=self._timeout) as resp:
                text = await resp.text()
                content_type = resp.headers.get("Content-Type", "")
                status = resp.status
        except TimeoutError:
            raise ReportError(f"Prometheus at {self.url} did not answer {path} in time") from None
        except aiohttp.ClientError as exc:
            raise ReportError(f"cannot reach Prometheus at {self.url}: {exc}") from None
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict) or body.get("status") not in ("success", "error"):
            raise ReportError(
                f"{url} did not answer like a Prometheus API (HTTP {status}, {content_type or 'no content type'}); "
                "is --prometheus-url the Prometheus server's base URL?"
            )
        if body["status"] == "error":
            raise ReportError(f"Prometheus refused {path}: {body.get('errorType', '')}: {body.get('error', '')}")
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
        return [str(n) for n in data or []]

    async def rule_intervals(self) -> dict[str, float]:
        """Recording rule name -> its group's evaluation interval in seconds (what this server evaluates)."""
        data = await self._get("/api/v1/rules", {"type": "record"})
        out: dict[str, float] = {}
        for group in (data or {}).get("groups", []):
            for rule in group.get("rules", []):
                if rule.get("name") and group.get("interval"):
                    out[rule["name"]] = float(group["interval"])
        return out


def _series(data: Any, expr: str) -> list[Series]:
    if not isinstance(data, dict) or "result" not in data:
        raise ReportError(f"Prometheus answered {expr!r} without a result")
    out = []
    for r in data["result"]:
        if "values" in r:
            points = [(float(t), float(v)) for t, v in r["values"]]
        else:
            t, v = r["value"]
            points = [(float(t), float(v))]
        labels = {k: v for k, v in r.get("metric", {}).items() if k != "__name__"}
        out.append(Series(labels, points))
    return out
