"""Objects, resourceVersions, watch history and watchers: the API server's storage semantics.

Stored object dicts are never mutated after they are stored (every write builds a new dict), so lists,
snapshots and watch events can hand out references; callers outside the server get copies.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import random
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from tests.fakeapi import errors
from tests.fakeapi.fieldmanager import ManagedFields
from tests.fakeapi.resources import Registry, ResourceType
from tests.fakeapi.selectors import Matcher

ObjKey = tuple[str, str]  # (namespace, name); namespace "" for cluster-scoped

_GEN_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def fmt_time(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def clone(obj: Any) -> Any:
    """A deep copy of a JSON-like value (faster than copy.deepcopy for plain data)."""
    return json.loads(json.dumps(obj))


@dataclass
class Event:
    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    rt: ResourceType
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass
class Watcher:
    rt: ResourceType
    namespace: str | None
    matcher: Matcher | None
    queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] = field(default_factory=asyncio.Queue)
    closed: bool = False

    def offer(self, ev: Event) -> None:
        """Translate a storage event into what this watcher sees (selectors move objects in and out)."""
        if self.closed or ev.rt is not self.rt:
            return
        if self.namespace is not None and ev.obj.get("metadata", {}).get("namespace") != self.namespace:
            return
        if self.matcher is None:
            self.queue.put_nowait((ev.type, ev.obj))
            return
        now = self.matcher(ev.obj)
        if ev.type == "MODIFIED":
            before = ev.old is not None and self.matcher(ev.old)
            if before and now:
                self.queue.put_nowait(("MODIFIED", ev.obj))
            elif before:
                self.queue.put_nowait(("DELETED", ev.obj))
            elif now:
                self.queue.put_nowait(("ADDED", ev.obj))
        elif now:
            self.queue.put_nowait((ev.type, ev.obj))


@dataclass
class Table:
    rt: ResourceType
    objects: dict[ObjKey, dict[str, Any]] = field(default_factory=dict)
    managed: dict[ObjKey, ManagedFields] = field(default_factory=dict)
    _sorted: list[ObjKey] | None = None

    def sorted_keys(self) -> list[ObjKey]:
        """Keys in etcd order: by "namespace/name" (or name) as a string."""
        if self._sorted is None:
            if self.rt.namespaced:
                self._sorted = sorted(self.objects, key=lambda k: f"{k[0]}/{k[1]}")
            else:
                self._sorted = sorted(self.objects, key=lambda k: k[1])
        return self._sorted


@dataclass
class WriteContext:
    """Who writes, and how: decides managedFields, status handling and which errors are raised."""

    version: str
    subresource: str = ""
    manager: str | None = None
    via_http: bool = True
    validate: bool = True
    operation: str = "Update"  # "Apply" for server-side apply
    force: bool = False
    dry_run: bool = False  # dryRun=All: everything but storing


class Store:
    """All resource tables plus one global resourceVersion counter and a bounded event history."""

    def __init__(
        self,
        registry: Registry,
        *,
        history_limit: int = 200_000,
        clock: Callable[[], datetime] | None = None,
        enforce_namespaces: bool = True,
    ) -> None:
        self.registry = registry
        self.tables: dict[tuple[str, str], Table] = {rt.key: Table(rt) for rt in registry.types}
        self.rv = 1
        self.history: deque[Event] = deque(maxlen=history_limit)
        self.compacted_rv = 1  # watches from an rv below this get 410
        self.watchers: list[Watcher] = []
        self.clock = clock or (lambda: datetime.now(UTC))
        self.enforce_namespaces = enforce_namespaces
        self._snapshots: OrderedDict[tuple[Any, ...], list[dict[str, Any]]] = OrderedDict()

    # ---- bookkeeping -------------------------------------------------------------------------

    def table(self, rt: ResourceType) -> Table:
        return self.tables[rt.key]

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _emit(self, ev: Event) -> None:
        if self.history.maxlen is not None and len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(ev)
        for w in self.watchers:
            w.offer(ev)

    def set_history_limit(self, events: int) -> None:
        kept = deque(self.history, maxlen=max(1, events))
        if len(kept) < len(self.history):
            self.compacted_rv = self.history[len(self.history) - len(kept) - 1].rv
        self.history = kept

    def compact(self) -> None:
        """Forget the event history (as etcd compaction does): older rvs now get 410 Expired."""
        self.history.clear()
        self.compacted_rv = self.rv
        self._snapshots.clear()

    # ---- reads -------------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.table(rt).objects.get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rt.plural, rt.group, name)
        return obj

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        matcher: Matcher | None,
        *,
        limit: int | None = None,
        continue_token: str | None = None,
        snapshot_key: tuple[Any, ...] = (),
    ) -> tuple[list[dict[str, Any]], str, str | None, int | None]:
        """(items, list resourceVersion, next continue token, remainingItemCount)."""
        table = self.table(rt)
        start = ""
        rv = self.rv
        items: list[dict[str, Any]] | None = None
        if continue_token:
            rv, start = self._decode_continue(continue_token)
            items = self._snapshots.get((rt.key, namespace, snapshot_key, rv))
            if items is None and rv < self.compacted_rv:
                raise errors.expired(
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter, or use the continue token "
                    "in this response to retrieve the remainder of the results. Continuing with the provided "
                    "token results in an inconsistent list - objects that were created, modified, or deleted "
                    "between the time the first chunk was returned and now may show up in the list."
                )
        if items is None:
            items = []
            for key in table.sorted_keys():
                if namespace is not None and key[0] != namespace:
                    continue
                obj = table.objects[key]
                if matcher is None or matcher(obj):
                    items.append(obj)
            if limit:
                self._snapshots[(rt.key, namespace, snapshot_key, rv)] = items
                while len(self._snapshots) > 32:
                    self._snapshots.popitem(last=False)
        if start:
            lo = _bisect_after(items, start, rt.namespaced)
        else:
            lo = 0
        if not limit or lo + limit >= len(items):
            return items[lo:], str(rv), None, None
        page = items[lo : lo + limit]
        last = page[-1]["metadata"]
        last_key = f"{last.get('namespace', '')}/{last['name']}" if rt.namespaced else last["name"]
        token = base64.urlsafe_b64encode(
            json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": last_key + "\x00"}).encode()
        ).decode()
        return page, str(rv), token, len(items) - lo - limit

    @staticmethod
    def _decode_continue(token: str) -> tuple[int, str]:
        try:
            data = json.loads(base64.urlsafe_b64decode(token.encode()))
            return int(data["rv"]), str(data["start"])
        except (ValueError, KeyError, TypeError, binascii.Error):
            raise errors.bad_request(
                "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
            ) from None

    # ---- writes ------------------------------------------------------------------------------

    def _now(self) -> str:
        return fmt_time(self.clock())

    def _validate(
        self, rt: ResourceType, obj: dict[str, Any], ctx: WriteContext, *, applied_config: bool = False
    ) -> None:
        """Strict unknown-field check (400, or 500 for an applied configuration), then schema (422)."""
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if not ctx.validate:
            return
        validator = rt.validator(ctx.version)
        if validator is not None:
            problems = validator.problems(obj)
            if problems.unknown:
                if applied_config:
                    ns = meta.get("namespace", "")
                    raise errors.internal(
                        f"failed to create typed patch object ({ns}/{name}; {rt.api_version(ctx.version)}, Kind={rt.kind}): "
                        + "; ".join(f".{u}: field not declared in schema" for u in problems.unknown)
                    )
                raise errors.bad_request(
                    f'{rt.kind} in version "{ctx.version}" cannot be handled as a {rt.kind}: strict decoding error: '
                    + ", ".join(f'unknown field "{u}"' for u in problems.unknown)
                )
            if problems.decode and not applied_config:
                raise errors.bad_request(
                    f'{rt.kind} in version "{ctx.version}" cannot be handled as a {rt.kind}: '
                    + problems.decode[0]
                )
            if problems.causes and not applied_config:
                raise errors.invalid(rt.kind, rt.group, name, problems.causes)

    @staticmethod
    def _check_type(rt: ResourceType, body: dict[str, Any], ctx: WriteContext) -> None:
        """An HTTP body that names another apiVersion / kind than the URL is refused (400)."""
        want = rt.api_version(ctx.version)
        got_av, got_kind = body.get("apiVersion"), body.get("kind")
        if got_av and got_av != want:
            raise errors.bad_request(
                f"the API version in the data ({got_av}) does not match the expected API version ({want})"
            )
        if got_kind and got_kind != rt.kind:
            raise errors.bad_request(
                f"the kind in the data ({got_kind}) does not match the expected kind ({rt.kind})"
            )

    def _check_namespace(self, rt: ResourceType, namespace: str, ctx: WriteContext) -> None:
        if not rt.namespaced:
            return
        ns_table = self.tables[("", "namespaces")]
        if ("", namespace) in ns_table.objects:
            return
        if ctx.via_http and self.enforce_namespaces:
            raise errors.not_found("namespaces", "", namespace)
        if not ctx.via_http:
            self._insert(
                ns_table.rt,
                {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace},
                    "status": {"phase": "Active"},
                },
                WriteContext(version="v1", via_http=False, validate=False),
            )

    def create(
        self, rt: ResourceType, namespace: str | None, body: dict[str, Any], ctx: WriteContext
    ) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise errors.bad_request("Object 'Kind' is missing in the request body")
        if ctx.via_http:
            self._check_type(rt, body, ctx)
        obj = clone(body)
        meta = obj.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
            obj["metadata"] = meta
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if namespace is None:
                namespace = body_ns or "default"
            elif body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        obj["apiVersion"] = rt.api_version(ctx.version)
        obj["kind"] = rt.kind
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + "".join(random.choices(_GEN_ALPHABET, k=5))
            else:
                raise errors.invalid(
                    rt.kind,
                    rt.group,
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: name or generateName is required",
                            "field": "metadata.name",
                        }
                    ],
                )
        if ctx.via_http:
            if rt.is_crd and rt.has_status:
                obj.pop("status", None)
            if rt.kind == "Pod" and not rt.group:
                obj["status"] = {"phase": "Pending"}
        self._validate(rt, obj, ctx)
        key = (meta.get("namespace", ""), meta["name"])
        if key in self.table(rt).objects:
            raise errors.already_exists(rt.plural, rt.group, meta["name"])
        self._check_namespace(rt, key[0], ctx)
        return self._insert(rt, obj, ctx)

    def _insert(self, rt: ResourceType, obj: dict[str, Any], ctx: WriteContext) -> dict[str, Any]:
        meta = obj["metadata"]
        for k in ("resourceVersion", "managedFields", "deletionTimestamp", "selfLink"):
            meta.pop(k, None)
        meta["uid"] = str(uuid.uuid4())
        if ctx.via_http or not meta.get("creationTimestamp"):
            meta["creationTimestamp"] = self._now()
        if rt.is_crd or rt.kind == "Pod":
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        table = self.table(rt)
        key = (meta.get("namespace", ""), meta["name"])
        if ctx.manager is not None:
            mf = ManagedFields()
            structure = rt.structure_for(ctx.version)
            if ctx.operation == "Apply":
                mf.apply(
                    {}, obj, structure, ctx.manager, ctx.subresource, obj["apiVersion"], self._now(), True
                )
            else:
                mf.record_update(
                    None, obj, structure, ctx.manager, ctx.subresource, obj["apiVersion"], self._now()
                )
            table.managed[key] = mf
            meta["managedFields"] = mf.to_json()
        if ctx.dry_run:
            return obj
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        table.objects[key] = obj
        table._sorted = None
        self._emit(Event(rv, "ADDED", rt, obj, None))
        return obj

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        ctx: WriteContext,
        *,
        apply_fn: Callable[[dict[str, Any], ManagedFields], dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """PUT semantics (also the end of every patch): preconditions, status rules, generation, rv."""
        table = self.table(rt)
        key = (namespace or "" if rt.namespaced else "", name)
        old = table.objects.get(key)
        if old is None:
            raise errors.not_found(rt.plural, rt.group, name)
        if not isinstance(body, dict):
            raise errors.bad_request("Object 'Kind' is missing in the request body")
        if ctx.via_http and apply_fn is None:
            self._check_type(rt, body, ctx)
        new = clone(body)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = {}
            new["metadata"] = meta
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request(
                f"the name of the object ({meta['name']}) does not match the name on the URL ({name})"
            )
        want_rv = meta.get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise errors.stale(rt.plural, rt.group, name)
        want_uid = meta.get("uid")
        if want_uid and want_uid != old["metadata"]["uid"]:
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {want_uid}, UID in object meta: {old['metadata']['uid']}",
            )
        managed = table.managed.get(key, ManagedFields()).copy()
        if apply_fn is not None:
            new = apply_fn(new, managed)
            meta = new["metadata"]
        # fields the client cannot change
        old_meta = old["metadata"]
        for k in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "namespace",
            "generation",
            "resourceVersion",
        ):
            if k in old_meta:
                meta[k] = old_meta[k]
            else:
                meta.pop(k, None)
        meta["name"] = name
        new["apiVersion"] = rt.api_version(ctx.version)
        new["kind"] = rt.kind
        if rt.has_status:
            if ctx.subresource == "status":
                status = new.get("status")
                new = {**old, "metadata": dict(old["metadata"])}
                if status is None:
                    new.pop("status", None)
                else:
                    new["status"] = status
                meta = new["metadata"]
            elif ctx.via_http:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
        if ctx.validate:
            self._validate(rt, new, ctx)
        if rt.is_crd or rt.kind == "Pod":
            ignored = {"metadata", "status"} if rt.has_status else {"metadata"}
            if {k: v for k, v in new.items() if k not in ignored} != {
                k: v for k, v in old.items() if k not in ignored
            }:
                meta["generation"] = int(old_meta.get("generation", 1)) + 1
        structure = rt.structure_for(ctx.version)
        if ctx.manager is not None and apply_fn is None:
            managed.record_update(
                old, new, structure, ctx.manager, ctx.subresource, new["apiVersion"], self._now()
            )
        meta["managedFields"] = managed.to_json()
        if not meta["managedFields"]:
            meta.pop("managedFields")
        # a no-op write changes nothing, not even the resourceVersion
        if _same(old, new):
            return old
        if ctx.dry_run:
            return new
        if old_meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(rt, key, new)
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        table.objects[key] = new
        table.managed[key] = managed
        self._emit(Event(rv, "MODIFIED", rt, new, old))
        return new

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        preconditions: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        table = self.table(rt)
        key = (namespace or "" if rt.namespaced else "", name)
        old = table.objects.get(key)
        if old is None:
            raise errors.not_found(rt.plural, rt.group, name)
        pre = preconditions or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: ResourceVersion in precondition: {pre['resourceVersion']}, "
                f"ResourceVersion in object meta: {old['metadata']['resourceVersion']}",
            )
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(
                rt.plural,
                rt.group,
                name,
                f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta: {old['metadata']['uid']}",
            )
        if old["metadata"].get("finalizers"):
            if old["metadata"].get("deletionTimestamp"):
                return old
            new = {
                **old,
                "metadata": {
                    **old["metadata"],
                    "deletionTimestamp": self._now(),
                    "deletionGracePeriodSeconds": 0,
                },
            }
            rv = self._next_rv()
            new["metadata"]["resourceVersion"] = str(rv)
            table.objects[key] = new
            self._emit(Event(rv, "MODIFIED", rt, new, old))
            return new
        return self._remove(rt, key, old)

    def _remove(self, rt: ResourceType, key: ObjKey, last: dict[str, Any]) -> dict[str, Any]:
        table = self.table(rt)
        table.objects.pop(key, None)
        table.managed.pop(key, None)
        table._sorted = None
        rv = self._next_rv()
        gone = {**last, "metadata": {**last["metadata"], "resourceVersion": str(rv)}}
        self._emit(Event(rv, "DELETED", rt, gone, last))
        return gone

    # ---- watches -----------------------------------------------------------------------------

    def watch(
        self, rt: ResourceType, namespace: str | None, matcher: Matcher | None, from_rv: str | None
    ) -> Watcher:
        """Subscribe; queue holds the events after from_rv (or synthetic ADDED for all when none/"0")."""
        w = Watcher(rt, namespace, matcher)
        if not from_rv or from_rv == "0":
            items, _, _, _ = self.list(rt, namespace, matcher)
            for obj in items:
                w.queue.put_nowait(("ADDED", obj))
        else:
            try:
                start = int(from_rv)
            except ValueError:
                raise errors.bad_request(f"invalid resource version: {from_rv!r}") from None
            if start < self.compacted_rv:
                w.queue.put_nowait(
                    (
                        "ERROR",
                        errors.expired(f"too old resource version: {start} ({self.compacted_rv})").body,
                    )
                )
                w.closed = True
                w.queue.put_nowait(None)
                return w
            for ev in self.history:
                if ev.rv > start:
                    w.offer(ev)
        self.watchers.append(w)
        return w

    def unwatch(self, w: Watcher) -> None:
        w.closed = True
        if w in self.watchers:
            self.watchers.remove(w)


def _bisect_after(items: list[dict[str, Any]], start: str, namespaced: bool) -> int:
    """Index of the first item whose key is >= start (start is 'last key' + NUL)."""
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        m = items[mid]["metadata"]
        k = f"{m.get('namespace', '')}/{m['name']}" if namespaced else m["name"]
        if k < start:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Equal apart from the resourceVersion and managedFields timestamps."""

    def strip(o: dict[str, Any]) -> dict[str, Any]:
        meta = {
            k: v for k, v in o.get("metadata", {}).items() if k not in ("managedFields", "resourceVersion")
        }
        meta["managedFields"] = [
            {k: v for k, v in e.items() if k != "time"}
            for e in o.get("metadata", {}).get("managedFields", [])
        ]
        return {**o, "metadata": meta}

    return strip(a) == strip(b)


__all__ = ["Event", "Store", "Watcher", "WriteContext", "clone"]
