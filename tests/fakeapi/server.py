"""The HTTP face: routing, auth, patches, watches, discovery, fault injection and request recording."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.fakeapi import errors
from tests.fakeapi.errors import ApiError
from tests.fakeapi.patching import (
    APPLY,
    CORE_PATCH_TYPES,
    CRD_PATCH_TYPES,
    JSON_PATCH,
    MERGE,
    STRATEGIC,
    json_patch,
    merge_patch,
    strategic_merge_patch,
)
from tests.fakeapi.resources import Registry, ResourceType, core_types, crd_types
from tests.fakeapi.selectors import combine, field_matcher, label_matcher
from tests.fakeapi.store import Store, Watcher, WriteContext, clone

log = logging.getLogger(__name__)

_TRUE = {"1", "t", "T", "true", "TRUE", "True"}


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    content_type: str
    verb: str
    group: str
    resource: str  # incl. subresource: "workloads/status"
    namespace: str | None
    name: str | None
    query: str = ""


@dataclass
class _FailRule:
    remaining: int
    status: int
    retry_after: float | None
    path_contains: str | None
    method: str | None
    verb: str | None = None

    def matches(self, method: str, path: str, verb: str) -> bool:
        if self.method and self.method.upper() != method:
            return False
        if self.verb and self.verb != verb:
            return False
        return not (self.path_contains and self.path_contains not in path)


WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


@dataclass
class WriteRefusal:
    """A rule made by :meth:`FakeApiServer.refuse_writes`; ``hits`` counts the requests it refused."""

    status: int
    retry_after: float | None = None
    message: str | None = None
    remaining: int | None = None  # None: until cancel()
    group: str | None = None
    resource: str | None = None  # incl. subresource: "workloads/status"
    namespace: str | None = None
    name: str | None = None
    verbs: frozenset[str] = WRITE_VERBS
    hits: int = 0
    cancelled: bool = False

    def matches(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        if self.cancelled or self.remaining == 0 or verb not in self.verbs:
            return False
        return all(
            want is None or want == got
            for want, got in ((self.group, group), (self.resource, resource), (self.namespace, namespace),
                              (self.name, name))
        )

    def cancel(self) -> None:
        self.cancelled = True


@dataclass
class _Route:
    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    subresource: str


class _NoTimestampLoader(yaml.SafeLoader):
    """YAML as the server reads it: timestamps stay strings."""


_NoTimestampLoader.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.copy().items()
}


class _OpenWatch:
    def __init__(self, request: web.Request, watcher: Watcher) -> None:
        self.request = request
        self.watcher = watcher


class FakeApiServer:
    """A stateful Kubernetes API server on 127.0.0.1 for tests (see tests/fakeapi/README.md)."""

    def __init__(
        self,
        crds_dir: Path | None = None,
        *,
        token: str | None = None,
        history_limit: int = 200_000,
        bookmark_interval: float = 1.0,
        clock: Callable[[], datetime] | None = None,
        enforce_namespaces: bool = True,
        workdir: Path | None = None,
    ) -> None:
        types = core_types() + (crd_types(crds_dir) if crds_dir is not None else [])
        self.registry = Registry(types)
        self.store = Store(
            self.registry, history_limit=history_limit, clock=clock, enforce_namespaces=enforce_namespaces
        )
        self.token = token or secrets.token_hex(16)
        self.bookmark_interval = bookmark_interval
        self.requests: list[RecordedRequest] = []
        self._fail_rules: list[_FailRule] = []
        self._refusals: list[WriteRefusal] = []
        self._latency = 0.0
        self._watches: set[_OpenWatch] = set()
        self._runner: web.AppRunner | None = None
        self._workdir = workdir
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.port = 0
        self.url = ""
        self.kubeconfig_path = Path()
        for ns in ("default", "kube-system"):
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> FakeApiServer:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that goes away ends its watch handler (and subscription)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=0.5, handler_cancellation=True
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None
        self.port = server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{self.port}"
        if self._workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="fakeapi-")
            self._workdir = Path(self._tmp.name)
        self.kubeconfig_path = self._workdir / "kubeconfig.yaml"
        self.kubeconfig_path.write_text(yaml.safe_dump(self.kubeconfig()))
        return self

    async def stop(self) -> None:
        self.drop_watches(graceful=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def __aenter__(self) -> FakeApiServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def kubeconfig(self) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": self.token}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "default"}}
            ],
            "current-context": "fake",
        }

    # ---- fault injection and recording --------------------------------------------------------

    def drop_watches(self, graceful: bool = False) -> int:
        """End every open watch: abruptly (connection aborted) or like a server-side timeout."""
        n = 0
        for ow in list(self._watches):
            n += 1
            if not graceful and ow.request.transport is not None:
                ow.request.transport.abort()
            ow.watcher.closed = True
            ow.watcher.queue.put_nowait(None)
        return n

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        retry_after: float | None = None,
        path_contains: str | None = None,
        method: str | None = None,
        verb: str | None = None,
    ) -> None:
        """The next n requests that match (path substring, HTTP method, Kubernetes verb such as
        "watch") get this error status; 429/503 carry Retry-After when retry_after is given."""
        self._fail_rules.append(_FailRule(n, status, retry_after, path_contains, method, verb))

    def refuse_writes(
        self,
        status: int,
        *,
        resource: str | None = None,
        name: str | None = None,
        namespace: str | None = None,
        group: str | None = None,
        verbs: Iterable[str] = WRITE_VERBS,
        times: int | None = None,
        retry_after: float | None = None,
        message: str | None = None,
    ) -> WriteRefusal:
        """Refuse matching HTTP writes with ``status`` (any code) until ``rule.cancel()`` (or ``times``
        refusals), each answered with the real server's Status shape for that code (see the README)."""
        rule = WriteRefusal(status, retry_after, message, times, group, resource, namespace, name, frozenset(verbs))
        self._refusals.append(rule)
        return rule

    def inject_watch_line(self, line: bytes, *, path_contains: str | None = None, end: bool = False) -> int:
        """Write ``line`` (raw bytes, e.g. ``b"null"``, ``b"<html>"``, a cut-off JSON object) followed by a
        newline into every open watch whose path contains ``path_contains``; ``end=True`` writes it without
        the newline and then aborts the connection (a stream cut in the middle of an event).  Returns
        how many watches got it."""
        n = 0
        for ow in list(self._watches):
            if path_contains and path_contains not in ow.request.path:
                continue
            ow.watcher.queue.put_nowait(("RAW", (line, end)))
            n += 1
        return n

    def set_latency(self, seconds: float) -> None:
        self._latency = max(0.0, seconds)

    def compact(self) -> None:
        self.store.compact()

    def set_history_limit(self, events: int) -> None:
        """Keep only the last `events` watch events (older resourceVersions then get 410)."""
        self.store.set_history_limit(events)

    def set_clock(self, clock: Callable[[], datetime]) -> None:
        """Where creationTimestamp / deletionTimestamp / managedFields times come from."""
        self.store.clock = clock

    def observed_calls(self) -> set[tuple[str, str, str]]:
        return {(r.group, r.resource, r.verb) for r in self.requests if r.verb}

    def clear_requests(self) -> None:
        self.requests.clear()

    @property
    def open_watches(self) -> int:
        return len(self._watches)

    @property
    def resource_version(self) -> str:
        return str(self.store.rv)

    # ---- direct store access ------------------------------------------------------------------

    def _resolve(self, api_version: str, kind: str) -> tuple[ResourceType, str]:
        try:
            return self.registry.by_api_version(api_version, kind)
        except KeyError as exc:
            raise errors.bad_request(str(exc)) from None

    def create(
        self, obj: dict[str, Any], *, validate: bool = True, field_manager: str | None = "fakeapi"
    ) -> dict[str, Any]:
        rt, version = self._resolve(obj.get("apiVersion", ""), obj.get("kind", ""))
        ctx = WriteContext(
            version, via_http=False, validate=validate, manager=field_manager if validate else None
        )
        ns = (obj.get("metadata") or {}).get("namespace") if rt.namespaced else None
        out = self.store.create(rt, ns or ("default" if rt.namespaced else None), obj, ctx)
        return clone(out)

    def load(self, objs: Iterable[dict[str, Any]]) -> int:
        """Bulk path for benchmarks: create without validation or managedFields; returns the count."""
        n = 0
        for obj in objs:
            rt, version = self._resolve(obj.get("apiVersion", ""), obj.get("kind", ""))
            ns = (obj.get("metadata") or {}).get("namespace") if rt.namespaced else None
            ctx = WriteContext(version, via_http=False, validate=False, manager=None)
            self.store.create(rt, ns or ("default" if rt.namespaced else None), obj, ctx)
            n += 1
        return n

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        rt, version = self._resolve(api_version, kind)
        return clone(self._as_version(self.store.get(rt, namespace or "", name), rt, version))

    def list(
        self,
        api_version: str,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> list[dict[str, Any]]:
        rt, version = self._resolve(api_version, kind)
        matcher = combine(
            label_matcher(label_selector), field_matcher(field_selector, rt.group, rt.plural, rt.is_crd)
        )
        items, _, _, _ = self.store.list(rt, namespace if rt.namespaced else None, matcher)
        return [clone(self._as_version(o, rt, version)) for o in items]

    def replace(
        self, obj: dict[str, Any], *, validate: bool = True, field_manager: str | None = "fakeapi"
    ) -> dict[str, Any]:
        rt, version = self._resolve(obj.get("apiVersion", ""), obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        ctx = WriteContext(version, via_http=False, validate=validate, manager=field_manager)
        return clone(self.store.update(rt, meta.get("namespace"), meta.get("name", ""), obj, ctx))

    def update_status(self, obj: dict[str, Any], *, field_manager: str | None = "fakeapi") -> dict[str, Any]:
        rt, version = self._resolve(obj.get("apiVersion", ""), obj.get("kind", ""))
        meta = obj.get("metadata") or {}
        ctx = WriteContext(
            version, subresource="status" if rt.has_status else "", via_http=False, manager=field_manager
        )
        return clone(self.store.update(rt, meta.get("namespace"), meta.get("name", ""), obj, ctx))

    def patch(
        self,
        api_version: str,
        kind: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        content_type: str = MERGE,
        subresource: str | None = None,
        field_manager: str | None = "fakeapi",
        force: bool = False,
    ) -> dict[str, Any]:
        rt, version = self._resolve(api_version, kind)
        route = _Route(rt, version, namespace, name, subresource or "")
        out = self._patch(route, content_type, patch, field_manager, force, via_http=False)
        return clone(out)

    def apply(
        self, obj: dict[str, Any], *, field_manager: str, force: bool = False, subresource: str | None = None
    ) -> dict[str, Any]:
        meta = obj.get("metadata") or {}
        return self.patch(
            obj.get("apiVersion", ""),
            obj.get("kind", ""),
            meta.get("name", ""),
            obj,
            meta.get("namespace"),
            content_type=APPLY,
            subresource=subresource,
            field_manager=field_manager,
            force=force,
        )

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        rt, _ = self._resolve(api_version, kind)
        return clone(self.store.delete(rt, namespace, name))

    # ---- HTTP ---------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            route, verb, resource_label, group = self._parse(request)
        except ApiError as exc:
            route, verb, resource_label, group = None, "", "", ""
            parse_error: ApiError | None = exc
        else:
            parse_error = None
        self.requests.append(
            RecordedRequest(
                request.method,
                request.path,
                request.headers.get("Content-Type", "").split(";")[0].strip(),
                verb,
                group,
                resource_label,
                route.namespace if route else None,
                route.name if route else None,
                request.query_string,
            )
        )
        try:
            if self._latency:
                await asyncio.sleep(self._latency)
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                raise errors.unauthorized()
            for rule in self._fail_rules:
                if rule.remaining > 0 and rule.matches(request.method, request.path, verb):
                    rule.remaining -= 1
                    if rule.remaining == 0:
                        self._fail_rules.remove(rule)
                    raise errors.injected(rule.status, rule.retry_after)
            for refusal in self._refusals:
                if route is not None and refusal.matches(verb, group, resource_label, route.namespace, route.name):
                    refusal.hits += 1
                    if refusal.remaining is not None:
                        refusal.remaining -= 1
                    raise errors.refused(
                        refusal.status, verb, route.rt.plural, route.subresource, group, route.namespace,
                        route.name, refusal.retry_after, refusal.message,
                    )
            discovery = self._discovery(request)
            if discovery is not None:
                return discovery
            if parse_error is not None:
                raise parse_error
            if route is None:
                if request.path in ("/healthz", "/readyz", "/livez"):
                    return web.Response(text="ok")
                return web.Response(status=404, text="404 page not found\n")
            return await self._dispatch(request, route, verb)
        except ApiError as exc:
            return _status_response(exc)
        except Exception as exc:  # a bug here must show up as a 500, with the traceback in the log
            log.exception("fake API server failed on %s %s", request.method, request.path)
            return _status_response(errors.internal(f"fake API server error: {exc!r}"))

    def _parse(self, request: web.Request) -> tuple[_Route | None, str, str, str]:
        parts = [p for p in request.path.split("/") if p]
        if not parts or parts[0] not in ("api", "apis"):
            return None, "", "", ""
        if parts[0] == "api":
            if len(parts) < 3:
                return None, "", "", ""
            group, version, rest = "", parts[1], parts[2:]
        else:
            if len(parts) < 4:
                return None, "", "", ""
            group, version, rest = parts[1], parts[2], parts[3:]
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        rt = self.registry.by_plural(group, plural)
        label = f"{plural}/{sub}" if sub else plural
        method = request.method
        if method == "GET":
            verb = "get" if name else ("watch" if request.query.get("watch") in _TRUE else "list")
        else:
            verb = {
                "POST": "create",
                "PUT": "update",
                "PATCH": "patch",
                "DELETE": "delete" if name else "deletecollection",
            }.get(method, method.lower())
        if rt is None or version not in rt.versions or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if sub and not (sub == "status" and rt.has_status):
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if namespace is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        return _Route(rt, version, namespace, name, sub), verb, label, group

    async def _dispatch(self, request: web.Request, route: _Route, verb: str) -> web.StreamResponse:
        rt = route.rt
        q = request.query
        if rt.namespaced and route.name and route.namespace is None and verb != "list":
            raise ApiError(404, "NotFound", "the server could not find the requested resource", {})
        if verb == "get":
            obj = self.store.get(rt, route.namespace or "", route.name or "")
            return _json(self._as_version(obj, rt, route.version))
        if verb in ("list", "watch"):
            matcher = combine(
                label_matcher(q.get("labelSelector")),
                field_matcher(q.get("fieldSelector"), rt.group, rt.plural, rt.is_crd),
            )
            if verb == "watch":
                return await self._watch(request, route, matcher)
            limit = int(q["limit"]) if q.get("limit", "").isdigit() else None
            items, rv, token, remaining = self.store.list(
                rt,
                route.namespace,
                matcher,
                limit=limit,
                continue_token=q.get("continue") or None,
                snapshot_key=(q.get("labelSelector", ""), q.get("fieldSelector", "")),
            )
            meta: dict[str, Any] = {"resourceVersion": rv}
            if token:
                meta["continue"] = token
                if remaining is not None and not q.get("labelSelector") and not q.get("fieldSelector"):
                    meta["remainingItemCount"] = remaining
            body = {
                "apiVersion": rt.api_version(route.version),
                "kind": f"{rt.kind}List",
                "metadata": meta,
                "items": [self._as_version(o, rt, route.version) for o in items],
            }
            return _json(body)
        manager = q.get("fieldManager") or _manager_from_agent(request.headers.get("User-Agent", ""))
        dry_run = "All" in q.getall("dryRun", [])
        if verb == "create":
            if route.name:
                raise errors.method_not_allowed(rt.plural, rt.group, "POST")
            body = await _read_json(request)
            ctx = WriteContext(route.version, manager=manager, dry_run=dry_run)
            obj = self.store.create(rt, route.namespace, body, ctx)
            return _json(self._as_version(obj, rt, route.version), status=201)
        if verb == "update":
            body = await _read_json(request)
            ctx = WriteContext(route.version, subresource=route.subresource, manager=manager, dry_run=dry_run)
            obj = self.store.update(rt, route.namespace, route.name or "", body, ctx)
            return _json(self._as_version(obj, rt, route.version))
        if verb == "patch":
            ctype = request.headers.get("Content-Type", "").split(";")[0].strip().lower()
            raw = await request.read()
            accepted = CRD_PATCH_TYPES if rt.is_crd else CORE_PATCH_TYPES
            if ctype not in accepted:
                raise errors.unsupported_media_type(accepted)
            if ctype == APPLY:
                try:
                    body = yaml.load(raw, Loader=_NoTimestampLoader)  # a SafeLoader subclass
                except yaml.YAMLError as exc:
                    raise errors.bad_request(f"error decoding YAML: {exc}") from None
            else:
                try:
                    body = json.loads(raw)
                except ValueError as exc:
                    raise errors.bad_request(f"error decoding patch: {exc}") from None
            force_param = q.get("force")
            if ctype == APPLY and not q.get("fieldManager"):
                raise errors.invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    [
                        {
                            "reason": "FieldValueRequired",
                            "message": "Required value: is required for apply patch",
                            "field": "fieldManager",
                        }
                    ],
                )
            if ctype != APPLY and force_param is not None:
                raise errors.invalid(
                    "PatchOptions",
                    "meta.k8s.io",
                    "",
                    [
                        {
                            "reason": "FieldValueForbidden",
                            "message": "Forbidden: may not be specified for non-apply patch",
                            "field": "force",
                        }
                    ],
                )
            obj = self._patch(
                route, ctype, body, manager, force_param in _TRUE, via_http=True, dry_run=dry_run
            )
            return _json(self._as_version(obj, rt, route.version))
        if verb == "delete":
            options = await _read_json(request) if (await request.read()).strip() else {}
            if not isinstance(options, dict):
                raise errors.bad_request("DeleteOptions must be an object")
            obj = self.store.delete(
                rt, route.namespace, route.name or "", (options or {}).get("preconditions")
            )
            if rt.key in (("coordination.k8s.io", "leases"), ("", "events"), ("events.k8s.io", "events")):
                details = {
                    "name": route.name,
                    "group": rt.group,
                    "kind": rt.plural,
                    "uid": obj["metadata"]["uid"],
                }
                return _json(
                    {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Success",
                        "details": details,
                    }
                )
            return _json(self._as_version(obj, rt, route.version))
        raise errors.method_not_allowed(rt.plural, rt.group, verb)

    def _patch(
        self,
        route: _Route,
        ctype: str,
        body: Any,
        manager: str | None,
        force: bool,
        *,
        via_http: bool,
        dry_run: bool = False,
    ) -> dict[str, Any]:
        rt = route.rt
        name = route.name or ""
        structure = rt.structure_for(route.version)
        if ctype == STRATEGIC and rt.is_crd:
            raise errors.unsupported_media_type(CRD_PATCH_TYPES)
        if ctype == APPLY:
            return self._apply(route, body, manager or "", force, via_http=via_http, dry_run=dry_run)
        current = self._as_version(self.store.get(rt, route.namespace or "", name), rt, route.version)
        if ctype == JSON_PATCH:
            patched = json_patch(current, body)
        elif not isinstance(body, dict):
            raise errors.bad_request(
                "json: cannot unmarshal array into Go value of type map[string]interface {}"
            )
        elif ctype == STRATEGIC:
            patched = strategic_merge_patch(current, body, structure)
        else:
            patched = merge_patch(current, body)
        ctx = WriteContext(
            route.version, subresource=route.subresource, manager=manager, via_http=via_http, dry_run=dry_run
        )
        return self.store.update(rt, route.namespace, name, patched, ctx)

    def _apply(
        self, route: _Route, body: Any, manager: str, force: bool, *, via_http: bool, dry_run: bool = False
    ) -> dict[str, Any]:
        rt = route.rt
        if not isinstance(body, dict):
            raise errors.bad_request("error decoding YAML: the applied configuration is not an object")
        want = rt.api_version(route.version)
        if body.get("apiVersion") != want or body.get("kind") != rt.kind:
            raise errors.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) does not match the expected API version ({want})"
                if body.get("kind") == rt.kind
                else f"invalid object type: {body.get('apiVersion')}, Kind={body.get('kind')}"
            )
        meta = body.get("metadata") or {}
        name = route.name or meta.get("name", "")
        ctx = WriteContext(
            route.version,
            subresource=route.subresource,
            manager=manager,
            via_http=via_http,
            operation="Apply",
            force=force,
            dry_run=dry_run,
        )
        applied = dict(body)
        if rt.has_status:
            if route.subresource == "status":
                applied = {k: v for k, v in body.items() if k in ("apiVersion", "kind", "metadata", "status")}
                applied["metadata"] = {
                    k: v for k, v in meta.items() if k in ("name", "namespace", "uid", "resourceVersion")
                }
            else:
                applied.pop("status", None)
        self.store._validate(rt, applied, ctx, applied_config=True)
        structure = rt.structure_for(route.version)
        table = self.store.table(rt)
        key = (route.namespace or "" if rt.namespaced else "", name)
        if key not in table.objects:
            if route.subresource:
                raise errors.not_found(rt.plural, rt.group, name)
            return self.store.create(rt, route.namespace, applied, ctx)

        def apply_fn(_new: dict[str, Any], managed: Any) -> dict[str, Any]:
            live = table.objects[key]
            return managed.apply(
                live, applied, structure, manager, route.subresource, want, self.store._now(), force
            )

        return self.store.update(rt, route.namespace, name, applied, ctx, apply_fn=apply_fn)

    async def _watch(self, request: web.Request, route: _Route, matcher: Any) -> web.StreamResponse:
        q = request.query
        rt = route.rt
        bookmarks = q.get("allowWatchBookmarks") in _TRUE
        timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else None
        watcher = self.store.watch(rt, route.namespace, matcher, q.get("resourceVersion"))
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        ow = _OpenWatch(request, watcher)
        self._watches.add(ow)  # open from here: drop_watches() ends it even before the headers are out
        deadline = time.monotonic() + timeout if timeout else None
        try:
            await resp.prepare(request)
            while True:
                wait = self.bookmark_interval if bookmarks else None
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    wait = left if wait is None else min(wait, left)
                try:
                    item = await asyncio.wait_for(watcher.queue.get(), wait)
                except TimeoutError:
                    if bookmarks and not watcher.closed:
                        await resp.write(self._bookmark(rt, route.version))
                    continue
                if item is None:
                    break
                etype, obj = item
                if etype == "RAW":
                    raw, end = obj
                    if end:
                        await resp.write(raw)
                        if request.transport is not None:
                            request.transport.abort()
                        break
                    await resp.write(raw + b"\n")
                    continue
                if etype != "ERROR":
                    obj = self._as_version(obj, rt, route.version)
                await resp.write(json.dumps({"type": etype, "object": obj}).encode() + b"\n")
            with contextlib.suppress(ConnectionError, RuntimeError):
                await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass
        finally:
            self._watches.discard(ow)
            self.store.unwatch(watcher)
        return resp

    def _bookmark(self, rt: ResourceType, version: str) -> bytes:
        obj = {
            "kind": rt.kind,
            "apiVersion": rt.api_version(version),
            "metadata": {"resourceVersion": str(self.store.rv), "creationTimestamp": None},
        }
        return json.dumps({"type": "BOOKMARK", "object": obj}).encode() + b"\n"

    @staticmethod
    def _as_version(obj: dict[str, Any], rt: ResourceType, version: str) -> dict[str, Any]:
        av = rt.api_version(version)
        return obj if obj.get("apiVersion") == av else {**obj, "apiVersion": av}

    def _discovery(self, request: web.Request) -> web.Response | None:
        if request.method != "GET":
            return None
        path = request.path.rstrip("/")
        if path == "/version":
            return _json(
                {"major": "1", "minor": "34", "gitVersion": "v1.34.0-fakeapi", "platform": "linux/amd64"}
            )
        if path == "/api":
            return _json(
                {
                    "kind": "APIVersions",
                    "versions": ["v1"],
                    "serverAddressByClientCIDRs": [
                        {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{self.port}"}
                    ],
                }
            )
        if path == "/apis":
            groups = []
            for g, vs in self.registry.groups().items():
                gvs = [{"groupVersion": f"{g}/{v}", "version": v} for v in vs]
                groups.append({"name": g, "versions": gvs, "preferredVersion": gvs[0]})
            return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        parts = [p for p in path.split("/") if p]
        if parts[0] == "apis" and len(parts) == 2:
            vs = self.registry.groups().get(parts[1])
            if vs is None:
                return None
            gvs = [{"groupVersion": f"{parts[1]}/{v}", "version": v} for v in vs]
            return _json(
                {
                    "kind": "APIGroup",
                    "apiVersion": "v1",
                    "name": parts[1],
                    "versions": gvs,
                    "preferredVersion": gvs[0],
                }
            )
        if (parts[0] == "api" and len(parts) == 2) or (parts[0] == "apis" and len(parts) == 3):
            group = "" if parts[0] == "api" else parts[1]
            version = parts[-1]
            resources: list[dict[str, Any]] = []
            for rt in self.registry.types:
                if rt.group != group or version not in rt.versions:
                    continue
                verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
                entry: dict[str, Any] = {
                    "name": rt.plural,
                    "singularName": rt.singular,
                    "namespaced": rt.namespaced,
                    "kind": rt.kind,
                    "verbs": verbs,
                }
                if rt.short_names:
                    entry["shortNames"] = rt.short_names
                resources.append(entry)
                if rt.has_status:
                    resources.append(
                        {
                            "name": f"{rt.plural}/status",
                            "singularName": "",
                            "namespaced": rt.namespaced,
                            "kind": rt.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                    )
            if not resources:
                return None
            gv = f"{group}/{version}" if group else version
            return _json(
                {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}
            )
        return None


def _manager_from_agent(agent: str) -> str:
    """The apiserver's default field manager: the User-Agent up to the first '/'."""
    return agent.split("/", 1)[0][:128] or "unknown"


async def _read_json(request: web.Request) -> Any:
    raw = await request.read()
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from None


def _json(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(),
        status=status,
        content_type="application/json",
        headers=headers,
    )


def _status_response(exc: ApiError) -> web.Response:
    return _json(exc.body, status=exc.status, headers=exc.headers)
