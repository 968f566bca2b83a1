"""``queuepilot controller`` flags, their ``QUEUEPILOT_<FLAG>`` environment variables, and the YAML file.

Precedence: command line > environment (``--resync-seconds`` <- ``QUEUEPILOT_RESYNC_SECONDS``) >
default.  ``--config PATH`` names a YAML file of policy sections (``admission:``, ``scaling:``,
``webhook:``) handed to the deciders as ``ControllerContext.settings``; every section is validated
here, at start-up, so a typo is one line on stderr (exit status 2), not a traceback later.
Every problem -- a bad flag, a bad environment value, a bad file -- raises :class:`ConfigError`
with a one-line message.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

import yaml

from autoscaler.core.policy.config import DEFAULT_CONTROLLER_NAME, admission_config, scaling_defaults
from autoscaler.core.policy.stall import stall_config
from autoscaler.signals.gpu import UTILIZATION_SOURCES
from servicekit.argtypes import count, non_negative_seconds, port, positive_seconds
from servicekit.envflags import DEFAULT_PREFIX, EnvError, HelpFormatter, apply_env
from servicekit.http import Limits
from servicekit.listen import listen_arg

ENV_PREFIX = DEFAULT_PREFIX
SECTIONS = ("admission", "scaling", "stall", "webhook")
GPU_SIGNALS = ("prometheus", "scrape")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_DNS_SUBDOMAIN = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


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
    multikueue_dispatcher: bool = False
    multikueue_namespace: str = "kueue-system"
    multikueue_cluster_label: str = "cluster"
    multikueue_allow_insecure_http: bool = False
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
    ray_ca_file: str | None = None
    gpu_utilization_signal: str = "gr_engine_active"
    pods: str = "all"
    leader_elect: bool = True
    lease_name: str = "queuepilot-controller"
    lease_namespace: str = "default"
    identity: str = ""
    lease_duration_seconds: float = 15.0
    stall_owners_configmap: str = "queuepilot-stall-owners"
    renew_deadline_seconds: float = 10.0
    retry_period_seconds: float = 2.0
    log_level: str = "INFO"
    webhook_listen: str = ""
    webhook_cert_dir: str = ""
    max_connections: int = Limits.max_connections
    http_header_timeout_seconds: float = Limits.header_timeout
    check_config: bool = False
    recommendation_annotations: bool = False

    @property
    def http_limits(self) -> Limits:
        """Limits of the metrics server: GET-only, so a request body of more than 64 KiB is refused, and
        one that dribbles in gets no longer than a request head."""
        return Limits(max_connections=self.max_connections, header_timeout=self.http_header_timeout_seconds,
                      body_timeout=self.http_header_timeout_seconds, max_body_bytes=64 * 1024)

    @property
    def webhook_limits(self) -> Limits:
        """Limits of the webhook server: the webhook's own body size and timeout, the shared cap and
        header timeout."""
        from autoscaler.webhook.server import LIMITS

        return replace(LIMITS, max_connections=self.max_connections, header_timeout=self.http_header_timeout_seconds)

    @property
    def controller_name(self) -> str:
        """The AdmissionCheck ``spec.controllerName`` this controller serves."""
        return DEFAULT_CONTROLLER_NAME

    def describe(self) -> str:
        """One line: mode, leader election, signals, the check's controller name, endpoints."""
        if self.gpu_signal == "prometheus":
            gpu = f"GPU signal prometheus {self.prometheus_url}" + (
                f" {self.prometheus_selector}" if self.prometheus_selector else "")
        else:
            gpu = f"GPU signal scrape of pods {self.exporter_selector} port {self.exporter_port}"
        leader = (f"leader election on (lease {self.lease_namespace}/{self.lease_name}, identity {self.identity})"
                  if self.leader_elect else "leader election off")
        webhook = f"webhook on {self.webhook_listen}" if self.webhook_listen else "webhook off"
        config = f"config {self.config_path}" if self.config_path else "no config file (defaults)"
        return (f"mode {'dry-run (shadow: every check Ready, would-be decisions reported, RayClusters never written)' if self.dry_run else 'live'}; {leader}; "
                f"{gpu}; Ray demand every {self.ray_poll_seconds:g}s; AdmissionCheck controller "
                f"{self.controller_name}; {webhook}; {config}")


