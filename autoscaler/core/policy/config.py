"""Policy defaults (frozen dataclasses) and their loading from the configuration file's sections.

``ControllerContext.settings`` holds the parsed YAML; its ``admission:`` and ``scaling:`` sections
map onto ``AdmissionConfig`` and ``ScalingDefaults`` (snake_case keys, durations as seconds or
strings like ``"90s"``, ``"10m"``, ``"1h30m"``).  An unknown key or a bad value raises ``ValueError``
naming it: configuration errors are found at start-up, not in the middle of a decision.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Literal, TypeGuard, TypeVar

from autoscaler.core.policy.behavior import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    MAX_POLICY_VALUE,
    PolicyType,
    ScalingPolicy,
    ScalingRules,
    SelectPolicy,
)
from autoscaler.core.policy.schedule import Schedule, parse_schedule

DEFAULT_CONTROLLER_NAME = "queuepilot.io/gpu-capacity"
StaleSignalMode = Literal["fail-open", "hold"]

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")

# The longest duration any knob accepts (30 days): longer is a typo or an attempt to disable a
# mechanism by overflow, and would be rejected with a clear message rather than accepted.
MAX_DURATION_SECONDS = 30 * 86400.0


def _checked_seconds(seconds: float, value: object) -> float:
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {brief_repr(value)}")
    if seconds < 0:
        raise ValueError(f"negative duration: {brief_repr(value)}")
    if seconds > MAX_DURATION_SECONDS:
        raise ValueError(f"duration above the 30-day limit: {brief_repr(value)}")
    return seconds


def brief_repr(value: object, limit: int = 64) -> str:
    """``repr(value)`` cut to ``limit`` characters (values end up in Events and logs)."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else f"<{value.bit_length()}-bit int>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_duration(value: object) -> float:
    """Seconds from ``300``, ``"300"``, ``"300s"``, ``"5m"``, ``"1h30m"``; ValueError otherwise
    (also for NaN, infinity, negative values and anything over 30 days)."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int):
        if abs(value) > MAX_DURATION_SECONDS:  # before float(): a huge int would overflow
            raise ValueError(f"duration above the 30-day limit: {brief_repr(value)}")
        return _checked_seconds(float(value), value)
    if isinstance(value, float):
        return _checked_seconds(value, value)
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        m = _DURATION.match(text)
        if not text or m is None or not any(m.groups()):
            raise ValueError(f"not a duration (use e.g. 90s, 10m, 1h30m): {brief_repr(value)}") from None
        h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        seconds = h * 3600 + mi * 60 + s
    return _checked_seconds(seconds, value)


def parse_ratio(value: object) -> float:
    """A 0-1 ratio from ``0.7``, ``"0.7"`` or ``"70%"``; ValueError outside (0, 1] (and for NaN)."""
    if isinstance(value, bool):
        raise ValueError(f"not a ratio (use 0.7 or 70%): {value!r}")
    text = str(value).strip() if not isinstance(value, int) or abs(value) < 10**6 else "inf"
    try:
        r = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"not a ratio (use 0.7 or 70%): {brief_repr(value)}") from None
    if not 0 < r <= 1:  # False for NaN too
        raise ValueError(f"ratio must be in (0, 1]: {brief_repr(value)}")
    return r


def parse_fraction(value: object) -> float:
    """A float in [0, 1) (the tolerance); ValueError otherwise (also for NaN and infinity)."""
    if isinstance(value, bool) or (isinstance(value, int) and abs(value) >= 10**6):
        raise ValueError(f"must be a number in [0, 1): {brief_repr(value)}")
    try:
        f = float(str(value).strip())
    except ValueError:
        raise ValueError(f"not a number: {brief_repr(value)}") from None
    if not 0 <= f < 1:  # False for NaN too
        raise ValueError(f"must be in [0, 1): {brief_repr(value)}")
    return f


def parse_count(value: object, what: str, lo: int = 0, hi: int = 1_000_000) -> int:
    """A whole number in ``[lo, hi]`` from an int, an integral float or a string of digits."""
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a whole number: {value!r}")
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not (math.isfinite(value) and value.is_integer()):
            raise ValueError(f"{what} must be a whole number: {brief_repr(value)}")
        if not lo <= value <= hi:
            raise ValueError(f"{what} must be in [{lo}, {hi}]: {brief_repr(value)}")
        n = int(value)
    else:
        text = str(value).strip()
        if not re.fullmatch(r"[+-]?\d{1,12}", text, flags=re.ASCII):
            raise ValueError(f"{what} must be a whole number: {brief_repr(value)}")
        n = int(text)
    if not lo <= n <= hi:
        raise ValueError(f"{what} must be in [{lo}, {hi}]: {brief_repr(value)}")
    return n


def parse_bool(value: object) -> bool:
    """``true``/``false`` (a YAML bool, or the strings, any case); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower() if isinstance(value, str) else ""
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"not a boolean (use true or false): {brief_repr(value)}")


