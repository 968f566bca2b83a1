"""HPA-style behavior normalization: stabilize -> rate-limit -> clamp, each step returning (value, reason, message).

The semantics are those of the Kubernetes HPA with ``spec.behavior`` (``autoscaling/v2``,
``pkg/controller/podautoscaler/horizontal.go``):

1. **Stabilize** over the recorded (unstabilized) recommendations: the scale-up limit is the *min* of
   the recommendations inside the scale-up window (and the new one), the scale-down limit the *max*
   of those inside the scale-down window; the current count is raised to the first and lowered to
   the second.
2. **Rate-limit** per policy: ``periodStart = current - added + removed`` over the policy's
   ``periodSeconds``; scale-up ``Pods`` -> ``periodStart + value``, ``Percent`` ->
   ``ceil(periodStart * (1 + value/100))``; scale-down ``Pods`` -> ``periodStart - value``,
   ``Percent`` -> ``int(periodStart * (1 - value/100))``.  ``selectPolicy`` Max picks the largest
   change, Min the smallest, Disabled forbids the direction.
3. **Clamp** to ``[min, max]``.

Pure: the clock (``now``) and the history (recommendations, scale events) are passed in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from autoscaler.core import reasons as R

PolicyType = Literal["Pods", "Percent"]
SelectPolicy = Literal["Max", "Min", "Disabled"]

# (unix seconds, replicas) and (unix seconds, signed replica change)
Recommendation = tuple[float, int]
ScaleEvent = tuple[float, int]
Step = tuple[int, str, str]

MAX_POLICY_VALUE = 100_000  # pods or percent per period; more is a typo (and would overflow the arithmetic)


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """One ``HPAScalingPolicy``: at most ``value`` pods (or percent) per ``period_seconds``."""

    type: PolicyType
    value: int
    period_seconds: int

    def __post_init__(self) -> None:
        if self.type not in ("Pods", "Percent"):
            raise ValueError(f"policy type must be Pods or Percent, not {self.type!r}")
        if not 0 < self.value <= MAX_POLICY_VALUE or not 0 < self.period_seconds <= 1800:
            raise ValueError(f"policy value must be in [1, {MAX_POLICY_VALUE}] and period in (0, 1800] s, "
                             f"got {self.value}, {self.period_seconds}")


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction of ``HorizontalPodAutoscalerBehavior`` (``HPAScalingRules``)."""

    policies: tuple[ScalingPolicy, ...]
    select_policy: SelectPolicy = "Max"
    stabilization_window_seconds: int = 0
    # derived from ``policies`` (not an input): the longest ``periodSeconds``, how far back the rate
    # limits look (the scaler keeps scale events that long); worked out once, read every decision
    longest_period: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.select_policy not in ("Max", "Min", "Disabled"):
            raise ValueError(f"selectPolicy must be Max, Min or Disabled, not {self.select_policy!r}")
        if not 0 <= self.stabilization_window_seconds <= 3600:
            raise ValueError("stabilization window must be within [0, 3600] s")
        object.__setattr__(self, "longest_period", max((p.period_seconds for p in self.policies), default=0))


# HPA defaults when spec.behavior is set and fields are left out (autoscaling/v2 defaults.go): made for
# a metric such as utilization, which a moment's spike can lift.
HPA_SCALE_UP = ScalingRules(
    policies=(ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15)),
    select_policy="Max",
    stabilization_window_seconds=0,
)
# queuepilot's scale-up default.  A scale-up is for Ray's pending demand (bundles that wait now, bin-packed
# into workers, those already starting subtracted) or a time window's min, not for a metric, so it is not
# rate-limited, as KubeRay's Ray autoscaler is not (upscalingMode Default: upscaling_speed 1000, at least
# 5 launches, i.e. launching <= max(5, 1000 x running)).  maxReplicas, the quota headroom and the time
# windows bound it; HPA_SCALE_UP (``Pods:4:15,Percent:100:15``) is the HPA's rate limit for those who want it.
DEFAULT_SCALE_UP = ScalingRules(
    policies=(ScalingPolicy("Pods", 5, 15), ScalingPolicy("Percent", MAX_POLICY_VALUE, 15)),
    select_policy="Max",
    stabilization_window_seconds=0,
)
DEFAULT_SCALE_DOWN = ScalingRules(
    policies=(ScalingPolicy("Percent", 100, 15),), select_policy="Max", stabilization_window_seconds=300
)


def stabilize(
    desired: int,
    current: int,
    recommendations: Sequence[Recommendation],
    up: ScalingRules,
    down: ScalingRules,
    now: float,
) -> Step:
    """HPA ``stabilizeRecommendationWithBehaviors``: ``recommendations`` are earlier unstabilized ones."""
    up_cutoff = now - up.stabilization_window_seconds
    down_cutoff = now - down.stabilization_window_seconds
    up_rec = desired
    down_rec = desired
    for t, rec in recommendations:
        if t > up_cutoff:
            up_rec = min(up_rec, rec)
        if t > down_cutoff:
            down_rec = max(down_rec, rec)
    value = current
    if value < up_rec:
        value = up_rec
    if value > down_rec:
        value = down_rec
    if value == desired:
        return value, "", ""
    if desired > current:
        return value, R.SCALE_UP_STABILIZED, (
            f"recent recommendations were lower: holding at {value} instead of {desired} "
            f"(scale-up window {up.stabilization_window_seconds}s)"
        )
    return value, R.SCALE_DOWN_STABILIZED, (
        f"recent recommendations were higher: holding at {value} instead of {desired} "
        f"(scale-down window {down.stabilization_window_seconds}s)"
    )


