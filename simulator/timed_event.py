"""One entry of a simulation's event heap: ordered by time, then by the order it was pushed (``seq``),
so two events at the same time run in the order they were scheduled.  The single-cluster engine and
the multi-cluster fleet simulation share it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(order=True, slots=True)
class TimedEvent:
    t: float
    seq: int
    kind: str = field(compare=False)
    data: Any = field(compare=False, default=None)
