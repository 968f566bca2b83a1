"""Capacity-aware MultiKueue dispatch: which worker clusters to nominate for a manager Workload.

Kueue's MultiKueue copies a Workload that holds quota in the manager cluster to the worker clusters
named in ``status.nominatedClusterNames`` and keeps the first copy that gets admitted there.  With
an external dispatcher configured (Kueue's ``multiKueue.dispatcherName`` not one of the built-in
all-at-once / incremental names) Kueue only reads that field: this policy fills it.

``decide_dispatch(targets, workers, ledgers, history, config, now)`` is pure.  Per workload
(highest priority first, then oldest quota reservation, then key):

1. not eligible (no quota reserved, inactive, evicted, finished) or ``status.clusterName`` set
   (a worker admitted it; Kueue cleared the nominations) -> no decision;
2. in backoff after an earlier "nothing fits" -> no decision until ``retry_at``;
3. the worker clusters it may go to are those of its MultiKueueConfig; a cluster is *usable* only
   when its MultiKueueCluster is Active, its caches are reachable, and its capacity (nodes/pods
   watch and GPU health) is fresh — an unusable cluster is never nominated;
4. current nominations that are all usable and still hold our reservation (or can be re-packed
   there, e.g. after a manager restart) are kept: no write, no churn of remote copies;
5. otherwise every usable cluster is asked the admission check's question: do the workload's GPU
   pod sets (by the flavor Kueue assigned in the manager) pack best-fit-decreasing onto free,
   healthy, unpromised GPUs of that flavor's nodes in *that* cluster?  The clusters where it fits
   are nominated best first — least fragmentation left behind: the fewest GPUs left over on the
   nodes the placement touched, then the largest free block left, then the name — at most
   ``max_nominations`` of them (0: all), and the GPUs are promised in each nominated cluster's
   ledger, so no later workload of this pass (or of a later pass) is promised the same GPUs;
6. none fits -> reason ``NoClusterFits`` (or ``NoUsableCluster``) with a message naming, per
   cluster, why and its largest free blocks per flavor; ``retry_after = min(cap, base * 2^n)``
   and the workload's history counts the attempt.  Nominations it had are withdrawn — unless no
   cluster is usable at all (the manager lost every worker, or is shutting down): then they stand,
   so a manager-side partition does not make Kueue delete every remote copy.

A workload without GPU pod sets is nominated to every usable cluster (quota decides there).
``release_worker_ledger`` ends a worker's reservations whose workload ended, went to another
cluster, or whose GPUs now show as requested on their nodes (``ledger.release``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from autoscaler.core.policy.admission import _Capacity, eligible
from autoscaler.core.policy.ledger import Ledger, release
from autoscaler.core.policy.packing import (
    MAX_BLOCKS_SHOWN,
    FreeBins,
    blocks_text,
    gpu_sets,
    needs_text,
    shape_of,
)
from autoscaler.core.snapshot import (
    ClusterSnapshot,
    NodeState,
    PodSetSpec,
    WorkloadState,
    frozen_map,
)

__all__ = [
    "DISPATCH_REASONS",
    "DispatchConfig",
    "DispatchDecision",
    "DispatchHistory",
    "DispatchResult",
    "DispatchTarget",
    "WorkerView",
    "decide_dispatch",
    "release_worker_ledger",
    "worker_problem",
]

# --- reasons (bounded label values of queuepilot_dispatch_decisions_total{reason}) -------------------
NOMINATED = "Nominated"
NOMINATION_KEPT = "NominationKept"
NO_GPUS_REQUESTED = "NoGpusRequested"
NO_CLUSTER_FITS = "NoClusterFits"
NO_USABLE_CLUSTER = "NoUsableCluster"
FLAVOR_NOT_ASSIGNED = "FlavorNotAssigned"
DISPATCH_REASONS: Mapping[str, str] = frozen_map({
    NOMINATED: "nominated the worker clusters where every GPU pod fits on free, healthy, unpromised GPUs",
    NOMINATION_KEPT: "the nominated clusters are still usable and hold the reservation; nothing written",
    NO_GPUS_REQUESTED: "no pod set requests GPUs; every usable worker cluster is nominated",
    NO_CLUSTER_FITS: "no usable worker cluster has room for the pods now; retried with backoff",
    NO_USABLE_CLUSTER: "every worker cluster is inactive, unreachable or stale; retried with backoff",
    FLAVOR_NOT_ASSIGNED: "a GPU pod set has no flavor assigned in the manager; retried with backoff",
})

# --- per-cluster verdicts (in messages) ---
INACTIVE = "inactive"
UNREACHABLE = "unreachable"
STALE = "stale"


@dataclass(frozen=True, slots=True)
class DispatchConfig:
    stale_seconds: float = 120.0  # capacity older than this (watch or GPU health) makes a cluster unusable
    backoff_base_seconds: int = 10
    backoff_cap_seconds: int = 300
    max_nominations: int = 0  # 0: every cluster where it fits
    reservation_timeout_seconds: float = 600.0
    check_cpu_memory: bool = True

    def __post_init__(self) -> None:
        if self.stale_seconds <= 0:
            raise ValueError("dispatch stale_seconds must be > 0")
        if self.backoff_base_seconds < 1 or self.backoff_cap_seconds < self.backoff_base_seconds:
            raise ValueError("dispatch backoff needs 1 <= base <= cap")
        if self.max_nominations < 0:
            raise ValueError("dispatch max_nominations must be >= 0")

    def backoff_seconds(self, attempt: int) -> int:
        return int(min(self.backoff_cap_seconds, self.backoff_base_seconds * 2 ** min(attempt, 30)))


@dataclass(frozen=True, slots=True)
class WorkerView:
    """One worker cluster as the dispatcher sees it.

    ``snapshot`` holds the worker's nodes (GPU requests from its pods, GPU health from the shared
    Prometheus) and the manager's ResourceFlavors resolved against those nodes; its ``workloads``
    are the manager's (so that ``release`` can tell which reservations ended)."""

    name: str
    active: bool  # the MultiKueueCluster's Active condition is True
    reachable: bool  # the worker's caches are synced and watching
    observed_at: float | None  # when its nodes/pods caches were last known current
    snapshot: ClusterSnapshot