def _changed_in_period(events: Sequence[ScaleEvent], period_seconds: int, now: float, sign: int) -> int:
    cutoff = now - period_seconds
    return sum(abs(d) for t, d in events if t > cutoff and d * sign > 0)


def scale_up_limit(current: int, events: Sequence[ScaleEvent], rules: ScalingRules, now: float) -> int:
    """HPA ``calculateScaleUpLimitWithScalingRules``: the most replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for p in rules.policies:
        start = current - _changed_in_period(events, p.period_seconds, now, +1) + _changed_in_period(
            events, p.period_seconds, now, -1
        )
        if p.type == "Pods":
            proposals.append(start + p.value)
        else:
            proposals.append(math.ceil(start * (1 + p.value / 100)))
    if not proposals:
        return current
    return min(proposals) if rules.select_policy == "Min" else max(proposals)


def scale_down_limit(current: int, events: Sequence[ScaleEvent], rules: ScalingRules, now: float) -> int:
    """HPA ``calculateScaleDownLimitWithBehaviors``: the fewest replicas the policies allow now."""
    if rules.select_policy == "Disabled":
        return current
    proposals = []
    for p in rules.policies:
        start = current - _changed_in_period(events, p.period_seconds, now, +1) + _changed_in_period(
            events, p.period_seconds, now, -1
        )
        if p.type == "Pods":
            proposals.append(start - p.value)
        else:
            proposals.append(int(start * (1 - p.value / 100)))
    if not proposals:
        return current
    return max(proposals) if rules.select_policy == "Min" else min(proposals)


def rate_limit(
    desired: int,
    current: int,
    min_replicas: int,
    max_replicas: int,
    events: Sequence[ScaleEvent],
    up: ScalingRules,
    down: ScalingRules,
    now: float,
) -> Step:
    """HPA ``convertDesiredReplicasWithBehaviorRate``: step limits per period, then the min/max bounds."""
    if desired > current:
        if up.select_policy == "Disabled":
            return current, R.SCALING_DISABLED, "scale-up selectPolicy is Disabled"
        limit = max(current, scale_up_limit(current, events, up, now))
        if max_replicas > limit:
            allowed, reason, msg = limit, R.SCALE_UP_LIMIT, (
                f"scale-up limited to {limit} by the scale-up policies (wanted {desired})"
            )
        else:
            allowed, reason, msg = max_replicas, R.AT_MAX_REPLICAS, f"wanted {desired}, maxReplicas is {max_replicas}"
        if desired > allowed:
            return allowed, reason, msg
    elif desired < current:
        if down.select_policy == "Disabled":
            return current, R.SCALING_DISABLED, "scale-down selectPolicy is Disabled"
        limit = min(current, scale_down_limit(current, events, down, now))
        if min_replicas < limit:
            allowed, reason, msg = limit, R.SCALE_DOWN_LIMIT, (
                f"scale-down limited to {limit} by the scale-down policies (wanted {desired})"
            )
        else:
            allowed, reason, msg = min_replicas, R.BELOW_MIN_REPLICAS, (
                f"wanted {desired}, minReplicas is {min_replicas}"
            )
        if desired < allowed:
            return allowed, reason, msg
    return desired, "", ""


def clamp(desired: int, min_replicas: int, max_replicas: int) -> Step:
    """Bound to ``[min, max]`` (a last guard: ``rate_limit`` already honours the bounds when it moves)."""
    if desired > max_replicas:
        return max_replicas, R.ABOVE_MAX_REPLICAS, f"{desired} is above maxReplicas {max_replicas}"
    if desired < min_replicas:
        return min_replicas, R.BELOW_MIN_REPLICAS, f"{desired} is below minReplicas {min_replicas}"
    return desired, "", ""


@dataclass(frozen=True, slots=True)
class Normalized:
    replicas: int
    reason: str  # "" when no step changed the recommendation
    message: str
    stabilized: int  # after step 1 (for tests and explanation)


def normalize(
    desired: int,
    current: int,
    min_replicas: int,
    max_replicas: int,
    recommendations: Sequence[Recommendation],
    events: Sequence[ScaleEvent],
    up: ScalingRules,
    down: ScalingRules,
    now: float,
) -> Normalized:
    """The whole chain; the reason is the last step that changed the value (HPA's condition reason)."""
    reason, message = "", ""
    stabilized, r, m = stabilize(desired, current, recommendations, up, down, now)
    if r:
        reason, message = r, m
    limited, r, m = rate_limit(stabilized, current, min_replicas, max_replicas, events, up, down, now)
    if r:
        reason, message = r, m
    final, r, m = clamp(limited, min_replicas, max_replicas)
    if r:
        reason, message = r, m
    return Normalized(final, reason, message, stabilized)
