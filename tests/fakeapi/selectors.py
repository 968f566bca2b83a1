"""Label and field selectors with the API server's semantics."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from tests.fakeapi.errors import bad_request

Matcher = Callable[[dict[str, Any]], bool]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_OP_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|!=|=|>|<)\s*([A-Za-z0-9._-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


def _split(selector: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    cur = ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [p for p in (x.strip() for x in parts) if p]


def _requirement(text: str) -> Matcher:
    m = _SET_RE.match(text)
    if m and not m.group(1):
        key, op = m.group(2), m.group(3)
        values = {v.strip() for v in m.group(4).split(",") if v.strip()}
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    m = _OP_RE.match(text)
    if m:
        key, op, value = m.groups()
        if op in ("=", "=="):
            return lambda labels: labels.get(key) == value
        if op == "!=":
            return lambda labels: labels.get(key) != value
        try:
            num = int(value)
        except ValueError:
            raise bad_request(
                f"unable to parse requirement: for 'gt', 'lt' operators, the value must be an integer: {text!r}"
            ) from None
        if op == ">":
            return lambda labels: _int(labels.get(key)) is not None and _int(labels.get(key)) > num  # type: ignore[operator]
        return lambda labels: _int(labels.get(key)) is not None and _int(labels.get(key)) < num  # type: ignore[operator]
    m = _EXISTS_RE.match(text)
    if m:
        neg, key = m.groups()
        if neg:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: invalid label selector: {text!r}")


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def label_matcher(selector: str | None) -> Matcher | None:
    if not selector:
        return None
    reqs = [_requirement(p) for p in _split(selector)]

    def match(obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


_COMMON = ("metadata.name", "metadata.namespace")
_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("", "pods"): (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    ("", "nodes"): ("spec.unschedulable",),
    ("", "events"): (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    ),
    ("events.k8s.io", "events"): (
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "reason",
        "type",
    ),
}


def _field_value(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    if cur is None:
        return "false" if path in ("spec.unschedulable", "spec.hostNetwork") else ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def field_matcher(selector: str | None, group: str, plural: str, is_crd: bool) -> Matcher | None:
    if not selector:
        return None
    allowed = _COMMON + _FIELDS.get((group, plural), ())
    reqs: list[tuple[str, str, bool]] = []
    for part in _split(selector):
        m = re.match(r"^\s*([A-Za-z0-9._-]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{part}'")
        key, op, value = m.groups()
        if key not in allowed:
            if is_crd:
                raise bad_request(
                    f'"{key}" is not a known field selector: only "metadata.name", "metadata.namespace"'
                )
            raise bad_request(f"field label not supported: {key}")
        reqs.append((key, value, op != "!="))

    def match(obj: dict[str, Any]) -> bool:
        return all((_field_value(obj, k) == v) == eq for k, v, eq in reqs)

    return match


def combine(*matchers: Matcher | None) -> Matcher | None:
    ms = [m for m in matchers if m is not None]
    if not ms:
        return None
    if len(ms) == 1:
        return ms[0]
    return lambda obj: all(m(obj) for m in ms)


__all__ = ["Matcher", "combine", "field_matcher", "label_matcher"]
