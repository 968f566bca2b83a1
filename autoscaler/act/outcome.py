"""What a write did (bounded vocabulary for logs and tests) and how its errors are classified."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from kubernetes_asyncio.client.exceptions import ApiException

Result = Literal["written", "unchanged", "skipped", "dry_run", "conflict", "error"]


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    result: Result
    detail: str = ""  # why skipped / the error kind
    attempts: int = 0


def error_kind(exc: BaseException) -> str:
    """Bounded ``kind`` label for ``queuepilot_write_errors_total``."""
    if isinstance(exc, ApiException):
        s = exc.status or 0
        if s == 409:
            return "conflict"
        if s in (400, 415, 422):
            return "invalid"
        if s in (401, 403):
            return "forbidden"
        if s == 404:
            return "not_found"
        if s == 429:
            return "throttled"
        if s >= 500:
            return "server"
        return "client"
    if isinstance(exc, asyncio.TimeoutError | TimeoutError):
        return "timeout"
    return "connection"


def rfc3339(t: float) -> str:
    """Kubernetes metav1.Time (seconds precision, UTC, trailing Z)."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
