"""Server-side apply: field sets per manager, conflicts, list-map merge by key, metadata.managedFields.

A field path is a tuple of elements: ("f", name) for a struct field or map key, ("k", ((key, value), ...))
for an entry of a `x-kubernetes-list-type: map` list, ("v", json) for an entry of a set list. Atomic lists
and scalars are leaves. A list-map entry's own path stands for the entry (FieldsV1 ".").
This follows structured-merge-diff closely enough to detect conflicts, keep other managers' entries, and
drop what a manager stops applying.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.fakeapi.errors import ApiError
from tests.fakeapi.schema import is_atomic_map, item_schema, list_kind, sub_schema

Elem = tuple[str, Any]
Path = tuple[Elem, ...]

ENTRY = object()  # value marker for list-map entries themselves

#: metadata fields the server never tracks (stripmeta.go)
_STRIPPED_META = {
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "managedFields",
    "selfLink",
}


@dataclass
class ManagerEntry:
    manager: str
    operation: str  # "Apply" | "Update"
    subresource: str
    api_version: str
    time: str
    fields: set[Path] = field(default_factory=set)

    @property
    def ident(self) -> tuple[str, str, str]:
        return (self.manager, self.operation, self.subresource)

    def describe(self) -> str:
        """printManager() of the apiserver: how a conflict names this manager."""
        text = json.dumps(self.manager)
        if self.subresource:
            text += f" with subresource {json.dumps(self.subresource)}"
        if self.operation == "Update":
            text += f" using {self.api_version}"
        return text

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "manager": self.manager,
            "operation": self.operation,
            "apiVersion": self.api_version,
            "time": self.time,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(self.fields),
        }
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def _key_of(item: dict[str, Any], keys: list[str]) -> tuple[tuple[str, Any], ...]:
    return tuple((k, item.get(k)) for k in keys)


def leaf_values(obj: dict[str, Any], schema: dict[str, Any]) -> dict[Path, Any]:
    """Every owned path of obj with its value (ENTRY for list-map entries)."""
    out: dict[Path, Any] = {}
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta_schema = sub_schema(schema, "metadata")
            for mk, mv in value.items():
                if mk in _STRIPPED_META:
                    continue
                _walk(mv, sub_schema(meta_schema, mk), (("f", "metadata"), ("f", mk)), out)
            continue
        _walk(value, sub_schema(schema, key), (("f", key),), out)
    return out


def _walk(value: Any, schema: dict[str, Any], path: Path, out: dict[Path, Any]) -> None:
    if isinstance(value, dict) and value and not is_atomic_map(schema):
        for k, v in value.items():
            _walk(v, sub_schema(schema, k), (*path, ("f", k)), out)
        return
    if isinstance(value, list) and value:
        kind, keys = list_kind(schema)
        if kind == "map" and all(isinstance(i, dict) for i in value):
            items = item_schema(schema)
            for item in value:
                p = (*path, ("k", _key_of(item, keys)))
                out[p] = ENTRY
                for k, v in item.items():
                    _walk(v, sub_schema(items, k), (*p, ("f", k)), out)
            return
        if kind == "set":
            for item in value:
                out[(*path, ("v", json.dumps(item, sort_keys=True)))] = item
            return
    out[path] = value


def path_string(path: Path) -> str:
    """fieldpath.Path.String(): .status.admissionChecks[name="gpu-health"].state"""
    s = ""
    for kind, val in path:
        if kind == "f":
            s += "." + val
        elif kind == "k":
            s += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in val) + "]"
        else:
            s += f"[={val}]"
    return s


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for path in sorted(paths, key=len):
        node = root
        for kind, val in path:
            if kind == "f":
                name = f"f:{val}"
            elif kind == "k":
                name = "k:" + json.dumps(dict(val), separators=(",", ":"), sort_keys=True)
            else:
                name = f"v:{val}"
            node = node.setdefault(name, {})
        if path and path[-1][0] == "k":
            node.setdefault(".", {})
    return root


def _is_under(p: Path, prefix: Path) -> bool:
    return p[: len(prefix)] == prefix


def remove_at(obj: Any, path: Path) -> None:
    """Remove the value at path from obj (in place; obj must be a private copy)."""
    parent = obj
    for elem in path[:-1]:
        parent = _child(parent, elem)
        if parent is None:
            return
    kind, val = path[-1]
    if kind == "f" and isinstance(parent, dict):
        parent.pop(val, None)
    elif kind == "k" and isinstance(parent, list):
        keys = [k for k, _ in val]
        parent[:] = [i for i in parent if not (isinstance(i, dict) and _key_of(i, keys) == val)]
    elif kind == "v" and isinstance(parent, list):
        parent[:] = [i for i in parent if json.dumps(i, sort_keys=True) != val]


def _child(node: Any, elem: Elem) -> Any:
    kind, val = elem
    if kind == "f":
        return node.get(val) if isinstance(node, dict) else None
    if kind == "k" and isinstance(node, list):
        keys = [k for k, _ in val]
        return next((i for i in node if isinstance(i, dict) and _key_of(i, keys) == val), None)
    return None


def merge_applied(live: Any, applied: Any, schema: dict[str, Any]) -> Any:
    """The applied configuration merged into the live object (new containers, live untouched)."""
    if isinstance(applied, dict) and isinstance(live, dict) and not is_atomic_map(schema):
        out = dict(live)
        for k, v in applied.items():
            out[k] = merge_applied(live.get(k), v, sub_schema(schema, k))
        return out
    if isinstance(applied, list) and isinstance(live, list):
        kind, keys = list_kind(schema)
        if kind == "map":
            items = item_schema(schema)
            out_list = list(live)
            for item in applied:
                if not isinstance(item, dict):
                    continue
                ident = _key_of(item, keys)
                idx = next(
                    (
                        i
                        for i, cur in enumerate(out_list)
                        if isinstance(cur, dict) and _key_of(cur, keys) == ident
                    ),
                    None,
                )
                if idx is None:
                    out_list.append(merge_applied(None, item, items))
                else:
                    out_list[idx] = merge_applied(out_list[idx], item, items)
            return out_list
        if kind == "set":
            out_list = list(live)
            for item in applied:
                if item not in out_list:
                    out_list.append(item)
            return out_list
    if isinstance(applied, dict):
        return {k: merge_applied(None, v, sub_schema(schema, k)) for k, v in applied.items()}
    if isinstance(applied, list):
        return json.loads(json.dumps(applied))
    return applied


@dataclass
class Conflict:
    manager: ManagerEntry
    path: Path


def conflict_error(conflicts: list[Conflict]) -> ApiError:
    """NewConflictError() of the apiserver's field manager (paths in field-set order)."""
    conflicts = sorted(conflicts, key=lambda c: path_string(c.path))
    causes = [
        {
            "reason": "FieldManagerConflict",
            "message": f"conflict with {c.manager.describe()}",
            "field": path_string(c.path),
        }
        for c in conflicts
    ]
    if len(conflicts) == 1:
        c = conflicts[0]
        msg = f"Apply failed with 1 conflict: conflict with {c.manager.describe()}: {path_string(c.path)}"
    else:
        by_manager: dict[str, list[str]] = {}
        for c in conflicts:
            by_manager.setdefault(c.manager.describe(), []).append(path_string(c.path))
        lines: list[str] = []
        for name in sorted(by_manager):
            lines.append(f"conflicts with {name}:")
            lines.extend(f"- {p}" for p in by_manager[name])
        msg = f"Apply failed with {len(conflicts)} conflicts: " + "\n".join(lines)
    return ApiError(409, "Conflict", msg, {"causes": causes})


