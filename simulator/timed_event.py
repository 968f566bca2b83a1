"""One entry of a simulation's event heap: ordered by time, then by the order it was pushed (``seq``),
so two events at the same time run in the order they were scheduled.  The single-cluster engine and
the multi-cluster fleet simulation share it."""

from __future__ import annotations

from typing import Any, NamedTuple


class TimedEvent(NamedTuple):
    """A tuple, so the heap compares entries in C: ``(t, seq)`` decides, since ``seq`` is unique and
    ``kind`` and ``data`` are never reached."""

    t: float
    seq: int
    kind: str
    data: Any = None
