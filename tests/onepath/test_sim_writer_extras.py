"""The simulator's Writer answers the stall detector's and the MultiKueue dispatcher's calls as the
Kubernetes writer would where the simulated world can tell (one cluster, no MultiKueue)."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.policy.stall import StalledWorkload
from simulator.writer import SimWriter


@dataclass
class _Workload:
    uid: str = "u1"
    inactive: bool = False
    check_message: str = ""

    def holds_quota(self) -> bool:
        return not self.inactive


class _World:
    def __init__(self) -> None:
        self.w = _Workload()
        self.deactivated: list[str] = []

    def find_workload(self, namespace: str, name: str) -> _Workload | None:
        return self.w if (namespace, name) == ("team-a", "job") else None

    def kueue_check_rejected(self, w: _Workload, message: str) -> None:
        w.inactive = True
        self.deactivated.append(message)


def _stalled(uid: str = "u1", name: str = "job") -> StalledWorkload:
    return StalledWorkload("team-a", name, uid, "7", "cq-a", "RayJob", "job", 8, 1800.0, True, True,
                           "StalledWorkload", "every GPU idle for 30m")


async def test_deactivate_releases_the_workload_once_and_guards_identity():
    world = _World()
    writer = SimWriter(world)  # type: ignore[arg-type]
    assert (await writer.deactivate_workload(_stalled("other-uid"), 0.0)).detail == "recreated"
    assert (await writer.deactivate_workload(_stalled(name="gone"), 0.0)).detail == "gone"
    assert world.deactivated == []
    assert (await writer.deactivate_workload(_stalled(), 0.0)).result == "written"
    assert world.w.inactive and len(world.deactivated) == 1 and "stalled for 1800s" in world.deactivated[0]
    assert (await writer.deactivate_workload(_stalled(), 1.0)).result == "unchanged"


async def test_dry_run_deactivates_nothing():
    world = _World()
    out = await SimWriter(world, dry_run=True).deactivate_workload(_stalled(), 0.0)  # type: ignore[arg-type]
    assert out.result == "dry_run" and not world.w.inactive
