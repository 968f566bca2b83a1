"""Ray demand and node state of RayClusters: poll each head's dashboard concurrently, bounded, with ages.

Which heads, and with what credentials:

- clusters that opted in (``queuepilot.io/autoscale: "true"``) are polled; so is, while the stall
  detector needs Ray's view of its workload, a cluster that did not (its target is ``evidence_only``;
  ``autoscaler.controller.loop.Controller.ray_targets`` decides); every other one gets no request
  at all (its target is None);
- the address is the cluster's own head Service in the cluster's own namespace
  (``<head service>.<namespace>.svc``), never one read from the RayCluster's status;
- the bearer token is the one in the Secret the cluster names (``queuepilot.io/ray-token-secret``,
  key ``token``, in the cluster's namespace), so a head only ever receives its own namespace's
  token.  A cluster that names no Secret gets no token, unless it opted in and the controller was
  started with a shared token (``--ray-token-file``), which is meant for single-tenant clusters only:
  an ``evidence_only`` target never gets it, and the two never mix, so with a shared token a cluster
  that names a token Secret is refused (``credentials``: its Secret is not read, the shared token not
  sent), because it shows the cluster has tenants with their own tokens, who must not be sent one
  shared by all;
- ``queuepilot.io/ray-dashboard-scheme: https`` polls over TLS, verified against the configured
  CA file (or the system's CAs); verification is never turned off.

:class:`RayHeadClient` enforces the above for one head; the dashboard protocol itself (endpoints,
v1/v2 parsing) is ``autoscaler.signals.ray_demand.RayDashboardClient``.  :class:`RaySignals`
decides how many heads are asked at once and keeps the last good ``RayStatus`` of each with its
``observed_at`` so a failing dashboard turns its ``ray/<ns>/<name>`` signal stale instead of
erasing the demand.  Failures are counted in ``queuepilot_source_errors_total{source="ray", kind}``
(``RaySignalError.kind``) and logged once per cluster and kind.

One tenant's slow or failing heads never make another tenant's signal stale:

- every head has its own deadline (``timeout``), and a poll does not wait for a slow head beyond it:
  the head's request goes on in the background (it is not asked again while it runs) and its
  answer is kept when it comes;
- at most ``concurrency`` heads are asked at once, and at most ``per_namespace`` of one namespace,
  so one namespace's heads can hold only their share of the slots; due heads are started in turn
  across namespaces (one of each namespace before a second of any);
- a head that keeps failing is asked less often: after its second failure in a row it waits
  ``retry_base`` seconds, then twice that, up to ``retry_cap``, before it is asked again.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any, Protocol

from autoscaler.signals.gpu import error_kind
from autoscaler.signals.ray_demand import RayDashboardClient, RaySignalError
from servicekit.tasks import cancel_tasks

log = logging.getLogger("queuepilot.ray")

# (namespace, secret name) -> the token; raises when the Secret cannot be read
ReadSecret = Callable[[str, str], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class RayObservation:
    """The last good Ray status of one RayCluster (``status``: a ``RayStatus``) and when it was read."""

    status: Any = None
    observed_at: float | None = None
    error: str = ""  # bounded kind of the last failure, "" after a success


class DashboardTarget(Protocol):
    """One cluster's head (``autoscaler.cluster.views.RayDashboardTarget`` is one)."""

    @property
    def namespace(self) -> str: ...

    @property
    def scheme(self) -> str: ...

    @property
    def token_secret(self) -> str | None: ...

    @property
    def base_url(self) -> str: ...

    @property
    def evidence_only(self) -> bool: ...


class RayClient(Protocol):
    async def fetch_status(self, target: DashboardTarget, now: float) -> Any: ...


