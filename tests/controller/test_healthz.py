"""/healthz follows the watches: a watch that makes no progress within its staleness limit fails the
liveness probe (so the kubelet restarts a controller whose watches cannot recover), and it passes
again once the watch recovers."""

from __future__ import annotations

import asyncio

from tests.controller.harness import http_get, running_controller
from tests.support import objects as o
from tests.support.eventually import eventually


async def test_healthz_fails_while_a_watch_is_stuck_and_recovers(fake_api):
    fake_api.create(o.node("n1"))
    async with running_controller(fake_api) as c:
        await eventually(lambda: c.synced)
        url = f"http://127.0.0.1:{c.port}/healthz"
        assert (await http_get(url))[0] == 200
        for cache in c.caches.values():
            cache.stale_after = 1.0  # the production limit is 45 s; the mechanism is the same
        poisoned = True

        async def poison() -> None:  # a broken proxy answers every node watch with garbage
            while poisoned:
                fake_api.inject_watch_line(b"null", path_contains="/nodes")
                await asyncio.sleep(0.01)

        poisoner = asyncio.create_task(poison())
        try:
            async def failing() -> bool:
                status, body = await http_get(url)
                return status == 503 and "watches not current: nodes" in body

            await eventually(failing, timeout=15)
        finally:
            poisoned = False
            await poisoner
        fake_api.create(o.node("n2"))
        await eventually(lambda: "n2" in c.caches["nodes"].items, timeout=15)

        async def passing() -> bool:
            return (await http_get(url))[0] == 200

        await eventually(passing, timeout=15)
