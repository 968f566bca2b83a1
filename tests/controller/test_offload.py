"""Work moved off the event loop for large clusters: the same results inline and in a worker thread.

``context.OFFLOAD_MIN_OBJECTS`` decides; the tests move it to 0 (everything in a thread) or out of
reach (everything inline) and compare, and check which thread did the work, so a test fails when the
work silently stays on the loop or the results differ.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from autoscaler.cluster.source import ClusterObjects
from autoscaler.controller import admission as admission_module
from autoscaler.controller import context as context_module
from autoscaler.controller import scaling as scaling_module
from autoscaler.controller import stall as stall_module
from autoscaler.controller.collector import ControllerCollector
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.context import ControllerContext, Published
from autoscaler.controller.counters import ControllerCounters
from autoscaler.controller.loop import Controller
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.controller.snapshot_builder import BuildConfig, SnapshotBuilder, build_snapshot
from autoscaler.signals import gpu_prometheus
from autoscaler.signals.gpu_prometheus import PrometheusGpuSignal
from tests.controller import scenario
from tests.controller.harness import StaticGpu
from tests.controller.scenario import gpu_reading
from tests.support.http import serve

INLINE = 10**12


def _mutable(objects: ClusterObjects) -> ClusterObjects:
    return ClusterObjects(**{f: dict(getattr(objects, f)) for f in ClusterObjects.__dataclass_fields__})


def _record_threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """Wrap the pure deciders the reconcilers call; note the thread each ran in."""
    seen: dict[str, set[int]] = {}
    for module, name in ((admission_module, "decide_admissions"), (scaling_module, "decide_scaling"),
                         (stall_module, "decide_stalls")):
        real = getattr(module, name)

        def wrapped(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
            seen.setdefault(_name, set()).add(threading.get_ident())
            return _real(*a, **k)

        monkeypatch.setattr(module, name, wrapped)
    return seen


async def _two_passes(threshold: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, dict[str, set[int]]]:
    monkeypatch.setattr(context_module, "OFFLOAD_MIN_OBJECTS", threshold)
    seen = _record_threads(monkeypatch)
    registry = CollectorRegistry()
    ctx = ControllerContext(api_client=None, registry=registry, counters=ControllerCounters(registry), dry_run=True)
    recs = build_reconcilers(ctx)
    now = scenario.NOW
    objs = scenario.cluster_objects(scenario.raw_objects(now))
    results = []
    for t in (now, now + 30):
        snap = build_snapshot(objs, gpu_reading(t), {}, t, BuildConfig(gpu_stale_seconds=60, ray_stale_seconds=60))
        for r in recs:
            await r.reconcile(snap, t)
        adm, sca, sta = recs[0], recs[1], recs[2]
        results.append((
            list(adm.outcomes), adm.ledger, dict(adm.history),
            list(sca.outcomes), dict(sca.history),
            sta.result, list(sta.outcomes), dict(sta.history),
            dict(ctx.published.desired_replicas), dict(ctx.published.idle_gpus), dict(ctx.published.reserved_gpus),
            list(ctx.published.last_decisions),
        ))
    for r in recs:
        await r.close()
    return results, seen


async def test_reconcilers_decide_the_same_in_a_worker_thread_as_inline(monkeypatch):
    inline, seen = await _two_passes(INLINE, monkeypatch)
    seen_inline = {k: set(v) for k, v in seen.items()}  # (the next run's wrappers call these ones)
    threaded, seen_threaded = await _two_passes(0, monkeypatch)
    main = threading.get_ident()
    assert set(seen_inline) == set(seen_threaded) == {"decide_admissions", "decide_scaling", "decide_stalls"}
    assert all(ids == {main} for ids in seen_inline.values())
    assert all(main not in ids for ids in seen_threaded.values()), seen_threaded
    assert inline[0][0] and inline[0][3], "the scenario decides something in both deciders"
    assert threaded == inline


class DictSource:
    """A ``ClusterSource`` over plain dicts the test changes."""

    def __init__(self, objects: ClusterObjects) -> None:
        self.objs = objects
        self.synced = True

    def objects(self) -> ClusterObjects:
        return self.objs

    def observed_at(self, now: float) -> dict[str, float | None]:
        return {"workloads": now}

    def not_synced(self) -> list[str]:
        return []

    def stats(self) -> list[Any]:
        return []

    def ray_targets(self) -> dict[str, Any]:
        return {}

    def runners(self) -> list[Any]:
        return []

    async def wait_synced(self) -> None:
        return None

    def stale(self, now: float) -> list[str]:
        return []


async def test_a_pass_built_in_a_worker_thread_is_of_the_instant_the_pass_started(monkeypatch):
    """While the build runs in its thread the loop applies a watch event; the snapshot does not see it."""
    monkeypatch.setattr(context_module, "OFFLOAD_MIN_OBJECTS", 0)
    now = scenario.NOW
    objs = _mutable(scenario.cluster_objects(scenario.raw_objects(now)))
    reading = gpu_reading(now)
    expected = build_snapshot(objs, reading, {}, now, watch_observed={"workloads": now})
    loop = asyncio.get_running_loop()
    threads = []
    real_build = SnapshotBuilder.build

    def build(self: SnapshotBuilder, *a: Any, **k: Any) -> Any:
        threads.append(threading.get_ident())
        applied = threading.Event()

        def watch_event() -> None:
            objs.workloads.pop("team-a/wl-a1")  # the caches change on the loop during the build
            applied.set()

        loop.call_soon_threadsafe(watch_event)
        assert applied.wait(10)
        return real_build(self, *a, **k)

    monkeypatch.setattr(SnapshotBuilder, "build", build)
    controller = Controller(ControllerConfig(), None, clock=lambda: now, gpu_signal=StaticGpu(reading),
                            build_reconcilers=lambda ctx: [], source=DictSource(objs))
    snap = await controller.run_pass()
    assert threads and threads[0] != threading.get_ident()
    assert "team-a/wl-a1" not in objs.workloads
    assert snap == expected


class Guarded(dict):
    """A published dict that must not be read in place (only copied whole, as ``dict(d)`` does)."""

    def _refuse(self, *a: Any, **k: Any) -> Any:
        raise AssertionError("the collector read a live published dict")

    get = items = keys = values = __getitem__ = __contains__ = _refuse


def test_the_collector_reads_copies_of_the_published_values():
    now = scenario.NOW
    snap = build_snapshot(scenario.cluster_objects(scenario.raw_objects(now)), gpu_reading(now), {}, now)
    published = Published()
    gk = ("team-a", "rc", "gpu")
    published.desired_replicas = Guarded({gk: 3})
    published.idle_gpus = Guarded({gk: 4})
    published.reserved_gpus = Guarded({"h100": 8})
    fams = {f.name: f for f in ControllerCollector(lambda: snap, published, lambda: True).collect()}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert samples[("queuepilot_admission_reserved_gpus", (("flavor", "h100"),))] == 8.0
    desired = [v for (name, labels), v in samples.items()
               if name == "queuepilot_raycluster_workers" and ("kind", "desired") in labels]
    assert desired == [3.0]


def _vector(series: list[tuple[dict[str, str], float]]) -> dict[str, Any]:
    return {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1.0, str(v)]} for labels, v in series]}}


@pytest.fixture
async def prometheus_api():
    state = {"garbage": False}
    gpus = [{"Hostname": f"n{i // 8}", "UUID": f"GPU-{i}", "gpu": str(i % 8), "modelName": "H100"} for i in range(64)]
    answers = {
        "queuepilot_gpu_healthy": _vector([(g, 1.0) for g in gpus]),
        "queuepilot_gpu_allocated": _vector([(g, float(i % 2)) for i, g in enumerate(gpus)]),
        "DCGM_FI_DEV_GPU_UTIL": _vector([({**g, "pod": f"p{i}", "namespace": "ns"}, float(i)) for i, g in enumerate(gpus)]),
        "DCGM_FI_DEV_FB_USED": _vector([(g, 1024.0) for g in gpus]),
    }

    async def query(request: web.Request) -> web.Response:
        if state["garbage"]:
            return web.Response(text="{not json", content_type="application/json")
        return web.json_response(answers.get(request.query["query"], _vector([])))

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    async with serve(app) as url:
        yield url, state


async def test_prometheus_answers_decoded_in_a_thread_read_the_same(prometheus_api, monkeypatch):
    url, state = prometheus_api
    main = threading.get_ident()
    decoded_in: list[int] = []
    real = gpu_prometheus._decode_all

    def decode_all(answers: Any) -> Any:
        decoded_in.append(threading.get_ident())
        return real(answers)

    monkeypatch.setattr(gpu_prometheus, "_decode_all", decode_all)
    readings = []
    errors: list[str] = []
    async with aiohttp.ClientSession() as session:
        for limit in (10**12, 0):
            monkeypatch.setattr(gpu_prometheus, "PARSE_IN_THREAD_BYTES", limit)
            sig = PrometheusGpuSignal(session, url, errors.append)
            await sig.poll(now=5.0)
            readings.append(sig.reading)
        state["garbage"] = True
        await sig.poll(now=6.0)  # a bad answer decoded in the thread: counted, the last reading kept
    assert decoded_in[0] == main and decoded_in[1] != main and decoded_in[2] != main
    assert len(readings[0].gpus) == 64 and readings[1] == readings[0]
    assert errors == ["bad_response"] and sig.reading == readings[1]
    assert "not JSON" in (sig.last_error or "")
