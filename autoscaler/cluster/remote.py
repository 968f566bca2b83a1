"""Worker clusters, reached the way MultiKueue reaches them: through the kubeconfig Secrets that
MultiKueueCluster objects name.

In the manager cluster :class:`Fleet` keeps four list-then-watch caches (``WatchCache``):
MultiKueueClusters, MultiKueueConfigs, MultiKueue's AdmissionChecks (only those with controllerName
``kueue.x-k8s.io/multikueue``, with the MultiKueueConfig they name) and a slim view of every
Workload's placement (``status.nominatedClusterNames`` / ``status.clusterName``).  Every
``refresh`` (the controller calls it periodically) it reads, with one GET each, the Secrets the
MultiKueueClusters name (``spec.clusterSource.kubeConfig`` with ``locationType: Secret``: a Secret
in Kueue's namespace, key ``kubeconfig``), and for each worker builds its own kubernetes-asyncio
``ApiClient`` and two caches — Nodes, and non-terminal Pods — nothing else.  A worker whose Secret
changed is reconnected; one no MultiKueueCluster names any more is stopped.

The controller may only ``get`` the Secrets it was granted by name (a Role with ``resourceNames``
in Kueue's namespace, rendered from the chart's list of worker kubeconfig Secrets); it never lists
or watches Secrets.  A kubeconfig must carry its credentials inline: ``exec`` / ``auth-provider``
plugins and file references (``tokenFile``, ``client-certificate``, ``client-key``,
``certificate-authority``) are refused, because whoever writes that Secret would otherwise run a
command or read a file inside the controller's pod.

A worker that cannot be reached is not an error of the controller: its caches back off and retry
(``WatchCache``), :meth:`WorkerCluster.reachable` turns False once they made no progress for
``unreachable_after`` seconds, and the dispatcher leaves it out of nominations.  Failures to read
a Secret or build a client are counted as ``source_error("fleet/<cluster>", kind)`` and logged once
per failure streak, with a bounded ``kind``: ``forbidden``, ``missing``, ``malformed``,
``unsupported`` (exec plugin, file reference, ClusterProfile), ``unavailable``.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import load_kube_config_from_dict
from kubernetes_asyncio.config.config_exception import ConfigException

from autoscaler.cluster.cache import STALE_AFTER_SECONDS, WatchCache, WatchReporter
from autoscaler.cluster.resources import KUEUE, KUEUE_VERSION, NON_TERMINAL_PODS, ResourceSpec
from autoscaler.cluster.secrets import read_secret_key
from autoscaler.cluster.views import (
    MultiKueueCheckView,
    MultiKueueClusterView,
    MultiKueueConfigView,
    PlacementView,
    PodView,
    multikueue_check_view,
    multikueue_cluster_view,
    multikueue_config_view,
    node_view,
    placement_view,
    pod_view,
)
from autoscaler.core.snapshot import NodeState
from servicekit.tasks import cancel_tasks

log = logging.getLogger("queuepilot.fleet")

KUBECONFIG_KEY = "kubeconfig"
DEFAULT_KUEUE_NAMESPACE = "kueue-system"
FLEET_ERROR_KINDS = ("forbidden", "missing", "malformed", "unsupported", "unavailable")

MULTIKUEUE_CLUSTERS = ResourceSpec("multikueueclusters", KUEUE, KUEUE_VERSION, "multikueueclusters")
MULTIKUEUE_CONFIGS = ResourceSpec("multikueueconfigs", KUEUE, KUEUE_VERSION, "multikueueconfigs")
MULTIKUEUE_CHECKS = ResourceSpec("multikueue-admissionchecks", KUEUE, KUEUE_VERSION, "admissionchecks")
PLACEMENTS = ResourceSpec("workload-placements", KUEUE, KUEUE_VERSION, "workloads")

_FILE_KEYS = {"tokenFile", "client-certificate", "client-key", "certificate-authority"}


class FleetError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        if kind not in FLEET_ERROR_KINDS:
            raise ValueError(f"unknown FleetError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind


def worker_specs(cluster: str) -> tuple[ResourceSpec, ResourceSpec]:
    """The two watches of one worker (cache names carry the cluster: ``<cluster>/nodes``)."""
    return (ResourceSpec(f"{cluster}/nodes", "", "v1", "nodes"),
            ResourceSpec(f"{cluster}/pods", "", "v1", "pods", field_selector=NON_TERMINAL_PODS))


def check_kubeconfig_dict(cfg: Any, where: str) -> dict[str, Any]:
    """The kubeconfig if it carries everything inline, else FleetError(malformed/unsupported)."""
    if not isinstance(cfg, dict):
        raise FleetError("malformed", f"{where}: the kubeconfig is not a YAML mapping")
    for section in ("clusters", "users", "contexts"):
        if not isinstance(cfg.get(section), list) or not cfg[section]:
            raise FleetError("malformed", f"{where}: the kubeconfig has no {section}")
    for u in cfg["users"]:
        user = (u or {}).get("user") if isinstance(u, dict) else None
        if not isinstance(user, dict):
            continue
        if "exec" in user or "auth-provider" in user:
            raise FleetError("unsupported", f"{where}: credential plugins (exec, auth-provider) are not run; "
                                            "put a token or client certificate data in the kubeconfig")
        bad = sorted(_FILE_KEYS & set(user))
        if bad:
            raise FleetError("unsupported", f"{where}: file references ({', '.join(bad)}) are not read; inline the data")
    for c in cfg["clusters"]:
        cl = (c or {}).get("cluster") if isinstance(c, dict) else None
        if isinstance(cl, dict) and "certificate-authority" in cl:
            raise FleetError("unsupported", f"{where}: certificate-authority file references are not read; "
                                            "use certificate-authority-data")
    return cfg


async def read_kubeconfig_secret(api: ApiClient, namespace: str, name: str,
                                 request_timeout: float = 10.0) -> tuple[dict[str, Any], str]:
    """(kubeconfig, Secret resourceVersion) of Secret ``namespace/name`` key ``kubeconfig``."""
    where = f"Secret {namespace}/{name}"
    raw, body = await read_secret_key(api, namespace, name, KUBECONFIG_KEY, request_timeout=request_timeout,
                                      error=FleetError, forbidden_hint="add it to the chart's list of MultiKueue "
                                                                       "kubeconfig Secrets")
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8")
        cfg = yaml.safe_load(text)
    except (binascii.Error, UnicodeDecodeError, yaml.YAMLError) as e:
        raise FleetError("malformed", f"{where} key {KUBECONFIG_KEY!r} is not a base64 YAML kubeconfig") from e
    md = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    return check_kubeconfig_dict(cfg, where), str(md.get("resourceVersion", ""))


async def api_client_from_kubeconfig(cfg: Mapping[str, Any], where: str) -> ApiClient:
    configuration = Configuration()
    try:
        await load_kube_config_from_dict(config_dict=dict(cfg), client_configuration=configuration)
    except (ConfigException, ValueError, TypeError, KeyError, AttributeError, OSError) as e:
        raise FleetError("malformed", f"{where}: {' '.join(str(e).split())[:200] or type(e).__name__}") from e
    return ApiClient(configuration=configuration)


class WorkerCluster:
    """One worker: its ApiClient and its Nodes / Pods caches."""

    def __init__(self, name: str, api: ApiClient, secret_version: str, counters: WatchReporter, *,
                 on_change: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time,
                 stale_after: float = STALE_AFTER_SECONDS) -> None:
        self.name = name
        self.api = api
        self.secret_version = secret_version
        nodes_spec, pods_spec = worker_specs(name)
        self.nodes: WatchCache[NodeState] = WatchCache(api, nodes_spec, node_view, counters, on_change=on_change,
                                                       clock=clock, stale_after=stale_after)
        self.pods: WatchCache[PodView] = WatchCache(api, pods_spec, pod_view, counters, on_change=on_change,
                                                    clock=clock, stale_after=stale_after)
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(c.run(), name=f"watch-{c.name}") for c in (self.nodes, self.pods)]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        await self.api.close()

    def reachable(self, now: float) -> bool:
        """Both caches listed once and made progress within their ``stale_after``."""
        return all(c.synced and c.healthy(now) for c in (self.nodes, self.pods))

    def observed_at(self, now: float) -> float | None:
        """When both caches were last known current (the older of the two)."""
        seen = [c.observed_at(now) for c in (self.nodes, self.pods)]
        if any(s is None for s in seen) or not all(c.synced for c in (self.nodes, self.pods)):
            return None
        return min(s for s in seen if s is not None)


@dataclass(frozen=True, slots=True)
class WorkerStatus:
    name: str
    connected: bool  # a client and caches exist
    error: str  # why not ('' when connected): "<kind>: <message>"


class Fleet:
    """The manager's MultiKueue objects and one :class:`WorkerCluster` per MultiKueueCluster."""

    def __init__(self, api: ApiClient, counters: WatchReporter, *, namespace: str = DEFAULT_KUEUE_NAMESPACE,
                 on_change: Callable[[str], None] | None = None, clock: Callable[[], float] = time.time,
                 stale_after: float = STALE_AFTER_SECONDS,
                 connect: Callable[[Mapping[str, Any], str], Any] = api_client_from_kubeconfig) -> None:
        self.api = api
        self.namespace = namespace
        self._counters = counters
        self._on_change = on_change
        self._clock = clock
        self._stale_after = stale_after
        self._connect = connect
        self.clusters: WatchCache[MultiKueueClusterView] = WatchCache(
            api, MULTIKUEUE_CLUSTERS, multikueue_cluster_view, counters, on_change=on_change, clock=clock)
        self.configs: WatchCache[MultiKueueConfigView] = WatchCache(
            api, MULTIKUEUE_CONFIGS, multikueue_config_view, counters, on_change=on_change, clock=clock)
        self.checks: WatchCache[MultiKueueCheckView] = WatchCache(
            api, MULTIKUEUE_CHECKS, multikueue_check_view, counters, on_change=on_change, clock=clock)
        self.placements: WatchCache[PlacementView] = WatchCache(
            api, PLACEMENTS, placement_view, counters, on_change=on_change, clock=clock)
        self.workers: dict[str, WorkerCluster] = {}
        self.errors: dict[str, str] = {}  # cluster -> "<kind>: <message>" of the current failure
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def manager_caches(self) -> tuple[WatchCache[Any], ...]:
        return (self.clusters, self.configs, self.checks, self.placements)

    @property
    def synced(self) -> bool:
        return all(c.synced for c in self.manager_caches)

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(c.run(), name=f"watch-{c.name}") for c in self.manager_caches]

    async def stop(self) -> None:
        await cancel_tasks(self._tasks)
        self._tasks = []
        for w in list(self.workers.values()):
            await w.stop()
        self.workers.clear()

    def _fail(self, cluster: str, err: FleetError) -> None:
        msg = str(err)
        if self.errors.get(cluster) != msg:  # once per failure streak (and when the cause changes)
            log.warning("worker cluster %s: %s", cluster, msg)
            self._counters.source_error(f"fleet/{cluster}", err.kind)
        self.errors[cluster] = msg

    async def refresh(self) -> None:
        """Connect new workers, reconnect those whose Secret changed, stop those no longer named."""
        wanted = dict(self.clusters.items)
        for name in [n for n in self.workers if n not in wanted]:
            log.info("worker cluster %s: no MultiKueueCluster names it any more; disconnecting", name)
            await self.workers.pop(name).stop()
        for name in [n for n in self.errors if n not in wanted]:
            del self.errors[name]
        for name, mkc in sorted(wanted.items()):
            if mkc.secret is None:
                old = self.workers.pop(name, None)
                if old is not None:
                    await old.stop()
                self._fail(name, FleetError("unsupported", f"MultiKueueCluster {name}: only kubeConfig "
                                                           f"locationType Secret is read (has {mkc.location_type or 'none'})"))
                continue
            try:
                cfg, version = await read_kubeconfig_secret(self.api, self.namespace, mkc.secret)
                current = self.workers.get(name)
                if current is not None and current.secret_version == version:
                    if self.errors.pop(name, None) is not None:
                        log.info("worker cluster %s: Secret readable again", name)
                    continue
                api = await self._connect(cfg, f"Secret {self.namespace}/{mkc.secret}")
            except FleetError as e:
                self._fail(name, e)
                continue
            if current is not None:
                log.info("worker cluster %s: kubeconfig Secret changed; reconnecting", name)
                await current.stop()
            worker = WorkerCluster(name, api, version, self._counters, on_change=self._on_change,
                                   clock=self._clock, stale_after=self._stale_after)
            worker.start()
            self.workers[name] = worker
            if self.errors.pop(name, None) is not None:
                log.info("worker cluster %s: connected", name)

    def status(self) -> list[WorkerStatus]:
        names = sorted(set(self.clusters.items) | set(self.workers))
        return [WorkerStatus(n, n in self.workers, self.errors.get(n, "")) for n in names]
