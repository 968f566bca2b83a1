"""Per-RayCluster policy overrides from ``queuepilot.io/*`` annotations.

``parse_policy_annotations(annotations) -> PolicyAnnotations`` reads the text once, where the
RayCluster is parsed (its ``RayClusterState.policy_annotations``); ``PolicyAnnotations.apply(defaults)
-> (ScalingDefaults, warnings)`` puts them over the controller's defaults at each decision: every
annotation that parses and fits overrides its default; one that does not (or an unknown
``queuepilot.io/`` key, most likely a typo) leaves the default in place and adds a warning, which the
scaler turns into a Warning Event ``MalformedAnnotation`` on the RayCluster.

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
                                            (the actors are killed); ``"false"`` (default)
``queuepilot.io/reclaim-replace``           ``"true"``: with reclaim, idle workers are also replaced
                                            while Ray demand for the group queues; ``"false"`` (default)
``queuepilot.io/reclaim-window``            duration the GPU must stay under the idle threshold to reclaim
``queuepilot.io/reclaim-grace``             duration: workers younger than this are never reclaimed
``queuepilot.io/reclaim-budget``            whole number 0-1000: most workers reclaimed per hour
``queuepilot.io/down-after-up``             duration 0-1h: no worker removed this long after a launch
``queuepilot.io/keep-spare-for-target``     ``"true"``: keep empty workers while the busy ones run over the
                                            utilization target; ``"false"`` (default)
``queuepilot.io/schedule``                  time windows that bound the workers of each group, e.g.
                                            ``"Mon-Thu 20:00-08:00 max=2; Fri 20:00-Mon 08:00 max=2;
                                            tz=Europe/Berlin"`` (``policy/schedule.py``); parsed here into
                                            ``PolicyAnnotations.schedule``, applied by the scaler with
                                            its ClusterQueue's schedule (``scaling.cluster_queue_schedules``)
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
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.core.policy.behavior import ScalingRules
from autoscaler.core.policy.config import (
    MAX_RECLAIM_BUDGET,
    RulesPatch,
    ScalingDefaults,
    brief_repr,
    format_rules,
    parse_bool,
    parse_count,
    parse_duration,
    parse_fraction,
    parse_ratio,
    parse_rules_text,
)
from autoscaler.core.policy.schedule import Schedule, parse_schedule
from autoscaler.core.snapshot import AUTOSCALE_ANNOTATION

PREFIX = "queuepilot.io/"
# the RayCluster's own time windows (not a ScalingDefaults field: its ClusterQueue's schedule, from the
# controller's config, applies beside it; see ``autoscaler.core.policy.schedule``)
SCHEDULE_ANNOTATION = PREFIX + "schedule"

# annotation -> (the field it sets, how its text parses); a parse raises ValueError for malformed text,
# and the policy's own checks refuse a value that parses but does not fit (a window past its limit)
_FIELDS: dict[str, tuple[str, Callable[[str], object]]] = {
    PREFIX + "target-gpu-utilization": ("target_gpu_utilization", parse_ratio),
    PREFIX + "idle-gpu-utilization": ("idle_gpu_utilization", parse_ratio),
    PREFIX + "idle-window": ("idle_window_seconds", parse_duration),
    PREFIX + "pressured-idle-window": ("pressured_idle_window_seconds", parse_duration),
    PREFIX + "queue-pressure-wait": ("queue_pressure_wait_seconds", parse_duration),
    PREFIX + "target-cpu-utilization": ("target_cpu_utilization", parse_ratio),
    PREFIX + "target-memory-utilization": ("target_memory_utilization", parse_ratio),
    PREFIX + "idle-cpu-utilization": ("idle_cpu_utilization", parse_ratio),
    PREFIX + "tolerance": ("tolerance", parse_fraction),
    PREFIX + "scale-up-policy": ("scale_up", parse_rules_text),
    PREFIX + "scale-down-policy": ("scale_down", parse_rules_text),
    PREFIX + "reclaim-idle-actors": ("reclaim_idle_actors", parse_bool),
    PREFIX + "reclaim-replace": ("reclaim_replace", parse_bool),
    PREFIX + "reclaim-window": ("reclaim_window_seconds", parse_duration),
    PREFIX + "reclaim-grace": ("reclaim_grace_seconds", parse_duration),
    PREFIX + "reclaim-budget": (
        "reclaim_budget_per_hour", lambda v: parse_count(v, "reclaim-budget", 0, MAX_RECLAIM_BUDGET)),
    PREFIX + "keep-spare-for-target": ("keep_spare_for_target", parse_bool),
    PREFIX + "down-after-up": ("down_after_up_seconds", parse_duration),
}
# read by the cluster layer for the Ray signal (which token Secret, which scheme), not policy knobs
RAY_SIGNAL_ANNOTATIONS: frozenset[str] = frozenset({PREFIX + "ray-token-secret", PREFIX + "ray-dashboard-scheme"})
# the right-sizing recommendation: the opt-in (read by ``autoscaler.controller.recommend``) and the
# annotation the controller writes (JSON, untrusted when read back: tenants can edit it)
ANNOTATE_RECOMMENDATION = PREFIX + "annotate-recommendation"
RECOMMENDATION_ANNOTATION = PREFIX + "recommendation"
RECOMMENDATION_ANNOTATIONS: frozenset[str] = frozenset({ANNOTATE_RECOMMENDATION, RECOMMENDATION_ANNOTATION})
KNOWN_ANNOTATIONS: frozenset[str] = frozenset({AUTOSCALE_ANNOTATION, *RAY_SIGNAL_ANNOTATIONS,
                                               *RECOMMENDATION_ANNOTATIONS, SCHEDULE_ANNOTATION, *_FIELDS})


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


@dataclass(frozen=True, slots=True)
class Override:
    """One policy annotation as read: the field it sets and its value, or why its text did not parse."""

    annotation: str
    field: str
    raw: str
    value: object = None
    error: str = ""


@dataclass(frozen=True, slots=True)
class PolicyAnnotations:
    """A RayCluster's policy annotations, parsed once; ``apply`` puts them over the defaults."""

    overrides: tuple[Override, ...] = ()
    unknown: tuple[str, ...] = ()  # the warnings for unknown queuepilot.io/ keys
    schedule: Schedule | None = None  # queuepilot.io/schedule, parsed (None: none, or it did not parse)
    schedule_error: str = ""  # the warning for a queuepilot.io/schedule that did not parse

    def apply(self, defaults: ScalingDefaults) -> tuple[ScalingDefaults, tuple[str, ...]]:
        """The effective policy and the warnings for the annotations that were ignored.

        Never raises: a value that did not parse, or that parses to something the policy refuses
        (NaN, infinity, negative, a window past its limit), leaves the current value in place and adds
        one warning naming the annotation.  Applied in the order ``parse_policy_annotations`` keeps
        (name order, ``idle-window`` first, so that raising it and ``pressured-idle-window`` together
        is accepted)."""
        policy = defaults
        warnings = list(self.unknown)
        for o in self.overrides:
            error = o.error
            if not error:
                try:
                    value = o.value.over(getattr(policy, o.field)) if isinstance(o.value, RulesPatch) else o.value
                    changes: dict[str, Any] = {o.field: value}
                    policy = replace(policy, **changes)
                except (ValueError, TypeError, ArithmeticError) as e:
                    error = str(e)
            if error:
                current = getattr(policy, o.field)
                shown = repr(format_rules(current)) if isinstance(current, ScalingRules) else brief_repr(current)
                warnings.append(f"annotation {o.annotation}={brief_repr(o.raw)} ignored: {error}; using {shown}")
        if self.schedule_error:
            warnings.append(self.schedule_error)
        return policy, tuple(warnings)


