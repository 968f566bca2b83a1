"""Queue pressure: which GPU workloads wait (for quota, or for GPUs with their quota), longest first,
and how much of that presses on one RayCluster (the workloads of other ClusterQueues, or other
namespaces, waiting past a threshold).

``pending_gpu_workloads(snapshot, now)`` is computed once per pass; ``queue_pressure`` answers for any
cluster from its ``WaitingIndex`` in O(log n).  Pure: the scaling policy's step 3 reads it (a
pressured cluster's empty workers go after the shorter idle window, and its floor is dropped).  A
workload's wait is the one its owner sees (``WorkloadState.pending_since``: from its creation, or from
the eviction that took an admission away), so a workload the admission check keeps Retrying, which
Kueue requeues every few minutes, presses harder the longer it starves; so does one the check keeps
waiting with its quota (``admission.capacity_wait``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import overload

from autoscaler.core.snapshot import ClusterSnapshot, RayClusterState, WorkloadState

__all__ = ["PressureIndex", "Waiting", "WaitingIndex", "pending_gpu_workloads", "pressure_of", "queue_pressure",
           "waiting_candidates"]

Waiting = tuple[float, WorkloadState]  # (seconds waited, workload)


class _Group:
    """The waiting workloads of one ClusterQueue (or namespace), in the global order."""

    __slots__ = ("cum_gpus", "neg_waits")

    def __init__(self) -> None:
        self.neg_waits: list[float] = []  # -wait, ascending
        self.cum_gpus: list[int] = [0]  # cum_gpus[i]: GPUs of the first i

    def add(self, wait: float, gpus: int) -> None:
        self.neg_waits.append(-wait)
        self.cum_gpus.append(self.cum_gpus[-1] + gpus)

    def longer_than(self, wait_seconds: float) -> tuple[int, int]:
        """(workloads, GPUs) of this group waiting longer than ``wait_seconds``."""
        n = bisect_left(self.neg_waits, -wait_seconds)
        return n, self.cum_gpus[n]


class PressureIndex:
    """Answers ``queue_pressure`` for any cluster in O(log n): prefix sums over the waiting list
    (longest wait first), overall and per ClusterQueue and per namespace, and for each of the two
    groupings the first workload that is not in the first workload's group."""

    __slots__ = ("all", "by_cq", "by_ns", "first_other_cq", "first_other_ns")

    def __init__(self, waiting: Sequence[Waiting]) -> None:
        self.all = _Group()
        self.by_cq: dict[str | None, _Group] = {}
        self.by_ns: dict[str, _Group] = {}
        self.first_other_cq: int | None = None
        self.first_other_ns: int | None = None
        if not waiting:
            return
        first = waiting[0][1]
        for i, (wait, wl) in enumerate(waiting):
            gpus = wl.gpu_demand
            self.all.add(wait, gpus)
            self.by_cq.setdefault(wl.cluster_queue, _Group()).add(wait, gpus)
            self.by_ns.setdefault(wl.namespace, _Group()).add(wait, gpus)
            if self.first_other_cq is None and wl.cluster_queue != first.cluster_queue:
                self.first_other_cq = i
            if self.first_other_ns is None and wl.namespace != first.namespace:
                self.first_other_ns = i


@dataclass(frozen=True, slots=True)
class WaitingIndex(Sequence[Waiting]):
    """The pending GPU workloads without quota as (wait, workload), longest wait first, with the
    ``PressureIndex`` over them, so that ``queue_pressure`` for N clusters costs O(n + N log n)
    instead of O(N x n).  A read-only sequence of its entries."""

    entries: tuple[Waiting, ...]
    pressure_index: PressureIndex = field(compare=False, repr=False)

    @classmethod
    def of(cls, waiting: Sequence[Waiting]) -> WaitingIndex:
        """``waiting`` (sorted longest wait first) with its index; an index is returned as it is."""
        if isinstance(waiting, WaitingIndex):
            return waiting
        entries = tuple(waiting)
        return cls(entries, PressureIndex(entries))

    @overload
    def __getitem__(self, i: int) -> Waiting: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Waiting, ...]: ...

    def __getitem__(self, i: int | slice) -> Waiting | tuple[Waiting, ...]:
        return self.entries[i]

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Waiting]:
        return iter(self.entries)


def pending_gpu_workloads(snapshot: ClusterSnapshot, now: float) -> WaitingIndex:
    """(wait, workload) of every pending GPU workload, longest wait first, with its pressure index;
    computed once per pass (``ScalingContext``)."""
    out = [(now - wl.pending_since, wl) for wl in waiting_candidates(snapshot.workloads)]
    out.sort(key=lambda x: (-x[0], x[1].key))
    return WaitingIndex.of(out)


def waiting_candidates(workloads: Mapping[str, WorkloadState]) -> tuple[WorkloadState, ...]:
    """The Workloads that wait for GPUs: pending (not admitted), some GPU asked for; with or without
    quota reserved (one the admission check keeps Pending waits for GPUs to free with its quota)."""
    return tuple(wl for wl in workloads.values() if wl.pending and wl.gpu_demand > 0)


def queue_pressure(
    snapshot: ClusterSnapshot,
    cluster: RayClusterState,
    wait_seconds: float,
    now: float,
    waiting: Sequence[Waiting] | None = None,
) -> str:
    """A description of other teams waiting (GPU workloads of other ClusterQueues pending longer than
    ``wait_seconds``), or "" when nobody waits.  ``waiting`` must be sorted longest wait first (as
    ``pending_gpu_workloads`` returns it)."""
    return pressure_of(WaitingIndex.of(pending_gpu_workloads(snapshot, now) if waiting is None else waiting),
                     cluster, wait_seconds)


def pressure_of(waiting: WaitingIndex, cluster: RayClusterState, wait_seconds: float) -> str:
    if not waiting:
        return ""
    index = waiting.pressure_index
    # others = the waiting workloads past the threshold that are not in the cluster's own group:
    # its ClusterQueue, or (a cluster outside Kueue) its namespace
    if cluster.cluster_queue is not None:
        own, first_own = index.by_cq.get(cluster.cluster_queue), waiting[0][1].cluster_queue == cluster.cluster_queue
        first_other = index.first_other_cq
    else:
        own, first_own = index.by_ns.get(cluster.namespace), waiting[0][1].namespace == cluster.namespace
        first_other = index.first_other_ns
    count, gpus = index.all.longer_than(wait_seconds)
    if own is not None:
        own_count, own_gpus = own.longer_than(wait_seconds)
        count, gpus = count - own_count, gpus - own_gpus
    if count <= 0:
        return ""
    # the oldest other: the first in the list unless that one is the cluster's own (then the first
    # of another group, which lies inside the threshold because count > 0, so first_other is set)
    age, oldest = waiting[first_other if first_own and first_other is not None else 0]
    return (f"{count} workload(s) of other queues wait for {gpus} GPUs "
            f"(oldest {oldest.key} in {oldest.cluster_queue}, {age / 60:.0f}m)")
