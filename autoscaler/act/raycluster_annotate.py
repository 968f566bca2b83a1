"""Write one annotation of a RayCluster in ONE merge patch (the right-sizing recommendation).

The patch (``application/merge-patch+json``) is ``{"metadata": {"resourceVersion": <rv>,
"annotations": {<key>: <value>}}}``: only that key changes, every other annotation and field is
left as it is, and the resourceVersion the caller decided on is a precondition (the API server
answers 409 when the RayCluster changed since: its opt-in may have gone, or another writer may have
set the annotation).  The caller decides again on a fresh snapshot and writes again; repeated
conflicts are paced by the write guard.

It goes through the RayCluster's write guard (the same ``WriteKey`` as ``raycluster_patch``): a
refused or failing write holds the RayCluster's writes back (per-object backoff, counted, logged);
404 -> ``skipped``/``gone``.  Dry-run (or no API client) writes nothing and answers ``dry_run``.
"""

from __future__ import annotations

import logging

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.guard import WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.pinned_patch import patch_pinned
from autoscaler.act.raycluster_patch import GROUP, PLURAL, RESOURCE, VERSION

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


def annotation_patch(key: str, value: str, resource_version: str = "") -> dict[str, object]:
    meta: dict[str, object] = {"annotations": {key: value}}
    if resource_version:
        meta["resourceVersion"] = resource_version
    return {"metadata": meta}


def raycluster_write_key(namespace: str, name: str) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "RayCluster", namespace, name)


async def annotate_raycluster(
    api_client: ApiClient | None,
    namespace: str,
    name: str,
    key: str,
    value: str,
    *,
    field_manager: str,
    now: float,
    write_guard: WriteGuard | None = None,
    dry_run: bool = False,
    resource_version: str = "",
) -> WriteOutcome:
    """One merge patch setting annotation ``key`` to ``value``, pinned to ``resource_version`` when
    given (409 -> ``conflict``); 404 -> ``skipped``/``gone``, any other failure -> the RayCluster is held
    back (``act.guard``)."""
    if dry_run or api_client is None:
        log.info("dry-run: would annotate RayCluster %s/%s with %s", namespace, name, key)
        return WriteOutcome("dry_run")
    return await patch_pinned(api_client, write_guard, raycluster_write_key(namespace, name), group=GROUP,
                              version=VERSION, plural=PLURAL, body=annotation_patch(key, value, resource_version),
                              content_type=MERGE_PATCH, field_manager=field_manager, now=now,
                              changed=f"RayCluster {namespace}/{name}", log=log)