class _Parser(argparse.ArgumentParser):
    """Usage errors raise ConfigError (one line) instead of printing the usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ConfigError(f"{message} (see --help)")


def _upper(text: str) -> str:
    return text.upper()


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="queuepilot controller",
        description="Watch Kueue, KubeRay and the cluster; export queue, capacity and Ray metrics; "
        "run the admission check and the worker-group scaler (leader only). "
        "Every flag can also be set as QUEUEPILOT_<FLAG> (e.g. QUEUEPILOT_RESYNC_SECONDS=30); the flag wins.",
        formatter_class=HelpFormatter,
    )
    a = p.add_argument
    a("--check-config", action="store_true", default=False,
      help="validate the flags, the config file and the kubeconfig offline (no cluster contact), "
      "print a summary and exit: 0 when valid, 2 otherwise")
    a("--listen", default="0.0.0.0:8080", type=listen_arg, metavar="HOST:PORT",
      help="address for /metrics, /healthz, /readyz")
    a("--max-connections", type=count(1), default=Limits.max_connections, metavar="N",
      help="open connections per HTTP server (metrics, webhook) at most; beyond it new ones wait")
    a("--http-header-timeout-seconds", type=positive_seconds, default=Limits.header_timeout, metavar="SECONDS",
      help="an HTTP client must send a complete request head (and finish a TLS handshake) within this")
    a("--kubeconfig", default=None, metavar="PATH",
      help="kubeconfig path (unset: the in-cluster service account, else ~/.kube/config)")
    a("--context", default=None, help="kubeconfig context (unset: its current-context)")
    a("--gpu-signal", choices=GPU_SIGNALS, default="prometheus",
      help="read GPU series from Prometheus, or scrape the exporter pods directly")
    a("--prometheus-url", default=ControllerConfig.prometheus_url, metavar="URL",
      help="Prometheus base URL (--gpu-signal prometheus)")
    a("--prometheus-selector", default="", metavar="MATCHERS",
      help='PromQL label matchers added to every GPU query, e.g. {cluster="a"}')
    a("--exporter-selector", default=ControllerConfig.exporter_selector, metavar="SELECTOR",
      help="label selector of exporter pods (--gpu-signal scrape)")
    a("--exporter-port", type=port, default=9400, metavar="PORT", help="exporter metrics port (--gpu-signal scrape)")
    a("--dry-run", action=argparse.BooleanOptionalAction, default=False,
      help="shadow mode: keep the AdmissionCheck Active and set every check Ready at once with the would-be "
           "decision in its message; send Events and count decisions with mode=dry_run; never write RayClusters; "
           "the webhook only warns")
    a("--recommendation-annotations", action=argparse.BooleanOptionalAction, default=False,
      help="write the right-sizing recommendation as the queuepilot.io/recommendation annotation (JSON) on "
           "RayClusters that opt in with queuepilot.io/annotate-recommendation: \"true\"; off: gauges and "
           "Events only")
    a("--config", dest="config_path", default=None, metavar="PATH",
      help="YAML policy file with sections admission, scaling, stall, webhook")
    a("--resync-seconds", type=positive_seconds, default=30.0, metavar="SECONDS",
      help="periodic pass interval (passes also follow watch events)")
    a("--debounce-seconds", type=non_negative_seconds, default=0.2, metavar="SECONDS",
      help="delay between a watch event and its pass")
    a("--signal-stale-seconds", type=positive_seconds, default=120.0, metavar="SECONDS",
      help="age beyond which GPU and Ray signals are stale")
    a("--gpu-poll-seconds", type=positive_seconds, default=15.0, metavar="SECONDS", help="GPU signal poll interval")
    a("--ray-poll-seconds", type=positive_seconds, default=10.0, metavar="SECONDS", help="Ray dashboard poll interval")
    a("--ray-concurrency", type=count(1), default=16, metavar="N", help="Ray dashboards asked at once")
    a("--ray-timeout-seconds", type=positive_seconds, default=5.0, metavar="SECONDS",
      help="timeout of one Ray dashboard request")
    a("--ray-token-file", default=None, metavar="PATH",
      help="single-tenant clusters only: one bearer token sent to every opted-in Ray head that names no "
           "token Secret (multi-tenant clusters: the queuepilot.io/ray-token-secret annotation per namespace)")
    a("--ray-ca-file", default=None, metavar="PATH",
      help="CA bundle to verify Ray dashboards served over https (queuepilot.io/ray-dashboard-scheme: https)")
    a("--gpu-utilization-signal", choices=UTILIZATION_SOURCES, default="gr_engine_active",
      help="per-GPU utilization for idle detection and targets: the profiling engine activity, SM activity, "
           "or DCGM_FI_DEV_GPU_UTIL; a GPU without the profiling series falls back to DCGM_FI_DEV_GPU_UTIL")
    a("--pods", choices=("all", "labeled"), default="all",
      help="watch all non-terminal pods (exact node GPU requests) or only Ray/Kueue-labelled pods")
    a("--leader-elect", action=argparse.BooleanOptionalAction, default=True, help="elect a leader on a Lease")
    a("--lease-name", default="queuepilot-controller", metavar="NAME", help="name of the leader-election Lease")
    a("--lease-namespace", default=os.environ.get("POD_NAMESPACE", "default"), metavar="NAMESPACE",
      help="namespace of the Lease (the default is $POD_NAMESPACE when set)")
    a("--stall-owners-configmap", default="queuepilot-stall-owners", metavar="NAME",
      help="ConfigMap in the --lease-namespace that keeps the owners of deactivated workloads across restarts "
           "(stall.remember_owners); '' keeps them in memory only")
    a("--identity", default="", help="leader-election identity (empty: $POD_NAME, else the host name)")
    a("--lease-duration-seconds", type=positive_seconds, default=15.0, metavar="SECONDS",
      help="how long a Lease holds without renewal")
    a("--renew-deadline-seconds", type=positive_seconds, default=10.0, metavar="SECONDS",
      help="the leader gives up leading when it cannot renew within this")
    a("--retry-period-seconds", type=positive_seconds, default=2.0, metavar="SECONDS",
      help="interval between Lease acquire or renew attempts")
    a("--log-level", type=_upper, default="INFO", choices=LOG_LEVELS, help="log verbosity")
    a("--multikueue-dispatcher", action=argparse.BooleanOptionalAction, default=False,
      help="manager cluster of MultiKueue: write status.nominatedClusterNames with the worker clusters where a "
           "workload's pods fit on healthy free GPUs (Kueue's multiKueue.dispatcherName must name queuepilot's "
           "dispatcher); off: single-cluster behaviour only")
    a("--multikueue-namespace", default="kueue-system", metavar="NAMESPACE",
      help="namespace Kueue runs in, where the MultiKueueClusters' kubeconfig Secrets are (--multikueue-dispatcher)")
    a("--multikueue-cluster-label", default="cluster", metavar="LABEL",
      help="label of the shared Prometheus that names the worker cluster of each GPU series, matched against the "
           "MultiKueueCluster name (--multikueue-dispatcher)")
    a("--multikueue-allow-insecure-http", action="store_true", default=False,
      help="TEST FLEETS ONLY: accept worker kubeconfigs whose server is plain http:// (their credentials then "
           "cross the network in clear); off, such a kubeconfig is refused (kind insecure). The chart never sets it")
    a("--webhook-listen", default="", metavar="HOST:PORT",
      help="address to serve the queue-name mutating webhook on (TLS); off when empty")
    a("--webhook-cert-dir", default="", metavar="DIR",
      help="directory with tls.crt and tls.key for the webhook (a mounted TLS Secret)")
    return p


def _apply_env(parser: argparse.ArgumentParser, env: Mapping[str, str]) -> None:
    try:
        apply_env(parser, env, skip=("check_config",))
    except EnvError as e:
        raise ConfigError(str(e)) from None


def load_settings(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"cannot read --config {path}: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"--config {path} is not valid YAML: {where}{problem}") from None
    except UnicodeDecodeError:
        raise ConfigError(f"--config {path} is not a text file") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict | type(None)) for v in data.values()):
        raise ConfigError(f"--config {path} must be a mapping of sections (admission:, scaling:, ...)")
    return {str(k): (v or {}) for k, v in data.items()}


def validate_settings(settings: Mapping[str, Any], path: str | None) -> None:
    """Every section of the config file, as the deciders and the webhook will read it."""
    from autoscaler.webhook.server import webhook_settings

    unknown = sorted(set(settings) - set(SECTIONS))
    if unknown:
        raise ConfigError(f"--config {path}: unknown section(s) {', '.join(map(repr, unknown))} "
                          f"(known: {', '.join(SECTIONS)})")
    for check in (admission_config, scaling_defaults, stall_config, webhook_settings):
        try:
            check(settings)
        except (ValueError, TypeError, OverflowError) as e:
            raise ConfigError(f"--config {path}: {' '.join(str(e).split())}") from None


def parse_config(argv: Sequence[str], env: Mapping[str, str] | None = None) -> ControllerConfig:
    """Flags + environment + config file -> ControllerConfig; ConfigError (one line) for any problem."""
    env = os.environ if env is None else env
    parser = build_parser()
    _apply_env(parser, env)
    ns = parser.parse_args(list(argv))
    host, port_ = ns.listen
    identity = ns.identity or env.get("POD_NAME") or socket.gethostname()
    if ns.gpu_signal == "prometheus":
        if not ns.prometheus_url.startswith(("http://", "https://")):
            raise ConfigError(f"--prometheus-url must be an http:// or https:// URL, got {ns.prometheus_url!r}")
    if ns.webhook_listen:
        try:
            listen_arg(ns.webhook_listen)
        except argparse.ArgumentTypeError as e:
            raise ConfigError(f"--webhook-listen: {e}") from None
        if not ns.webhook_cert_dir:
            raise ConfigError("--webhook-listen needs --webhook-cert-dir (the webhook is served over TLS only)")
    if ns.leader_elect and not ns.renew_deadline_seconds < ns.lease_duration_seconds:
        raise ConfigError("--renew-deadline-seconds must be shorter than --lease-duration-seconds")
    if ns.leader_elect and not ns.retry_period_seconds < ns.renew_deadline_seconds:
        raise ConfigError("--retry-period-seconds must be shorter than --renew-deadline-seconds")
    if ns.stall_owners_configmap and not _DNS_SUBDOMAIN.fullmatch(ns.stall_owners_configmap):
        raise ConfigError(f"--stall-owners-configmap {ns.stall_owners_configmap!r} is not a ConfigMap name "
                          "(lower-case letters, digits, '-' and '.', at most 253)")
    fields_ = {k: v for k, v in vars(ns).items() if k != "listen"}
    settings = load_settings(ns.config_path)
    validate_settings(settings, ns.config_path)
    # the reconcilers read ControllerContext.settings: the flag reaches the recommender as this (internal) section
    if ns.recommendation_annotations:
        settings = {**settings, "recommendations": {"annotate": True}}
    return ControllerConfig(
        listen_host=host, listen_port=port_, **{**fields_, "identity": identity}, settings=settings,
    )
