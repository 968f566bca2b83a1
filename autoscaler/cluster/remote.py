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
or watches Secrets.  A MultiKueueCluster's ``location`` must be a plain Secret name (DNS-1123
subdomain): it is read from the configured namespace only, never as a path.  The kubeconfig is
held to Kueue's bar before anything in it is used (``autoscaler.cluster.worker_kubeconfig``: inline
credentials only, https only, verification on, no basic auth, no credentials in the URL, no proxy).

A worker that cannot be reached is not an error of the controller: its caches back off and retry
(``WatchCache``), :meth:`WorkerCluster.reachable` turns False once they made no progress for
``unreachable_after`` seconds, and the dispatcher leaves it out of nominations.  One worker's
failure is its own: every per-cluster step of :meth:`Fleet.refresh` is isolated, so whatever the
Secrets sorted before it contain, a good worker connects.  Failures to read a Secret or build a
client are counted as ``source_error("multikueue", kind)``, kept per cluster in
:attr:`Fleet.failing` (the ``queuepilot_worker_cluster_connect_failing`` gauge) and logged once per
failure streak, with a bounded ``kind``: ``forbidden``, ``missing``, ``malformed``, ``unsupported``
(exec plugin, file reference, ClusterProfile), ``insecure`` (plain http, verification off, basic
auth, credentials in the URL, a proxy), ``unavailable``, ``exception`` (anything unforeseen).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from autoscaler.cluster.cache import STALE_AFTER_SECONDS, WatchCache, WatchReporter
from autoscaler.cluster.resources import KUEUE, KUEUE_VERSION, NON_TERMINAL_PODS, ResourceSpec
from autoscaler.cluster.secrets import is_dns_subdomain, read_secret_key
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
from autoscaler.cluster.worker_kubeconfig import (
    KubeconfigRefused,
    WorkerCredentials,
    api_client_for,
    check_kubeconfig,
)
from autoscaler.core.snapshot import NodeState
from servicekit.tasks import cancel_tasks

log = logging.getLogger("queuepilot.fleet")

KUBECONFIG_KEY = "kubeconfig"
DEFAULT_KUEUE_NAMESPACE = "kueue-system"
FLEET_ERROR_KINDS = ("forbidden", "missing", "malformed", "unsupported", "insecure", "unavailable", "exception")
ERROR_SOURCE = "multikueue"  # the source label of queuepilot_source_errors_total for worker connections

MULTIKUEUE_CLUSTERS = ResourceSpec("multikueueclusters", KUEUE, KUEUE_VERSION, "multikueueclusters")
MULTIKUEUE_CONFIGS = ResourceSpec("multikueueconfigs", KUEUE, KUEUE_VERSION, "multikueueconfigs")
MULTIKUEUE_CHECKS = ResourceSpec("multikueue-admissionchecks", KUEUE, KUEUE_VERSION, "admissionchecks")
PLACEMENTS = ResourceSpec("workload-placements", KUEUE, KUEUE_VERSION, "workloads")


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


def check_kubeconfig_dict(cfg: Any, where: str, *, allow_insecure_http: bool = False) -> WorkerCredentials:
    """The credentials of kubeconfig ``cfg`` (``worker_kubeconfig.check_kubeconfig``), or FleetError with
    the rule it breaks (malformed / unsupported / insecure)."""
    try:
        return check_kubeconfig(cfg, where, allow_insecure_http=allow_insecure_http)
    except KubeconfigRefused as e:
        raise FleetError(e.kind, e.message) from None


