"""Merge patch (RFC 7386), JSON patch (RFC 6902) and a basic strategic merge patch."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import jsonpointer

from tests.fakeapi.errors import ApiError, bad_request
from tests.fakeapi.schema import item_schema, list_kind, sub_schema

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"

CRD_PATCH_TYPES = [JSON_PATCH, MERGE, APPLY]
CORE_PATCH_TYPES = [JSON_PATCH, MERGE, STRATEGIC, APPLY]


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _go_type(v: Any) -> str:
    if isinstance(v, dict):
        return "object"
    if isinstance(v, str):
        return "string"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int | float):
        return "number"
    return "null"


def json_patch(target: dict[str, Any], ops: Any) -> dict[str, Any]:
    """RFC 6902. A body that is not a list of operations is refused the way the server does."""
    if not isinstance(ops, list):
        raise bad_request(f"json: cannot unmarshal {_go_type(ops)} into Go value of type jsonpatch.Patch")
    try:
        result = jsonpatch.JsonPatch(ops).apply(target, in_place=False)
    except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, KeyError, TypeError) as exc:
        raise ApiError(
            422, "Invalid", "the server rejected our request due to an error in our request", {}
        ) from exc
    if not isinstance(result, dict):
        raise ApiError(422, "Invalid", "the server rejected our request due to an error in our request", {})
    return result


def strategic_merge_patch(target: Any, patch: Any, schema: dict[str, Any]) -> Any:
    """Merge patch that merges lists with a merge key by that key (basic: `$patch: delete` on items)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
            continue
        child = sub_schema(schema, key)
        kind, keys = list_kind(child)
        if isinstance(value, list) and kind == "map" and keys and isinstance(result.get(key), list):
            result[key] = _merge_keyed_list(result[key], value, keys, item_schema(child))
        else:
            result[key] = strategic_merge_patch(result.get(key), value, child)
    return result


def _merge_keyed_list(
    live: list[Any], patch: list[Any], keys: list[str], schema: dict[str, Any]
) -> list[Any]:
    out = list(live)
    for item in patch:
        if not isinstance(item, dict):
            continue
        ident = tuple(item.get(k) for k in keys)
        idx = next(
            (
                i
                for i, cur in enumerate(out)
                if isinstance(cur, dict) and tuple(cur.get(k) for k in keys) == ident
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: v for k, v in item.items() if not k.startswith("$")})
        else:
            out[idx] = strategic_merge_patch(out[idx], item, schema)
    return out


def decode_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise bad_request(f"error decoding patch: {exc}") from None
