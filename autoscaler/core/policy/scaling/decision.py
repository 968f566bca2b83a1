"""What a group's scaling decision says: each step's ``Step``, the ``GroupDecision``, and the result
for one RayCluster (``ScalingResult``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, NamedTuple

if TYPE_CHECKING:
    from autoscaler.core.policy.scaling.history import GroupHistory

Direction = Literal["up", "down", "hold"]
WriteMode = Literal["replicas", "min_max", "none"]


class Step(NamedTuple):
    """What one step of a group decision says: the replicas it arrives at, and why ("" when it left
    the value alone)."""

    value: int
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class GroupDecision:
    namespace: str
    cluster: str
    group: str
    direction: Direction
    reason: str
    message: str
    current: int
    desired: int
    min_replicas: int
    max_replicas: int
    workers_to_delete: tuple[str, ...] = ()
    write: WriteMode = "none"
    new_min: int | None = None
    new_max: int | None = None
    idle_gpus: int = 0
    pending_gpus: int = 0
    infeasible: tuple[str, ...] = ()
    clear_workers_to_delete: bool = False
    resource_version: str = ""
    # the pods of ``workers_to_delete`` that hold Ray actors/tasks (their work is killed)
    reclaimed: tuple[str, ...] = ()
    group_index: int = 0  # the group's position in spec.workerGroupSpecs, as the snapshot saw it

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.cluster, self.group)


@dataclass(frozen=True, slots=True)
class ScalingResult:
    decisions: tuple[GroupDecision, ...]
    history: Mapping[str, GroupHistory]  # group name -> history
    warnings: tuple[str, ...]  # malformed annotations (-> Warning Events)
