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
from functools import partial

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from autoscaler.act.guard import Failure, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
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
    wg = write_guard or WriteGuard()
    key = workload_key(stalled)
    held = wg.blocked(key, now)
    if held is not None:
        return held
    # (the client's type stubs leave out ``_content_type``, which it takes and which must be set)
    res = await wg.call(key, partial(CustomObjectsApi(api_client).patch_namespaced_custom_object,  # type: ignore[call-arg]
                                     GROUP, VERSION, stalled.namespace, PLURAL, stalled.name,
                                     deactivation_patch(stalled), field_manager=field_manager,
                                     _content_type=MERGE_PATCH), now)
    if isinstance(res, Failure):
        if res.status == 409:
            log.info("Workload %s changed since the snapshot; deciding again next pass", stalled.key)
            return WriteOutcome("conflict", res.kind, 1)
        if res.status == 404:
            wg.settled(key)
            return WriteOutcome("skipped", "gone", 1)
        return WriteOutcome("error", res.kind, 1)
    wg.succeeded(key, "patch")
    return WriteOutcome("written", "", 1)
