"""Per-RayCluster policy overrides from ``queuepilot.io/*`` annotations.

``policy_from_annotations(annotations, defaults) -> (ScalingDefaults, warnings)``: every annotation
that parses overrides its default; one that does not (or an unknown ``queuepilot.io/`` key, most
likely a typo) leaves the default in place and adds a warning, which the scaler turns into a
Warning Event ``MalformedAnnotation`` on the RayCluster.

Formats (docs/autoscaling.md has examples):

=========================================== ==========================================================
``queuepilot.io/autoscale``                 ``"true"`` opts the cluster in (anything else: left alone)
``queuepilot.io/target-gpu-utilization``    ratio ``0.7`` or ``70%``
``queuepilot.io/idle-gpu-utilization``      ratio under which a GPU worker counts as idle
``queuepilot.io/idle-window``               duration ``600``, ``600s``, ``10m``, ``1h30m`` (at most 30 days)
``queuepilot.io/pressured-idle-window``     duration used while other queues wait (must be <= idle-window)
``queuepilot.io/queue-pressure-wait``       duration another queue's workload must wait to count
``queuepilot.io/target-cpu-utilization``    ratio (CPU-only groups)
``queuepilot.io/target-memory-utilization`` ratio (CPU-only groups)
``queuepilot.io/idle-cpu-utilization``      ratio (CPU-only groups)
``queuepilot.io/tolerance``                 float in [0, 1)
``queuepilot.io/scale-up-policy``           ``"Pods:4:15,Percent:100:15;select=Max;window=0s"`` (value
                                            1-100000, period 1-1800 s, window 0-3600 s)
``queuepilot.io/scale-down-policy``         ``"Pods:1:60;select=Min;window=5m"``
``queuepilot.io/reclaim-idle-actors``       ``"true"``: workers whose Ray actors leave the GPU idle may go
                                            (the actors are killed), also replaced while Ray demand
                                            queues; ``"false"`` (default)
``queuepilot.io/reclaim-window``            duration the GPU must stay under the idle threshold to reclaim
``queuepilot.io/reclaim-grace``             duration: workers younger than this are never reclaimed
``queuepilot.io/reclaim-budget``            whole number 0-1000: most workers reclaimed per hour
``queuepilot.io/down-after-up``             duration 0-1h: no worker removed this long after a launch
``queuepilot.io/keep-spare-for-target``     ``"true"``: keep empty workers while the busy ones run over the
                                            utilization target; ``"false"`` (default)
``queuepilot.io/annotate-recommendation``   ``"true"``: the controller writes its right-sizing
                                            recommendation onto the RayCluster as
                                            ``queuepilot.io/recommendation`` (JSON), when the
                                            controller's ``--recommendation-annotations`` is on;
                                            ``"false"`` (default).  Read by the recommendation
                                            reconciler, not here (``annotate_recommendation``)
=========================================== ==========================================================

``queuepilot.io/recommendation`` is written by the controller (never read as policy): both keys are
known, so they give no "unknown annotation" warning.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace

from autoscaler.core.policy.behavior import ScalingRules
from autoscaler.core.policy.config import (
    MAX_RECLAIM_BUDGET,
    ScalingDefaults,
    brief_repr,
    format_rules,
    parse_bool,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_ratio,
    parse_rules,
)
from autoscaler.core.snapshot import AUTOSCALE_ANNOTATION

PREFIX = "queuepilot.io/"

# Applies one annotation value to the policy so far; raises ValueError when the value is malformed
# (the dataclass's own checks catch values that parse but do not fit, e.g. a window past its limit).
Setter = Callable[[str, ScalingDefaults], ScalingDefaults]

# annotation -> (the field it sets, for the warning; how it sets it)
_FIELDS: dict[str, tuple[str, Setter]] = {
    PREFIX + "target-gpu-utilization": (
        "target_gpu_utilization", lambda v, p: replace(p, target_gpu_utilization=parse_ratio(v))),
    PREFIX + "idle-gpu-utilization": (
        "idle_gpu_utilization", lambda v, p: replace(p, idle_gpu_utilization=parse_ratio(v))),
    PREFIX + "idle-window": (
        "idle_window_seconds", lambda v, p: replace(p, idle_window_seconds=parse_duration(v))),
    PREFIX + "pressured-idle-window": (
        "pressured_idle_window_seconds", lambda v, p: replace(p, pressured_idle_window_seconds=parse_duration(v))),
    PREFIX + "queue-pressure-wait": (
        "queue_pressure_wait_seconds", lambda v, p: replace(p, queue_pressure_wait_seconds=parse_duration(v))),
    PREFIX + "target-cpu-utilization": (
        "target_cpu_utilization", lambda v, p: replace(p, target_cpu_utilization=parse_ratio(v))),
    PREFIX + "target-memory-utilization": (
        "target_memory_utilization", lambda v, p: replace(p, target_memory_utilization=parse_ratio(v))),
    PREFIX + "idle-cpu-utilization": (
        "idle_cpu_utilization", lambda v, p: replace(p, idle_cpu_utilization=parse_ratio(v))),
    PREFIX + "tolerance": ("tolerance", lambda v, p: replace(p, tolerance=parse_fraction(v))),
    PREFIX + "scale-up-policy": ("scale_up", lambda v, p: replace(p, scale_up=parse_rules(v, p.scale_up))),
    PREFIX + "scale-down-policy": ("scale_down", lambda v, p: replace(p, scale_down=parse_rules(v, p.scale_down))),
    PREFIX + "reclaim-idle-actors": (
        "reclaim_idle_actors", lambda v, p: replace(p, reclaim_idle_actors=parse_bool(v))),
    PREFIX + "reclaim-window": (
        "reclaim_window_seconds", lambda v, p: replace(p, reclaim_window_seconds=parse_duration(v))),
    PREFIX + "reclaim-grace": (
        "reclaim_grace_seconds", lambda v, p: replace(p, reclaim_grace_seconds=parse_duration(v))),
    PREFIX + "reclaim-budget": (
        "reclaim_budget_per_hour",
        lambda v, p: replace(p, reclaim_budget_per_hour=parse_count(v, "reclaim-budget", 0, MAX_RECLAIM_BUDGET))),
    PREFIX + "keep-spare-for-target": (
        "keep_spare_for_target", lambda v, p: replace(p, keep_spare_for_target=parse_bool(v))),
    PREFIX + "down-after-up": (
        "down_after_up_seconds", lambda v, p: replace(p, down_after_up_seconds=parse_duration(v))),
}
# read by the cluster layer for the Ray signal (which token Secret, which scheme), not policy knobs
RAY_SIGNAL_ANNOTATIONS: frozenset[str] = frozenset({PREFIX + "ray-token-secret", PREFIX + "ray-dashboard-scheme"})
# the right-sizing recommendation: the opt-in (read by ``autoscaler.controller.recommend``) and the
# annotation the controller writes (JSON, untrusted when read back: tenants can edit it)
ANNOTATE_RECOMMENDATION = PREFIX + "annotate-recommendation"
RECOMMENDATION_ANNOTATION = PREFIX + "recommendation"
RECOMMENDATION_ANNOTATIONS: frozenset[str] = frozenset({ANNOTATE_RECOMMENDATION, RECOMMENDATION_ANNOTATION})
KNOWN_ANNOTATIONS: frozenset[str] = frozenset({AUTOSCALE_ANNOTATION, *RAY_SIGNAL_ANNOTATIONS,
                                               *RECOMMENDATION_ANNOTATIONS, *_FIELDS})


def annotate_recommendation(annotations: Mapping[str, str]) -> tuple[bool, str | None]:
    """Whether the RayCluster opted in to the recommendation annotation, and a warning when the opt-in
    is malformed (then off: the safe default).  Never raises."""
    if ANNOTATE_RECOMMENDATION not in annotations:
        return False, None
    raw = annotations[ANNOTATE_RECOMMENDATION]
    try:
        return parse_bool(raw), None
    except (ValueError, TypeError) as e:
        return False, f"annotation {ANNOTATE_RECOMMENDATION}={brief_repr(raw)} ignored: {e}; using false"


def policy_from_annotations(
    annotations: Mapping[str, str], defaults: ScalingDefaults
) -> tuple[ScalingDefaults, tuple[str, ...]]:
    """The effective policy for one RayCluster and the warnings for annotations that were ignored.

    Never raises: a value that does not parse, or parses to something out of range (NaN, infinity,
    negative, overflow, a window past its limit), leaves the current value in place and adds one
    warning naming the annotation.  Annotations are applied in name order; ``idle-window`` before
    ``pressured-idle-window`` so that raising both at once is accepted.
    """
    policy = defaults
    warnings: list[str] = []
    keys = sorted(k for k in annotations if k.startswith(PREFIX))
    keys.sort(key=lambda k: (k != PREFIX + "idle-window", k))
    for key in keys:
        raw = annotations[key]
        if key == AUTOSCALE_ANNOTATION or key in RAY_SIGNAL_ANNOTATIONS or key in RECOMMENDATION_ANNOTATIONS:
            continue
        spec = _FIELDS.get(key)
        if spec is None:
            warnings.append(f"unknown annotation {key[:128]}={brief_repr(raw)} ignored "
                            f"(known: {', '.join(sorted(_FIELDS))})")
            continue
        name, apply = spec
        try:
            policy = apply(str(raw), policy)
        except (ValueError, TypeError, ArithmeticError) as e:
            current = getattr(policy, name)
            shown = repr(format_rules(current)) if isinstance(current, ScalingRules) else brief_repr(current)
            warnings.append(f"annotation {key}={brief_repr(raw)} ignored: {e}; using {shown}")
    return policy, tuple(warnings)
