"""ONE patch of a custom object, pinned to the snapshot's resourceVersion, through the write guard.

The shared tail of the single-patch writers (``raycluster_patch``, ``workload_deactivate``): the
per-object backoff first (held back -> that outcome, nothing requested), then the patch; 409 ->
``conflict`` (no retry: the next pass decides again on the fresh object; from the second 409 in a
row the object's writes are held back with a growing delay, ``act.guard``), 404 ->
``skipped``/``gone``, any other failure -> ``error`` (the guard holds the object back).
"""

from __future__ import annotations

import logging
from functools import partial

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from autoscaler.act.guard import Failure, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome


async def patch_pinned(
    api_client: ApiClient,
    write_guard: WriteGuard | None,
    key: WriteKey,
    *,
    group: str,
    version: str,
    plural: str,
    body: object,
    content_type: str,
    field_manager: str,
    now: float,
    changed: str,
    log: logging.Logger,
) -> WriteOutcome:
    """One ``patch_namespaced_custom_object`` of ``key``'s object; ``changed`` names it in the 409 line
    that goes to the caller's ``log``."""
    wg = write_guard or WriteGuard()
    held = wg.blocked(key, now)
    if held is not None:
        return held
    # (the client's type stubs leave out ``_content_type``, which it takes and which must be set)
    res = await wg.call(key, partial(CustomObjectsApi(api_client).patch_namespaced_custom_object,  # type: ignore[call-arg]
                                     group, version, key.namespace, plural, key.name, body,
                                     field_manager=field_manager, _content_type=content_type), now)
    if isinstance(res, Failure):
        if res.status == 409:
            if res.backoff is None:  # (repeated conflicts are logged once by the guard, with their count)
                log.info("%s changed since the snapshot; deciding again next pass", changed)
            return WriteOutcome("conflict", res.kind, 1)
        if res.status == 404:
            wg.settled(key)
            return WriteOutcome("skipped", "gone", 1)
        return WriteOutcome("error", res.kind, 1)
    wg.succeeded(key, "patch")
    return WriteOutcome("written", "", 1)
