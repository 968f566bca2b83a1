"""The GPU-capacity AdmissionCheck policy: Ready, Retry or Rejected for each workload our check holds.

``decide_admissions(snapshot, ledger, history, config, now)`` decides every Workload that has
``QuotaReserved=True``, is active, not evicted, not finished, and whose entry for a check of *our*
controller (``snapshot.admission_checks[name].controller_name == config.controller_name``) is
``Pending``.  Order: priority (high first), then QuotaReserved time (oldest first), then key — each
``Ready`` reserves its GPUs in the ledger before the next workload is looked at, so two workloads
are never promised the same GPUs.  Call ``ledger.release(...)`` on the previous ledger first.

Per workload (GPU pod sets grouped by the flavor Kueue assigned to their ``nvidia.com/gpu``):

1. no pod set requests GPUs -> ``Ready`` ``NoGpusRequested``;
2. a GPU pod set has no flavor, or an unknown one -> ``Retry`` ``FlavorNotAssigned``; the flavor
   selects no node -> ``Retry`` ``FlavorHasNoNodes`` (nodes may still be coming);
3. **never fits** (certain, independent of health and load, so not affected by stale signals):
   a pod needs more GPUs than the largest node of its flavor (matching its node selector) has
   allocatable -> ``Rejected`` ``PodLargerThanNode``; the workload needs more GPUs than all nodes
   of the flavor have allocatable -> ``Rejected`` ``ExceedsFlavorCapacity``;
4. a workload already holding a reservation (we said Ready, Kueue has not caught up) keeps it;
5. GPU signal stale: ``fail-open`` -> ``Ready`` ``ReadyGpuSignalStale`` (Kueue's quota decides,
   no reservation is made); ``hold`` -> state ``None`` (entry left ``Pending``; the message says
   why) ``GpuSignalStale``;
6. best-fit-decreasing packing of the pods onto free, healthy, unpromised GPUs of the flavor's
   Ready, schedulable nodes (``packing.py``) -> ``Ready`` ``CapacityConfirmed`` with the placement, or
   else — ``InsufficientGpus`` when the free total is short, ``Fragmented`` when the total is
   enough but the blocks are not — state ``None`` (the entry stays ``Pending``, the quota stays
   reserved, the workload is decided again at every pass) until ``capacity_wait`` has passed since
   its quota reservation, then ``Retry`` with ``requeueAfterSeconds = min(cap, base * 2^attempt)``;
   after ``max_retries`` Retries -> ``Rejected`` ``RetryLimitExceeded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import AdmissionConfig
from autoscaler.core.policy.ledger import Ledger
from autoscaler.core.policy.packing import (
    FreeBins,
    blocks_text,
    capacity_bin,
    gpu_sets,
    needs_text,
    node_bin,
    shape_of,
)
from autoscaler.core.snapshot import (
    CHECK_PENDING,
    CHECK_READY,
    CHECK_REJECTED,
    CHECK_RETRY,
    ClusterSnapshot,
    NodeState,
    PodSetSpec,
    WorkloadState,
    frozen_map,
)

__all__ = [
    "AdmissionConfig",
    "AdmissionDecision",
    "AdmissionResult",
    "RetryHistory",
    "decide_admissions",
    "eligible",
    "rebuild_ledger",
]

RetryHistory = Mapping[str, int]  # workload key -> Retry decisions made so far (backoff exponent)



# from this many earlier retries on, a Fragmented message says what an operator can do about it
FRAGMENTED_HINT_AFTER = 3

@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """Our verdict on one workload's check entry. ``state`` None = leave it Pending."""

    workload: str  # "ns/name"
    namespace: str
    name: str
    uid: str
    resource_version: str
    cluster_queue: str | None
    check: str
    state: str | None  # Ready | Retry | Rejected | None
    reason: str
    message: str
    requeue_after_seconds: int | None = None
    placement: Mapping[str, Mapping[str, int]] = field(default_factory=frozen_map)  # pod set -> node -> GPUs
    infeasible: tuple[str, ...] = ()
    quota_reserved_at: float | None = None

    @property
    def reserved_gpus(self) -> int:
        return sum(sum(n.values()) for n in self.placement.values())