@dataclass(frozen=True, slots=True)
class DispatchTarget:
    """A manager Workload whose ClusterQueue has a MultiKueue AdmissionCheck."""

    workload: WorkloadState
    clusters: tuple[str, ...]  # the MultiKueueConfig's spec.clusters (its order breaks ties)
    nominated: tuple[str, ...] = ()  # status.nominatedClusterNames now
    cluster_name: str | None = None  # status.clusterName now


@dataclass(frozen=True, slots=True)
class DispatchHistory:
    attempts: int = 0
    retry_at: float = 0.0


@dataclass(frozen=True, slots=True)
class DispatchDecision:
    workload: str  # "ns/name"
    namespace: str
    name: str
    uid: str
    resource_version: str
    cluster_queue: str | None
    nominate: tuple[str, ...] | None  # the list to write; None: leave the field as it is
    reason: str
    message: str
    retry_after_seconds: int | None = None
    # cluster -> flavor -> free blocks (GPUs per node, largest first) when nothing fits
    blocks: Mapping[str, Mapping[str, tuple[int, ...]]] = field(default_factory=frozen_map)
    # cluster -> flavor -> node -> GPUs promised by this decision
    promised: Mapping[str, Mapping[str, Mapping[str, int]]] = field(default_factory=frozen_map)
    previous: tuple[str, ...] = ()

    @property
    def changes(self) -> bool:
        return self.nominate is not None and self.nominate != self.previous


@dataclass(frozen=True, slots=True)
class DispatchResult:
    decisions: tuple[DispatchDecision, ...]
    ledgers: Mapping[str, Ledger]
    history: Mapping[str, DispatchHistory]


