"""Write our entry of ``Workload.status.admissionChecks`` the way Kueue expects an AdmissionCheck controller to.

- a fresh GET first, then the guards (Kueue #3322/#3543): same uid, ``QuotaReserved=True``,
  ``Evicted`` not True, ``Finished`` not True, ``spec.active`` not false, and our entry still
  ``Pending`` (the AdmissionCheck's controllerName was checked by the policy; it is immutable);
- nothing to change (same state and message) -> no write;
- server-side apply on ``/status``: field manager = our controller name, ``force=true``, body =
  apiVersion/kind/metadata(name, namespace, uid, resourceVersion) + ONLY our entry (name, state,
  lastTransitionTime, message, and requeueAfterSeconds for Retry);
- 409 Conflict -> fresh GET and again (bounded); guards failing on the fresh read -> skip;
- any other failure -> the workload is held back (``act.guard``: per-object backoff, counted, logged).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.fresh_apply import apply_status_fresh
from autoscaler.act.guard import WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome, rfc3339
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.snapshot import CHECK_PENDING, CHECK_RETRY

log = logging.getLogger(__name__)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "workloads"
RESOURCE = "workloads/status"


def _cond_true(obj: Mapping[str, Any], ctype: str) -> bool:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if isinstance(c, Mapping) and c.get("type") == ctype:
            return c.get("status") == "True"
    return False


def admitted_workload_guard(obj: Mapping[str, Any], uid: str) -> str:
    """'' when ``obj`` (a fresh read) is still the Workload ``uid`` names (any, when '') and holds
    quota, not evicted, not finished and not deactivated; else why not."""
    md = obj.get("metadata") or {}
    if uid and md.get("uid") and md.get("uid") != uid:
        return "recreated"
    if not _cond_true(obj, "QuotaReserved"):
        return "no_quota"
    if _cond_true(obj, "Evicted"):
        return "evicted"
    if _cond_true(obj, "Finished"):
        return "finished"
    if (obj.get("spec") or {}).get("active") is False:
        return "inactive"
    return ""


def guard(obj: Mapping[str, Any], decision: AdmissionDecision) -> str:
    """'' when we may write ``decision`` onto ``obj`` (a fresh read), else why not."""
    why = admitted_workload_guard(obj, decision.uid)
    if why:
        return why
    entry = current_entry(obj, decision.check)
    if entry is None:
        return "no_entry"
    if entry.get("state") != CHECK_PENDING:
        return "not_pending"
    return ""


def current_entry(obj: Mapping[str, Any], check: str) -> Mapping[str, Any] | None:
    for e in (obj.get("status") or {}).get("admissionChecks") or ():
        if isinstance(e, Mapping) and e.get("name") == check:
            return e
    return None


def pinned_metadata(obj: Mapping[str, Any], name: str, namespace: str, resource_version: str) -> dict[str, Any]:
    """An SSA body's metadata: name, namespace and resourceVersion of ``obj`` (a fresh read; the
    decision's where it has none) and its uid when it has one."""
    md = obj.get("metadata") or {}
    meta = {"name": md.get("name", name), "namespace": md.get("namespace", namespace),
            "resourceVersion": md.get("resourceVersion", resource_version)}
    if md.get("uid"):
        meta["uid"] = md["uid"]
    return meta


def apply_body(obj: Mapping[str, Any], decision: AdmissionDecision, now: float) -> dict[str, Any] | None:
    """The SSA body for ``decision`` on ``obj``, or None when it would change nothing."""
    entry = current_entry(obj, decision.check) or {}
    state = decision.state or CHECK_PENDING
    same_state = entry.get("state") == state
    if same_state and entry.get("message", "") == decision.message and (
        state != CHECK_RETRY or entry.get("requeueAfterSeconds") == decision.requeue_after_seconds
    ):
        return None
    ltt = entry.get("lastTransitionTime") if same_state and entry.get("lastTransitionTime") else rfc3339(now)
    new_entry: dict[str, Any] = {"name": decision.check, "state": state, "lastTransitionTime": ltt,
                                 "message": decision.message}
    if state == CHECK_RETRY and decision.requeue_after_seconds is not None:
        new_entry["requeueAfterSeconds"] = int(decision.requeue_after_seconds)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Workload",
            "metadata": pinned_metadata(obj, decision.name, decision.namespace, decision.resource_version),
            "status": {"admissionChecks": [new_entry]}}


def workload_key(decision: AdmissionDecision) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "Workload", decision.namespace, decision.name, decision.uid)


async def write_check_state(
    api_client: ApiClient | None,
    decision: AdmissionDecision,
    *,
    field_manager: str,
    now: float,
    write_guard: WriteGuard | None = None,
    max_attempts: int = 3,
) -> WriteOutcome:
    """Fresh read, guards, SSA of our entry; 409 -> re-read and retry up to ``max_attempts``.

    Every request goes through ``write_guard`` (a fresh one, without memory, when None): while the
    workload is held back after failed writes nothing is requested (``skipped``/``backoff``).
    Without an API client (demo, simulator) there is nothing to read or write: it counts as dry-run."""
    if api_client is None:
        return WriteOutcome("dry_run", "no_client", 0)
    return await apply_status_fresh(
        api_client, write_guard, workload_key(decision), group=GROUP, version=VERSION, plural=PLURAL,
        namespace=decision.namespace, name=decision.name, guard=partial(guard, decision=decision),
        body=lambda got: apply_body(got, decision, now), field_manager=field_manager, now=now,
        max_attempts=max_attempts)