@dataclass(frozen=True, slots=True)
class AdmissionResult:
    decisions: tuple[AdmissionDecision, ...]
    ledger: Ledger
    history: RetryHistory


def eligible(wl: WorkloadState) -> bool:
    """Kueue's guard (#3322/#3543): touch a workload only with quota reserved, not evicted/finished."""
    return wl.quota_reserved and wl.active and not wl.evicted and not wl.finished


def _pending_in_order(snapshot: ClusterSnapshot, controller_name: str) -> list[tuple[WorkloadState, tuple[str, ...]]]:
    """The eligible workloads with a Pending check of ours and those checks' names, in decision order
    (priority, then the oldest reservation).  Most passes find none of the snapshot's workloads
    waiting for us, so they are filtered before they are sorted, by the names of our checks."""
    ours = frozenset(name for name, ac in snapshot.admission_checks.items() if ac.controller_name == controller_name)
    if not ours:
        return []
    todo = []
    for wl in snapshot.workloads.values():
        if eligible(wl):
            checks = tuple(c.name for c in wl.checks if c.state == CHECK_PENDING and c.name in ours)
            if checks:
                todo.append((wl, checks))
    todo.sort(key=lambda item: item[0].decision_order)
    return todo


def _decision(
    wl: WorkloadState, check: str, state: str | None, reason: str, message: str, *,
    requeue_after_seconds: int | None = None, placement: Mapping[str, Mapping[str, int]] | None = None,
    infeasible: tuple[str, ...] = (),
) -> AdmissionDecision:
    return AdmissionDecision(
        workload=wl.key, namespace=wl.namespace, name=wl.name, uid=wl.uid, resource_version=wl.resource_version,
        cluster_queue=wl.cluster_queue, check=check, state=state, reason=reason, message=message[:1024],
        quota_reserved_at=wl.quota_reserved_at, requeue_after_seconds=requeue_after_seconds,
        placement=frozen_map() if placement is None else placement, infeasible=infeasible,
    )


class _Capacity:
    """Per-call working view of the flavors (nodes, hardware shape, free bins after promises), so
    deciding N workloads on M nodes costs O(N x pods + M), not O(N x M): each flavor's free bins
    are built once (``FreeBins``) and lowered in place by every promise."""

    def __init__(self, snapshot: ClusterSnapshot, ledger: Ledger, check_cpu_memory: bool) -> None:
        self.snapshot = snapshot
        self.promised = ledger.promised_by_node()
        self.check_cpu_memory = check_cpu_memory
        self._nodes: dict[str, tuple[NodeState, ...]] = {}
        self._free: dict[str, FreeBins] = {}
        self._promised_on: dict[str, int] = {}  # flavor -> GPUs promised on its nodes
        self._shape: dict[str, tuple[int, int]] = {}
        self._largest: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        self._unhealthy: dict[str, int] = {}

    def nodes(self, flavor: str) -> tuple[NodeState, ...]:
        if flavor not in self._nodes:
            self._nodes[flavor] = self.snapshot.flavor_nodes(flavor)
        return self._nodes[flavor]

    def shape(self, flavor: str) -> tuple[int, int]:
        """(largest node's allocatable GPUs, all allocatable GPUs) of the flavor."""
        if flavor not in self._shape:
            alloc = [n.gpu_allocatable for n in self.nodes(flavor)]
            self._shape[flavor] = (max(alloc, default=0), sum(alloc))
        return self._shape[flavor]

    def largest_for(self, flavor: str, selector: Mapping[str, str]) -> int:
        if not selector:
            return self.shape(flavor)[0]
        key = (flavor, tuple(sorted(selector.items())))
        if key not in self._largest:
            self._largest[key] = max((capacity_bin(n).gpus for n in self.nodes(flavor)
                                      if all(n.labels.get(k) == v for k, v in selector.items())), default=0)
        return self._largest[key]

    def free(self, flavor: str) -> FreeBins:
        """The flavor's free, healthy, unpromised room (kept up to date by ``take``)."""
        if flavor not in self._free:
            nodes = {n.name: n for n in self.nodes(flavor)}
            self._free[flavor] = FreeBins(node_bin(n, self.promised.get(name, 0), self.check_cpu_memory)
                                          for name, n in nodes.items())
            self._promised_on[flavor] = sum(self.promised.get(name, 0) for name in nodes)
        return self._free[flavor]

    def promised_on(self, flavor: str) -> int:
        self.free(flavor)
        return self._promised_on[flavor]

    def unhealthy(self, flavor: str) -> int:
        if flavor not in self._unhealthy:
            self._unhealthy[flavor] = self.snapshot.flavor_capacity(flavor).unhealthy
        return self._unhealthy[flavor]

    def take(self, reservation: Mapping[str, Mapping[str, int]]) -> None:
        """Record a new promise: the nodes' free GPUs drop."""
        for nodes in reservation.values():
            for node, g in nodes.items():
                self.promised[node] = self.promised.get(node, 0) + g
                for flavor, free in self._free.items():
                    if node in free:
                        free.take(node, g)
                        self._promised_on[flavor] += g


