"""servicekit.tasks: stopping tasks and the supervised periodic step."""

from __future__ import annotations

import asyncio
import logging

import pytest

from servicekit.logthrottle import ThrottledLog
from servicekit.tasks import cancel_tasks, every


async def test_cancel_tasks_ends_every_task_and_logs_errors_without_raising(caplog) -> None:
    async def forever() -> None:
        await asyncio.Event().wait()

    async def fails_on_cancel() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("broken cleanup")

    tasks = [asyncio.create_task(forever()), asyncio.create_task(fails_on_cancel(), name="bad")]
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="queuepilot.tasks"):
        await cancel_tasks(tasks)
    assert all(t.done() for t in tasks)
    assert [r.getMessage() for r in caplog.records] == ["task bad ended with RuntimeError while stopping: broken cleanup"]


async def test_a_cancelled_caller_of_cancel_tasks_stays_cancelled() -> None:
    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.2)

    inner = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    outer = asyncio.create_task(cancel_tasks([inner]))
    await asyncio.sleep(0.05)
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer


async def test_every_survives_failing_steps_and_logs_them_throttled(caplog) -> None:
    calls = []
    fifth = asyncio.Event()

    async def step() -> None:
        calls.append(1)
        if len(calls) == 5:
            fifth.set()
        raise ValueError("bad round")

    clock = [0.0]
    throttle = ThrottledLog(logging.getLogger("test.every"), 60.0, clock=lambda: clock[0])
    with caplog.at_level(logging.ERROR, logger="test.every"):
        task = asyncio.create_task(every(0.001, step, name="poll", throttle=throttle))
        await asyncio.wait_for(fifth.wait(), 10)
        await cancel_tasks([task])
    assert len(calls) >= 5
    assert len(caplog.records) == 1 and caplog.records[0].getMessage() == "poll failed: ValueError: bad round"