def parse_policy_annotations(annotations: Mapping[str, str]) -> PolicyAnnotations:
    """The ``queuepilot.io/`` policy annotations of a RayCluster, each parsed (never raises)."""
    keys = sorted(k for k in annotations if k.startswith(PREFIX))
    keys.sort(key=lambda k: (k != PREFIX + "idle-window", k))
    overrides: list[Override] = []
    unknown: list[str] = []
    schedule: Schedule | None = None
    schedule_error = ""
    for key in keys:
        raw = annotations[key]
        if key == AUTOSCALE_ANNOTATION or key in RAY_SIGNAL_ANNOTATIONS or key in RECOMMENDATION_ANNOTATIONS:
            continue
        if key == SCHEDULE_ANNOTATION:
            try:
                schedule = parse_schedule(str(raw))
            except ValueError as e:
                schedule_error = (f"annotation {key}={brief_repr(raw)} ignored: {e}; the RayCluster has no "
                                  "time windows of its own (its ClusterQueue's, if any, still apply)")
            continue
        spec = _FIELDS.get(key)
        if spec is None:
            unknown.append(f"unknown annotation {key[:128]}={brief_repr(raw)} ignored "
                           f"(known: {', '.join(sorted([*_FIELDS, SCHEDULE_ANNOTATION]))})")
            continue
        name, parse = spec
        try:
            overrides.append(Override(key, name, str(raw), parse(str(raw))))
        except (ValueError, TypeError, ArithmeticError) as e:
            overrides.append(Override(key, name, str(raw), error=str(e)))
    return PolicyAnnotations(tuple(overrides), tuple(unknown), schedule, schedule_error)


def policy_from_annotations(
    annotations: Mapping[str, str], defaults: ScalingDefaults
) -> tuple[ScalingDefaults, tuple[str, ...]]:
    """The effective policy for one RayCluster and the warnings for annotations that were ignored
    (``parse_policy_annotations(annotations).apply(defaults)``)."""
    return parse_policy_annotations(annotations).apply(defaults)
