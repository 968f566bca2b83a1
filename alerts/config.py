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
    # controller
    watch_restart_window: str = "15m"
    watch_restart_count: float = 5
    write_error_window: str = "15m"
    write_error_count: float = 0
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


def _check_duration(name: str, value: str) -> None:
    if not _DURATION.match(value):
        raise ConfigError(f"{name} expects a Prometheus duration like 30s, 5m, 1h; got {value!r}")


def fmt_number(value: float) -> str:
    """Render a threshold for PromQL without a trailing .0 (3600.0 -> 3600)."""
    return str(int(value)) if float(value).is_integer() else repr(value)
