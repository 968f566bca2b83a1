"""The simulated GPU nodes: flavors, nodes x GPUs, health, allocation, placement.

A GPU is owned by at most one pod (``owner``: a string pod id).  Placement is the kube-scheduler's
job in the simulation: best fit (the node with the fewest free healthy GPUs that still fits the
pod), all pods of a gang or none.  A failed GPU (XID 79) stays with its pod until the pod ends
(the pod keeps running degraded; docs/simulation.md), then sits unhealthy until repaired.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field


@dataclass(slots=True)
class SimNode:
    name: str
    flavor: str
    gpus: int
    healthy: list[bool] = field(default_factory=list)
    owner: list[str | None] = field(default_factory=list)
    version: int = 0  # bumped on every change (the snapshot builder caches NodeStates by it)

    def __post_init__(self) -> None:
        if not self.healthy:
            self.healthy = [True] * self.gpus
        if not self.owner:
            self.owner = [None] * self.gpus

    @property
    def free(self) -> int:
        """Healthy GPUs no pod holds."""
        return sum(1 for h, o in zip(self.healthy, self.owner, strict=True) if h and o is None)

    @property
    def allocated(self) -> int:
        return sum(1 for o in self.owner if o is not None)


SPREAD = "spread"  # kube-scheduler's default scoring (NodeResourcesFit LeastAllocated): the emptiest node
PACK = "pack"  # NodeResourcesFit MostAllocated (bin packing): the fullest node that fits
PLACEMENTS = (SPREAD, PACK)


class SimCluster:
    """Nodes of one or more flavors; ``place``/``release`` keep every GPU owned by at most one pod.

    ``placement`` is the scheduler's choice among the nodes a pod fits on: ``spread`` (the
    kube-scheduler default, LeastAllocated: the node with the most free GPUs) or ``pack``
    (MostAllocated: the fewest free GPUs that fit)."""

    def __init__(self, flavors: dict[str, int], gpus_per_node: int = 8, placement: str = SPREAD) -> None:
        if placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")
        self.placement = placement
        self.nodes: list[SimNode] = []
        self.flavors: dict[str, list[SimNode]] = {}
        for flavor, count in flavors.items():
            nodes = [SimNode(f"{flavor}-node-{i:03d}", flavor, gpus_per_node) for i in range(count)]
            self.flavors[flavor] = nodes
            self.nodes.extend(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.pod_gpus: dict[str, list[tuple[SimNode, int]]] = {}
        self._free: dict[str, int] = {n.name: n.gpus for n in self.nodes}
        self._allocated = 0  # GPUs owned by a pod (== sum of len(pod_gpus values))
        self.version = 0  # bumped on every change to any node (simulator/fleet.py caches by it; SnapshotBuilder uses watchers)
        # each snapshot builder's set of nodes changed since it last built its node map (it empties its
        # own), by the set's id: held weakly, an entry goes with its builder (``watch``)
        self.watchers: weakref.WeakValueDictionary[int, set[str]] = weakref.WeakValueDictionary()

    # ---------------------------------------------------------------------------- accounting
    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def free_blocks(self, flavor: str) -> list[int]:
        return sorted((self._free[n.name] for n in self.flavors.get(flavor, ()) if self._free[n.name]), reverse=True)

    def free_gpus(self, flavor: str) -> int:
        return sum(self._free[n.name] for n in self.flavors.get(flavor, ()))

    def allocated_gpus(self) -> int:
        return self._allocated

    def unhealthy_gpus(self) -> int:
        return sum(1 for n in self.nodes for h in n.healthy if not h)

    # ---------------------------------------------------------------------------- placement
    def fits(self, flavor: str, pods: list[int]) -> bool:
        """Whether pods (GPUs each) can all be placed now (best fit, largest first)."""
        free = sorted((self._free[n.name] for n in self.flavors.get(flavor, ())), reverse=True)
        for need in sorted(pods, reverse=True):
            best = -1
            for i, f in enumerate(free):
                if f >= need and (best < 0 or f < free[best]):
                    best = i
            if best < 0:
                return False
            free[best] -= need
        return True

    def place(self, flavor: str, pods: list[tuple[str, int]]) -> bool:
        """Bind every pod (id, GPUs) or none."""
        if not self.fits(flavor, [g for _, g in pods]):
            return False
        for pod_id, need in sorted(pods, key=lambda p: -p[1]):
            nodes = [n for n in self.flavors[flavor] if self._free[n.name] >= need]
            if self.placement == SPREAD:
                node = min(nodes, key=lambda n: (-self._free[n.name], n.name))
            else:
                node = min(nodes, key=lambda n: (self._free[n.name], n.name))
            got: list[tuple[SimNode, int]] = []
            for i in range(node.gpus):
                if len(got) == need:
                    break
                if node.healthy[i] and node.owner[i] is None:
                    node.owner[i] = pod_id
                    got.append((node, i))
            self._free[node.name] -= need
            self._touch(node)
            self._allocated += len(got)
            self.pod_gpus[pod_id] = got
        return True

    def place_on(self, pods: list[tuple[str, int]], by_node: dict[str, int]) -> bool:
        """Bind pods onto the given nodes (node -> GPUs, e.g. an admission check's placement), or none."""
        room = {n: g for n, g in by_node.items() if n in self.by_name and self._free[n] >= g}
        if len(room) != len(by_node):
            return False
        plan: list[tuple[str, str, int]] = []
        left = dict(room)
        for pod_id, need in sorted(pods, key=lambda p: -p[1]):
            node = next((n for n in sorted(left) if left[n] >= need), None)
            if node is None:
                return False
            left[node] -= need
            plan.append((pod_id, node, need))
        for pod_id, node_name, need in plan:
            sim_node = self.by_name[node_name]
            got: list[tuple[SimNode, int]] = []
            for i in range(sim_node.gpus):
                if len(got) == need:
                    break
                if sim_node.healthy[i] and sim_node.owner[i] is None:
                    sim_node.owner[i] = pod_id
                    got.append((sim_node, i))
            self._free[node_name] -= need
            self._touch(sim_node)
            self._allocated += len(got)
            self.pod_gpus[pod_id] = got
        return True

    def release(self, pod_id: str) -> None:
        for node, i in self.pod_gpus.pop(pod_id, ()):
            node.owner[i] = None
            if node.healthy[i]:
                self._free[node.name] += 1
            self._touch(node)
            self._allocated -= 1

    def node_of(self, pod_id: str) -> str | None:
        got = self.pod_gpus.get(pod_id)
        return got[0][0].name if got else None

    # ------------------------------------------------------------------------------- health
    def fail(self, node: SimNode, index: int) -> bool:
        """Mark a GPU unhealthy; False if it already was."""
        if not node.healthy[index]:
            return False
        node.healthy[index] = False
        if node.owner[index] is None:
            self._free[node.name] -= 1
        self._touch(node)
        return True

    def repair(self, node: SimNode, index: int) -> None:
        if node.healthy[index]:
            return
        node.healthy[index] = True
        if node.owner[index] is None:
            self._free[node.name] += 1
        self._touch(node)

    def watch(self, changed: set[str]) -> None:
        """From now on every node that changes is added to ``changed`` (the caller empties it), while
        the caller holds it."""
        self.watchers[id(changed)] = changed

    def _touch(self, node: SimNode) -> None:
        node.version += 1
        self.version += 1
        for changed in self.watchers.values():
            changed.add(node.name)

    def check(self) -> None:
        """Invariants: the free counts match the GPU table; each GPU has at most one owner."""
        assert self._allocated == sum(len(v) for v in self.pod_gpus.values()), "allocated count drifted"
        seen: set[tuple[str, int]] = set()
        for pod, gpus in self.pod_gpus.items():
            for node, i in gpus:
                assert node.owner[i] == pod, f"{node.name}/{i} owned by {node.owner[i]}, expected {pod}"
                assert (node.name, i) not in seen, f"{node.name}/{i} given twice"
                seen.add((node.name, i))
        for n in self.nodes:
            assert self._free[n.name] == n.free, f"{n.name}: free {self._free[n.name]} != {n.free}"
            owned = sum(1 for i in range(n.gpus) if n.owner[i] is not None)
            assert owned == sum(1 for (nn, _) in seen if nn == n.name)
