"""Write ``Workload.status.nominatedClusterNames`` as MultiKueue's external dispatcher.

Kueue (an external ``multiKueue.dispatcherName``) only reads the field: it creates a copy of the
Workload in every nominated worker cluster and deletes copies in clusters no longer named; when a
worker admits its copy Kueue sets ``status.clusterName`` and clears the nominations.  So:

- a fresh GET first, then the guards: same uid, ``QuotaReserved=True``, ``Evicted`` and
  ``Finished`` not True, ``spec.active`` not false, and ``status.clusterName`` unset (once a worker
  holds it, nominations are Kueue's business);
- nothing to change (the same list) -> no write;
- server-side apply on ``/status`` with our field manager, ``force=true``, pinned to the
  resourceVersion just read; the body is apiVersion/kind/metadata + ONLY
  ``status.nominatedClusterNames`` (an empty list withdraws every nomination);
- 409 -> fresh GET and again (bounded); anything else -> the guard's per-object backoff.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.fresh_apply import apply_status_fresh
from autoscaler.act.guard import WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.workload_status import (
    GROUP,
    PLURAL,
    RESOURCE,
    VERSION,
    admitted_workload_guard,
    pinned_metadata,
)
from autoscaler.core.policy.dispatch import DispatchDecision


def guard(obj: Mapping[str, Any], decision: DispatchDecision) -> str:
    """'' when we may write ``decision``'s nominations onto ``obj`` (a fresh read), else why not."""
    why = admitted_workload_guard(obj, decision.uid)
    if why:
        return why
    if (obj.get("status") or {}).get("clusterName"):
        return "placed"
    return ""


def apply_body(obj: Mapping[str, Any], decision: DispatchDecision) -> dict[str, Any] | None:
    """The SSA body, or None when the field already says the same."""
    if decision.nominate is None:
        return None
    current = (obj.get("status") or {}).get("nominatedClusterNames") or []
    if list(current) == list(decision.nominate):
        return None
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": pinned_metadata(obj, decision.name, decision.namespace, decision.resource_version),
            "status": {"nominatedClusterNames": list(decision.nominate)}}


def nomination_key(decision: DispatchDecision) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "Workload", decision.namespace, decision.name, decision.uid)


async def write_nominations(
    api_client: ApiClient | None,
    decision: DispatchDecision,
    *,
    field_manager: str,
    now: float,
    write_guard: WriteGuard | None = None,
    dry_run: bool = False,
    max_attempts: int = 3,
) -> WriteOutcome:
    """Fresh read, guards, SSA of ``status.nominatedClusterNames``; dry-run and no client write nothing."""
    if api_client is None:
        return WriteOutcome("dry_run", "no_client", 0)
    if dry_run:
        return WriteOutcome("dry_run", "dry_run", 0)
    if decision.nominate is None:
        return WriteOutcome("unchanged", "", 0)
    return await apply_status_fresh(
        api_client, write_guard, nomination_key(decision), group=GROUP, version=VERSION, plural=PLURAL,
        namespace=decision.namespace, name=decision.name, guard=partial(guard, decision=decision),
        body=partial(apply_body, decision=decision), field_manager=field_manager, now=now,
        max_attempts=max_attempts)