def worker_problem(w: WorkerView, config: DispatchConfig, now: float) -> str:
    """'' when ``w`` may be nominated, else ``inactive`` / ``unreachable`` / ``stale``."""
    if not w.active:
        return INACTIVE
    if not w.reachable:
        return UNREACHABLE
    if w.observed_at is None or now - w.observed_at > config.stale_seconds:
        return STALE
    sig = w.snapshot.signals.get("gpu")
    if sig is None or sig.observed_at is None or now - sig.observed_at > config.stale_seconds:
        return STALE
    return ""


def release_worker_ledger(
    ledger: Ledger, worker: WorkerView, targets: Mapping[str, DispatchTarget], now: float, timeout: float,
) -> Ledger:
    """End ``worker``'s reservations of workloads that went elsewhere, ended, or whose pods now run."""
    for key in list(ledger.reservations):
        t = targets.get(key)
        if t is not None and t.cluster_name and t.cluster_name != worker.name:
            ledger = ledger.without(key)
    return release(ledger, worker.snapshot, now, timeout)


@dataclass(slots=True)
class _Fit:
    cluster: str
    reservation: dict[str, Mapping[str, int]]  # flavor -> node -> GPUs
    leftover: int  # GPUs left free on the nodes the placement touched
    largest_left: int  # largest free block left in the flavors used

    def score(self, rank: int) -> tuple[int, int, int, str]:
        return (self.leftover, -self.largest_left, rank, self.cluster)


class _Worker:
    """One worker's capacity for this pass: the admission check's working view, lowered by promises."""

    def __init__(self, view: WorkerView, ledger: Ledger, config: DispatchConfig) -> None:
        self.view = view
        self.ledger = ledger
        self.cap = _Capacity(view.snapshot, ledger, config.check_cpu_memory)
        self.new: list[tuple[str, str, Mapping[str, Mapping[str, int]], float, Mapping[str, Mapping[str, int]] | None]]
        self.new = []
        self._names: dict[str, dict[str, NodeState]] = {}

    def _by_name(self, flavor: str) -> dict[str, NodeState]:
        if flavor not in self._names:
            self._names[flavor] = {n.name: n for n in self.cap.nodes(flavor)}
        return self._names[flavor]

    def holds(self, wl: WorkloadState) -> bool:
        r = self.ledger.reservations.get(wl.key)
        if r is not None and r.uid == wl.uid:
            return True
        return any(k == wl.key and u == wl.uid for k, u, *_ in self.new)

    def fit(self, by_flavor: Mapping[str, list[tuple[PodSetSpec, int, str | None]]]) -> tuple[_Fit | None, str]:
        """Where the pods go on this worker, or None and why not."""
        reservation: dict[str, Mapping[str, int]] = {}
        leftover = 0
        largest = 0
        for flavor in sorted(by_flavor):
            fsets = by_flavor[flavor]
            if not self.cap.nodes(flavor):
                return None, f"flavor {flavor} selects no nodes"
            for ps, _c, _ in fsets:
                biggest = self.cap.largest_for(flavor, ps.node_selector)
                if ps.gpus_per_pod > biggest:
                    return None, f"{ps.name} needs {ps.gpus_per_pod} GPUs per pod, largest {flavor} node has {biggest}"
            room = self.cap.free(flavor)
            result = room.pack([shape_of(ps, c) for ps, c, _ in fsets])
            if not result.fits:
                top, free = _top_blocks(room, MAX_BLOCKS_SHOWN + 1)
                needed = sum(c * ps.gpus_per_pod for ps, c, _ in fsets)
                kind = "insufficient" if free < needed else "fragmented"
                return None, f"{kind} on {flavor}: largest free blocks {blocks_text(top)}"
            used = result.gpus_by_node()
            reservation[flavor] = frozen_map(used)
            nodes = self._by_name(flavor)
            before = {n: max(0, nodes[n].free_gpus - self.cap.promised.get(n, 0)) for n in used}
            left = {n: before[n] - g for n, g in used.items()}
            leftover += sum(left.values())
            # the largest block of a node the placement does not touch: the top len(used)+1 blocks
            # less the touched nodes' own blocks
            rest = Counter(_top_blocks(room, len(used) + 1)[0])
            rest.subtract(before.values())
            untouched = max((b for b, k in rest.items() if k > 0), default=0)
            largest = max(largest, untouched, max(left.values(), default=0))
        return _Fit(self.view.name, reservation, leftover, largest), ""

    def take(self, wl: WorkloadState, reservation: Mapping[str, Mapping[str, int]], now: float) -> None:
        self.cap.take(reservation)
        self.new.append((wl.key, wl.uid, reservation, now, None))

    def blocks(self, flavors: Iterable[str]) -> dict[str, tuple[int, ...]]:
        """The largest free blocks per flavor (at most a few more than a message shows)."""
        return {f: _top_blocks(self.cap.free(f), 2 * MAX_BLOCKS_SHOWN)[0] for f in sorted(flavors) if self.cap.nodes(f)}

    def drop(self, wl: WorkloadState) -> None:
        """Give back ``wl``'s promise on this worker (the nomination is being replaced)."""
        r = self.ledger.reservations.get(wl.key)
        if r is not None:
            self.ledger = self.ledger.without(wl.key)
            for f, nodes in r.by_flavor.items():
                room = self.cap.free(f)
                for n, g in nodes.items():
                    if n in room:
                        room.take(n, -g)
                    self.cap.promised[n] = max(0, self.cap.promised.get(n, 0) - g)

    def final_ledger(self) -> Ledger:
        return self.ledger.reserve_all(self.new, self.view.snapshot) if self.new else self.ledger