class RayHeadClient:
    """Reads one cluster's head with that cluster's own credentials (see the module doc).

    ``dashboard``: the shared dashboard client (its own token, if any, is never used: each request
    gets the target's).  ``read_secret``: how a named token Secret is read
    (``autoscaler.cluster.secrets.SecretTokens.token``); None: clusters that name a Secret are not
    polled.  ``shared_token``: single-tenant mode, sent to opted-in clusters that name no Secret
    (never to an ``evidence_only`` target).
    ``ca_file``: PEM bundle that signs the heads' dashboard certificates (None: the system CAs).
    ``forget_secrets(keep)``: drops cached Secrets not in ``keep`` (``SecretTokens.forget``), called by
    :meth:`prune` with the Secrets the current targets name.
    """

    def __init__(
        self,
        dashboard: RayDashboardClient,
        *,
        read_secret: ReadSecret | None = None,
        shared_token: str | None = None,
        ca_file: str | None = None,
        forget_secrets: Callable[[set[tuple[str, str]]], None] | None = None,
    ) -> None:
        self._dashboard = dashboard
        self._read_secret = read_secret
        self._forget_secrets = forget_secrets
        self._shared_token = shared_token or None
        self._ssl = ssl.create_default_context(cafile=ca_file)  # verifies chain and host name

    async def fetch_status(self, target: DashboardTarget, now: float) -> Any:
        if isinstance(target, str) or not hasattr(target, "base_url"):
            raise TypeError(f"a dashboard target is needed, not {type(target).__name__} (no bare URLs)")
        token = await self._token(target)
        tls = self._ssl if target.scheme == "https" else None
        return await self._dashboard.bound(token=token, ssl_context=tls).fetch_status(target.base_url, now)

    def prune(self, targets: Mapping[str, DashboardTarget | None]) -> None:
        """Forget the token Secrets no opted-in cluster names any more (``forget_secrets``)."""
        if self._forget_secrets is not None:
            self._forget_secrets({(t.namespace, t.token_secret) for t in targets.values()
                                  if t is not None and t.token_secret})

    async def _token(self, target: DashboardTarget) -> str | None:
        secret = target.token_secret
        if not secret:
            # the shared token is for clusters someone opted in to scaling, not for every RayJob's head
            return None if target.evidence_only else self._shared_token
        if self._shared_token is not None:
            raise RaySignalError("credentials", f"Secret {target.namespace}/{secret}: per-namespace token Secrets are "
                                                "refused while a shared --ray-token-file is set (single-tenant mode)")
        if self._read_secret is None:
            raise RaySignalError("credentials", f"Secret {target.namespace}/{secret}: no Secret access configured")
        try:
            return await self._read_secret(target.namespace, secret)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the reader's errors carry their own message (forbidden, missing, ...)
            raise RaySignalError("credentials", str(e)) from e


