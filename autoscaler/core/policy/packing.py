"""Bin-packing: can these GPU pods be placed on these nodes' free GPUs (admission), and how many new
workers of a group's shape does Ray's pending demand need (``workers_needed``, scaling)?

Heuristic: **best-fit decreasing**.  Pods are taken largest first (GPUs, then CPU, then memory, then
pod-set name); each goes to the node that fits it with the fewest GPUs left over (ties: node name).
Best fit keeps large free blocks whole for the pods that need them.  It is not optimal (bin packing
is NP-hard), so it can answer "does not fit" for a set an exact solver could place — that only
costs a Retry — but it never answers "fits" for a set it has not actually placed, pod by pod.

Pods that request no GPU are not placed: Kueue's quota covers them and the scheduler can put them
on any node.  For GPU pods the node's free CPU and memory are checked too when the node reports
allocatable CPU/memory (``cpu_allocatable > 0``), against current requests (promises hold GPUs only).
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core.snapshot import GPU_RESOURCE, NodeState, PodSetSpec, WorkloadState, frozen_map


@dataclass(frozen=True, slots=True)
class Bin:
    """Free room on one node."""

    node: str
    gpus: int
    cpu: float | None = None  # None: unknown, not checked
    memory: float | None = None
    labels: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class PodShape:
    """``count`` identical pods of one pod set."""

    pod_set: str
    count: int
    gpus: int
    cpu: float = 0.0
    memory: float = 0.0
    node_selector: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class PackResult:
    placement: Mapping[str, Mapping[str, int]]  # pod set -> node -> GPUs placed
    unplaced: Mapping[str, int]  # pod set -> pods that found no node

    @property
    def fits(self) -> bool:
        return not any(self.unplaced.values())

    def gpus_by_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for nodes in self.placement.values():
            for n, g in nodes.items():
                out[n] = out.get(n, 0) + g
        return out


def shape_of(ps: PodSetSpec, count: int | None = None) -> PodShape:
    """The per-pod shape of a pod set (``count`` overrides the spec count, e.g. the admitted count)."""
    return PodShape(
        pod_set=ps.name,
        count=ps.count if count is None else count,
        gpus=ps.gpus_per_pod,
        cpu=float(ps.requests.get("cpu", 0.0)),
        memory=float(ps.requests.get("memory", 0.0)),
        node_selector=ps.node_selector,
    )


def node_bin(node: NodeState, promised: int = 0, check_cpu_memory: bool = True) -> Bin:
    """Free healthy, unpromised room on ``node`` (0 GPUs when not ready or not schedulable)."""
    known = check_cpu_memory and node.cpu_allocatable > 0
    return Bin(
        node=node.name,
        gpus=max(0, node.free_gpus - promised),
        cpu=max(0.0, node.cpu_allocatable - node.cpu_requested) if known else None,
        memory=max(0.0, node.memory_allocatable - node.memory_requested)
        if known and node.memory_allocatable > 0 else None,
        labels=node.labels,
    )


def capacity_bin(node: NodeState) -> Bin:
    """The node as if empty and fully healthy: its hardware shape (for "can never fit")."""
    return Bin(node=node.name, gpus=node.gpu_allocatable, labels=node.labels)


def _selects(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


@dataclass(slots=True)
class _Room:
    """One node's free room while packing (mutable: a pack takes from it and gives it back)."""

    gpus: int
    cpu: float | None  # None: unknown, not checked
    memory: float | None


