"""HPA ``behavior`` semantics, checked against the formulas of the Kubernetes HPA controller
(``pkg/controller/podautoscaler/horizontal.go``, restated in ``autoscaler/core/policy/behavior.py``).

Expected numbers are computed by hand from the cited formula in each test, not by the code under test.
"""

from __future__ import annotations

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.behavior import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    HPA_SCALE_UP,
    MAX_POLICY_VALUE,
    ScalingPolicy,
    ScalingRules,
    normalize,
    rate_limit,
    scale_down_limit,
    scale_up_limit,
    stabilize,
)

NOW = 1_000.0


def rules(*policies: tuple[str, int, int], select: str = "Max", window: int = 0) -> ScalingRules:
    return ScalingRules(tuple(ScalingPolicy(t, v, p) for t, v, p in policies), select, window)


# 4a step 2, scale-up: periodStart = current - added; Pods -> periodStart + value;
# Percent -> ceil(periodStart * (1 + value/100)); Max picks the largest, Min the smallest.
@pytest.mark.parametrize(
    ("current", "events", "select", "expected"),
    [
        (3, [], "Max", 7),  # Pods: 3+4=7; Percent: ceil(3*2)=6 -> Max 7
        (3, [], "Min", 6),  # -> Min 6
        (6, [(NOW - 10, 3)], "Max", 7),  # added 3 within 15 s: start 3 -> Pods 7, Percent 6 -> 7
        (6, [(NOW - 20, 3)], "Max", 12),  # the event is outside the 15 s period: start 6 -> Pods 10, Percent 12 -> 12
        (0, [], "Max", 4),  # start 0: Pods 4, Percent ceil(0)=0 -> 4
    ],
)
def test_scale_up_limit_default_policies(current, events, select, expected):
    r = rules(("Pods", 4, 15), ("Percent", 100, 15), select=select)
    assert scale_up_limit(current, events, r, NOW) == expected


# 4a step 2, scale-down: periodStart = current + removed; Pods -> periodStart - value;
# Percent -> int(periodStart * (1 - value/100)); Max = largest change = smallest count.
@pytest.mark.parametrize(
    ("current", "events", "select", "expected"),
    [
        (10, [], "Max", 5),  # Percent 50: int(10*0.5)=5; Pods 3: 7 -> largest change 5
        (10, [], "Min", 7),  # smallest change 7
        (10, [(NOW - 30, -2)], "Max", 6),  # removed 2 within 60 s: start 12 -> int(6)=6, Pods 9 -> 6
        (10, [(NOW - 61, -2)], "Max", 5),  # outside the period: as with no events
    ],
)
def test_scale_down_limit(current, events, select, expected):
    r = rules(("Percent", 50, 60), ("Pods", 3, 60), select=select)
    assert scale_down_limit(current, events, r, NOW) == expected


def test_percent_rounding_up_ceil_down_truncates():
    # up: ceil(7 * 1.1) = ceil(7.7) = 8; down: int(7 * 0.9) = int(6.3) = 6
    assert scale_up_limit(7, [], rules(("Percent", 10, 60)), NOW) == 8
    assert scale_down_limit(7, [], rules(("Percent", 10, 60)), NOW) == 6


def test_disabled_select_policy_blocks_the_direction():
    off = rules(("Pods", 4, 15), select="Disabled")
    assert rate_limit(9, 3, 0, 20, [], off, DEFAULT_SCALE_DOWN, NOW) == (3, R.SCALING_DISABLED, "scale-up selectPolicy is Disabled")
    value, reason, _ = rate_limit(1, 5, 0, 20, [], DEFAULT_SCALE_UP, off, NOW)
    assert (value, reason) == (5, R.SCALING_DISABLED)


# 4a step 1: scale-down takes the MAX of the recommendations inside the scale-down window.
def test_scale_down_stabilization_keeps_the_max_in_the_window():
    down = rules(("Percent", 100, 15), window=300)
    recs = [(NOW - 200, 8), (NOW - 100, 6)]
    value, reason, _ = stabilize(4, 8, recs, DEFAULT_SCALE_UP, down, NOW)
    assert (value, reason) == (8, R.SCALE_DOWN_STABILIZED)  # max(4, 8, 6) = 8
    recs = [(NOW - 301, 8), (NOW - 100, 6)]
    assert stabilize(4, 8, recs, DEFAULT_SCALE_UP, down, NOW)[0] == 6  # 8 is outside: max(4, 6) = 6