class RaySignals:
    """Per-cluster Ray observations, refreshed by :meth:`poll` over the clusters' dashboard targets
    (see the module doc for the deadlines, the per-namespace share and the retry backoff)."""

    def __init__(
        self,
        client: RayClient,
        on_error: Callable[[str], None],
        concurrency: int = 16,
        timeout: float = 10.0,
        *,
        per_namespace: int | None = None,
        retry_base: float = 10.0,
        retry_cap: float = 60.0,
    ) -> None:
        self._client = client
        self._on_error = on_error
        self._sem = asyncio.Semaphore(concurrency)
        self._per_namespace = per_namespace or max(1, concurrency // 4)
        self._ns_sems: dict[str, asyncio.Semaphore] = {}
        self._timeout = timeout
        self._retry_base = retry_base
        self._retry_cap = retry_cap
        self._obs: dict[str, RayObservation] = {}
        self._logged: dict[str, str] = {}
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._running: dict[str, asyncio.Task[None]] = {}

    @property
    def observations(self) -> Mapping[str, RayObservation]:
        return self._obs

    @property
    def in_flight(self) -> int:
        return len(self._running)

    @property
    def reading(self) -> frozenset[str]:
        """The clusters whose heads are being read now (started by an earlier poll, not ended)."""
        return frozenset(self._running)

    def retry_at(self, key: str) -> float | None:
        """When a failing cluster is asked again (None: at the next poll)."""
        return self._retry_at.get(key)

    async def _one(self, key: str, namespace: str, target: DashboardTarget, now: float) -> None:
        ns_sem = self._ns_sems.setdefault(namespace, asyncio.Semaphore(self._per_namespace))
        async with ns_sem, self._sem:
            try:
                async with asyncio.timeout(self._timeout):
                    status = await self._client.fetch_status(target, now)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                kind = str(getattr(e, "kind", "") or error_kind(e))
                self._on_error(kind)
                old = self._obs.get(key, RayObservation())
                self._obs[key] = RayObservation(old.status, old.observed_at, kind)
                failures = self._failures[key] = self._failures.get(key, 0) + 1
                if failures >= 2:
                    self._retry_at[key] = now + min(self._retry_cap, self._retry_base * 2 ** (failures - 2))
                if self._logged.get(key) != kind:  # once per cluster and kind, not every poll
                    self._logged[key] = kind
                    where = getattr(target, "base_url", "?")
                    log.warning("Ray demand of %s from %s: %s (%s)", key, where, kind, e)
                return
            self._logged.pop(key, None)
            self._failures.pop(key, None)
            self._retry_at.pop(key, None)
            self._obs[key] = RayObservation(status, getattr(status, "observed_at", None) or now, "")

    def _done(self, key: str, task: asyncio.Task[None]) -> None:
        if self._running.get(key) is task:
            del self._running[key]

    async def poll(self, targets: Mapping[str, DashboardTarget | None], now: float) -> None:
        """``targets``: RayCluster key "ns/name" -> its dashboard target (None: never asked); within a
        namespace the clusters opted in to scaling are asked before those polled for evidence only.

        Starts every due head that is not still being read and waits for them at most one deadline
        (``timeout``); heads still running then go on in the background (their answers are kept when
        they come) and are not asked again until they end."""
        wanted = {k for k, t in targets.items() if t is not None}
        self._obs = {k: v for k, v in self._obs.items() if k in wanted}
        self._logged = {k: v for k, v in self._logged.items() if k in wanted}
        self._failures = {k: v for k, v in self._failures.items() if k in wanted}
        self._retry_at = {k: v for k, v in self._retry_at.items() if k in wanted}
        prune = getattr(self._client, "prune", None)
        if callable(prune):
            prune(targets)
        gone = [t for k, t in self._running.items() if k not in wanted]
        if gone:
            await cancel_tasks(gone)
        by_ns: dict[str, list[str]] = {}
        for key in sorted(wanted, key=lambda k: (bool(getattr(targets[k], "evidence_only", False)), k)):
            if key in self._running or now < self._retry_at.get(key, float("-inf")):
                continue
            by_ns.setdefault(self._namespace(key, targets[key]), []).append(key)
        busy = {self._namespace(k, targets.get(k)) for k in self._running}
        self._ns_sems = {ns: s for ns, s in self._ns_sems.items() if ns in by_ns or ns in busy}
        started: list[asyncio.Task[None]] = []
        for turn in zip_longest(*(by_ns[ns] for ns in sorted(by_ns))):  # one of each namespace in turn
            for key in turn:
                if key is None:
                    continue
                target = targets[key]
                assert target is not None
                task = asyncio.create_task(self._one(key, self._namespace(key, target), target, now),
                                           name=f"ray-{key}")
                self._running[key] = task
                task.add_done_callback(functools.partial(self._done, key))
                started.append(task)
        if started:
            await self._wait(started)

    async def _wait(self, tasks: list[asyncio.Task[None]]) -> None:
        """Until every task ended or one deadline passed (what is left is slow, or waits for a slot
        behind slow heads of its own namespace: it lands when it ends)."""
        await asyncio.wait(tasks, timeout=self._timeout)

    @staticmethod
    def _namespace(key: str, target: DashboardTarget | None) -> str:
        ns = getattr(target, "namespace", None)
        return ns if isinstance(ns, str) and ns else key.partition("/")[0]

    async def close(self) -> None:
        """Stop the reads still running (shutdown)."""
        await cancel_tasks(list(self._running.values()))
        self._running.clear()