def parse_rules(value: object, default: ScalingRules) -> ScalingRules:
    """Scaling rules from a string ``"Pods:2:60,Percent:50:60;select=Min;window=5m"`` or a mapping
    ``{policies: ["Pods:2:60"] | [{type, value, periodSeconds}], select_policy, stabilization_window}``.
    Parts left out keep ``default``'s values.  ValueError for anything malformed or out of range
    (window over 3600 s, period outside (0, 1800] s, value outside [1, 100000])."""
    if not isinstance(value, Mapping):
        return parse_rules_text(value).over(default)
    policies: tuple[ScalingPolicy, ...] = default.policies
    select: SelectPolicy = default.select_policy
    window = default.stabilization_window_seconds
    unknown = set(value) - {"policies", "select_policy", "selectPolicy", "stabilization_window",
                            "stabilizationWindowSeconds"}
    if unknown:
        raise ValueError(f"unknown scaling-rules keys: {brief_repr(sorted(map(str, unknown)))}")
    if "policies" in value:
        given = value["policies"]
        items = given.split(",") if isinstance(given, str) else given
        if not isinstance(items, list | tuple):
            raise ValueError(f"policies must be a list: {brief_repr(given)}")
        policies = tuple(_policy(p) for p in items)
    raw_select = value.get("select_policy", value.get("selectPolicy"))
    if raw_select is not None:
        select = _select(raw_select)
    w = value.get("stabilization_window", value.get("stabilizationWindowSeconds"))
    if w is not None:
        window = int(parse_duration(w))
    return ScalingRules(policies=policies, select_policy=select, stabilization_window_seconds=window)


@dataclass(frozen=True, slots=True)
class RulesPatch:
    """Scaling rules as their text gives them: the parts it names (None: left as they are)."""

    policies: tuple[ScalingPolicy, ...] | None = None
    select_policy: SelectPolicy | None = None
    stabilization_window_seconds: int | None = None

    def over(self, default: ScalingRules) -> ScalingRules:
        """``default`` with the parts this names."""
        return ScalingRules(
            policies=default.policies if self.policies is None else self.policies,
            select_policy=default.select_policy if self.select_policy is None else self.select_policy,
            stabilization_window_seconds=(default.stabilization_window_seconds
                                          if self.stabilization_window_seconds is None
                                          else self.stabilization_window_seconds))


def parse_rules_text(value: object) -> RulesPatch:
    """The parts of scaling rules a string ``"Pods:2:60,Percent:50:60;select=Min;window=5m"`` names;
    ValueError for anything malformed or out of range."""
    text = str(value).strip()
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not parts:
        raise ValueError(f"empty scaling rules: {brief_repr(value)}")
    select: SelectPolicy | None = None
    window: int | None = None
    policies: list[ScalingPolicy] = []
    for part in parts:
        if "=" in part:
            k, _, v = part.partition("=")
            k = k.strip().lower()
            if k == "select":
                select = _select(v)
            elif k == "window":
                window = int(parse_duration(v.strip()))
            else:
                raise ValueError(f"unknown scaling-rules option {brief_repr(k)} (use select= or window=)")
        else:
            policies.extend(_policy(p) for p in part.split(",") if p.strip())
    return RulesPatch(tuple(policies) or None, select, window)


def format_rules(rules: ScalingRules) -> str:
    """``rules`` in the annotation's own format (``"Pods:4:15,Percent:100:15;select=Max;window=0s"``)."""
    policies = ",".join(f"{p.type}:{p.value}:{p.period_seconds}" for p in rules.policies)
    return f"{policies};select={rules.select_policy};window={rules.stabilization_window_seconds}s"


_SELECT: dict[str, SelectPolicy] = {"Max": "Max", "Min": "Min", "Disabled": "Disabled"}
_POLICY_TYPES: dict[str, PolicyType] = {"Pods": "Pods", "Percent": "Percent"}


def _select(value: object) -> SelectPolicy:
    found = _SELECT.get(value.strip().capitalize()) if isinstance(value, str) else None
    if found is not None:
        return found
    raise ValueError(f"selectPolicy must be Max, Min or Disabled, not {brief_repr(value)}")