class FreeBins:
    """Free room on a set of nodes, kept in buckets by free GPUs (names sorted in each bucket), so
    that many workloads can be packed one after another (``pack``), each promise lowering the
    nodes' free GPUs (``take``), without rebuilding the buckets: a pack costs O(pods), not O(nodes).

    Built from ``Bin``s as ``pack`` takes them (a node named twice: the last entry with free GPUs
    wins; nodes without free GPUs are kept, for ``take``, but never chosen)."""

    __slots__ = ("_buckets", "_free", "_labels")

    def __init__(self, bins: Iterable[Bin]) -> None:
        self._free: dict[str, _Room] = {}  # node -> its free room now
        self._labels: dict[str, Mapping[str, str]] = {}
        for b in bins:
            if b.gpus > 0 or b.node not in self._free:
                self._free[b.node] = _Room(b.gpus, b.cpu, b.memory)
                self._labels[b.node] = b.labels
        self._buckets: dict[int, list[str]] = {}
        for n in sorted(self._free):
            if self._free[n].gpus > 0:
                self._buckets.setdefault(self._free[n].gpus, []).append(n)

    def __contains__(self, node: object) -> bool:
        return node in self._free

    def blocks(self) -> list[int]:
        """Free GPUs per node, largest first (nodes with none left out)."""
        out: list[int] = []
        for size in sorted(self._buckets, reverse=True):
            out += [size] * len(self._buckets[size])
        return out

    def _set_gpus(self, node: str, gpus: int) -> None:
        slot = self._free[node]
        if slot.gpus > 0:
            self._buckets[slot.gpus].remove(node)
        slot.gpus = gpus
        if gpus > 0:
            insort(self._buckets.setdefault(gpus, []), node)

    def take(self, node: str, gpus: int) -> None:
        """A promise of ``gpus`` on ``node``: its free GPUs drop (not below 0); CPU and memory stay."""
        slot = self._free.get(node)
        if slot is not None:
            self._set_gpus(node, max(0, slot.gpus - gpus))

    def _best(self, s: PodShape) -> str | None:
        for size in sorted(k for k, v in self._buckets.items() if k >= s.gpus and v):
            for n in self._buckets[size]:
                c, m = self._free[n].cpu, self._free[n].memory
                if c is not None and c < s.cpu:
                    continue
                if m is not None and m < s.memory:
                    continue
                if s.node_selector and not _selects(s.node_selector, self._labels[n]):
                    continue
                return n
        return None

    def pack(self, shapes: Iterable[PodShape]) -> PackResult:
        """``pack(shapes, bins)`` on the current free room; the room is left as it was (a caller that
        keeps the placement records it with ``take``)."""
        pods = [s for s in shapes if s.gpus > 0 and s.count > 0]
        pods.sort(key=lambda s: (-s.gpus, -s.cpu, -s.memory, s.pod_set))
        if not pods:
            return PackResult(placement=frozen_map(), unplaced=frozen_map())
        placement: dict[str, dict[str, int]] = {}
        unplaced: dict[str, int] = {}
        undo: list[tuple[str, int, float | None, float | None]] = []
        try:
            for s in pods:
                for i in range(s.count):
                    best = self._best(s)
                    if best is None:
                        # nothing changed since this pod found no node: its identical siblings find none either
                        unplaced[s.pod_set] = unplaced.get(s.pod_set, 0) + s.count - i
                        break
                    slot = self._free[best]
                    undo.append((best, slot.gpus, slot.cpu, slot.memory))
                    self._set_gpus(best, slot.gpus - s.gpus)
                    if slot.cpu is not None:
                        slot.cpu -= s.cpu
                    if slot.memory is not None:
                        slot.memory -= s.memory
                    ps = placement.setdefault(s.pod_set, {})
                    ps[best] = ps.get(best, 0) + s.gpus
        finally:
            for node, g, c, m in reversed(undo):
                self._set_gpus(node, g)
                self._free[node].cpu = c
                self._free[node].memory = m
        return PackResult(
            placement=frozen_map({k: frozen_map(v) for k, v in placement.items()}),
            unplaced=frozen_map(unplaced),
        )


def pack(shapes: Iterable[PodShape], bins: Sequence[Bin]) -> PackResult:
    """Place every GPU pod of ``shapes`` onto ``bins`` (best-fit decreasing); pure and deterministic.

    Nodes are kept in buckets by free GPUs (names sorted), so each pod looks at the buckets from
    its size upward and takes the first node that also fits its CPU, memory and node selector:
    the fewest GPUs left over, ties broken by node name.
    """
    return FreeBins(bins).pack(shapes)


def gpu_pod_sets(pod_sets: Sequence[PodSetSpec]) -> tuple[PodSetSpec, ...]:
    return tuple(ps for ps in pod_sets if ps.gpus_per_pod > 0)


# --------------------------------------------------------------------------- what a workload asks
GpuSet = tuple[PodSetSpec, int, "str | None"]  # (pod set, pod count, GPU flavor)
MAX_BLOCKS_SHOWN = 8  # free blocks named in a message


def gpu_sets(wl: WorkloadState) -> list[GpuSet]:
    """(pod set, pod count, GPU flavor) for every pod set of ``wl`` that requests GPUs (the count Kueue
    admitted, else the spec's)."""
    return [(ps, int(wl.admitted_counts.get(ps.name, ps.count)), wl.flavors.get(ps.name, {}).get(GPU_RESOURCE))
            for ps in wl.pod_sets if ps.gpus_per_pod > 0]


def needs_text(sets: Iterable[GpuSet]) -> str:
    """``2 pods x 8 GPUs (workers) + 1 pod x 1 GPUs (head)``."""
    return " + ".join(f"{c} pod{'s' if c != 1 else ''} x {ps.gpus_per_pod} GPUs ({ps.name})" for ps, c, _ in sets)


# Ray resources counted in bytes (the others are counts: CPU, GPU, custom resources)
BYTE_RESOURCES = frozenset({"memory", "object_store_memory"})
_BINARY = ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB"))


def amount_text(resource: str, value: float) -> str:
    """One resource amount for a message: bytes in binary units (``64 GiB``, ``1.5 GiB``), counts as
    plain numbers (``8``, ``0.5``), never in exponent notation."""
    if resource in BYTE_RESOURCES:
        for size, unit in _BINARY:
            if abs(value) >= size:
                return f"{_plain(value / size, 1)} {unit}"
        return f"{value:.0f} B"
    return _plain(value, 3)


