"""A CRD's openAPIV3Schema as a strict JSON Schema, for checking rendered CRD objects offline.

``nullable: true`` becomes ``type: [T, "null"]``; every object with ``properties`` and without
``x-kubernetes-preserve-unknown-fields`` rejects unknown fields (like ``kubectl --validate=strict``);
``apiVersion`` and ``kind`` are pinned and ``metadata.name`` is required.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import yaml


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if out.pop("nullable", False) and "type" in out:
            out["type"] = [out["type"], "null"]
        if out.get("type") == "object" and "properties" in out and not out.get("x-kubernetes-preserve-unknown-fields"):
            out.setdefault("additionalProperties", False)
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def crd_validator(crd_file: Path, version: str) -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(crd_file.read_text())
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    (ver,) = [v for v in crd["spec"]["versions"] if v["name"] == version]
    schema = _strict(copy.deepcopy(ver["schema"]["openAPIV3Schema"]))
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"const": f"{group}/{version}"}
    props["kind"] = {"const": kind}
    props["metadata"] = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata"})
    return jsonschema.Draft7Validator(schema)


def errors(validator: jsonschema.Draft7Validator, obj: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(obj)]