def _decide(
    wl: WorkloadState,
    check: str,
    snapshot: ClusterSnapshot,
    ledger: Ledger,
    attempts: int,
    config: AdmissionConfig,
    now: float,
    cap: _Capacity | None = None,
) -> tuple[AdmissionDecision, Mapping[str, Mapping[str, int]] | None]:
    """One decision, and the reservation (flavor -> node -> GPUs) to record if it is Ready."""
    if cap is None:
        cap = _Capacity(snapshot, ledger, config.check_cpu_memory)
    sets = gpu_sets(wl)
    if not sets:
        return _decision(wl, check, CHECK_READY, R.NO_GPUS_REQUESTED, "no pod set requests nvidia.com/gpu"), None

    def retry(reason: str, message: str, infeasible: tuple[str, ...] = ()) -> AdmissionDecision:
        if config.max_retries is not None and attempts >= config.max_retries:
            return _decision(
                wl, check, CHECK_REJECTED, R.RETRY_LIMIT_EXCEEDED,
                f"gave up after {attempts} retries; last: {message}", infeasible=infeasible,
            )
        after = config.backoff_seconds(attempts)
        return _decision(wl, check, CHECK_RETRY, reason, f"{message}; retry in {after}s",
                         requeue_after_seconds=after, infeasible=infeasible)

    by_flavor: dict[str, list[tuple[PodSetSpec, int, str | None]]] = {}
    for s in sets:
        ps, _count, flavor = s
        if not flavor or flavor not in snapshot.flavors:
            what = f"flavor {flavor!r} is unknown" if flavor else "no flavor is assigned for nvidia.com/gpu"
            return retry(R.FLAVOR_NOT_ASSIGNED, f"pod set {ps.name}: {what}"), None
        by_flavor.setdefault(flavor, []).append(s)

    # 2-3: no nodes, or can never fit (hardware shape only)
    for flavor in sorted(by_flavor):
        fsets = by_flavor[flavor]
        if not cap.nodes(flavor):
            return retry(R.FLAVOR_HAS_NO_NODES, f"flavor {flavor} selects no nodes; needs {needs_text(fsets)}"), None
        for ps, count, _ in fsets:
            largest = cap.largest_for(flavor, ps.node_selector)
            if ps.gpus_per_pod > largest:
                msg = (f"pod set {ps.name} needs {ps.gpus_per_pod} GPUs per pod; the largest node of flavor "
                       f"{flavor} has {largest}")
                return _decision(wl, check, CHECK_REJECTED, R.POD_LARGER_THAN_NODE, msg,
                                 infeasible=(f"{ps.name}: {count} x {ps.gpus_per_pod} GPUs > {largest} per node",)), None
        total_cap = cap.shape(flavor)[1]
        needed = sum(c * ps.gpus_per_pod for ps, c, _ in fsets)
        if needed > total_cap:
            msg = f"needs {needed} GPUs ({needs_text(fsets)}) on flavor {flavor}, which has {total_cap} in all"
            return _decision(wl, check, CHECK_REJECTED, R.EXCEEDS_FLAVOR_CAPACITY, msg,
                             infeasible=(f"{flavor}: {needed} GPUs > {total_cap}",)), None

    # 4: an earlier promise stands
    held = ledger.reservations.get(wl.key)
    if held is not None and held.uid == wl.uid:
        msg = f"capacity already reserved: {held.total} GPUs on {', '.join(sorted(held.by_flavor))}"
        return _decision(wl, check, CHECK_READY, R.CAPACITY_CONFIRMED, msg,
                         placement=held.placement), None  # stays in the ledger

    # 5: stale GPU signal
    if snapshot.gpu_signal_stale():
        sig = snapshot.signals.get("gpu")
        since = f"last data at {sig.observed_at:.0f}" if sig and sig.observed_at is not None else "no data yet"
        if config.stale_signal_mode == "fail-open":
            return _decision(wl, check, CHECK_READY, R.READY_GPU_SIGNAL_STALE,
                             f"GPU signal stale ({since}); admitting on quota alone (stale_signal_mode=fail-open)"), None
        return _decision(wl, check, None, R.GPU_SIGNAL_STALE,
                         f"GPU signal stale ({since}); holding until it is fresh (stale_signal_mode=hold)"), None

    # 6: pack onto free, healthy, unpromised GPUs
    reservation: dict[str, Mapping[str, int]] = {}
    placement: dict[str, Mapping[str, int]] = {}
    for flavor in sorted(by_flavor):
        fsets = by_flavor[flavor]
        room = cap.free(flavor)
        result = room.pack([shape_of(ps, c) for ps, c, _ in fsets])
        if not result.fits:
            blocks = room.blocks()
            needed = sum(c * ps.gpus_per_pod for ps, c, _ in fsets)
            free = sum(blocks)
            promised = cap.promised_on(flavor)
            detail = (f"needs {needs_text(fsets)} on flavor {flavor}; largest free healthy blocks: {blocks_text(blocks)} "
                      f"({free} free, {promised} promised, {cap.unhealthy(flavor)} unhealthy)")
            counts = {p.name: c for p, c, _ in fsets}
            infeasible = tuple(f"{ps}: {n} of {counts[ps]} pods unplaced on {flavor}"
                               for ps, n in sorted(result.unplaced.items()) if n)
            reason = R.INSUFFICIENT_GPUS if free < needed else R.FRAGMENTED
            wait = config.capacity_wait_seconds
            if wl.quota_reserved_at is not None and 0 <= now - wl.quota_reserved_at < wait:
                # keep the quota and wait for GPUs to free, as a Pending pod would; one message for
                # the whole wait, so it is written (and leaves an Event) once, not at every pass
                short = "not enough free healthy GPUs" if reason == R.INSUFFICIENT_GPUS else "no free block fits"
                return _decision(wl, check, None, reason,
                                 f"needs {needs_text(fsets)} on flavor {flavor}; {short}; waiting with quota "
                                 f"reserved for up to {wait:.0f}s from its reservation, then Retry"), None
            if reason == R.FRAGMENTED and attempts >= FRAGMENTED_HINT_AFTER:
                detail += (f"; fragmented on {attempts + 1} tries: score GPU nodes MostAllocated (a scheduler "
                           "profile that bin-packs nvidia.com/gpu), reserve whole nodes for multi-GPU workloads "
                           "(a ResourceFlavor of their own), or let idle Ray workers go "
                           '(queuepilot.io/reclaim-idle-actors: "true", stall deactivation)')
            return retry(reason, detail, infeasible), None
        reservation[flavor] = frozen_map(result.gpus_by_node())
        placement.update(result.placement)
    total = sum(sum(n.values()) for n in reservation.values())
    where = "; ".join(f"{f}: " + ", ".join(f"{n} {g}" for n, g in sorted(nodes.items()))
                      for f, nodes in sorted(reservation.items()))
    msg = f"{total} healthy GPUs reserved ({where})"
    return _decision(wl, check, CHECK_READY, R.CAPACITY_CONFIRMED, msg, placement=frozen_map(placement)), reservation


