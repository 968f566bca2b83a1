"""Waiting for something a test cannot await directly: poll a check until it holds or a timeout passes.

One way to wait, for every test: ``await eventually(check, what, timeout=...)`` in async tests,
``eventually_sync(...)`` in sync code (fixtures that start a process). ``check`` returns something
truthy when the wait is over, and that value is returned; an exception it raises ends the wait at once
(a process that died is not worth waiting for). At the timeout: AssertionError naming ``what``, the
timeout and the check's last answer.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

DEFAULT_TIMEOUT = 10.0


def _timed_out(what: str, timeout: float, last: Any) -> AssertionError:
    return AssertionError(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})")


async def eventually(
    check: Callable[[], Any],
    what: str = "the condition",
    *,
    timeout: float = DEFAULT_TIMEOUT,  # noqa: ASYNC109 (a deadline on a poll loop, not on one await)
    interval: float = 0.05,
    in_thread: bool = False,
) -> Any:
    """Poll ``check`` (a function, or one returning a coroutine) until it returns something truthy.

    ``in_thread``: call a blocking ``check`` (urllib, subprocess) in a worker thread, so the event loop
    keeps serving whatever the test runs in process meanwhile (exporters a Prometheus scrapes).
    """
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = await asyncio.to_thread(check) if in_thread else check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last)
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], Any], what: str = "the condition", *, timeout: float = DEFAULT_TIMEOUT, interval: float = 0.05
) -> Any:
    """``eventually`` for sync code: blocks the calling thread between polls."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, last)
        time.sleep(interval)
