"""How fast this machine is while a benchmark runs: a fixed pure-Python probe taken now and then.

This project's machine is shared, and its speed moves by 20-40 % from hour to hour (and by as much
from one second to the next): the same matrix of the same code took 34.2 and 28.3 minutes 40 minutes
apart (docs/simulation.md, "Speed"). A page's wall time alone cannot say whether a change made the
code faster or the hour was a fast one. So while the runs go on, the parent process (idle, waiting
for its workers) times a small fixed loop (``probe_work``: tuples, dictionaries, a heap, float and
integer arithmetic, short strings, as a simulated tick is made of; none of the project's code) every
``every_s`` seconds, in CPU seconds (``time.process_time``: the time the probe had a core, not the time
it waited for one beside the workers), and the page reports the median of those probes beside its
wall time. The probe costs some 30 ms every 20 s (0.15 % of a core).

The clock is passed in (``SpeedLog.maybe(now)``), and the probe is a parameter, so the log is tested
without timing anything. ``margin`` says at which probe median a run would have taken a given time
(the whole matrix's page: its 30-minute target), its wall time taken to move with the median.
"""

from __future__ import annotations

import heapq
import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

PROBE_N = 30_000  # iterations of the probe's loop: some 19-35 ms on this project's 2-core machine
EVERY_S = 20.0


def probe_work(n: int = PROBE_N) -> int:
    """The probe's fixed work (its result only keeps the loop from being optimized away)."""
    heap: list[tuple[int, int]] = []
    seen: dict[int, tuple[int, float, str]] = {}
    acc = 0
    for i in range(n):
        key = (i * 40503 + 0x9E3779B9) & 0xFFFF
        seen[key] = (i, i * 0.5 + 1.0, f"w-{key}")
        heapq.heappush(heap, (key, i))
        if len(heap) > 64:
            acc += heapq.heappop(heap)[1] + len(seen[key][2])
    return acc


def probe_s(n: int = PROBE_N) -> float:
    """CPU seconds of one ``probe_work(n)`` now."""
    t0 = time.process_time()
    probe_work(n)
    return time.process_time() - t0


class SpeedLog:
    """Probes taken at most every ``every_s`` seconds of the caller's clock."""

    def __init__(self, every_s: float = EVERY_S, probe: Callable[[], float] = probe_s) -> None:
        if every_s <= 0:
            raise ValueError("every_s must be > 0")
        self.every_s = every_s
        self.probe = probe
        self.samples: list[float] = []
        self._next: float | None = None

    def maybe(self, now: float) -> None:
        """Take a probe if one is due at ``now`` (the first call always takes one, after a first probe
        that is dropped: a process's first runs of the loop are slower, 2-3x, as its caches warm)."""
        if self._next is not None and now < self._next:
            return
        if self._next is None:
            self.probe()
        self.samples.append(self.probe())
        self._next = now + self.every_s

    def summary(self) -> dict[str, Any] | None:
        """``{"n", "median_ms", "min_ms", "max_ms", "probe_n"}`` of the probes taken; None without any."""
        if not self.samples:
            return None
        ms = [s * 1000.0 for s in self.samples]
        return {"n": len(ms), "median_ms": round(statistics.median(ms), 2), "min_ms": round(min(ms), 2),
                "max_ms": round(max(ms), 2), "probe_n": PROBE_N}


def margin(wall_s: float, speed: Mapping[str, Any] | None, limit_min: float) -> str:
    """One clause: the probe median at which a run like this one would take ``limit_min`` minutes, if its
    wall time moves with the median (as the whole matrix's did: 0.95-1.01 min per ms over four runs,
    docs/simulation.md "Speed"), and how many times this run's median that is; empty without a probe."""
    if not speed or wall_s <= 0 or float(speed["median_ms"]) <= 0:
        return ""
    median = float(speed["median_ms"])
    at = limit_min * 60.0 / wall_s * median
    return (f"this run would take {limit_min:g} minutes at a probe median of {at:.1f} ms ({at / median:.2f}x this "
            "run's), its wall time taken to move with the median.")


def describe(speed: Mapping[str, Any] | None) -> str:
    """One sentence for a page's provenance; empty where the run took no probe (older pages)."""
    if not speed:
        return ""
    return (f"Machine speed while it ran (`benchmarks/machine_speed.py`: a fixed pure-Python probe of "
            f"{int(speed['probe_n']):,} iterations every {EVERY_S:g} s, in CPU ms): median {speed['median_ms']:.1f} "
            f"ms over {speed['n']} probes ({speed['min_ms']:.1f}-{speed['max_ms']:.1f}); lower is faster, and a "
            "wall time compares with another page's only at a like median.")
