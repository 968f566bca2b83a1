"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's algorithm, get/create/update only).

Every ``retry_period`` a candidate reads the Lease.  It takes the Lease when it is free (no
holder) or expired, and the leader renews it, both with an ``update`` carrying the read
``resourceVersion`` (so two candidates cannot both win: the loser gets 409).  Expiry is judged on
this process's clock from when the holder's record (holder, renewTime) was last seen to change --
as client-go does -- so clock skew between replicas does not matter.  A leader that cannot renew
for ``renew_deadline`` steps down; one that sees another holder steps down at once.  ``release()``
(on SIGTERM) empties the holder so a standby takes over within one ``retry_period``.

The clock and the sleep are injectable; :meth:`try_acquire_or_renew` is one step, for tests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.cluster.client import KubeError, request_json
from autoscaler.cluster.views import parse_time

log = logging.getLogger("queuepilot.leader")

LEADER, OTHER, FAILED = "leader", "other", "failed"


def micro_time(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
        on_change: Callable[[bool], None] | None = None,
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._sleep = sleep
        self._on_change = on_change
        self.is_leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0

    def holds(self) -> bool:
        """Leader *and* renewed within the renew deadline (a loop blocked for longer may have lost it)."""
        return self.is_leader and self._clock() - self._last_renew <= self.renew_deadline

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def _set(self, leader: bool) -> None:
        if leader != self.is_leader:
            self.is_leader = leader
            log.info("%s %s leadership of lease %s/%s", self.identity,
                     "acquired" if leader else "lost", self.namespace, self.name)
            if self._on_change is not None:
                self._on_change(leader)

    def _spec(self, now: float, old: dict[str, Any] | None) -> dict[str, Any]:
        old = old or {}
        spec = dict(old)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = int(self.lease_duration)
        spec["renewTime"] = micro_time(now)
        if old.get("holderIdentity") != self.identity:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(old.get("leaseTransitions") or 0) + (1 if old else 0)
        return spec

    async def try_acquire_or_renew(self) -> str:
        """One attempt: LEADER (we hold the Lease now), OTHER (someone else validly does) or FAILED."""
        now = self._clock()
        try:
            lease = await request_json(self.api, "GET", self.path, request_timeout=self.retry_period * 2)
        except KubeError as e:
            if e.status != 404:
                log.warning("lease %s/%s: get failed: %s", self.namespace, self.name, e)
                return FAILED
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, None),
            }
            try:
                await request_json(self.api, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases",
                                   body=body, request_timeout=self.retry_period * 2)
            except KubeError as e2:
                return OTHER if e2.status == 409 else FAILED
            self._observed, self._observed_at = None, now
            return LEADER
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and holder != self.identity and self._observed_at + duration > now:
            return OTHER
        body = dict(lease)
        body["spec"] = self._spec(now, spec)
        try:
            await request_json(self.api, "PUT", self.path, body=body, request_timeout=self.retry_period * 2)
        except KubeError as e:
            if e.status == 409:
                return OTHER
            log.warning("lease %s/%s: update failed: %s", self.namespace, self.name, e)
            return FAILED
        new = body["spec"]
        self._observed, self._observed_at = (self.identity, new["renewTime"], new["leaseDurationSeconds"]), now
        return LEADER

    async def step(self) -> bool:
        try:
            result = await self.try_acquire_or_renew()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # connection errors: like FAILED
            log.warning("lease %s/%s: %s: %s", self.namespace, self.name, type(e).__name__, e)
            result = FAILED
        now = self._clock()
        if result == LEADER:
            self._last_renew = now
            self._set(True)
        elif result == OTHER or (self.is_leader and now - self._last_renew > self.renew_deadline):
            self._set(False)
        return self.is_leader

    async def run(self, iterations: int | None = None) -> None:
        i = 0
        while iterations is None or i < iterations:
            i += 1
            await self.step()
            await self._sleep(self.retry_period)

    async def release(self) -> None:
        """Give the Lease up (holder emptied) if we hold it; errors are logged, never raised."""
        if not self.is_leader:
            return
        self._set(False)
        try:
            lease = await request_json(self.api, "GET", self.path, request_timeout=5.0)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") != self.identity:
                return
            spec.pop("holderIdentity", None)
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = micro_time(self._clock())
            lease["spec"] = spec
            await request_json(self.api, "PUT", self.path, body=lease, request_timeout=5.0)
        except Exception as e:
            log.warning("lease %s/%s: release failed: %s", self.namespace, self.name, e)


def lease_holder(lease: dict[str, Any]) -> tuple[str, float | None]:
    spec = lease.get("spec") or {}
    return str(spec.get("holderIdentity") or ""), parse_time(spec.get("renewTime"))
