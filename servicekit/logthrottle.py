"""Logging that a peer cannot turn into a flood.

- :class:`ThrottledLog`: at most one line per key per interval; the next line says how many were
  held back (for events an outsider can trigger at will: malformed requests, accept failures).
- :class:`ProblemLog`: a recurring failure of one dependency (a Prometheus that does not answer)
  is logged when it starts, when it changes, then with a doubling interval while it lasts, and
  once when it clears -- not on every poll.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Window:
    last: float
    held: int = 0


class ThrottledLog:
    """``log(key, level, msg, *args)`` emits the first line of a key, then at most one per
    ``interval`` seconds, each saying how many of that key were held back since the last one."""

    def __init__(self, logger: logging.Logger, interval: float = 60.0, *,
                 clock: Callable[[], float] = time.monotonic, max_keys: int = 64) -> None:
        self.logger = logger
        self.interval = interval
        self.clock = clock
        self.max_keys = max_keys
        self._windows: dict[str, _Window] = {}

    def log(self, key: str, level: int, msg: str, *args: object, exc_info: BaseException | None = None) -> bool:
        """True when the line was written (with ``exc_info``'s traceback when given)."""
        now = self.clock()
        w = self._windows.get(key)
        if w is not None and now - w.last < self.interval:
            w.held += 1
            return False
        held = w.held if w is not None else 0
        if w is None and len(self._windows) >= self.max_keys:  # bounded memory whatever the keys
            self._windows.pop(next(iter(self._windows)))
        self._windows[key] = _Window(now)
        if held:
            msg = f"{msg} ({held} more like this in the last {self.interval:g}s not logged)"
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True


class ProblemLog:
    """State of one dependency for the log: ``failing(kind, detail)`` on every failed attempt,
    ``ok()`` on every success.

    A line is written when a problem starts, when its kind changes, and while it lasts after
    ``first_repeat`` seconds, then twice that, ... up to ``max_repeat``; ``ok()`` after a problem
    writes one "recovered" line.  ``problem`` / ``since`` / ``failures`` describe the current state
    (for a health endpoint).
    """

    def __init__(self, logger: logging.Logger, what: str, *, first_repeat: float = 60.0,
                 max_repeat: float = 3600.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.logger = logger
        self.what = what
        self.first_repeat = first_repeat
        self.max_repeat = max_repeat
        self.clock = clock
        self.problem: str | None = None  # the kind of the current problem, None when fine
        self.detail = ""
        self.since: float | None = None
        self.failures = 0
        self._next = 0.0
        self._gap = first_repeat

    def failing(self, kind: str, detail: str) -> bool:
        """Record a failed attempt; True when it was logged."""
        now = self.clock()
        self.failures += 1
        self.detail = detail
        if kind != self.problem:
            changed = self.problem is not None
            self.problem, self.since, self._gap = kind, (self.since if changed else now), self.first_repeat
            self._next = now + self._gap
            self.logger.warning("%s: %s (%s)%s", self.what, detail, kind,
                                "; the problem changed" if changed else "")
            return True
        if now >= self._next:
            self._gap = min(self._gap * 2, self.max_repeat)
            self._next = now + self._gap
            self.logger.warning("%s: still failing after %d attempts over %.0fs: %s (%s); next report in %.0fs "
                                "unless it changes", self.what, self.failures, now - (self.since or now), detail,
                                kind, self._gap)
            return True
        return False

    def ok(self) -> bool:
        """Record a success; True when a recovery was logged."""
        if self.problem is None:
            return False
        now = self.clock()
        self.logger.info("%s: recovered after %d failed attempts over %.0fs", self.what, self.failures,
                         now - (self.since or now))
        self.problem, self.detail, self.since, self.failures = None, "", None, 0
        return True
