"""Server-side apply on a custom object's ``/status`` from a fresh read, through the write guard.

The one loop behind every "read fresh, check, apply" writer (``workload_status``,
``workload_nominate``): the per-object backoff first (held back -> that outcome, nothing
requested), then up to ``max_attempts`` times: a fresh GET (404 -> ``skipped``/``gone``), the
caller's guard on it (a reason -> ``skipped`` with it), the caller's body (None -> ``unchanged``),
a forced SSA pinned by the body's resourceVersion; a 409 the guard does not back off -> a fresh GET
and again, a 409 it backs off (the second in a row) or the last attempt's -> ``conflict`` (the
object's writes are then held back: ``act.guard``); any other failure -> ``error`` (the guard holds
the object back).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from autoscaler.act.guard import Failure, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome

APPLY = "application/apply-patch+yaml"


async def apply_status_fresh(
    api_client: ApiClient,
    write_guard: WriteGuard | None,
    key: WriteKey,
    *,
    group: str,
    version: str,
    plural: str,
    namespace: str,
    name: str,
    guard: Callable[[Mapping[str, Any]], str],
    body: Callable[[Mapping[str, Any]], dict[str, Any] | None],
    field_manager: str,
    now: float,
    max_attempts: int = 3,
) -> WriteOutcome:
    """Fresh GET, ``guard`` ('' = go on), ``body`` (None = nothing to change), forced SSA of ``/status``;
    409 -> re-read and retry up to ``max_attempts``.  ``write_guard`` None: a fresh one, without memory."""
    wg = write_guard or WriteGuard()
    held = wg.blocked(key, now)
    if held is not None:
        return held
    api = CustomObjectsApi(api_client)
    attempts = 0
    while attempts < max_attempts:
        attempts += 1
        got = await wg.call(key, partial(api.get_namespaced_custom_object, group, version, namespace, plural, name),
                            now, expected=(404,))
        if isinstance(got, Failure):
            if got.status == 404:
                wg.settled(key)
                return WriteOutcome("skipped", "gone", attempts)
            return WriteOutcome("error", got.kind, attempts)
        why = guard(got)
        if why:
            wg.settled(key)
            return WriteOutcome("skipped", why, attempts)
        new = body(got)
        if new is None:
            wg.settled(key)
            return WriteOutcome("unchanged", "", attempts)
        # (the client's type stubs leave out ``_content_type``, which it takes and which must be set)
        put = await wg.call(key, partial(api.patch_namespaced_custom_object_status, group, version,  # type: ignore[call-arg]
                                         namespace, plural, name, new, field_manager=field_manager,
                                         force=True, _content_type=APPLY), now)
        if isinstance(put, Failure):
            if put.status == 409 and put.backoff is None and attempts < max_attempts:
                continue  # a first conflict: read fresh and write again at once
            if put.status == 409:
                return WriteOutcome("conflict", "conflict", attempts)
            return WriteOutcome("error", put.kind, attempts)
        wg.succeeded(key, "patch")
        return WriteOutcome("written", "", attempts)
    return WriteOutcome("conflict", "conflict", attempts)
