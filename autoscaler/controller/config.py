"""``queuepilot controller`` flags, their ``QUEUEPILOT_<FLAG>`` environment variables, and the YAML file.

Precedence: command line > environment (``--resync-seconds`` <- ``QUEUEPILOT_RESYNC_SECONDS``) >
default.  ``--config PATH`` names a YAML file of policy sections (``admission:``, ``scaling:``,
``webhook:`` ...) handed unchanged to the deciders as ``ControllerContext.settings``.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

ENV_PREFIX = "QUEUEPILOT_"
TRUE = {"1", "true", "yes", "on"}
FALSE = {"0", "false", "no", "off", ""}


class ConfigError(Exception):
    """A bad flag value or configuration file: reported in one line, exit code 2."""


@dataclass(frozen=True)
class ControllerConfig:
    listen_host: str = "0.0.0.0"
    listen_port: int = 8080
    kubeconfig: str | None = None
    context: str | None = None
    gpu_signal: str = "prometheus"
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    prometheus_selector: str = ""
    exporter_selector: str = "app.kubernetes.io/name=queuepilot-exporter"
    exporter_port: int = 9400
    dry_run: bool = False
    config_path: str | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    resync_seconds: float = 30.0
    debounce_seconds: float = 0.2
    signal_stale_seconds: float = 120.0
    gpu_poll_seconds: float = 15.0
    ray_poll_seconds: float = 10.0
    ray_concurrency: int = 16
    ray_timeout_seconds: float = 5.0
    ray_token_file: str | None = None
    pods: str = "all"
    leader_elect: bool = True
    lease_name: str = "queuepilot-controller"
    lease_namespace: str = "default"
    identity: str = ""
    lease_duration_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    log_level: str = "INFO"
    webhook_listen: str = ""
    webhook_cert_dir: str = ""


def _env_name(flag: str) -> str:
    return ENV_PREFIX + flag.lstrip("-").replace("-", "_").upper()


def _bool_env(name: str, value: str) -> bool:
    v = value.strip().lower()
    if v in TRUE:
        return True
    if v in FALSE:
        return False
    raise ConfigError(f"{name}={value!r} is not a boolean (true/false)")


def _listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="queuepilot controller",
        description="Watch Kueue, KubeRay and the cluster; export queue, capacity and Ray metrics; "
        "run the admission check and the worker-group scaler (leader only). "
        "Every flag can also be set as QUEUEPILOT_<FLAG> (e.g. QUEUEPILOT_RESYNC_SECONDS=30).",
    )
    a = p.add_argument
    a("--listen", default="0.0.0.0:8080", type=_listen, help="HOST:PORT for /metrics, /healthz, /readyz")
    a("--kubeconfig", default=None, help="kubeconfig path (default: in-cluster service account, else ~/.kube/config)")
    a("--context", default=None, help="kubeconfig context")
    a("--gpu-signal", choices=("prometheus", "scrape"), default="prometheus",
      help="read GPU series from Prometheus, or scrape the exporter pods directly")
    a("--prometheus-url", default=ControllerConfig.prometheus_url, help="Prometheus base URL (--gpu-signal prometheus)")
    a("--prometheus-selector", default="", help='PromQL label matchers added to every GPU query, e.g. {cluster="a"}')
    a("--exporter-selector", default=ControllerConfig.exporter_selector, help="label selector of exporter pods (scrape)")
    a("--exporter-port", type=int, default=9400, help="exporter metrics port (scrape)")
    a("--dry-run", action=argparse.BooleanOptionalAction, default=False, help="decide and report, never write")
    a("--config", dest="config_path", default=None, help="YAML policy file (sections passed to the deciders)")
    a("--resync-seconds", type=float, default=30.0, help="periodic pass interval (passes also follow watch events)")
    a("--debounce-seconds", type=float, default=0.2, help="delay between a watch event and its pass")
    a("--signal-stale-seconds", type=float, default=120.0, help="age beyond which GPU/Ray signals are stale")
    a("--gpu-poll-seconds", type=float, default=15.0, help="GPU signal poll interval")
    a("--ray-poll-seconds", type=float, default=10.0, help="Ray dashboard poll interval")
    a("--ray-concurrency", type=int, default=16, help="Ray dashboards asked at once")
    a("--ray-timeout-seconds", type=float, default=5.0, help="timeout of one Ray dashboard request")
    a("--ray-token-file", default=None, help="file holding a bearer token for Ray dashboards")
    a("--pods", choices=("all", "labeled"), default="all",
      help="watch all non-terminal pods (exact node GPU requests) or only Ray/Kueue-labelled pods")
    a("--leader-elect", action=argparse.BooleanOptionalAction, default=True, help="elect a leader on a Lease")
    a("--lease-name", default="queuepilot-controller")
    a("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"))
    a("--identity", default="", help="leader-election identity (default: $POD_NAME, else the hostname)")
    a("--lease-duration-seconds", type=float, default=15.0)
    a("--renew-deadline-seconds", type=float, default=10.0)
    a("--retry-period-seconds", type=float, default=2.0)
    a("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    a("--webhook-listen", default="", help="HOST:PORT to serve the queue-name mutating webhook on (TLS); off when empty")
    a("--webhook-cert-dir", default="", help="directory with tls.crt and tls.key for the webhook (a mounted TLS Secret)")
    return p


def _apply_env(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    for action in parser._actions:
        if not action.option_strings or action.dest == "help":
            continue
        flag = next(s for s in action.option_strings if s.startswith("--") and not s.startswith("--no-"))
        name = _env_name(flag)
        if name not in env:
            continue
        raw = env[name]
        if isinstance(action, argparse.BooleanOptionalAction):
            value: Any = _bool_env(name, raw)
        elif action.type is not None:
            try:
                value = action.type(raw)  # type: ignore[operator]
            except (ValueError, argparse.ArgumentTypeError) as e:
                raise ConfigError(f"{name}={raw!r}: {e}") from e
        else:
            value = raw
        if action.choices is not None and value not in action.choices:
            raise ConfigError(f"{name}={raw!r}: choose from {', '.join(map(str, action.choices))}")
        parser.set_defaults(**{action.dest: value})


def load_settings(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"--config {path} is not valid YAML: {e}") from e
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict | type(None)) for v in data.values()):
        raise ConfigError(f"--config {path} must be a mapping of sections (admission:, scaling:, ...)")
    return {str(k): (v or {}) for k, v in data.items()}


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ControllerConfig:
    """Flags + environment -> ControllerConfig (raises ConfigError; argparse exits 2 on bad flags)."""
    env = os.environ if env is None else env
    parser = build_parser()
    _apply_env(parser, env)
    ns = parser.parse_args(list(argv))
    host, port = ns.listen
    identity = ns.identity or env.get("POD_NAME") or socket.gethostname()
    if ns.gpu_signal == "prometheus" and not ns.prometheus_url:
        raise ConfigError("--gpu-signal prometheus needs --prometheus-url")
    for name in ("resync_seconds", "signal_stale_seconds", "gpu_poll_seconds", "ray_poll_seconds"):
        if getattr(ns, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    if ns.webhook_listen and not ns.webhook_cert_dir:
        raise ConfigError("--webhook-listen needs --webhook-cert-dir (the webhook is served over TLS only)")
    if ns.leader_elect and not ns.renew_deadline_seconds < ns.lease_duration_seconds:
        raise ConfigError("--renew-deadline-seconds must be shorter than --lease-duration-seconds")
    fields = {k: v for k, v in vars(ns).items() if k != "listen"}
    settings = load_settings(ns.config_path)
    if ns.webhook_listen:
        from autoscaler.webhook.server import webhook_settings

        try:
            webhook_settings(settings)
        except ValueError as e:
            raise ConfigError(f"--config {ns.config_path}: {e}") from e
    return ControllerConfig(
        listen_host=host, listen_port=port, **{**fields, "identity": identity}, settings=settings,
    )
