"""Policy defaults (frozen dataclasses) and their loading from the configuration file's sections.

``ControllerContext.settings`` holds the parsed YAML; its ``admission:`` and ``scaling:`` sections
map onto ``AdmissionConfig`` and ``ScalingDefaults`` (snake_case keys, durations as seconds or
strings like ``"90s"``, ``"10m"``, ``"1h30m"``).  An unknown key or a bad value raises ``ValueError``
naming it: configuration errors are found at start-up, not in the middle of a decision.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from autoscaler.core.policy.behavior import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    ScalingPolicy,
    ScalingRules,
)

DEFAULT_CONTROLLER_NAME = "queuepilot.io/gpu-capacity"
StaleSignalMode = Literal["fail-open", "hold"]

_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?$")


def parse_duration(value: object) -> float:
    """Seconds from ``300``, ``"300"``, ``"300s"``, ``"5m"``, ``"1h30m"``; ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"negative duration: {value!r}")
        return float(value)
    text = str(value).strip()
    try:
        seconds = float(text)
    except ValueError:
        m = _DURATION.match(text)
        if not text or m is None or not any(m.groups()):
            raise ValueError(f"not a duration (use e.g. 90s, 10m, 1h30m): {value!r}") from None
        h, mi, s = (float(g) if g else 0.0 for g in m.groups())
        return h * 3600 + mi * 60 + s
    if seconds < 0:
        raise ValueError(f"negative duration: {value!r}")
    return seconds


def parse_ratio(value: object) -> float:
    """A 0-1 ratio from ``0.7``, ``"0.7"`` or ``"70%"``; ValueError outside (0, 1]."""
    text = str(value).strip()
    try:
        r = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise ValueError(f"not a ratio (use 0.7 or 70%): {value!r}") from None
    if not 0 < r <= 1:
        raise ValueError(f"ratio must be in (0, 1]: {value!r}")
    return r


def parse_bool(value: object) -> bool:
    """``true``/``false`` (a YAML bool, or the strings, any case); ValueError otherwise."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ValueError(f"not a boolean (use true or false): {value!r}")


def parse_rules(value: object, default: ScalingRules) -> ScalingRules:
    """Scaling rules from a string ``"Pods:2:60,Percent:50:60;select=Min;window=5m"`` or a mapping
    ``{policies: ["Pods:2:60"] | [{type, value, periodSeconds}], select_policy, stabilization_window}``.
    Parts left out keep ``default``'s values."""
    policies: tuple[ScalingPolicy, ...] = default.policies
    select = default.select_policy
    window = default.stabilization_window_seconds
    if isinstance(value, Mapping):
        unknown = set(value) - {"policies", "select_policy", "selectPolicy", "stabilization_window",
                                "stabilizationWindowSeconds"}
        if unknown:
            raise ValueError(f"unknown scaling-rules keys: {sorted(unknown)}")
        if "policies" in value:
            policies = tuple(_policy(p) for p in value["policies"])
        select = value.get("select_policy", value.get("selectPolicy", select))
        w = value.get("stabilization_window", value.get("stabilizationWindowSeconds"))
        if w is not None:
            window = int(parse_duration(w))
    else:
        text = str(value).strip()
        parts = [p.strip() for p in text.split(";") if p.strip()]
        if not parts:
            raise ValueError(f"empty scaling rules: {value!r}")
        new_policies = []
        for part in parts:
            if "=" in part:
                k, _, v = part.partition("=")
                k = k.strip().lower()
                if k == "select":
                    select = v.strip().capitalize()  # type: ignore[assignment]
                elif k == "window":
                    window = int(parse_duration(v.strip()))
                else:
                    raise ValueError(f"unknown scaling-rules option {k!r} (use select= or window=)")
            else:
                new_policies.extend(_policy(p) for p in part.split(",") if p.strip())
        if new_policies:
            policies = tuple(new_policies)
    return ScalingRules(policies=policies, select_policy=select, stabilization_window_seconds=window)