def _top_blocks(room: FreeBins, k: int) -> tuple[tuple[int, ...], int]:
    """(the ``k`` largest free blocks, all free GPUs) of ``room`` in O(distinct block sizes + k), not
    O(nodes): the bins are kept in buckets by free GPUs."""
    buckets = room._buckets  # size -> nodes with that many free GPUs
    top: list[int] = []
    free = 0
    for size in sorted(buckets, reverse=True):
        n = len(buckets[size])
        free += size * n
        if len(top) < k:
            top += [size] * min(n, k - len(top))
    return tuple(top), free


def _decision(t: DispatchTarget, nominate: tuple[str, ...] | None, reason: str, message: str, **kw: object) -> DispatchDecision:
    wl = t.workload
    return DispatchDecision(
        workload=wl.key, namespace=wl.namespace, name=wl.name, uid=wl.uid, resource_version=wl.resource_version,
        cluster_queue=wl.cluster_queue, nominate=nominate, reason=reason, message=message[:1024],
        previous=t.nominated, **kw,  # type: ignore[arg-type]
    )


def decide_dispatch(
    targets: Iterable[DispatchTarget],
    workers: Mapping[str, WorkerView],
    ledgers: Mapping[str, Ledger],
    history: Mapping[str, DispatchHistory],
    config: DispatchConfig,
    now: float,
) -> DispatchResult:
    """Nominations for every target (see the module docstring); pure.  ``ledgers`` (one per worker
    cluster) should already be released with :func:`release_worker_ledger`."""
    todo = sorted(targets, key=lambda t: t.workload.decision_order)
    live = {t.workload.key for t in todo}
    hist = {k: v for k, v in history.items() if k in live}
    state = {name: _Worker(w, ledgers.get(name, Ledger()), config) for name, w in sorted(workers.items())}
    problems = {name: worker_problem(w, config, now) for name, w in workers.items()}
    decisions: list[DispatchDecision] = []

    def none_fit(t: DispatchTarget, reason: str, message: str,
                 blocks: Mapping[str, Mapping[str, tuple[int, ...]]] | None = None) -> DispatchDecision:
        h = hist.get(t.workload.key, DispatchHistory())
        after = config.backoff_seconds(h.attempts)
        hist[t.workload.key] = DispatchHistory(h.attempts + 1, now + after)
        for w in state.values():
            w.drop(t.workload)
        # nothing usable at all (e.g. the manager lost its network): nominations stand, no churn of copies
        keep = reason == NO_USABLE_CLUSTER and bool(t.nominated)
        return _decision(t, None if keep else (), reason, f"{message}; retry in {after}s", retry_after_seconds=after,
                         blocks=frozen_map({c: frozen_map(b) for c, b in (blocks or {}).items()}))

    for t in todo:
        wl = t.workload
        if not eligible(wl) or t.cluster_name:
            hist.pop(wl.key, None)
            continue
        h = hist.get(wl.key)
        if h is not None and now < h.retry_at:
            continue
        clusters = tuple(dict.fromkeys(t.clusters))
        rank = {c: i for i, c in enumerate(clusters)}
        usable = [c for c in clusters if c in state and not problems.get(c)]
        why_not = {c: (problems.get(c) or "") if c in state else UNREACHABLE for c in clusters}
        sets = gpu_sets(wl)
        if not sets:
            if not usable:
                decisions.append(none_fit(t, NO_USABLE_CLUSTER, "no usable worker cluster: " + _why(why_not)))
                continue
            pick = tuple(usable[: config.max_nominations or None])
            hist.pop(wl.key, None)
            if pick == t.nominated:
                continue
            decisions.append(_decision(t, pick, NO_GPUS_REQUESTED, "no pod set requests GPUs; nominated " + ", ".join(pick)))
            continue
        by_flavor: dict[str, list[tuple[PodSetSpec, int, str | None]]] = {}
        unassigned = ""
        for s in sets:
            if not s[2]:
                unassigned = s[0].name
                break
            by_flavor.setdefault(s[2], []).append(s)
        if unassigned:
            decisions.append(none_fit(t, FLAVOR_NOT_ASSIGNED, f"pod set {unassigned}: no flavor for nvidia.com/gpu"))
            continue

        # keep current nominations while they are usable and hold (or can re-take) the reservation
        if t.nominated and all(c in usable for c in t.nominated):
            fits: list[_Fit] = []
            ok = True
            for c in t.nominated:
                w = state[c]
                if w.holds(wl):
                    continue
                f, _why_c = w.fit(by_flavor)
                if f is None:
                    ok = False
                    break
                fits.append(f)
            if ok:
                for f in fits:
                    state[f.cluster].take(wl, f.reservation, now)
                hist.pop(wl.key, None)
                decisions.append(_decision(t, None, NOMINATION_KEPT, "kept: " + ", ".join(t.nominated)))
                continue

        for w in state.values():  # a new nomination replaces the old one: its promises go back first
            w.drop(wl)
        found: list[_Fit] = []
        for c in usable:
            f, why = state[c].fit(by_flavor)
            if f is None:
                why_not[c] = why
            else:
                found.append(f)
        if not found:
            blocks = {c: state[c].blocks(by_flavor) for c in usable}
            reason = NO_CLUSTER_FITS if usable else NO_USABLE_CLUSTER
            decisions.append(none_fit(t, reason, f"no worker cluster fits {needs_text(sets)}: {_why(why_not)}", blocks))
            continue
        found.sort(key=lambda f: f.score(rank[f.cluster]))
        chosen = found[: config.max_nominations or None]
        promised = {}
        for f in chosen:
            state[f.cluster].take(wl, f.reservation, now)
            promised[f.cluster] = frozen_map({fl: frozen_map(n) for fl, n in f.reservation.items()})
        pick = tuple(f.cluster for f in chosen)
        hist.pop(wl.key, None)
        where = "; ".join(
            f"{f.cluster}: " + ", ".join(f"{n} {g}" for nodes in f.reservation.values() for n, g in sorted(nodes.items()))
            + f" ({f.leftover} GPUs left on those nodes)" for f in chosen)
        decisions.append(_decision(t, pick, NOMINATED, f"{needs_text(sets)} fit on {where}", promised=frozen_map(promised)))

    out_ledgers = {name: w.final_ledger() for name, w in state.items()}
    for name, led in ledgers.items():
        out_ledgers.setdefault(name, led)
    return DispatchResult(decisions=tuple(decisions), ledgers=frozen_map(out_ledgers), history=frozen_map(hist))


def _why(why_not: Mapping[str, str]) -> str:
    return "; ".join(f"{c}: {w or 'usable'}" for c, w in why_not.items()) or "no worker clusters configured"