# 4a step 1: scale-up takes the MIN of the recommendations inside the scale-up window.
def test_scale_up_stabilization_keeps_the_min_in_the_window():
    up = rules(("Pods", 4, 15), window=60)
    value, reason, _ = stabilize(9, 4, [(NOW - 30, 5)], up, DEFAULT_SCALE_DOWN, NOW)
    assert (value, reason) == (5, R.SCALE_UP_STABILIZED)  # min(9, 5) = 5
    # default scale-up window 0: the new recommendation is taken as is
    assert stabilize(9, 4, [(NOW - 30, 5)], DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[0] == 9


def test_hpa_defaults_and_the_scale_down_default_match_hpa():
    # scaleUp: window 0, [Pods 4/15 s, Percent 100/15 s], Max; scaleDown: window 300, [Percent 100/15 s], Max
    assert HPA_SCALE_UP.stabilization_window_seconds == 0
    assert {(p.type, p.value, p.period_seconds) for p in HPA_SCALE_UP.policies} == {("Pods", 4, 15), ("Percent", 100, 15)}
    assert DEFAULT_SCALE_DOWN.stabilization_window_seconds == 300
    assert [(p.type, p.value, p.period_seconds) for p in DEFAULT_SCALE_DOWN.policies] == [("Percent", 100, 15)]
    assert HPA_SCALE_UP.select_policy == DEFAULT_SCALE_DOWN.select_policy == "Max"


def test_the_default_scale_up_is_rays_unlimited_upscaling():
    # Ray's autoscaler on KubeRay (upscaling_speed 1000): launching <= max(5, 1000 x running); the default
    # rule is its HPA form: Pods 5 (from 0: 5 workers at once), Percent 100000 (start x 1001)
    assert DEFAULT_SCALE_UP.stabilization_window_seconds == 0 and DEFAULT_SCALE_UP.select_policy == "Max"
    assert {(p.type, p.value, p.period_seconds) for p in DEFAULT_SCALE_UP.policies} == {
        ("Pods", 5, 15), ("Percent", MAX_POLICY_VALUE, 15)}
    assert scale_up_limit(0, [], DEFAULT_SCALE_UP, NOW) == 5
    assert scale_up_limit(3, [], DEFAULT_SCALE_UP, NOW) == 3003  # ceil(3 * 1001)
    # a burst from 3 workers to 40 in one step (the HPA's rule: 7, then 14, 28, 40 a period apart)
    assert rate_limit(40, 3, 0, 50, [], DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (40, "")
    assert rate_limit(40, 3, 0, 50, [], HPA_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (7, R.SCALE_UP_LIMIT)


def test_rate_limit_then_max_bound():
    # wanted 20 from 3: limit max(3+4, ceil(3*2)) = 7, maxReplicas 5 is lower -> 5, AtMaxReplicas
    assert rate_limit(20, 3, 0, 5, [], HPA_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (5, R.AT_MAX_REPLICAS)
    # maxReplicas 50: the policy limit 7 applies
    assert rate_limit(20, 3, 0, 50, [], HPA_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (7, R.SCALE_UP_LIMIT)
    # the default (not rate-limited): maxReplicas alone bounds it
    assert rate_limit(80, 3, 0, 50, [], DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (50, R.AT_MAX_REPLICAS)
    # scale-down to 0 with minReplicas 2 -> 2
    assert rate_limit(0, 6, 2, 50, [], DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)[:2] == (2, R.BELOW_MIN_REPLICAS)


def test_normalize_chain_stabilize_then_rate_then_clamp():
    down = rules(("Pods", 1, 60), window=120)
    # stabilization: max(2, 5 at t-60) = 5 -> from current 6 to 5; rate: Pods 1/60 s, start 6 -> 5 ok
    n = normalize(2, 6, 0, 10, [(NOW - 60, 5)], [], DEFAULT_SCALE_UP, down, NOW)
    assert (n.stabilized, n.replicas, n.reason) == (5, 5, R.SCALE_DOWN_STABILIZED)
    # without the window: 2 wanted, but only 1 pod per 60 s -> 5, ScaleDownLimit
    n = normalize(2, 6, 0, 10, [], [], DEFAULT_SCALE_UP, rules(("Pods", 1, 60)), NOW)
    assert (n.replicas, n.reason) == (5, R.SCALE_DOWN_LIMIT)
    # current above max and no change wanted: clamp brings it down
    n = normalize(12, 12, 0, 10, [], [], DEFAULT_SCALE_UP, DEFAULT_SCALE_DOWN, NOW)
    assert (n.replicas, n.reason) == (10, R.ABOVE_MAX_REPLICAS)


def test_invalid_rules_are_refused():
    with pytest.raises(ValueError):
        ScalingPolicy("Nodes", 1, 15)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        ScalingPolicy("Pods", 0, 15)
    with pytest.raises(ValueError):
        ScalingRules((), "Sometimes")  # type: ignore[arg-type]
