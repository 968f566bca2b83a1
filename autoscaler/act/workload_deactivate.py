"""Deactivate a stalled Workload: ``spec.active: false`` in ONE merge patch, pinned to the snapshot.

The patch (``application/merge-patch+json``) is ``{"metadata": {"resourceVersion": <snapshot's>},
"spec": {"active": false}}``: the API server treats the resourceVersion as a precondition, so a
Workload that changed since the snapshot (Kueue updates its status often) answers 409 Conflict.
Nothing is retried then: the next pass decides again on the fresh object.  Kueue does the rest on
its own, as for a user who sets ``spec.active: false``: it evicts the workload (``Evicted=True``,
reason ``Deactivated``), suspends the job, releases the quota (``QuotaReserved=False``) and keeps
it out of the queue (``Requeued=False``) until somebody sets ``spec.active: true`` again.  Those
conditions are Kueue's; queuepilot writes none of them and says why in an Event instead.

Any other failure holds the Workload back (``act.guard``: per-object backoff, counted, logged).
"""

from __future__ import annotations

import logging

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.guard import WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.pinned_patch import patch_pinned
from autoscaler.core.policy.stall import StalledWorkload

log = logging.getLogger(__name__)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "workloads"
RESOURCE = "workloads"  # the metric label of this write (the object itself, not its status)
MERGE_PATCH = "application/merge-patch+json"


def deactivation_patch(stalled: StalledWorkload) -> dict[str, object]:
    return {"metadata": {"resourceVersion": stalled.resource_version}, "spec": {"active": False}}


def workload_key(stalled: StalledWorkload) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "Workload", stalled.namespace, stalled.name, stalled.uid)


async def deactivate_workload(
    api_client: ApiClient | None,
    stalled: StalledWorkload,
    *,
    field_manager: str,
    now: float,
    write_guard: WriteGuard | None = None,
    dry_run: bool = False,
) -> WriteOutcome:
    """One merge patch setting ``spec.active: false``; 409 -> ``conflict`` (no retry), 404 ->
    ``skipped``/``gone``, any other failure -> the Workload is held back (``act.guard``)."""
    if dry_run or api_client is None:
        log.info("dry-run: would deactivate stalled workload %s", stalled.key)
        return WriteOutcome("dry_run")
    return await patch_pinned(api_client, write_guard, workload_key(stalled), group=GROUP, version=VERSION,
                              plural=PLURAL, body=deactivation_patch(stalled), content_type=MERGE_PATCH,
                              field_manager=field_manager, now=now, changed=f"Workload {stalled.key}", log=log)
