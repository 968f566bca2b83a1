"""What one worker group's past decisions leave behind, kept by the caller between passes: the
recommendations the stabilization windows look back on, the scale events the step limits count, the
idle timers, the minReplicas and maxReplicas of the in-tree autoscaler case, the last launch
(down-after-up) and the reclaims (the hourly budget)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.snapshot import frozen_map

RECLAIM_BUDGET_PERIOD = 3600.0  # the reclaim budget counts the workers reclaimed in this many seconds


@dataclass(frozen=True, slots=True)
class GroupHistory:
    """What one group's past decisions leave behind (kept by the caller between passes)."""

    recommendations: tuple[tuple[float, int], ...] = ()  # (t, unstabilized replicas)
    scale_events: tuple[tuple[float, int], ...] = ()  # (t, signed replica change written)
    idle_since: Mapping[str, float] = field(default_factory=frozen_map)  # pod -> first seen idle
    user_max: int | None = None  # in-tree autoscaler case: the user's maxReplicas
    written_max: int | None = None  # the maxReplicas we last wrote
    user_min: int | None = None  # in-tree autoscaler case: the user's minReplicas (a time window raises it)
    written_min: int | None = None  # the minReplicas we last wrote
    last_launch: float | None = None  # when we last launched workers here (scale-up or replacement)
    reclaims: tuple[float, ...] = ()  # one entry per worker reclaimed, for the hourly budget

    def rollback(self, old: GroupHistory) -> GroupHistory:
        """This pass's history after its write failed: keep what was observed (recommendations, idle
        timers, the user's maxReplicas) and forget the change that did not happen (the scale event,
        the min/maxReplicas written, the launch and the reclaims), so that it does not count against the
        step limits, the down-after-up hold or the reclaim budget."""
        return replace(self, scale_events=old.scale_events, written_max=old.written_max,
                       written_min=old.written_min, last_launch=old.last_launch, reclaims=old.reclaims)

    def pruned(self, policy: ScalingDefaults, now: float) -> GroupHistory:
        """Without the recommendations, scale events and reclaims older than any window or period
        that still looks back."""
        keep_rec = max(policy.scale_up.stabilization_window_seconds, policy.scale_down.stabilization_window_seconds)
        keep_ev = max(policy.scale_up.longest_period, policy.scale_down.longest_period)
        return replace(self, recommendations=_recent(self.recommendations, now, keep_rec),
                       scale_events=_recent(self.scale_events, now, keep_ev),
                       reclaims=tuple(t for t in self.reclaims if now - t < RECLAIM_BUDGET_PERIOD))

    def reclaims_in_period(self, now: float) -> int:
        """Workers reclaimed in this group during the last hour (the budget's period)."""
        return sum(1 for t in self.reclaims if now - t < RECLAIM_BUDGET_PERIOD)

    def launch_hold(self, policy: ScalingDefaults, now: float) -> float:
        """Seconds left of the down-after-up hold (0 when no launch is that recent)."""
        if self.last_launch is None:
            return 0.0
        return max(0.0, policy.down_after_up_seconds - (now - self.last_launch))

    def seeing_max(self, max_replicas: int) -> GroupHistory:
        """In-tree autoscaler case: a maxReplicas that is not the one we wrote is the user's."""
        if self.written_max is None or max_replicas != self.written_max or self.user_max is None:
            return replace(self, user_max=max_replicas)
        return self

    def seeing_min(self, min_replicas: int) -> GroupHistory:
        """In-tree autoscaler case: a minReplicas that is not the one we wrote is the user's."""
        if self.written_min is None or min_replicas != self.written_min or self.user_min is None:
            return replace(self, user_min=min_replicas)
        return self

    def scaled(self, now: float, change: int) -> GroupHistory:
        return replace(self, scale_events=(*self.scale_events, (now, change)))


def _recent(entries: tuple[tuple[float, int], ...], now: float, keep: float) -> tuple[tuple[float, int], ...]:
    """The (t, value) entries younger than ``keep`` seconds."""
    return tuple(e for e in entries if now - e[0] < keep)
