"""Generation-time settings of the alert rules: thresholds, windows, `for` durations, selectors.

Every field can be changed with ``queuepilot alerts --set name=value``; a per-alert ``for`` with
``--set for.<AlertName>=5m``.  Defaults are what a 200-GPU shared cluster would start with.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

DEFAULT_RUNBOOK_BASE_URL = "https://github.com/queuepilot/queuepilot/blob/main/docs/runbooks.md"
_DURATION = re.compile(r"^(\d+(ms|s|m|h|d|w|y))+$")


class ConfigError(ValueError):
    """A --set that names no setting or carries a value of the wrong shape."""


@dataclass(frozen=True)
class AlertConfig:
    """Thresholds and selectors the rules are rendered with."""

    runbook_base_url: str = DEFAULT_RUNBOOK_BASE_URL
    # selectors of the scrape jobs (the Helm chart's ServiceMonitors name them)
    exporter_selector: str = 'job="queuepilot-exporter"'
    controller_selector: str = 'job="queuepilot-controller"'
    # GPU
    node_unhealthy_gpus: float = 2  # unhealthy GPUs on one node that make it a node-level problem
    ecc_window: str = "10m"
    exporter_stale_seconds: float = 120
    # allocation
    idle_util_percent: float = 5
    idle_window: str = "30m"
    # queues
    pending_slo_seconds: float = 3600
    retry_window: str = "30m"
    retry_loop_count: float = 10
    rejected_window: str = "15m"
    # capacity below quota: fires when a flavor's healthy GPUs fall short of its nominal quota by more
    # than both of these (so one broken GPU on a cluster whose quota equals its capacity stays quiet)
    capacity_shortfall_gpus: float = 4
    capacity_shortfall_ratio: float = 0.05
    # Ray: workers reclaimed with Ray actors/tasks on them (killed work) per RayCluster in the last hour at
    # or above which QueuePilotIdleActorsKilled fires; the controller's default reclaim budget per hour
    idle_actors_killed_count: float = 4
    # controller
    watch_restart_window: str = "15m"
    watch_restart_count: float = 5
    write_error_window: str = "15m"
    write_error_count: float = 0
    # MultiKueue dispatcher: seconds since a worker cluster's Nodes/Pods were last current above which
    # QueuePilotWorkerCapacityStale fires (the dispatcher stops nominating it after 120 s)
    worker_capacity_stale_seconds: float = 300
    # per-alert `for` overrides, alert name -> duration
    for_overrides: dict[str, str] = field(default_factory=dict)

    def with_settings(self, settings: Iterable[str]) -> AlertConfig:
        """Apply ``name=value`` strings (the CLI's ``--set``); raise ConfigError on a bad one."""
        changes: dict[str, object] = {}
        overrides = dict(self.for_overrides)
        fields = {f.name: f for f in dataclasses.fields(self) if f.name != "for_overrides"}
        for item in settings:
            name, sep, value = item.partition("=")
            name, value = name.strip(), value.strip()
            if not sep or not name:
                raise ConfigError(f"--set expects name=value, got {item!r}")
            if name.startswith("for."):
                _check_duration(name, value)
                overrides[name[4:]] = value
                continue
            if name not in fields:
                raise ConfigError(f"unknown setting {name!r}; known: {', '.join(sorted(fields))}, for.<AlertName>")
            kind = fields[name].type
            if kind == "float":
                try:
                    changes[name] = float(value)
                except ValueError:
                    raise ConfigError(f"{name} expects a number, got {value!r}") from None
            else:
                if name.endswith("_window"):
                    _check_duration(name, value)
                changes[name] = value
        return dataclasses.replace(self, for_overrides=overrides, **changes)


# The Helm chart renders the rules from a copy generated with these tokens in place of the settings
# (``chart_template``); its PrometheusRule template replaces them with chart values.
TOKEN_PREFIX = "__QP_"
SELECTOR_FIELDS = ("exporter_selector", "controller_selector")


def threshold_fields() -> tuple[str, ...]:
    """The settings the chart exposes as ``monitoring.alerts.thresholds.<camelCase name>``."""
    skip = {"runbook_base_url", "for_overrides", *SELECTOR_FIELDS}
    return tuple(f.name for f in dataclasses.fields(AlertConfig) if f.name not in skip)


def chart_key(name: str) -> str:
    """``pending_slo_seconds`` -> ``pendingSloSeconds`` (the chart value's name)."""
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


def threshold_token(name: str) -> str:
    return f"{TOKEN_PREFIX}T_{chart_key(name)}__"


def for_token(alert: str, default: str) -> str:
    """The chart replaces it with ``monitoring.alerts.for.<alert>``, else with ``default``."""
    return f"{TOKEN_PREFIX}FOR_{alert}:{default}__"


JOB_TOKENS = {"exporter_selector": f"{TOKEN_PREFIX}JOB_exporter__", "controller_selector": f"{TOKEN_PREFIX}JOB_controller__"}
RUNBOOK_TOKEN = f"{TOKEN_PREFIX}RUNBOOK_BASE_URL__"


def chart_template() -> AlertConfig:
    """A config whose every chart-settable value is a token (``for`` durations are set per alert)."""
    values: dict[str, object] = {name: threshold_token(name) for name in threshold_fields()}
    values.update({name: f'job="{token}"' for name, token in JOB_TOKENS.items()})
    return dataclasses.replace(AlertConfig(), runbook_base_url=RUNBOOK_TOKEN, **values)


def _check_duration(name: str, value: str) -> None:
    if not _DURATION.match(value):
        raise ConfigError(f"{name} expects a Prometheus duration like 30s, 5m, 1h; got {value!r}")


def fmt_number(value: float | str) -> str:
    """Render a threshold for PromQL without a trailing .0 (3600.0 -> 3600); a chart token as it is."""
    if isinstance(value, str):
        return value
    return str(int(value)) if float(value).is_integer() else repr(value)