def _plain(value: float, decimals: int) -> str:
    """``value`` with thousands separators and at most ``decimals`` decimals, trailing zeros dropped."""
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def shape_text(shape: Mapping[str, float]) -> str:
    """A Ray resource bundle for a message: ``{CPU: 8, GPU: 1, memory: 64 GiB}`` (zero amounts left out)."""
    return "{" + ", ".join(f"{k}: {amount_text(k, v)}" for k, v in sorted(shape.items()) if v) + "}"


def blocks_text(blocks: Sequence[int]) -> str:
    """Free blocks for a message: the first ``MAX_BLOCKS_SHOWN``, then how many nodes in all."""
    shown = ", ".join(str(b) for b in blocks[:MAX_BLOCKS_SHOWN])
    if len(blocks) > MAX_BLOCKS_SHOWN:
        shown += f", ... ({len(blocks)} nodes)"
    return shown or "none"


# ------------------------------------------------------------------------------ Ray demand -> workers
Bundle = Mapping[str, float]  # one Ray resource bundle: resource name -> amount


def _fit_count(rem: tuple[float, ...], need: tuple[float, ...]) -> float:
    """How many bundles of ``need`` fit in ``rem`` (inf when the bundle asks for none of the keys)."""
    f = math.inf
    for r, x in zip(rem, need, strict=True):
        if x > 1e-12:
            f = min(f, math.floor((r + 1e-9) / x))
    return max(f, 0)


def _minus(rem: tuple[float, ...], need: tuple[float, ...], m: int) -> tuple[float, ...]:
    return tuple(r - x * m for r, x in zip(rem, need, strict=True))


def workers_needed(
    bundles: Sequence[tuple[Bundle, bool] | tuple[Bundle, bool, int]], cap: Mapping[str, float]
) -> int:
    """New workers of shape ``cap`` for ``bundles`` ((shape, strict_spread[, count]) entries): first-fit
    decreasing over the resources ``cap`` has, STRICT_SPREAD bundles one per new worker.

    Near-linear: identical bundles (same needs on those resources, same strategy) are placed as one
    run with a count, and identical workers are kept as one bin run with a count, so the cost is
    O(entries + shapes x bin runs), not O(bundles x workers).  Among shapes with equal needs the
    STRICT_SPREAD ones go first (their workers' leftover room then takes the others).
    """
    keys = [k for k in cap if cap[k] > 0]
    full = tuple(float(cap[k]) for k in keys)
    runs: dict[tuple[tuple[float, ...], bool], int] = {}
    for b in bundles:
        n = b[2] if len(b) == 3 else 1
        if n <= 0:
            continue
        need = tuple(max(0.0, float(b[0].get(k, 0.0))) for k in keys)
        runs[(need, b[1])] = runs.get((need, b[1]), 0) + n
    bins: list[tuple[tuple[float, ...], int]] = []  # (remaining room, how many workers have it), in opening order
    for need, spread in sorted(runs, key=lambda r: (tuple(-x for x in r[0]), not r[1])):
        n = runs[(need, spread)]
        if not spread:
            i = 0
            while n > 0 and i < len(bins):
                rem, count = bins[i]
                f = _fit_count(rem, need)
                if f == 0:
                    i += 1
                    continue
                if f == math.inf:  # needs none of the checked resources: all go in the first worker
                    n = 0
                    break
                fit = int(f)  # (the count as an int: n // fit, not a float)
                filled = min(count, n // fit)
                n -= filled * fit
                repl = [(_minus(rem, need, fit), filled)] if filled else []
                left = count - filled
                if left and n > 0:  # the next worker of this run takes the rest (fewer than f)
                    repl.append((_minus(rem, need, n), 1))
                    n, left = 0, left - 1
                if left:
                    repl.append((rem, left))
                bins[i:i + 1] = repl
                i += len(repl)
        if n <= 0:
            continue
        f = 1 if spread else _fit_count(full, need)
        if f == math.inf:
            bins.append((full, 1))
        elif f == 0:  # larger than a worker (not assigned here by assign_demand): one worker each
            bins.append((_minus(full, need, 1), n))
        else:
            fit = int(f)  # (the count as an int: n // fit, not a float)
            if n // fit:
                bins.append((_minus(full, need, fit), n // fit))
            if n % fit:
                bins.append((_minus(full, need, n % fit), 1))
    return sum(c for _, c in bins)


__all__ = [
    "GPU_RESOURCE",
    "MAX_BLOCKS_SHOWN",
    "Bin",
    "Bundle",
    "FreeBins",
    "GpuSet",
    "PackResult",
    "PodShape",
    "blocks_text",
    "capacity_bin",
    "gpu_pod_sets",
    "gpu_sets",
    "needs_text",
    "node_bin",
    "pack",
    "shape_of",
    "workers_needed",
]
