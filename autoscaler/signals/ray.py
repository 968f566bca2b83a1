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
  started with a shared token (``--ray-token-file``), which is meant for single-tenant clusters only;
  an ``evidence_only`` target never gets the shared token;
- ``queuepilot.io/ray-dashboard-scheme: https`` polls over TLS, verified against the configured
  CA file (or the system's CAs); verification is never turned off.

:class:`RayHeadClient` enforces the above for one head; the dashboard protocol itself (endpoints,
v1/v2 parsing) is ``autoscaler.signals.ray_demand.RayDashboardClient``.  :class:`RaySignals`
decides how many heads are asked at once and keeps the last good ``RayStatus`` of each with its
``observed_at`` so a failing dashboard turns its ``ray/<ns>/<name>`` signal stale instead of
erasing the demand.  Failures are counted in ``queuepilot_source_errors_total{source="ray", kind}``
(``RaySignalError.kind``) and logged once per cluster and kind.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.signals.gpu import error_kind
from autoscaler.signals.ray_demand import RayDashboardClient, RaySignalError

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
    """

    def __init__(
        self,
        dashboard: RayDashboardClient,
        *,
        read_secret: ReadSecret | None = None,
        shared_token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        self._dashboard = dashboard
        self._read_secret = read_secret
        self._shared_token = shared_token or None
        self._ssl = ssl.create_default_context(cafile=ca_file)  # verifies chain and host name

    async def fetch_status(self, target: DashboardTarget, now: float) -> Any:
        if isinstance(target, str) or not hasattr(target, "base_url"):
            raise TypeError(f"a dashboard target is needed, not {type(target).__name__} (no bare URLs)")
        token = await self._token(target)
        tls = self._ssl if target.scheme == "https" else None
        return await self._dashboard.bound(token=token, ssl_context=tls).fetch_status(target.base_url, now)

    async def _token(self, target: DashboardTarget) -> str | None:
        secret = target.token_secret
        if not secret:
            # the shared token is for clusters someone opted in to scaling, not for every RayJob's head
            return None if target.evidence_only else self._shared_token
        if self._read_secret is None:
            raise RaySignalError("credentials", f"Secret {target.namespace}/{secret}: no Secret access configured")
        try:
            return await self._read_secret(target.namespace, secret)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # the reader's errors carry their own message (forbidden, missing, ...)
            raise RaySignalError("credentials", str(e)) from e


class RaySignals:
    """Per-cluster Ray observations, refreshed by :meth:`poll` over the clusters' dashboard targets."""

    def __init__(
        self,
        client: RayClient,
        on_error: Callable[[str], None],
        concurrency: int = 16,
        timeout: float = 10.0,
    ) -> None:
        self._client = client
        self._on_error = on_error
        self._sem = asyncio.Semaphore(concurrency)
        self._timeout = timeout
        self._obs: dict[str, RayObservation] = {}
        self._logged: dict[str, str] = {}

    @property
    def observations(self) -> Mapping[str, RayObservation]:
        return self._obs

    async def _one(self, key: str, target: DashboardTarget, now: float) -> None:
        async with self._sem:
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
                if self._logged.get(key) != kind:  # once per cluster and kind, not every poll
                    self._logged[key] = kind
                    where = getattr(target, "base_url", "?")
                    log.warning("Ray demand of %s from %s: %s (%s)", key, where, kind, e)
                return
            self._logged.pop(key, None)
            self._obs[key] = RayObservation(status, getattr(status, "observed_at", None) or now, "")

    async def poll(self, targets: Mapping[str, DashboardTarget | None], now: float) -> None:
        """``targets``: RayCluster key "ns/name" -> its dashboard target (None: never asked).  Heads are
        asked in the order given, at most ``concurrency`` at once, each within ``timeout``."""
        self._obs = {k: v for k, v in self._obs.items() if targets.get(k) is not None}
        self._logged = {k: v for k, v in self._logged.items() if k in self._obs}
        await asyncio.gather(*(self._one(k, t, now) for k, t in targets.items() if t is not None))
