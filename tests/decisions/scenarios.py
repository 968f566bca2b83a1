"""What the decision scenarios on the fake API server share (test_scenarios, test_reclaim_scenarios,
test_stall_scenarios): time zero, the base Kueue world, reading a counter and the Events, the RBAC check."""

from __future__ import annotations

from autoscaler.rbac import CONTROLLER_API_CALLS
from tests.decisions import kube_world as k

T0 = 100_000.0


def base_world(world, nodes=("n0", "n1")):
    world.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.cluster_queue("cq-b", {"a100": 64}),
              k.local_queue("lq-a", "team-a", "cq-a"), k.local_queue("lq-b", "team-b", "cq-b"), k.admission_check(),
              *(k.node(n) for n in nodes))


def sample(registry, name, labels):
    return registry.get_sample_value(name, labels) or 0.0


def events(fake_api, ns="team-a"):
    return [(e["involvedObject"]["name"], e["type"], e["reason"], e["message"]) for e in fake_api.list("v1", "Event", ns)]


def assert_rbac(fake_api):
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
