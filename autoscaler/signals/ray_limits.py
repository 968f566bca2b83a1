"""What one Ray dashboard answer may cost the controller: bytes, JSON values, and how many at once.

A RayCluster's head is run by its tenant, so its answers are hostile input.  Three bounds keep the
controller's memory bounded whatever the heads send (``docs/ray-signal.md``, "Bounds"):

- **per part** (:data:`PART_LIMITS`): an answer longer than ``max_bytes`` is refused while it is
  read (``too_large``), and one that could build more than ``max_values`` JSON values or
  ``max_containers`` objects and arrays (``servicekit.boundedjson``) is refused before it is parsed.  Each bound is what a real head's
  answer needs at 1 000 nodes (or at the state API's row ``limit``), measured from the recorded Ray
  2.60 answers in ``fixtures/ray`` per node or per row, times :data:`MARGIN`, rounded up
  (:func:`needed`; ``tests/ray/test_answer_limits.py`` checks every bound against the fixtures);
- **bytes held at once** (:class:`ByteBudget`): every answer being read, or read and waiting to be
  parsed, holds its bytes from one process-wide budget; a read waits for room (within its head's
  deadline), so sixteen heads answering their caps at once cost the budget, not sixteen caps;
- **parses at once** (:class:`ParseGate`): large answers are decoded in a worker thread, one at a
  time; a parse whose head's deadline passed runs to its end (a thread cannot be cancelled) and
  only then frees the gate and its bytes.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

NODES = 1000  # the largest Ray cluster an answer is sized for
MARGIN = 2.0  # over what the recorded answers need per node / row at that size
ROWS = 2000  # the state API's row limit the client asks for (RayDashboardClient limit)


@dataclass(frozen=True, slots=True)
class PartLimit:
    max_bytes: int
    max_values: int
    max_containers: int | None = None


def needed(per_unit_bytes: float, per_unit_values: float, per_unit_containers: float, units: int,
           margin: float = MARGIN) -> PartLimit:
    """Bounds for an answer of ``units`` nodes or rows at the measured size per unit, times ``margin``:
    bytes rounded up to a whole MiB, values and containers to a thousand."""
    b = math.ceil(per_unit_bytes * units * margin / 2**20) * 2**20
    v = math.ceil(per_unit_values * units * margin / 1000) * 1000
    c = math.ceil(per_unit_containers * units * margin / 1000) * 1000
    return PartLimit(b, v, c)


# Per node or per row in fixtures/ray (bytes; JSON values and objects + arrays: servicekit.boundedjson):
#   cluster_status.json (v1 report, 1 node)          2 123 B,   128 values,  53 containers per node
#   cluster_status_format1.json (the text, 1 node)     929 B,    14 values,   8 containers per node
#   tasks_pending_detail.json (7 rows)              1 121 B,    51 values,  15 containers per row
#   actors.json (3 rows)                              758 B,    30 values,   7 containers per row
#   placement_groups.json (2 rows)                    860 B,    39 values,  13 containers per row
#   nodes.json (1 node)                               659 B,    29 values,   7 containers per node
#   nodes_view_summary.json (1 node)               16 819 B, 1 403 values,  64 containers per node
def part_limits(rows: int = ROWS, nodes: int = NODES) -> dict[str, PartLimit]:
    """The bounds of each part for a state-API row ``limit`` of ``rows`` and clusters of ``nodes`` nodes."""
    return {
        "cluster_status": needed(2123, 128, 53, nodes),
        "cluster_status_format1": needed(929, 14, 8, nodes),
        "tasks": needed(1121, 51, 15, rows),
        "actors": needed(758, 30, 7, rows),
        "placement_groups": needed(860, 39, 13, rows),
        "nodes": needed(659, 29, 7, nodes),
        "nodes_summary": needed(16819, 1403, 64, nodes),
    }


PART_LIMITS = part_limits()


def largest(limits: dict[str, PartLimit]) -> PartLimit:
    """The bound for any other part (``get_json`` callers): the largest of each."""
    return PartLimit(max(v.max_bytes for v in limits.values()), max(v.max_values for v in limits.values()),
                     max(v.max_containers or 0 for v in limits.values()) or None)


# bytes of Ray answers held at once, process-wide: room for the largest answer and as much again
BUDGET_BYTES = 2 * largest(PART_LIMITS).max_bytes
PARSES_AT_ONCE = 1


class ByteBudget:
    """Bytes held at once by the answers being read or parsed, first come first served.

    ``await take(n)`` waits until ``n`` more bytes fit (cancellable: a cancelled wait takes nothing),
    ``give(n)`` returns them.  One reader's chunk never exceeds ``total``."""

    def __init__(self, total: int = BUDGET_BYTES) -> None:
        if total <= 0:
            raise ValueError(f"a byte budget must be positive, got {total}")
        self.total = total
        self.used = 0
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def take(self, n: int) -> None:
        n = min(n, self.total)
        if not self._waiters and self.used + n <= self.total:
            self.used += n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as it was cancelled: give it back
                self.used -= n
            with_fut = [w for w in self._waiters if w[1] is not fut]
            self._waiters = deque(with_fut)
            self._wake()
            raise

    def give(self, n: int) -> None:
        self.used = max(0, self.used - min(n, self.total))
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.total:
            n, fut = self._waiters.popleft()
            if fut.done():
                continue
            self.used += n
            fut.set_result(None)


class ParseGate:
    """At most ``at_once`` parses in worker threads; the slot (and ``release``) is freed when the
    thread ends, even when the waiting caller was cancelled (its head's deadline passed)."""

    def __init__(self, at_once: int = PARSES_AT_ONCE) -> None:
        self._sem = asyncio.Semaphore(at_once)
        self.running = 0

    async def run(self, fn: Callable[..., T], *args: Any, release: Callable[[], None] | None = None) -> T:
        try:
            await self._sem.acquire()
        except BaseException:
            if release is not None:
                release()
            raise
        self.running += 1
        fut = asyncio.get_running_loop().run_in_executor(None, fn, *args)

        def done(f: asyncio.Future[T]) -> None:
            if not f.cancelled():
                f.exception()  # retrieved here: a caller that stopped waiting never reads it
            self.running -= 1
            self._sem.release()
            if release is not None:
                release()

        fut.add_done_callback(done)
        return await asyncio.shield(fut)