async def read_kubeconfig_secret(api: ApiClient, namespace: str, name: str, request_timeout: float = 10.0,
                                 ) -> tuple[Any, str]:
    """(the decoded kubeconfig YAML, unchecked; the Secret's resourceVersion) of Secret ``namespace/name``
    key ``kubeconfig``; ``name`` must be a plain Secret name."""
    where = f"Secret {namespace}/{name}"
    if not is_dns_subdomain(name):
        raise FleetError("malformed", f"kubeConfig location {name[:100]!r} is not a Secret name (a DNS-1123 "
                                      f"subdomain); it is read from namespace {namespace} only")
    raw, body = await read_secret_key(api, namespace, name, KUBECONFIG_KEY, request_timeout=request_timeout,
                                      error=FleetError, forbidden_hint="add it to the chart's list of MultiKueue "
                                                                       "kubeconfig Secrets")
    try:
        text = base64.b64decode(raw, validate=True).decode("utf-8")
        cfg = yaml.safe_load(text)
    except (binascii.Error, UnicodeDecodeError, yaml.YAMLError, RecursionError) as e:
        raise FleetError("malformed", f"{where} key {KUBECONFIG_KEY!r} is not a base64 YAML kubeconfig") from e
    md = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    return cfg, str((md or {}).get("resourceVersion", ""))


def api_client_from_credentials(creds: WorkerCredentials, where: str) -> ApiClient:
    try:
        return api_client_for(creds, where)
    except KubeconfigRefused as e:
        raise FleetError(e.kind, e.message) from None


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
                 stale_after: float = STALE_AFTER_SECONDS, allow_insecure_http: bool = False,
                 connect: Callable[[WorkerCredentials, str], ApiClient] = api_client_from_credentials) -> None:
        self.api = api
        self.namespace = namespace
        self.allow_insecure_http = allow_insecure_http
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
        self.failing: dict[str, str] = {}  # cluster -> kind of the current failure
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
            self._counters.source_error(ERROR_SOURCE, err.kind)
        self.errors[cluster] = msg
        self.failing[cluster] = err.kind

    def _recovered(self, cluster: str, message: str) -> None:
        self.failing.pop(cluster, None)
        if self.errors.pop(cluster, None) is not None:
            log.info("worker cluster %s: %s", cluster, message)

    async def refresh(self) -> None:
        """Connect new workers, reconnect those whose Secret changed, stop those no longer named.  Each
        cluster's step is its own: a failure of one (whatever it raises) is counted for that cluster
        and the others go on."""
        wanted = dict(self.clusters.items)
        for name in [n for n in self.workers if n not in wanted]:
            log.info("worker cluster %s: no MultiKueueCluster names it any more; disconnecting", name)
            await self.workers.pop(name).stop()
        for name in [n for n in self.errors if n not in wanted]:
            del self.errors[name]
            self.failing.pop(name, None)
        for name, mkc in sorted(wanted.items()):
            try:
                await self._refresh_one(name, mkc)
            except asyncio.CancelledError:
                raise
            except FleetError as e:
                self._fail(name, e)
            except Exception as e:  # a shape or a bug nobody foresaw: this cluster only
                log.debug("worker cluster %s: refresh failed", name, exc_info=True)
                self._fail(name, FleetError("exception", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"))

    async def _refresh_one(self, name: str, mkc: MultiKueueClusterView) -> None:
        if mkc.secret is None:
            old = self.workers.pop(name, None)
            if old is not None:
                await old.stop()
            raise FleetError("unsupported", f"MultiKueueCluster {name}: only kubeConfig locationType Secret is read "
                                            f"(has {mkc.location_type or 'none'})")
        cfg, version = await read_kubeconfig_secret(self.api, self.namespace, mkc.secret)
        current = self.workers.get(name)
        if current is not None and current.secret_version == version:
            self._recovered(name, "Secret readable again")
            return
        where = f"Secret {self.namespace}/{mkc.secret}"
        creds = check_kubeconfig_dict(cfg, where, allow_insecure_http=self.allow_insecure_http)
        api = self._connect(creds, where)
        if current is not None:
            log.info("worker cluster %s: kubeconfig Secret changed; reconnecting", name)
            self.workers.pop(name)
            await current.stop()
        worker = WorkerCluster(name, api, version, self._counters, on_change=self._on_change,
                               clock=self._clock, stale_after=self._stale_after)
        worker.start()
        self.workers[name] = worker
        self._recovered(name, "connected")

    def status(self) -> list[WorkerStatus]:
        names = sorted(set(self.clusters.items) | set(self.workers))
        return [WorkerStatus(n, n in self.workers, self.errors.get(n, "")) for n in names]