def _policy(p: object) -> ScalingPolicy:
    if isinstance(p, Mapping):
        try:
            return ScalingPolicy(str(p["type"]), int(p["value"]),
                                 int(parse_duration(p.get("periodSeconds", p.get("period_seconds")))))
        except (KeyError, TypeError) as e:
            raise ValueError(f"policy needs type, value, periodSeconds: {p!r}") from e
    bits = str(p).strip().split(":")
    if len(bits) != 3:
        raise ValueError(f"policy must be Type:value:period, e.g. Pods:2:60 — got {p!r}")
    kind = bits[0].strip().capitalize()
    try:
        value = int(bits[1])
    except ValueError:
        raise ValueError(f"policy value must be an integer: {p!r}") from None
    return ScalingPolicy(kind, value, int(parse_duration(bits[2].strip())))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class AdmissionConfig:
    """Knobs of the GPU-capacity admission check (config section ``admission:``)."""

    controller_name: str = DEFAULT_CONTROLLER_NAME
    stale_signal_mode: StaleSignalMode = "fail-open"
    retry_backoff_base_seconds: float = 30.0
    retry_backoff_cap_seconds: float = 900.0
    reservation_timeout_seconds: float = 600.0
    max_retries: int | None = None  # None: retry forever (Kueue's own backoff also applies)
    check_cpu_memory: bool = True  # GPU pods must also fit the node's free CPU/memory (when known)

    def __post_init__(self) -> None:
        if self.stale_signal_mode not in ("fail-open", "hold"):
            raise ValueError(f"admission.stale_signal_mode must be fail-open or hold, not {self.stale_signal_mode!r}")
        if self.retry_backoff_base_seconds <= 0 or self.retry_backoff_cap_seconds < self.retry_backoff_base_seconds:
            raise ValueError("admission retry backoff: need 0 < base <= cap")
        if self.reservation_timeout_seconds <= 0:
            raise ValueError("admission.reservation_timeout_seconds must be > 0")

    def backoff_seconds(self, attempt: int) -> int:
        """``base * 2^attempt`` capped (attempt 0 = first Retry), as whole seconds for requeueAfterSeconds."""
        return int(min(self.retry_backoff_cap_seconds, self.retry_backoff_base_seconds * 2 ** min(attempt, 30)))


@dataclass(frozen=True, slots=True)
class ScalingDefaults:
    """Knobs of the worker-group scaler (config section ``scaling:``; per-cluster annotations override)."""

    target_gpu_utilization: float = 0.7
    idle_gpu_utilization: float = 0.05  # a worker whose GPUs are below this (and has no Ray work) is idle
    idle_window_seconds: float = 600.0
    pressured_idle_window_seconds: float = 120.0  # used while other queues wait past queue_pressure_wait
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

    def __post_init__(self) -> None:
        for name in ("target_gpu_utilization", "target_cpu_utilization", "target_memory_utilization"):
            v = getattr(self, name)
            if not 0 < v <= 1:
                raise ValueError(f"scaling.{name} must be in (0, 1], got {v}")
        if not 0 <= self.tolerance < 1:
            raise ValueError("scaling.tolerance must be in [0, 1)")
        if self.pressured_idle_window_seconds > self.idle_window_seconds:
            raise ValueError("scaling.pressured_idle_window must not exceed scaling.idle_window")


_DURATION_SUFFIX = "_seconds"


def _from_section(cls: type, section: Mapping[str, Any] | None, name: str) -> Any:
    """Build ``cls`` from a config section: keys are field names; ``*_seconds`` fields also accept the
    name without the suffix with a duration string (``idle_window: 10m``)."""
    obj = cls()
    if not section:
        return obj
    if not isinstance(section, Mapping):
        raise ValueError(f"config section {name!r} must be a mapping")
    names = {f.name for f in fields(cls)}
    changes: dict[str, Any] = {}
    for key, raw in section.items():
        k = str(key).replace("-", "_")
        try:
            if k in names and k.endswith(_DURATION_SUFFIX):
                changes[k] = parse_duration(raw)
            elif k + _DURATION_SUFFIX in names:
                changes[k + _DURATION_SUFFIX] = parse_duration(raw)
            elif k in ("scale_up", "scale_down"):
                changes[k] = parse_rules(raw, getattr(obj, k))
            elif k in names and ("utilization" in k):
                changes[k] = parse_ratio(raw)
            elif k == "tolerance":
                changes[k] = float(raw)
            elif k == "reclaim_idle_actors":
                changes[k] = parse_bool(raw)
            elif k == "max_retries":
                changes[k] = None if raw is None else int(raw)
            elif k in names:
                changes[k] = raw
            else:
                raise ValueError(f"unknown key {key!r} (known: {sorted(names)})")
        except ValueError as e:
            raise ValueError(f"config {name}.{key}: {e}") from None
    return replace(obj, **changes)


def admission_config(settings: Mapping[str, Any] | None) -> AdmissionConfig:
    """``AdmissionConfig`` from the parsed configuration (its ``admission:`` section)."""
    return _from_section(AdmissionConfig, (settings or {}).get("admission"), "admission")


def scaling_defaults(settings: Mapping[str, Any] | None) -> ScalingDefaults:
    """``ScalingDefaults`` from the parsed configuration (its ``scaling:`` section)."""
    return _from_section(ScalingDefaults, (settings or {}).get("scaling"), "scaling")
