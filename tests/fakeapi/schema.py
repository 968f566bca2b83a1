"""CRD openAPIV3Schema -> JSON Schema, validated like the API server with strict field validation.

The structural schema is turned into a JSON Schema (draft 2020-12) that jsonschema can check:
`nullable` -> `[T, "null"]`, `x-kubernetes-int-or-string` -> integer or string, objects without
`x-kubernetes-preserve-unknown-fields` get `additionalProperties: false` (unknown fields are errors,
as with `fieldValidation=Strict`). CEL rules (`x-kubernetes-validations`) are not evaluated.
Errors come back in the server's shapes: unknown fields as a strict-decoding message, everything
else as field causes for a 422 Invalid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import referencing
from jsonschema import Draft202012Validator, FormatChecker

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")

_FORMATS = FormatChecker(formats=())


@_FORMATS.checks("date-time")
def _is_datetime(value: object) -> bool:
    return not isinstance(value, str) or bool(_RFC3339.match(value))


_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}

#: ObjectMeta, strictly typed (the server decodes metadata into a Go struct).
OBJECT_META: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "generateName": {"type": "string"},
        "namespace": {"type": "string"},
        "selfLink": {"type": "string"},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"},
        "creationTimestamp": {"type": ["string", "null"]},
        "deletionTimestamp": {"type": ["string", "null"]},
        "deletionGracePeriodSeconds": {"type": ["integer", "null"]},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "ownerReferences": {"type": "array", "items": {"type": "object"}},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "managedFields": {"type": "array", "items": {"type": "object"}},
    },
}

#: Structural information (list types) for metadata, shared by every kind.
META_STRUCTURE: dict[str, Any] = {
    "properties": {
        "finalizers": {"x-kubernetes-list-type": "set"},
        "ownerReferences": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"]},
    }
}


def go_regex(pattern: str) -> str:
    """RE2 allows inline flags anywhere ("^(?i)[a-z]"); Python wants them at the start."""
    if "(?i)" in pattern and not pattern.startswith("(?i)"):
        return "(?i)" + pattern.replace("(?i)", "")
    return pattern


def to_json_schema(node: dict[str, Any], top: bool = True) -> dict[str, Any]:
    """Convert one structural-schema node (recursively)."""
    out: dict[str, Any] = {}
    preserve = bool(node.get("x-kubernetes-preserve-unknown-fields"))
    for key, value in node.items():
        if key in ("description", "x-kubernetes-validations", "example", "externalDocs"):
            continue
        if key.startswith("x-kubernetes-"):
            continue
        if key == "properties":
            out["properties"] = {k: to_json_schema(v, top=False) for k, v in value.items()}
        elif key == "items":
            out["items"] = to_json_schema(value, top=False) if isinstance(value, dict) else value
        elif key == "additionalProperties":
            out["additionalProperties"] = (
                to_json_schema(value, top=False) if isinstance(value, dict) else value
            )
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [to_json_schema(v, top=False) for v in value]
        elif key == "not":
            out[key] = to_json_schema(value, top=False)
        elif key == "default":
            continue
        elif key == "pattern":
            out["pattern"] = go_regex(value)
        else:
            out[key] = value
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        # keep anyOf if the CRD spells it out, else add it
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if node.get("x-kubernetes-embedded-resource"):
        props = out.setdefault("properties", {})
        props.setdefault("apiVersion", {"type": "string"})
        props.setdefault("kind", {"type": "string"})
        props.setdefault("metadata", {"type": "object"})
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    is_object = out.get("type") == "object" or "properties" in out
    if is_object and not preserve and "additionalProperties" not in out:
        out["additionalProperties"] = False
    if top:
        props = out.setdefault("properties", {})
        props["apiVersion"] = {"type": "string"}
        props["kind"] = {"type": "string"}
        props["metadata"] = OBJECT_META
        out["additionalProperties"] = False if not preserve else out.get("additionalProperties", True)
    return out


@dataclass
class Problems:
    """What validation found: unknown field paths (-> 400), decoding errors of typed kinds (-> 400)
    and field causes (-> 422)."""

    unknown: list[str]
    causes: list[dict[str, str]]
    decode: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.unknown or self.causes or self.decode)


def _path(parts: Any) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _go_value(v: Any) -> str:
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v, separators=(",", ":"))


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def _cause(err: jsonschema.ValidationError) -> dict[str, str] | None:
    path = _path(err.absolute_path)
    v = err.validator
    inst = err.instance
    if v == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        name = missing[0] if missing else "?"
        return {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": f"{path}.{name}" if path else name,
        }
    if v == "type" or (v == "anyOf" and all("type" in s and len(s) == 1 for s in err.validator_value)):
        want = err.validator_value if v == "type" else ",".join(s["type"] for s in err.validator_value)
        if isinstance(want, list):
            want = ",".join(t for t in want if t != "null")
        msg = f"Invalid value: {json.dumps(_json_type(inst))}: {path} in body must be of type {want}: {_go_value(inst)}"
        return {"reason": "FieldValueTypeInvalid", "message": msg, "field": path, "got": _json_type(inst)}
    if v == "enum":
        allowed = ", ".join(_go_value(a) for a in err.validator_value if a is not None)
        return {
            "reason": "FieldValueNotSupported",
            "message": f"Unsupported value: {_go_value(inst)}: supported values: {allowed}",
            "field": path,
        }
    if v == "maxItems":
        return {
            "reason": "FieldValueTooMany",
            "message": f"Too many: {len(inst)}: must have at most {err.validator_value} items",
            "field": path,
        }
    if v == "maxLength":
        return {
            "reason": "FieldValueTooLong",
            "message": f"Too long: may not be more than {err.validator_value} bytes",
            "field": path,
        }
    text = {
        "maximum": f"should be less than or equal to {err.validator_value}",
        "minimum": f"should be greater than or equal to {err.validator_value}",
        "exclusiveMaximum": f"should be less than {err.validator_value}",
        "exclusiveMinimum": f"should be greater than {err.validator_value}",
        "minLength": f"should be at least {err.validator_value} chars long",
        "minItems": f"should have at least {err.validator_value} items",
        "pattern": f"should match '{err.validator_value}'",
        "format": f"must be of type {err.validator_value}",
        "uniqueItems": "shouldn't contain duplicates",
        "minProperties": f"should have at least {err.validator_value} properties",
        "maxProperties": f"should have at most {err.validator_value} properties",
    }.get(str(v), err.message)
    return {
        "reason": "FieldValueInvalid",
        "message": f"Invalid value: {_go_value(inst)}: {path} in body {text}",
        "field": path,
    }


class KindValidator:
    """Validates whole objects of one (group, version, kind) against its CRD schema."""

    def __init__(self, openapi_v3: dict[str, Any]) -> None:
        self.schema = to_json_schema(openapi_v3)
        self._validator = Draft202012Validator(self.schema, format_checker=_FORMATS)

    def problems(self, obj: dict[str, Any]) -> Problems:
        found = self._problems(obj)
        for c in found.causes:
            c.pop("got", None)
        return found

    def _problems(self, obj: dict[str, Any]) -> Problems:
        unknown: list[str] = []
        causes: list[dict[str, str]] = []
        for err in self._validator.iter_errors(obj):
            if err.validator == "additionalProperties" and err.validator_value is False:
                props = err.schema.get("properties", {})
                base = _path(err.absolute_path)
                for k in err.instance:
                    if k not in props:
                        unknown.append(f"{base}.{k}" if base else k)
                continue
            cause = _cause(err)
            if cause is not None:
                causes.append(cause)
        causes.sort(key=lambda c: c["field"])
        return Problems(sorted(set(unknown)), causes)


#: encoding/json's names for JSON values in "cannot unmarshal X into Go struct field"
_GO_JSON = {"integer": "number", "boolean": "bool"}


class CoreValidator(KindValidator):
    """Built-in kinds, against the upstream OpenAPI (kubernetes-validate's strict JSON schemas).

    The server decodes them into Go structs: a wrong type is a decoding error (400), not a 422.
    """

    def __init__(self, schema: dict[str, Any], registry: referencing.Registry) -> None:  # type: ignore[type-arg]
        self.schema = schema
        self._validator = Draft202012Validator(schema, registry=registry, format_checker=_FORMATS)

    def problems(self, obj: dict[str, Any]) -> Problems:
        found = self._problems(obj)
        causes: list[dict[str, str]] = []
        for c in found.causes:
            got = c.pop("got", None)
            if got is not None:
                found.decode.append(
                    f"json: cannot unmarshal {_GO_JSON.get(got, got)} into Go struct field .{c['field']}"
                )
            else:
                causes.append(c)
        found.causes = causes
        return found


def _schema_dir() -> Path | None:
    try:
        import kubernetes_validate
    except ImportError:
        return None
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    dirs = sorted(
        (d for d in root.glob("v*-local-strict") if d.is_dir()),
        key=lambda d: tuple(int(x) for x in d.name[1:].split("-")[0].split(".")),
    )
    return dirs[-1] if dirs else None


@cache
def _core_registry() -> tuple[Path, referencing.Registry] | None:  # type: ignore[type-arg]
    d = _schema_dir()
    if d is None:
        return None
    defs = json.loads((d / "_definitions.json").read_text())
    return d, referencing.Registry().with_resource(defs["$id"], referencing.Resource.from_contents(defs))


def core_validator(kind: str, api_version: str) -> CoreValidator | None:
    """A validator for a built-in kind, or None when kubernetes-validate is not installed."""
    reg = _core_registry()
    if reg is None:
        return None
    d, registry = reg
    group, _, version = api_version.rpartition("/")
    stem = f"{kind.lower()}-{group.split('.')[0]}-{version}" if group else f"{kind.lower()}-{version}"
    path = d / f"{stem}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text())
    return CoreValidator(
        schema, registry.with_resource(schema["$id"], referencing.Resource.from_contents(schema))
    )


def _deref(node: dict[str, Any]) -> dict[str, Any]:
    """Follow a `$ref` into the upstream definitions (core kinds' schemas use them)."""
    ref = node.get("$ref")
    if not isinstance(ref, str) or "/$defs/" not in ref:
        return node
    reg = _core_registry()
    if reg is None:
        return {}
    target = _core_defs().get(ref.rsplit("/$defs/", 1)[1], {})
    # keep the list/map markers of the referring node (the definition has none of its own)
    extra = {k: v for k, v in node.items() if k.startswith("x-kubernetes-")}
    return {**target, **extra} if extra else target


@cache
def _core_defs() -> dict[str, Any]:
    reg = _core_registry()
    if reg is None:
        return {}
    return json.loads((reg[0] / "_definitions.json").read_text())["$defs"]


def sub_schema(node: dict[str, Any] | None, key: str) -> dict[str, Any]:
    """The structural schema of field `key` below `node` ({} when unknown)."""
    if not node:
        return {}
    node = _deref(node)
    props = node.get("properties")
    if props and key in props:
        return _deref(props[key])
    addl = node.get("additionalProperties")
    return _deref(addl) if isinstance(addl, dict) else {}


def item_schema(node: dict[str, Any] | None) -> dict[str, Any]:
    if not node:
        return {}
    items = _deref(node).get("items")
    return _deref(items) if isinstance(items, dict) else {}


def list_kind(node: dict[str, Any] | None) -> tuple[str, list[str]]:
    """('map', keys) | ('set', []) | ('atomic', []); a strategic merge key counts as a map key."""
    if not node:
        return "atomic", []
    lt = node.get("x-kubernetes-list-type")
    if lt == "map":
        return "map", list(node.get("x-kubernetes-list-map-keys") or [])
    if lt == "set":
        return "set", []
    merge_key = node.get("x-kubernetes-patch-merge-key")
    if lt is None and merge_key and "merge" in str(node.get("x-kubernetes-patch-strategy", "")):
        return "map", [merge_key]
    return "atomic", []


def core_structure(kind: str, api_version: str) -> dict[str, Any] | None:
    """The upstream schema of a built-in kind (list types, merge keys), for apply and strategic merge."""
    v = core_validator(kind, api_version)
    return v.schema if v is not None else None


def is_atomic_map(node: dict[str, Any] | None) -> bool:
    return bool(node) and node.get("x-kubernetes-map-type") == "atomic"  # type: ignore[union-attr]


def with_meta_structure(root: dict[str, Any]) -> dict[str, Any]:
    """A shallow copy of a structural root schema whose metadata carries the list types."""
    out = dict(root)
    props = dict(out.get("properties") or {})
    props["metadata"] = META_STRUCTURE
    out["properties"] = props
    return out
