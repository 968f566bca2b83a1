"""The guard's classification and schedule, with the kubernetes-asyncio exception type the client
raises and the controller's own counters."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from autoscaler.act.guard import BackoffPolicy, WriteGuard, WriteKey, retry_after
from autoscaler.controller.counters import ControllerCounters

KEY = WriteKey("workloads/status", "kueue.x-k8s.io/v1beta2", "Workload", "team-a", "w", "uid-w")
NOW = 1_000_000.0


def api_error(status: int, headers: dict[str, str] | None = None) -> ApiException:
    exc = ApiException(status=status, reason="refused")
    exc.headers = headers
    exc.body = '{"kind":"Status","message":"spec.x: Invalid value"}'
    return exc


async def fail_with(guard: WriteGuard, exc: BaseException, now: float = NOW, key: WriteKey = KEY):
    async def request() -> None:
        raise exc

    return await guard.call(key, request, now)


@pytest.mark.parametrize(("status", "lo", "hi"), [
    (422, 5.0, 10.0), (403, 5.0, 10.0), (400, 5.0, 10.0),  # refused: 10 s less up to half
    (500, 0.5, 1.0), (503, 0.5, 1.0),  # transient: 1 s less up to half
])
async def test_first_delay_by_kind(status, lo, hi):
    guard = WriteGuard(rng=random.Random(3))
    failure = await fail_with(guard, api_error(status))
    assert failure.backoff is not None and lo <= failure.backoff <= hi
    assert guard.blocked(KEY, NOW + failure.backoff - 0.01) is not None
    assert guard.blocked(KEY, NOW + failure.backoff) is None


@pytest.mark.parametrize("status", [409, 404])
async def test_conflict_and_gone_are_not_backed_off(status):
    guard = WriteGuard()
    failure = await fail_with(guard, api_error(status))
    assert failure.backoff is None and guard.blocked(KEY, NOW) is None and guard.in_backoff() == 0


async def test_exponential_up_to_the_cap_and_timeouts_are_transient():
    guard = WriteGuard(policy=BackoffPolicy(jitter=0.0, transient_cap=8.0))
    delays = [(await fail_with(guard, TimeoutError())).backoff for _ in range(6)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert (await fail_with(guard, ConnectionRefusedError())).kind == "connection"


async def test_retry_after_in_seconds_and_as_a_date():
    assert retry_after(api_error(429, {"Retry-After": "30"}), NOW) == 30.0
    date = format_datetime(datetime.fromtimestamp(NOW + 120, UTC), usegmt=True)
    assert retry_after(api_error(429, {"Retry-After": date}), NOW) == pytest.approx(120.0)
    assert retry_after(api_error(429, {"Retry-After": "soon"}), NOW) is None
    assert retry_after(api_error(429), NOW) is None
    guard = WriteGuard(rng=random.Random(1))
    failure = await fail_with(guard, api_error(429, {"Retry-After": "45"}))
    assert failure.backoff is not None and 45.0 <= failure.backoff <= 49.5


async def test_counts_warns_once_per_streak_and_forgets_objects_never_tried_again():
    registry = CollectorRegistry()
    counters = ControllerCounters(registry)
    warned: list[str] = []
    guard = WriteGuard(counters, BackoffPolicy(warn_after=2), random.Random(0),
                       on_failing=lambda key, message, now: warned.append(message))
    other = WriteKey("rayclusters", "ray.io/v1", "RayCluster", "team-a", "rc")
    for i in range(4):
        await fail_with(guard, api_error(422), NOW + 1000 * i)
    await fail_with(guard, api_error(500), NOW, key=other)
    assert registry.get_sample_value("queuepilot_write_errors_total",
                                     {"resource": "workloads/status", "kind": "invalid"}) == 4
    assert len(warned) == 1 and "2 failures in a row" in warned[0] and "spec.x: Invalid value" in warned[0]
    assert registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 1
    guard.succeeded(KEY, "patch")
    assert registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "workloads/status"}) == 0
    await fail_with(guard, api_error(422), NOW + 5000)
    await fail_with(guard, api_error(422), NOW + 6000)
    assert len(warned) == 2  # a new streak warns again
    # the RayCluster is never written again (deleted): dropped an hour past its backoff
    assert registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "rayclusters"}) == 1
    guard.blocked(KEY, NOW + 2 * 3600)
    assert registry.get_sample_value("queuepilot_objects_in_write_backoff", {"resource": "rayclusters"}) == 0
