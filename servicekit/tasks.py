"""Background tasks: stopping a set of them, and running a step periodically under supervision.

- :func:`cancel_tasks` is how every queuepilot component stops its tasks: cancel them all, then
  wait for each to end; an error a task ends with is logged, never raised into the caller's
  shutdown, and a cancellation of the caller itself still propagates.
- :func:`every` runs ``step()`` every ``seconds`` until cancelled: an exception in one step is
  logged (with its traceback at most once a minute per step name) and the next step runs as
  planned, so one bad round never ends the loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from servicekit.logthrottle import ThrottledLog

log = logging.getLogger("queuepilot.tasks")


async def cancel_tasks(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait for each to end, whatever it raises."""
    tasks = list(tasks)
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for t, r in zip(tasks, results, strict=True):
        if isinstance(r, Exception):
            log.warning("task %s ended with %s while stopping: %s", t.get_name(), type(r).__name__, r)


async def every(seconds: float, step: Callable[[], Awaitable[Any]], *, name: str,
                logger: logging.Logger | None = None, throttle: ThrottledLog | None = None) -> None:
    """Run ``step()``, then sleep ``seconds``, forever; a failing step is logged (throttled) and skipped."""
    throttled = throttle or ThrottledLog(logger or log, 60.0)
    while True:
        try:
            await step()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # never let one bad round end the loop
            throttled.log(name, logging.ERROR, "%s failed: %s: %s", name, type(e).__name__, e, exc_info=e)
        await asyncio.sleep(seconds)
