"""What a write did (bounded vocabulary for logs and tests).  Errors are classified by the one
vocabulary of ``servicekit.errors`` (re-exported here as ``error_kind``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from servicekit.errors import error_kind

__all__ = ["Result", "WriteOutcome", "error_kind", "rfc3339"]

Result = Literal["written", "unchanged", "skipped", "dry_run", "conflict", "error"]


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    result: Result
    detail: str = ""  # why skipped / the error kind
    attempts: int = 0


def rfc3339(t: float) -> str:
    """Kubernetes metav1.Time (seconds precision, UTC, trailing Z)."""
    return datetime.fromtimestamp(t, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
