"""Events are queued per tenant with a fair share: one namespace flooding the Event queue neither crowds
out nor delays the others' Events (the real EventSink and kubernetes-asyncio against the fake API server)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from autoscaler.act.events import EventSink, ObjectRef
from autoscaler.controller.counters import ControllerCounters


def ref(namespace: str, name: str) -> ObjectRef:
    return ObjectRef("ray.io/v1", "RayCluster", namespace, name)


async def test_a_flooding_namespace_neither_crowds_out_nor_delays_the_others(fake_api, kube_client):
    for ns in ("team-x", "team-a", "team-b"):
        fake_api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    registry = CollectorRegistry()
    sink = EventSink(kube_client, ControllerCounters(registry), maxsize=100)
    for i in range(1000):  # one tenant's objects flood the queue before anything is sent
        sink.post(ref("team-x", f"rc-{i}"), "Normal", "Flood", f"event {i}", 1.0)
    assert sink.queued == {"team-x": 100} and sink.dropped == 900
    for i in range(10):
        sink.post(ref("team-a", f"a-{i}"), "Normal", "Quiet", f"event {i}", 2.0)
        sink.post(ref("team-b", f"b-{i}"), "Normal", "Quiet", f"event {i}", 2.0)
    # the quiet tenants hold less than their share: each of their Events took the place of a flood Event
    assert sink.queued == {"team-x": 80, "team-a": 10, "team-b": 10} and sink.dropped == 920
    fake_api.clear_requests()
    await sink.drain(30.0)
    order = [r.namespace for r in fake_api.requests if r.resource == "events" and r.method == "POST"]
    assert len(order) == 100
    assert order[:30].count("team-a") == 10 and order[:30].count("team-b") == 10  # served in turn, not last
    assert len(fake_api.list("v1", "Event", "team-a")) == len(fake_api.list("v1", "Event", "team-b")) == 10
    assert registry.get_sample_value("queuepilot_write_errors_total",
                                     {"resource": "events", "kind": "dropped"}) == 920
    await sink.close()


async def test_a_namespace_at_its_share_cannot_take_more(fake_api, kube_client):
    sink = EventSink(kube_client, None, maxsize=10)
    for i in range(5):
        sink.post(ref("team-a", f"a-{i}"), "Normal", "R", str(i), 1.0)
        sink.post(ref("team-b", f"b-{i}"), "Normal", "R", str(i), 1.0)
    sink.post(ref("team-a", "a-late"), "Normal", "R", "late", 1.0)  # full, and team-a holds its share (5 of 10)
    assert sink.queued == {"team-a": 5, "team-b": 5} and sink.dropped == 1
    await sink.close()
