"""A watch that meets 410 Gone relists after a growing delay, as client-go's reflector does: against a
server that answers 410 to every watch the cache made ~470 LISTs a second; now a handful a minute.
Counted with an injected clock and sleep against the fake API server, through the real client."""

from __future__ import annotations

import random

from autoscaler.cluster.cache import RelistBackoff, WatchCache
from autoscaler.cluster.client import make_api_client
from autoscaler.cluster.resources import NODES
from autoscaler.cluster.views import node_view
from tests.support import objects as o


class Reported:
    def __init__(self) -> None:
        self.restarts: list[str] = []
        self.errors: list[tuple[str, str]] = []

    def watch_restarted(self, resource: str) -> None:
        self.restarts.append(resource)

    def source_error(self, source: str, kind: str) -> None:
        self.errors.append((source, kind))


def test_the_relist_delay_grows_as_the_reflectors_and_resets_after_two_quiet_minutes() -> None:
    b = RelistBackoff(rng=random.Random(1))
    delays = [b.next_delay(float(t)) for t in range(8)]  # a 410 every second
    for d, base in zip(delays, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0], strict=True):
        assert base <= d < 2 * base
    assert 0.8 <= b.next_delay(8.0 + 121.0) < 1.6  # no 410 for more than two minutes: from the start again


async def test_a_server_that_answers_410_to_every_watch_gets_a_few_relists_a_minute(fake_api) -> None:
    fake_api.create(o.node("n1"))
    fake_api.fail_next(1_000_000, status=410, verb="watch")
    clock = [1000.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    api = await make_api_client(str(fake_api.kubeconfig_path))
    reported = Reported()
    try:
        cache = WatchCache(api, NODES, node_view, reported, clock=lambda: clock[0], sleep=sleep,
                           relist_backoff=RelistBackoff(rng=random.Random(3)))
        fake_api.clear_requests()
        while clock[0] < 1000.0 + 300.0:  # five minutes of the injected clock
            await cache.step()
        lists = [r for r in fake_api.requests if r.verb == "list" and r.resource == "nodes"]
        watches = [r for r in fake_api.requests if r.verb == "watch" and r.resource == "nodes"]
        assert len(watches) == len(lists) == len(slept)  # each 410 is one list, one watch, one wait
        first_minute = sum(1 for i in range(len(slept)) if sum(slept[:i]) < 60.0)
        assert first_minute <= 7  # 0.8, 1.6, 3.2, 6.4, 12.8, 25.6 s (each up to twice that) ...
        assert len(lists) <= 16  # ... then one per 30-60 s
        assert all(s >= 30.0 for s in slept[6:])
        assert cache.synced and set(cache.items) == {"n1"}  # every relist still brought the cache up to date
        assert len(reported.restarts) == len(lists) and reported.errors == []  # 410 is routine: a restart only
    finally:
        await api.close()