def decide_admissions(
    snapshot: ClusterSnapshot,
    ledger: Ledger,
    history: RetryHistory,
    config: AdmissionConfig,
    now: float,
) -> AdmissionResult:
    """Decide every workload whose check of ours is Pending (see the module docstring); pure.

    ``ledger`` should already be ``release``d for this snapshot.  Returns the decisions in the order
    they were made, the ledger with the new reservations, and the updated retry history (entries of
    workloads no longer in the snapshot are dropped; Ready/Rejected reset a workload's count).
    """
    hist = {k: v for k, v in history.items() if k in snapshot.workloads}
    decisions: list[AdmissionDecision] = []
    # a reservation of a workload that was re-created under the same name is void
    for key, r in list(ledger.reservations.items()):
        wl = snapshot.workloads.get(key)
        if wl is not None and r.uid != wl.uid:
            ledger = ledger.without(key)
    cap = _Capacity(snapshot, ledger, config.check_cpu_memory)
    todo = _pending_in_order(snapshot, config.controller_name)
    # new promises are added to the ledger in one go (``cap`` already counts them); a workload
    # decided again in this pass (a second check of ours) first sees its own promise
    promises: list[tuple[str, str, Mapping[str, Mapping[str, int]], float, Mapping[str, Mapping[str, int]] | None]]
    promises = []
    promised_keys: set[str] = set()
    for wl, checks in todo:
        for check in checks:
            if wl.key in promised_keys:
                ledger, promises = ledger.reserve_all(promises, snapshot), []
                promised_keys.clear()
            attempts = hist.get(wl.key, 0)
            d, reservation = _decide(wl, check, snapshot, ledger, attempts, config, now, cap)
            if d.state == CHECK_READY and reservation:
                promises.append((wl.key, wl.uid, reservation, now, d.placement))
                promised_keys.add(wl.key)
                cap.take(reservation)
            if d.state == CHECK_RETRY:
                hist[wl.key] = attempts + 1
            elif d.state in (CHECK_READY, CHECK_REJECTED):
                hist.pop(wl.key, None)
            decisions.append(d)
    if promises:
        ledger = ledger.reserve_all(promises, snapshot)
    return AdmissionResult(decisions=tuple(decisions), ledger=ledger, history=frozen_map(hist))


