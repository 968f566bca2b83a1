"""queue_pressure's index (built once per pass, shared by every cluster) counts exactly the other
teams' workloads a direct scan counts: pending GPU workloads of other groups (ClusterQueue, or
namespace for a cluster outside Kueue) waiting longer than the threshold."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.policy.scaling import pending_gpu_workloads, queue_pressure
from tests.decisions import builders as b

NOW = b.NOW
entry = st.tuples(
    st.sampled_from(["team-a", "team-b", "team-c"]),  # namespace
    st.sampled_from(["cq-a", "cq-b", "cq-c"]),  # cluster queue
    st.integers(min_value=0, max_value=7200),  # wait
    st.integers(min_value=1, max_value=8),  # GPUs
)


def scan(waiting, own_cq: str | None, own_ns: str, threshold: float) -> tuple[int, int]:
    """The direct O(n) count, the definition the index must agree with."""
    others = [
        (w, wl) for w, wl in waiting
        if w > threshold and ((wl.cluster_queue != own_cq) if own_cq is not None else (wl.namespace != own_ns))
    ]
    return len(others), sum(wl.gpu_demand for _, wl in others)


@settings(max_examples=150, deadline=None)
@given(
    entries=st.lists(entry, max_size=25),
    own_cq=st.sampled_from([None, "cq-a", "cq-b"]),
    own_ns=st.sampled_from(["team-a", "team-b"]),
    threshold=st.integers(min_value=0, max_value=7200),
)
def test_index_agrees_with_a_direct_scan(entries, own_cq, own_ns, threshold) -> None:
    workloads = [
        b.workload(f"w{i}", (("main", 1, gpus),), ns=ns, cq=cq, quota_reserved=False, created=NOW - wait)
        for i, (ns, cq, wait, gpus) in enumerate(entries)
    ]
    snap = b.snapshot(workloads=workloads)
    cluster = b.ray_cluster([b.group()], ns=own_ns, cq=own_cq)
    waiting = pending_gpu_workloads(snap, NOW)
    count, gpus = scan(waiting, own_cq, own_ns, threshold)
    text = queue_pressure(snap, cluster, threshold, NOW, waiting=waiting)
    if count == 0:
        assert text == ""
    else:
        m = re.match(r"(\d+) workload\(s\) of other queues wait for (\d+) GPUs", text)
        assert m, text
        assert (int(m.group(1)), int(m.group(2))) == (count, gpus)
    # without the shared index (computed on the spot) the answer is the same
    assert queue_pressure(snap, cluster, threshold, NOW) == text


def test_a_workload_presses_for_its_owners_wait_not_since_its_last_requeue() -> None:
    """A workload the admission check keeps Retrying is requeued by Kueue every few minutes; what
    counts is how long its owner has waited (since creation), so it presses harder as it starves.
    One admitted and then evicted has waited since that eviction."""
    from dataclasses import replace

    retried = replace(b.workload("retried", (("main", 1, 8),), ns="team-b", cq="cq-b", quota_reserved=False,
                                 created=NOW - 3600), requeued_at=NOW - 60)
    evicted = replace(b.workload("evicted", (("main", 1, 4),), ns="team-c", cq="cq-c", quota_reserved=False,
                                 created=NOW - 3600), admission_lost_at=NOW - 60)
    snap = b.snapshot(workloads=[retried, evicted])
    cluster = b.ray_cluster([b.group()], ns="team-a", cq="cq-a")
    assert queue_pressure(snap, cluster, 300.0, NOW).startswith("1 workload(s) of other queues wait for 8 GPUs")
    assert queue_pressure(snap, cluster, 30.0, NOW).startswith("2 workload(s) of other queues wait for 12 GPUs")


def test_a_workload_waiting_with_its_quota_presses_and_an_admitted_one_does_not() -> None:
    """The admission check keeps a workload whose GPUs are not free Pending with its quota
    (``capacity_wait``): it still waits for GPUs, so it presses; once admitted it no longer does."""
    waiting = b.workload("waiting", (("main", 1, 8),), ns="team-b", cq="cq-b", quota_reserved=True,
                         created=NOW - 3600)
    admitted = b.workload("admitted", (("main", 1, 4),), ns="team-c", cq="cq-c", quota_reserved=True,
                          admitted=True, created=NOW - 3600)
    no_gpu = b.workload("cpu", (("main", 1, 0),), ns="team-c", cq="cq-c", quota_reserved=False, created=NOW - 3600)
    snap = b.snapshot(workloads=[waiting, admitted, no_gpu])
    cluster = b.ray_cluster([b.group()], ns="team-a", cq="cq-a")
    assert queue_pressure(snap, cluster, 300.0, NOW).startswith("1 workload(s) of other queues wait for 8 GPUs")
    assert [wl.name for _, wl in pending_gpu_workloads(snap, NOW)] == ["waiting"]
