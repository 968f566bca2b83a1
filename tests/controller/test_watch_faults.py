"""Watch caches under dropped watches, 410 Gone, 429 and 500: they converge to the store, no lost objects,
no ghosts; malformed objects are counted once and survived."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from autoscaler.cluster.cache import Backoff
from tests.controller.harness import running_controller
from tests.support import objects as o
from tests.support.eventually import eventually
from tests.support.reporters import RecordingReporter

KINDS = {  # cache name -> (apiVersion, kind)
    "workloads": (o.KUEUE, "Workload"),
    "pods": ("v1", "Pod"),
    "nodes": ("v1", "Node"),
    "rayclusters": (o.RAY, "RayCluster"),
}


def store_versions(fake_api, cache: str) -> dict[str, str]:
    api_version, kind = KINDS[cache]
    out = {}
    for obj in fake_api.list(api_version, kind):
        md = obj["metadata"]
        if kind == "Pod" and obj.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        key = f"{md['namespace']}/{md['name']}" if md.get("namespace") else md["name"]
        out[key] = md["resourceVersion"]
    return out


def converged(fake_api, controller) -> bool:
    return all(store_versions(fake_api, name) == controller.caches[name]._rvs for name in KINDS)


def watching(controller) -> bool:
    """Every cache has its watch stream open: a drop now cuts a stream (and counts a restart). A cache
    matches the store once its relist is done, before its next watch is open, so converged() alone
    does not say a drop will find a stream to cut."""
    return all(controller.caches[name].connected for name in KINDS)


def restarts(controller, resource: str) -> float:
    return controller.counters.watch_restarts.labels(resource=resource)._value.get()


async def test_caches_converge_under_faults(fake_api):
    fake_api.create(o.namespace("team-a"))
    for i in range(5):
        fake_api.create(o.workload(f"wl-{i}"))
        fake_api.create(o.node(f"n{i}"))
    async with running_controller(fake_api) as c:
        for cache in c.caches.values():  # keep retries quick in the test
            cache._backoff = Backoff(base=0.05, cap=0.5)
        await eventually(lambda: c.synced)
        await eventually(lambda: converged(fake_api, c) and watching(c))

        # 1. dropped watches (connection aborted): resume from the last resourceVersion
        fake_api.drop_watches()
        fake_api.create(o.workload("wl-10"))
        fake_api.delete(o.KUEUE, "Workload", "wl-0", "team-a")
        fake_api.create(o.ray_worker_pod("rc", "gpu", "p1", node="n1"))
        await eventually(lambda: converged(fake_api, c))
        assert restarts(c, "workloads") >= 1

        # 2. history compacted while the watches are down: 410 Gone -> relist; deletions seen (no ghosts)
        before = restarts(c, "workloads")
        fake_api.drop_watches()
        fake_api.delete(o.KUEUE, "Workload", "wl-1", "team-a")
        fake_api.delete("v1", "Node", "n2")
        fake_api.create(o.workload("wl-11"))
        fake_api.compact()
        await eventually(lambda: converged(fake_api, c))
        assert restarts(c, "workloads") > before
        assert "team-a/wl-1" not in c.caches["workloads"].items and "n2" not in c.caches["nodes"].items

        # 3. throttled (429 + Retry-After) and 4. server errors (500) on the reconnects
        await eventually(lambda: watching(c))
        before = restarts(c, "workloads")
        # verb="watch": the controller also writes Workloads; a 429 on its PATCH is not a watch restart
        fake_api.fail_next(2, status=429, retry_after=1, path_contains="/workloads", verb="watch")
        fake_api.drop_watches()
        fake_api.create(o.workload("wl-12"))
        await eventually(lambda: converged(fake_api, c), timeout=15)
        assert restarts(c, "workloads") >= before + 3  # the drop and both 429s
        await eventually(lambda: watching(c))
        before = restarts(c, "nodes")
        fake_api.fail_next(3, status=500, path_contains="/nodes", verb="watch")
        fake_api.drop_watches()
        fake_api.create(o.node("n9"))
        fake_api.delete(o.KUEUE, "Workload", "wl-12", "team-a")
        await eventually(lambda: converged(fake_api, c), timeout=15)
        assert restarts(c, "nodes") >= before + 4

        # streams the server ends at the timeout we asked for are routine, not restarts
        nodes = c.caches["nodes"]
        nodes._watch_timeout = 1
        fake_api.drop_watches(graceful=True)  # cut early: counted
        await asyncio.sleep(0.3)
        await eventually(lambda: nodes.connected)
        before = restarts(c, "nodes")
        await asyncio.sleep(2.5)  # two 1-second streams end and are resumed
        fake_api.create(o.node("n10"))
        await eventually(lambda: converged(fake_api, c))
        assert restarts(c, "nodes") == before
        assert set(c.caches["workloads"].items) == {f"team-a/wl-{i}" for i in (2, 3, 4, 10, 11)}


async def test_malformed_objects_are_counted_logged_once_and_survived(fake_api, caplog):
    fake_api.create(o.namespace("team-a"))
    fake_api.create(o.workload("good"))
    bad = o.workload("bad")
    bad["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][o.GPU] = "eight"
    fake_api.create(bad, validate=False)
    caplog.set_level(logging.WARNING, logger="queuepilot.watch")
    async with running_controller(fake_api) as c:
        await eventually(lambda: c.synced)
        cache = c.caches["workloads"]
        assert set(cache.items) == {"team-a/good"}
        errors = c.counters.source_errors.labels(source="watch/workloads", kind="malformed")
        assert errors._value.get() == 1
        # a relist sees the same bad version again: neither counted nor logged again
        fake_api.compact()
        fake_api.drop_watches()
        fake_api.create(o.workload("good-2"))
        await eventually(lambda: "team-a/good-2" in cache.items)
        assert errors._value.get() == 1
        lines = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
        assert len(lines) == 1 and "team-a/bad" in lines[0] and "eight" in lines[0]
        # fixed by its owner: it joins the cache
        fixed = fake_api.get(o.KUEUE, "Workload", "bad", "team-a")
        fixed["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"][o.GPU] = "8"
        fake_api.replace(fixed, validate=False)
        await eventually(lambda: "team-a/bad" in cache.items)
        assert cache.items["team-a/bad"].gpu_demand == 8
        assert c.snapshot is not None  # passes kept running


def test_backoff_grows_jittered_capped_and_honours_retry_after():
    import random

    b = Backoff(base=0.5, cap=4.0, rng=random.Random(1))
    delays = [b.next_delay() for _ in range(6)]
    for n, d in enumerate(delays):
        top = min(4.0, 0.5 * 2**n)
        assert top / 2 <= d <= top
    assert b.next_delay(retry_after=30) == 30  # the server's Retry-After wins when longer
    b.reset()
    assert b.next_delay() <= 0.5


async def test_a_cache_on_its_own_with_the_iteration_hook(fake_api):
    """WatchCache.run(iterations=n): n list-or-watch steps, then it returns (no infinite loop in tests)."""
    from prometheus_client import CollectorRegistry

    from autoscaler.cluster.cache import WatchCache
    from autoscaler.cluster.client import make_api_client
    from autoscaler.cluster.resources import NODES
    from autoscaler.cluster.views import node_view
    from autoscaler.controller.counters import ControllerCounters

    fake_api.create(o.node("n1"))
    changes: list[str] = []
    api = await make_api_client(str(fake_api.kubeconfig_path))
    try:
        cache = WatchCache(api, NODES, node_view, ControllerCounters(CollectorRegistry()),
                           on_change=changes.append, watch_timeout_seconds=1)
        task = asyncio.create_task(cache.run(iterations=2))  # list + a 1 s watch, then one more watch
        await eventually(lambda: cache.connected)
        fake_api.create(o.node("n2"))
        await asyncio.wait_for(task, 10)
        assert cache.synced and set(cache.items) == {"n1", "n2"}
        assert changes == ["nodes", "nodes"]  # the initial sync, then n2
        assert cache.items["n2"].gpu_allocatable == 8
    finally:
        await api.close()


# ------------------------------------------------------------------------------ supervised watches
@contextlib.asynccontextmanager
async def node_cache(fake_api, **kwargs):
    """A nodes WatchCache running against the fake API server through the real client."""
    from autoscaler.cluster.cache import WatchCache
    from autoscaler.cluster.client import make_api_client
    from autoscaler.cluster.resources import NODES
    from autoscaler.cluster.views import node_view

    api = await make_api_client(str(fake_api.kubeconfig_path))
    reported = RecordingReporter()
    cache = WatchCache(api, NODES, node_view, reported, backoff=Backoff(base=0.05, cap=0.2), **kwargs)
    task = asyncio.create_task(cache.run())
    try:
        await eventually(lambda: cache.synced and cache.connected)
        yield cache, reported, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


@pytest.mark.parametrize(("line", "end"), [
    (b"null", False),  # a broken proxy: json.loads gives None
    (b"<html><body>502 Bad Gateway</body></html>", False),
    (b'{"type": "ADDED", "object": {"metadata": {"name": "n', False),  # truncated JSON
    (b'{"type": "ADDED", "object": {"metadata": {"name": "n', True),  # cut mid-event, connection gone
    (b'{"type": "ADDED", "object": "not an object"}', False),
    (b"[1, 2, 3]", False),
])
async def test_a_malformed_watch_line_restarts_the_watch_once(fake_api, caplog, line, end):
    fake_api.create(o.node("n1"))
    caplog.set_level(logging.INFO, logger="queuepilot.watch")
    async with node_cache(fake_api) as (cache, reported, task):
        assert fake_api.inject_watch_line(line, path_contains="/nodes", end=end) == 1
        await eventually(lambda: reported.restarts)
        fake_api.create(o.node("n2"))  # the cache goes on: resumed from the last resourceVersion
        await eventually(lambda: set(cache.items) == {"n1", "n2"})
        assert not task.done()
        assert reported.restarts == ["nodes"]
        kind = "connection" if end else "malformed_stream"
        assert reported.errors == [("watch/nodes", kind)]
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 1 and "watch nodes" in warnings[0]
        await eventually(lambda: any("recovered" in r.getMessage() for r in caplog.records))


async def test_a_watch_that_keeps_failing_turns_unhealthy_and_recovers(fake_api, caplog):
    """Garbage on every connection: the watch keeps retrying with backoff, logs once, and its staleness
    grows past the limit (so /healthz fails); once the stream is good again it is healthy."""
    import time

    fake_api.create(o.node("n1"))
    caplog.set_level(logging.WARNING, logger="queuepilot.watch")
    async with node_cache(fake_api, stale_after=1.0) as (cache, reported, task):
        assert cache.healthy(time.time()) and cache.stale_for(time.time()) == 0
        poisoned = True

        async def poison() -> None:
            while poisoned:
                fake_api.inject_watch_line(b"null", path_contains="/nodes")
                await asyncio.sleep(0.01)

        poisoner = asyncio.create_task(poison())
        try:
            await eventually(lambda: not cache.healthy(time.time()), timeout=10)
            assert cache.stale_for(time.time()) > 1.0
            assert len(reported.restarts) >= 3 and not task.done()
            assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
        finally:
            poisoned = False
            await poisoner
        fake_api.create(o.node("n2"))
        await eventually(lambda: "n2" in cache.items and cache.healthy(time.time()))


async def test_a_parser_bug_skips_the_object_not_the_watch(fake_api):
    """An exception no parser foresaw (here RuntimeError) is a malformed object, counted once."""
    from autoscaler.cluster.cache import WatchCache
    from autoscaler.cluster.client import make_api_client
    from autoscaler.cluster.resources import NODES
    from autoscaler.cluster.views import node_view

    def fragile(obj):
        if obj["metadata"]["name"] == "odd":
            raise RuntimeError("bug")
        return node_view(obj)

    fake_api.create(o.node("n1"))
    fake_api.create(o.node("odd"))
    api = await make_api_client(str(fake_api.kubeconfig_path))
    reported = RecordingReporter()
    cache = WatchCache(api, NODES, fragile, reported, backoff=Backoff(base=0.05, cap=0.2))
    task = asyncio.create_task(cache.run())
    try:
        await eventually(lambda: cache.connected)
        fake_api.create(o.node("n2"))
        await eventually(lambda: set(cache.items) == {"n1", "n2"})
        assert reported.errors == [("watch/nodes", "malformed")] and reported.restarts == []
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


async def test_an_unexpected_exception_in_a_step_is_survived(fake_api, caplog):
    """Whatever a step raises, run() goes on: counted as kind "exception", logged once with its traceback."""
    fake_api.create(o.node("n1"))
    caplog.set_level(logging.WARNING, logger="queuepilot.watch")
    async with node_cache(fake_api) as (cache, reported, task):
        real_event = cache._event
        calls = {"n": 0}

        def flaky(ev):
            calls["n"] += 1
            if calls["n"] <= 2:
                raise RuntimeError("a bug in event handling")
            return real_event(ev)

        cache._event = flaky
        fake_api.create(o.node("n2"))
        await eventually(lambda: "n2" in cache.items)
        assert not task.done()
        assert ("watch/nodes", "exception") in reported.errors
        tracebacks = [r for r in caplog.records if r.exc_info]
        assert len(tracebacks) == 1