def rebuild_ledger(snapshot: ClusterSnapshot, config: AdmissionConfig, now: float) -> Ledger:
    """A ledger for a new leader: workloads whose check of ours is Ready, still hold quota and got
    Ready less than ``reservation_timeout`` ago are re-packed onto today's free GPUs (oldest first)
    and reserved until ``Ready time + timeout``.  Their pods may already run, so this over-reserves
    for at most one timeout — the safe direction."""
    ledger = Ledger()
    cands = []
    for wl in snapshot.workloads.values():
        if not eligible(wl):
            continue
        for c in wl.checks:
            ac = snapshot.admission_checks.get(c.name)
            if (ac is not None and ac.controller_name == config.controller_name and c.state == CHECK_READY
                    and c.last_transition_time is not None
                    and now - c.last_transition_time <= config.reservation_timeout_seconds):
                cands.append((c.last_transition_time, wl))
                break
    # one working view of the flavors' free bins, lowered as each promise is made (the same bins as
    # re-reading the ledger's promises per candidate, without rebuilding every node's bin each time)
    cap = _Capacity(snapshot, ledger, config.check_cpu_memory)
    entries = []
    for t, wl in sorted(cands, key=lambda x: (x[0], x[1].key)):
        by_flavor: dict[str, list[tuple[PodSetSpec, int]]] = {}
        for ps, count, flavor in gpu_sets(wl):
            if flavor:
                by_flavor.setdefault(flavor, []).append((ps, count))
        reservation: dict[str, Mapping[str, int]] = {}
        for flavor, fsets in by_flavor.items():
            result = cap.free(flavor).pack([shape_of(ps, c) for ps, c in fsets])
            reservation[flavor] = frozen_map(result.gpus_by_node())
        if reservation:
            entries.append((wl.key, wl.uid, reservation, t, None))
            cap.take(reservation)
    return ledger.reserve_all(entries, snapshot)