class ManagedFields:
    """The managers of one object."""

    def __init__(self, entries: list[ManagerEntry] | None = None) -> None:
        self.entries: list[ManagerEntry] = entries or []

    def copy(self) -> ManagedFields:
        return ManagedFields(
            [
                ManagerEntry(e.manager, e.operation, e.subresource, e.api_version, e.time, set(e.fields))
                for e in self.entries
            ]
        )

    def _entry(
        self, manager: str, operation: str, subresource: str, api_version: str, now: str
    ) -> ManagerEntry:
        for e in self.entries:
            if e.ident == (manager, operation, subresource):
                e.api_version, e.time = api_version, now
                return e
        e = ManagerEntry(manager, operation, subresource, api_version, now)
        self.entries.append(e)
        return e

    def record_update(
        self,
        old: dict[str, Any] | None,
        new: dict[str, Any],
        schema: dict[str, Any],
        manager: str,
        subresource: str,
        api_version: str,
        now: str,
    ) -> None:
        """A non-apply write: the writer owns what it changed, others lose it."""
        old_leaves = leaf_values(old, schema) if old is not None else {}
        new_leaves = leaf_values(new, schema)
        changed = {
            p for p, v in new_leaves.items() if p not in old_leaves or (v is not ENTRY and old_leaves[p] != v)
        }
        if changed:
            writer = self._entry(manager, "Update", subresource, api_version, now)
            for e in self.entries:
                if e is not writer:
                    e.fields -= changed
            writer.fields |= changed
        self._prune(new_leaves)

    def apply(
        self,
        live: dict[str, Any],
        applied: dict[str, Any],
        schema: dict[str, Any],
        manager: str,
        subresource: str,
        api_version: str,
        now: str,
        force: bool,
    ) -> dict[str, Any]:
        """Merge an applied configuration; raise the 409 conflict error unless force."""
        live_leaves = leaf_values(live, schema)
        applied_leaves = leaf_values(applied, schema)
        me = (manager, "Apply", subresource)
        conflicts: list[Conflict] = []
        for p, v in applied_leaves.items():
            if v is ENTRY or (p in live_leaves and live_leaves[p] == v):
                continue
            for e in self.entries:
                if e.ident != me and p in e.fields:
                    conflicts.append(Conflict(e, p))
        if conflicts and not force:
            raise conflict_error(conflicts)
        for c in conflicts:
            c.manager.fields.discard(c.path)
        merged = json.loads(json.dumps(merge_applied(live, applied, schema)))  # private: removals mutate it
        previous = next((e.fields for e in self.entries if e.ident == me), set())
        dropped = previous - set(applied_leaves)
        others = [e for e in self.entries if e.ident != me]
        for p in sorted(dropped, key=len):
            if any(any(_is_under(q, p) for q in e.fields) for e in others):
                continue
            if len(p) >= 2 and p[-2][0] == "k" and p[-1][1] in dict(p[-2][1]):
                continue  # never strip the key fields of an entry that stays
            remove_at(merged, p)
        mine = self._entry(manager, "Apply", subresource, api_version, now)
        mine.fields = set(applied_leaves)
        self._prune(leaf_values(merged, schema))
        return merged

    def _prune(self, present: dict[Path, Any]) -> None:
        for e in self.entries:
            e.fields = {p for p in e.fields if p in present}
        self.entries = [e for e in self.entries if e.fields]

    def to_json(self) -> list[dict[str, Any]]:
        return [e.to_json() for e in self.entries]
