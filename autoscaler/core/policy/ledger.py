"""The reservation ledger: GPUs promised to workloads we marked Ready whose pods do not run yet.

Between our ``Ready`` and the workload's pods being bound there is a gap (Kueue admits, the job
unsuspends, pods get created and scheduled) in which the node still shows the GPUs as free.  The
ledger holds them so that the next decision cannot promise the same GPUs twice.

How a reservation ends (``release``):
- the workload is gone (deleted, or re-created with another uid), evicted, finished, deactivated, or
  lost its quota reservation;
- its pods run: we cannot see which pod belongs to which workload in the snapshot, so each node's
  ``gpu_requested`` is remembered (``baseline``); any increase since the last pass is taken off the
  reservations on that node, oldest promise first.  An unrelated pod landing on the node also
  consumes the reservation — that is the safe direction: free GPUs (allocatable − requested −
  promised) can only be counted lower, never twice;
- ``timeout`` seconds passed since the promise (pods never came: stuck image pull, quota race).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from autoscaler.core.snapshot import ClusterSnapshot, frozen_map


@dataclass(frozen=True, slots=True)
class Reservation:
    workload: str  # "ns/name"
    uid: str
    by_flavor: Mapping[str, Mapping[str, int]]  # flavor -> node -> GPUs still promised
    promised_at: float
    placement: Mapping[str, Mapping[str, int]] = field(default_factory=frozen_map)  # pod set -> node -> GPUs

    @property
    def total(self) -> int:
        return sum(sum(nodes.values()) for nodes in self.by_flavor.values())

    def on_node(self, node: str) -> int:
        return sum(nodes.get(node, 0) for nodes in self.by_flavor.values())


@dataclass(frozen=True, slots=True)
class Ledger:
    reservations: Mapping[str, Reservation] = field(default_factory=frozen_map)
    baseline: Mapping[str, int] = field(default_factory=frozen_map)  # node -> gpu_requested last seen

    def promised_on(self, node: str) -> int:
        """GPUs promised on ``node`` across all reservations."""
        return sum(r.on_node(node) for r in self.reservations.values())

    def promised_by_node(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.reservations.values():
            for nodes in r.by_flavor.values():
                for n, g in nodes.items():
                    out[n] = out.get(n, 0) + g
        return out

    def promised_by_flavor(self) -> dict[str, int]:
        """Flavor -> GPUs promised (``queuepilot_admission_reserved_gpus``)."""
        out: dict[str, int] = {}
        for r in self.reservations.values():
            for f, nodes in r.by_flavor.items():
                out[f] = out.get(f, 0) + sum(nodes.values())
        return out

    def without(self, key: str) -> Ledger:
        if key not in self.reservations:
            return self
        res = {k: v for k, v in self.reservations.items() if k != key}
        return replace(self, reservations=frozen_map(res))

    def reserve(
        self, key: str, uid: str, by_flavor: Mapping[str, Mapping[str, int]], snapshot: ClusterSnapshot, now: float,
        placement: Mapping[str, Mapping[str, int]] | None = None,
    ) -> Ledger:
        """Add (or replace) ``key``'s reservation; remembers the nodes' current requests as baseline."""
        clean = {f: frozen_map({n: g for n, g in nodes.items() if g > 0}) for f, nodes in by_flavor.items()}
        clean = {f: nodes for f, nodes in clean.items() if nodes}
        res = dict(self.reservations)
        if not clean:
            res.pop(key, None)
            return replace(self, reservations=frozen_map(res))
        res[key] = Reservation(workload=key, uid=uid, by_flavor=frozen_map(clean), promised_at=now,
                               placement=frozen_map(placement or {}))
        base = dict(self.baseline)
        for nodes in clean.values():
            for n in nodes:
                if n not in base and n in snapshot.nodes:
                    base[n] = snapshot.nodes[n].gpu_requested
        return Ledger(reservations=frozen_map(res), baseline=frozen_map(base))

    def reserve_all(
        self,
        entries: Iterable[tuple[str, str, Mapping[str, Mapping[str, int]], float, Mapping[str, Mapping[str, int]] | None]],
        snapshot: ClusterSnapshot,
    ) -> Ledger:
        """``reserve`` for each (key, uid, by_flavor, promised_at, placement) in turn, in one copy:
        O(ledger + entries) instead of a copy of the ledger per entry."""
        res = dict(self.reservations)
        base = dict(self.baseline)
        for key, uid, by_flavor, now, placement in entries:
            clean = {f: frozen_map({n: g for n, g in nodes.items() if g > 0}) for f, nodes in by_flavor.items()}
            clean = {f: nodes for f, nodes in clean.items() if nodes}
            if not clean:
                res.pop(key, None)
                continue
            res[key] = Reservation(workload=key, uid=uid, by_flavor=frozen_map(clean), promised_at=now,
                                   placement=frozen_map(placement or {}))
            for nodes in clean.values():
                for n in nodes:
                    if n not in base and n in snapshot.nodes:
                        base[n] = snapshot.nodes[n].gpu_requested
        return Ledger(reservations=frozen_map(res), baseline=frozen_map(base))


def _ended(r: Reservation, snapshot: ClusterSnapshot, now: float, timeout: float) -> bool:
    wl = snapshot.workloads.get(r.workload)
    if wl is None or (r.uid and wl.uid != r.uid):
        return True
    if wl.evicted or wl.finished or not wl.active or not wl.quota_reserved:
        return True
    return now - r.promised_at > timeout


def release(ledger: Ledger, snapshot: ClusterSnapshot, now: float, timeout: float) -> Ledger:
    """Drop ended reservations and consume those whose GPUs now show as requested on their nodes."""
    live = sorted(
        (r for r in ledger.reservations.values() if not _ended(r, snapshot, now, timeout)),
        key=lambda r: (r.promised_at, r.workload),
    )
    # GPUs newly requested per node since the last pass, to be taken off the reservations there.
    delta: dict[str, int] = {}
    for node, before in ledger.baseline.items():
        n = snapshot.nodes.get(node)
        if n is not None:
            delta[node] = max(0, n.gpu_requested - before)
    kept: dict[str, Reservation] = {}
    for r in live:
        by_flavor: dict[str, Mapping[str, int]] = {}
        for f, nodes in r.by_flavor.items():
            left: dict[str, int] = {}
            for node, g in nodes.items():
                if node not in snapshot.nodes:
                    continue  # node gone: its GPUs are gone too
                used = min(g, delta.get(node, 0))
                if used:
                    delta[node] -= used
                if g - used > 0:
                    left[node] = g - used
            if left:
                by_flavor[f] = frozen_map(left)
        if by_flavor:
            kept[r.workload] = replace(r, by_flavor=frozen_map(by_flavor))
    nodes_in_use = {n for r in kept.values() for nodes in r.by_flavor.values() for n in nodes}
    baseline = {n: snapshot.nodes[n].gpu_requested for n in nodes_in_use}
    return Ledger(reservations=frozen_map(kept), baseline=frozen_map(baseline))
