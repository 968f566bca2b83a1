"""The stall reconciler's memory of the owners whose workloads it deactivated, kept in a ConfigMap so that a
restart or a new leader keeps it (``stall.remember_owners``: a job created again under the name of one
deactivated is held as a reactivated one).

One ConfigMap in the controller's namespace (``--stall-owners-configmap``, the chart names it
``<fullname>-stall-owners``), one data key ``owners.json``: a JSON object from owner key
(``namespace/kind/name``) to when a workload of it was last deactivated (Unix seconds).  The leader
writes it after a deactivation it wrote: a fresh read, its owners merged in (the later time per owner,
so what another replica wrote during a Lease handover stays; the expired dropped), a server-side apply
with our field manager pinned to the version read (a 409 reads again).  It reads it on its first pass
and after a gap (another replica led meanwhile).

Written within bounds (``encode_owners``): at most ``MAX_OWNERS`` entries and ``MAX_BYTES`` of JSON (a
ConfigMap holds at most 1 MiB), the oldest dropped first.  Read defensively (``decode_owners``): a
document over ``MAX_READ_BYTES``, one that is not a JSON object, or an entry that is not a well-formed
key with a finite time is not taken; what is left of it is.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CoreV1Api

from autoscaler.act.guard import Failure, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.core.policy.stall import MAX_OWNERS, merge_owners

DATA_KEY = "owners.json"
MAX_BYTES = 512 * 1024  # what we write: half of what a ConfigMap may hold
MAX_READ_BYTES = 1024 * 1024  # what we read (a ConfigMap holds at most 1 MiB)
MAX_KEY = 64 + 64 + 254  # namespace / kind / name, each at most what Kubernetes allows
APPLY = "application/apply-patch+yaml"
RESOURCE = "configmaps"


def encode_owners(owners: Mapping[str, float]) -> str:
    """``owners`` as the ConfigMap's JSON: the most recent first kept, at most ``MAX_OWNERS`` entries and
    ``MAX_BYTES`` bytes, keys sorted (``decode_owners`` gives the same times back)."""
    newest = sorted(owners.items(), key=lambda kv: (-kv[1], kv[0]))[:MAX_OWNERS]
    kept: dict[str, float] = {}
    size = 2  # "{}"
    for key, t in newest:
        entry = len(json.dumps(key)) + len(json.dumps(float(t))) + 2  # "key":t,
        if size + entry > MAX_BYTES:
            break
        kept[key] = float(t)
        size += entry
    return json.dumps(dict(sorted(kept.items())), separators=(",", ":"))


def decode_owners(text: str) -> tuple[dict[str, float], int]:
    """The owners in a ConfigMap's ``owners.json`` and how many entries were not taken (a malformed key or
    time).  ValueError for a document too large or not a JSON object."""
    if len(text) > MAX_READ_BYTES:
        raise ValueError(f"{DATA_KEY} is {len(text)} bytes, over {MAX_READ_BYTES}")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{DATA_KEY} is not JSON: {e.msg} at {e.pos}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{DATA_KEY} is a JSON {type(doc).__name__}, not an object")
    out: dict[str, float] = {}
    for key, t in doc.items():
        parts = key.split("/")
        if (len(parts) == 3 and all(parts) and len(key) <= MAX_KEY and isinstance(t, int | float)
                and not isinstance(t, bool) and math.isfinite(t)):
            out[key] = float(t)
    return out, len(doc) - len(out)


def owners_key(namespace: str, name: str) -> WriteKey:
    return WriteKey(RESOURCE, "v1", "ConfigMap", namespace, name)


def owners_body(namespace: str, name: str, owners: Mapping[str, float]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"app.kubernetes.io/managed-by": "queuepilot",
                                    "app.kubernetes.io/component": "stall-owners"}},
            "data": {DATA_KEY: encode_owners(owners)}}


async def load_owners(api_client: ApiClient, namespace: str, name: str, *, now: float,
                      write_guard: WriteGuard | None = None) -> tuple[dict[str, float], int] | None:
    """The ConfigMap's owners and how many entries were not taken (``decode_owners``): none when it does not
    exist yet; None when it cannot be read now (the failure counted, logged and backed off by the guard, or
    still backed off); ValueError for a malformed document."""
    wg = write_guard or WriteGuard()
    key = owners_key(namespace, name)
    if wg.blocked(key, now) is not None:
        return None
    got = await wg.call(key, partial(CoreV1Api(api_client).read_namespaced_config_map, name, namespace), now,
                        expected=(404,))
    if isinstance(got, Failure):
        if got.status != 404:
            return None
        wg.settled(key)
        return {}, 0
    data = getattr(got, "data", None) or {}
    text = data.get(DATA_KEY) if isinstance(data, dict) else None
    wg.settled(key)
    return decode_owners(text) if isinstance(text, str) else ({}, 0)


async def save_owners(api_client: ApiClient, namespace: str, name: str, owners: Mapping[str, float], *,
                      forget_before: float, field_manager: str, now: float, write_guard: WriteGuard | None = None,
                      max_attempts: int = 3) -> WriteOutcome:
    """Merge ``owners`` into the ConfigMap (the later time per owner: what another replica wrote meanwhile, as
    during a Lease handover, is kept; an owner deactivated before ``forget_before`` is dropped) and
    server-side apply it pinned to the version read (created if missing); a 409 reads again, up to
    ``max_attempts`` times, through the guard."""
    wg = write_guard or WriteGuard()
    key = owners_key(namespace, name)
    held = wg.blocked(key, now)
    if held is not None:
        return held
    api = CoreV1Api(api_client)
    attempts = 0
    while attempts < max_attempts:
        attempts += 1
        got = await wg.call(key, partial(api.read_namespaced_config_map, name, namespace), now, expected=(404,))
        if isinstance(got, Failure) and got.status != 404:
            return WriteOutcome("error", got.kind, attempts)
        merged, version = dict(owners), ""
        if not isinstance(got, Failure):
            version = got.metadata.resource_version or ""
            text = (got.data or {}).get(DATA_KEY)
            try:
                merged = merge_owners(owners, decode_owners(text)[0] if isinstance(text, str) else {})
            except ValueError:
                pass  # malformed: ours replaces it
        body = owners_body(namespace, name, {k: t for k, t in merged.items() if t >= forget_before})
        if version:
            body["metadata"]["resourceVersion"] = version
        # (the client's type stubs leave out ``_content_type``, which it takes and which must be set)
        res = await wg.call(key, partial(api.patch_namespaced_config_map, name, namespace, body,  # type: ignore[call-arg]
                                         field_manager=field_manager, force=True, _content_type=APPLY), now)
        if isinstance(res, Failure):
            if res.status == 409 and res.backoff is None and attempts < max_attempts:
                continue  # another writer between our read and our write: read again
            return WriteOutcome("conflict" if res.status == 409 else "error", res.kind, attempts)
        wg.succeeded(key, "apply")
        return WriteOutcome("written", "", attempts)
    return WriteOutcome("conflict", "conflict", attempts)