def _policy_type(value: object) -> PolicyType:
    found = _POLICY_TYPES.get(value.strip().capitalize()) if isinstance(value, str) else None
    if found is not None:
        return found
    raise ValueError(f"policy type must be Pods or Percent, not {brief_repr(value)}")


def _policy(p: object) -> ScalingPolicy:
    if isinstance(p, Mapping):
        if "type" not in p or "value" not in p or ("periodSeconds" not in p and "period_seconds" not in p):
            raise ValueError(f"policy needs type, value, periodSeconds: {brief_repr(dict(p))}")
        period = p.get("periodSeconds", p.get("period_seconds"))
        return ScalingPolicy(_policy_type(p["type"]), parse_count(p["value"], "policy value", 1, MAX_POLICY_VALUE),
                             int(parse_duration(period)))
    bits = str(p).strip().split(":")
    if len(bits) != 3:
        raise ValueError(f"policy must be Type:value:period, e.g. Pods:2:60 — got {brief_repr(p)}")
    return ScalingPolicy(_policy_type(bits[0]), parse_count(bits[1], "policy value", 1, MAX_POLICY_VALUE),
                         int(parse_duration(bits[2].strip())))


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Knobs of the GPU-capacity admission check (config section ``admission:``)."""

    controller_name: str = DEFAULT_CONTROLLER_NAME
    stale_signal_mode: StaleSignalMode = "fail-open"
    retry_backoff_base_seconds: float = 30.0
    retry_backoff_cap_seconds: float = 900.0
    reservation_timeout_seconds: float = 600.0
    # a workload whose GPUs are not free yet keeps its quota and its Pending check this long after
    # its quota reservation (decided again at every pass, Ready as soon as they are) before the check
    # says Retry (quota given back, requeued with backoff); 0 = Retry at once
    capacity_wait_seconds: float = 1800.0
    max_retries: int | None = None  # None: retry forever (Kueue's own backoff also applies)
    check_cpu_memory: bool = True  # GPU pods must also fit the node's free CPU/memory (when known)

    def __post_init__(self) -> None:
        if not isinstance(self.controller_name, str) or not self.controller_name:
            raise ValueError(f"admission.controller_name must be a non-empty string, not {brief_repr(self.controller_name)}")
        if self.stale_signal_mode not in ("fail-open", "hold"):
            raise ValueError(f"admission.stale_signal_mode must be fail-open or hold, not {brief_repr(self.stale_signal_mode)}")
        for name in ("retry_backoff_base_seconds", "retry_backoff_cap_seconds", "reservation_timeout_seconds",
                     "capacity_wait_seconds"):
            _check_duration_field("admission", name, getattr(self, name))
        if self.retry_backoff_base_seconds <= 0 or self.retry_backoff_cap_seconds < self.retry_backoff_base_seconds:
            raise ValueError("admission retry backoff: need 0 < base <= cap")
        if self.reservation_timeout_seconds <= 0:
            raise ValueError("admission.reservation_timeout_seconds must be > 0")
        if self.max_retries is not None and (isinstance(self.max_retries, bool) or not isinstance(self.max_retries, int)
                                             or not 0 <= self.max_retries <= 1_000_000):
            raise ValueError(f"admission.max_retries must be a whole number in [0, 1000000] or null, "
                             f"not {brief_repr(self.max_retries)}")
        if not isinstance(self.check_cpu_memory, bool):
            raise ValueError(f"admission.check_cpu_memory must be true or false, not {brief_repr(self.check_cpu_memory)}")

    def backoff_seconds(self, attempt: int) -> int:
        """``base * 2^attempt`` capped (attempt 0 = first Retry), as whole seconds for requeueAfterSeconds."""
        return int(min(self.retry_backoff_cap_seconds, self.retry_backoff_base_seconds * 2 ** min(attempt, 30)))


@dataclass(frozen=True, slots=True)
class ScalingDefaults:
    """Knobs of the worker-group scaler (config section ``scaling:``; per-cluster annotations override)."""

    target_gpu_utilization: float = 0.7
    idle_gpu_utilization: float = 0.05  # a worker whose GPUs are below this (and has no Ray work) is idle
    # an empty worker (no Ray work, GPU/CPU under the idle threshold) goes after this window; the
    # scale-down stabilization window does not hold its removal back (it smooths recommendations)
    idle_window_seconds: float = 90.0
    pressured_idle_window_seconds: float = 60.0  # used while other queues wait past queue_pressure_wait
    queue_pressure_wait_seconds: float = 300.0
    target_cpu_utilization: float = 0.7  # CPU-only groups
    target_memory_utilization: float = 0.8  # CPU-only groups
    idle_cpu_utilization: float = 0.05  # CPU-only groups
    tolerance: float = 0.1
    scale_up: ScalingRules = field(default=DEFAULT_SCALE_UP)
    scale_down: ScalingRules = field(default=DEFAULT_SCALE_DOWN)
    # opt-in: a GPU worker whose GPU stayed under idle_gpu_utilization for idle_window counts as idle
    # even with Ray actors/tasks on it (they are killed when it goes); docs/autoscaling.md
    reclaim_idle_actors: bool = False
    # with reclaim_idle_actors: how long the GPU must stay under idle_gpu_utilization on a worker Ray
    # reports work on (or, while Ray demand for the group queues, on any worker) before it is reclaimed
    reclaim_window_seconds: float = 300.0
    # with reclaim_idle_actors: a worker younger than this is never reclaimed (start-up: image pull,
    # data loading keep the GPU idle)
    reclaim_grace_seconds: float = 600.0
    # with reclaim_idle_actors: at most this many workers reclaimed per RayCluster in any hour
    reclaim_budget_per_hour: int = 4
    # with reclaim_idle_actors: while Ray demand for the group queues, replace its idle workers (deleted by
    # name, replicas kept, so KubeRay launches fresh ones for the queue); off, they stay until the queue is
    # served.  A replacement is a new pod where the scheduler puts it: under its default scoring
    # (LeastAllocated) the emptiest node, so replacements split whole nodes; on where the scheduler bin-packs
    reclaim_replace: bool = False
    # no worker of a group is removed (scale-down, empty worker, reclaim) within this long after
    # queuepilot launched workers in it (a scale-up or a replacement)
    down_after_up_seconds: float = 300.0
    # true: keep empty workers as spares while the busy ones would run over the utilization target
    # (the HPA rule ceil(ready * mean / target) as a floor); false: an empty worker always goes
    keep_spare_for_target: bool = False
    # ClusterQueue name -> its time windows (``autoscaler.core.policy.schedule``): bounds on the workers of
    # every opted-in RayCluster whose queue-name label leads to that ClusterQueue, beside the RayCluster's
    # own ``queuepilot.io/schedule``; none by default (docs/autoscaling.md, "Time windows")
    cluster_queue_schedules: Mapping[str, Schedule] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        for name in ("target_gpu_utilization", "target_cpu_utilization", "target_memory_utilization",
                     "idle_gpu_utilization", "idle_cpu_utilization"):
            v = getattr(self, name)
            if not _is_number(v) or not 0 < v <= 1:  # NaN fails the range test too
                raise ValueError(f"scaling.{name} must be in (0, 1], got {brief_repr(v)}")
        if not _is_number(self.tolerance) or not 0 <= self.tolerance < 1:
            raise ValueError(f"scaling.tolerance must be in [0, 1), got {brief_repr(self.tolerance)}")
        for name in ("idle_window_seconds", "pressured_idle_window_seconds", "queue_pressure_wait_seconds",
                     "reclaim_window_seconds", "reclaim_grace_seconds", "down_after_up_seconds"):
            _check_duration_field("scaling", name, getattr(self, name))
        if self.down_after_up_seconds > MAX_DOWN_AFTER_UP_SECONDS:
            raise ValueError(f"scaling.down_after_up must be at most {MAX_DOWN_AFTER_UP_SECONDS:g}s, "
                             f"got {brief_repr(self.down_after_up_seconds)}")
        if (isinstance(self.reclaim_budget_per_hour, bool) or not isinstance(self.reclaim_budget_per_hour, int)
                or not 0 <= self.reclaim_budget_per_hour <= MAX_RECLAIM_BUDGET):
            raise ValueError(f"scaling.reclaim_budget_per_hour must be a whole number in [0, {MAX_RECLAIM_BUDGET}], "
                             f"got {brief_repr(self.reclaim_budget_per_hour)}")
        if self.pressured_idle_window_seconds > self.idle_window_seconds:
            raise ValueError("scaling.pressured_idle_window must not exceed scaling.idle_window")
        for name in ("scale_up", "scale_down"):
            if not isinstance(getattr(self, name), ScalingRules):
                raise ValueError(f"scaling.{name} must be scaling rules, not {brief_repr(getattr(self, name))}")
        for name in ("reclaim_idle_actors", "reclaim_replace", "keep_spare_for_target"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"scaling.{name} must be true or false, not {brief_repr(getattr(self, name))}")
        schedules = self.cluster_queue_schedules
        if not isinstance(schedules, Mapping) or not all(
                isinstance(k, str) and k and isinstance(v, Schedule) for k, v in schedules.items()):
            raise ValueError("scaling.cluster_queue_schedules must map ClusterQueue names to schedules, "
                             f"not {brief_repr(schedules)}")
        if len(schedules) > MAX_CLUSTER_QUEUE_SCHEDULES:
            raise ValueError(f"scaling.cluster_queue_schedules: at most {MAX_CLUSTER_QUEUE_SCHEDULES} ClusterQueues")


MAX_RECLAIM_BUDGET = 1000  # reclaims per RayCluster per hour
MAX_CLUSTER_QUEUE_SCHEDULES = 10_000  # ClusterQueues with time windows in one configuration
MAX_DOWN_AFTER_UP_SECONDS = 3600.0


def _is_number(v: object) -> TypeGuard[int | float]:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _check_duration_field(section: str, name: str, v: object) -> None:
    if not _is_number(v) or not 0 <= v <= MAX_DURATION_SECONDS:
        raise ValueError(f"{section}.{name.removesuffix(_DURATION_SUFFIX)} must be a duration in [0s, 30 days], "
                         f"got {brief_repr(v)}")


_DURATION_SUFFIX = "_seconds"
_Section = TypeVar("_Section", "AdmissionConfig", "ScalingDefaults")


def _from_section(cls: type[_Section], section: object, name: str) -> _Section:
    """Build ``cls`` from a config section: keys are field names; ``*_seconds`` fields also accept the
    name without the suffix with a duration string (``idle_window: 10m``).  ValueError naming the
    key for an unknown key or a malformed value."""
    obj = cls()
    if not section:
        return obj
    if not isinstance(section, Mapping):
        raise ValueError(f"config section {name!r} must be a mapping")
    names = {f.name for f in fields(cls)}
    changes: dict[str, Any] = {}  # field -> value of that field's type (checked by the dataclass)
    for key, raw in section.items():
        k = str(key).replace("-", "_")
        try:
            if k in names and k.endswith(_DURATION_SUFFIX):
                changes[k] = parse_duration(raw)
            elif k + _DURATION_SUFFIX in names:
                changes[k + _DURATION_SUFFIX] = parse_duration(raw)
            elif k in ("scale_up", "scale_down") and k in names:
                changes[k] = parse_rules(raw, getattr(obj, k))
            elif k in names and ("utilization" in k):
                changes[k] = parse_ratio(raw)
            elif k == "tolerance" and k in names:
                changes[k] = parse_fraction(raw)
            elif k in ("reclaim_idle_actors", "reclaim_replace", "keep_spare_for_target", "check_cpu_memory") \
                    and k in names:
                changes[k] = parse_bool(raw)
            elif k == "reclaim_budget_per_hour" and k in names:
                changes[k] = parse_count(raw, k, 0, MAX_RECLAIM_BUDGET)
            elif k == "max_retries" and k in names:
                changes[k] = None if raw is None else parse_count(raw, "max_retries")
            elif k == "cluster_queue_schedules" and k in names:
                changes[k] = parse_cluster_queue_schedules(raw)
            elif k in names:
                changes[k] = raw if isinstance(raw, str) else str(raw)
            else:
                raise ValueError(f"unknown key {brief_repr(key)} (known: {sorted(names)})")
        except (ValueError, TypeError, ArithmeticError) as e:
            raise ValueError(f"config {name}.{str(key)[:64]}: {e}") from None
    try:
        return replace(obj, **changes)
    except (ValueError, TypeError) as e:
        raise ValueError(f"config {name}: {e}") from None


def parse_cluster_queue_schedules(value: object) -> Mapping[str, Schedule]:
    """ClusterQueue name -> ``Schedule`` from a mapping of names to schedule texts (``{}`` or null: none);
    ValueError naming the ClusterQueue whose schedule is malformed."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"must map ClusterQueue names to schedules, not {brief_repr(value)}")
    out: dict[str, Schedule] = {}
    for name, text in value.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"a ClusterQueue name must be a non-empty string, not {brief_repr(name)}")
        try:
            out[name] = parse_schedule(text)
        except ValueError as e:
            raise ValueError(f"{name[:64]}: {e}") from None
    return MappingProxyType(out)


def admission_config(settings: Mapping[str, object] | None) -> AdmissionConfig:
    """``AdmissionConfig`` from the parsed configuration (its ``admission:`` section)."""
    return _from_section(AdmissionConfig, (settings or {}).get("admission"), "admission")


def scaling_defaults(settings: Mapping[str, object] | None) -> ScalingDefaults:
    """``ScalingDefaults`` from the parsed configuration (its ``scaling:`` section)."""
    return _from_section(ScalingDefaults, (settings or {}).get("scaling"), "scaling")
