"""What the fake server serves: core kinds from a table, custom kinds from the CRDs in a directory."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.fakeapi.schema import KindValidator, core_structure, core_validator, with_meta_structure

_CONTAINER = {
    "properties": {
        "ports": {
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
        },
        "env": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        "volumeMounts": {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["mountPath"]},
    }
}


def _map(*keys: str, items: dict[str, Any] | None = None) -> dict[str, Any]:
    node: dict[str, Any] = {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": list(keys)}
    if items:
        node["items"] = items
    return node


_CONDITIONS = _map("type")

#: Structural hints for the core kinds (list-map keys as the upstream types declare them);
#: anything not listed is a granular map / atomic list.
_CORE_STRUCTURE: dict[str, dict[str, Any]] = {
    "Pod": {
        "properties": {
            "spec": {
                "properties": {
                    "containers": _map("name", items=_CONTAINER),
                    "initContainers": _map("name", items=_CONTAINER),
                    "volumes": _map("name"),
                }
            },
            "status": {"properties": {"conditions": _CONDITIONS}},
        }
    },
    "Node": {
        "properties": {
            "status": {"properties": {"conditions": _CONDITIONS, "addresses": _map("type")}},
        }
    },
    "Service": {"properties": {"spec": {"properties": {"ports": _map("port", "protocol")}}}},
    "Namespace": {"properties": {"status": {"properties": {"conditions": _CONDITIONS}}}},
}


@dataclass
class ResourceType:
    """One served resource (all its served versions share one storage)."""

    group: str
    versions: list[str]
    kind: str
    plural: str
    singular: str
    namespaced: bool
    has_status: bool
    is_crd: bool
    short_names: list[str] = field(default_factory=list)
    #: version -> raw openAPIV3Schema (structural info for apply / strategic merge)
    structure: dict[str, dict[str, Any]] = field(default_factory=dict)
    _raw_schemas: dict[str, dict[str, Any]] = field(default_factory=dict)
    _validators: dict[str, KindValidator | None] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.group, self.plural)

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    def validator(self, version: str) -> KindValidator | None:
        """The (cached) validator of one served version (None: nothing to validate against)."""
        if version in self._validators:
            return self._validators[version]
        v: KindValidator | None
        if version in self._raw_schemas:
            v = KindValidator(self._raw_schemas[version])
        elif not self.is_crd:
            v = core_validator(self.kind, self.api_version(version))
        else:
            v = None
        self._validators[version] = v
        return v

    def structure_for(self, version: str) -> dict[str, Any]:
        return self.structure.get(version) or next(iter(self.structure.values()), {})


def _core(
    group: str, version: str, kind: str, plural: str, namespaced: bool, has_status: bool
) -> ResourceType:
    upstream = core_structure(kind, f"{group}/{version}" if group else version)
    structure = with_meta_structure(upstream if upstream is not None else _CORE_STRUCTURE.get(kind, {}))
    return ResourceType(
        group=group,
        versions=[version],
        kind=kind,
        plural=plural,
        singular=kind.lower(),
        namespaced=namespaced,
        has_status=has_status,
        is_crd=False,
        structure={version: structure},
    )


def core_types() -> list[ResourceType]:
    return [
        _core("", "v1", "Namespace", "namespaces", False, True),
        _core("", "v1", "Node", "nodes", False, True),
        _core("", "v1", "Pod", "pods", True, True),
        _core("", "v1", "Service", "services", True, True),
        _core("", "v1", "Secret", "secrets", True, False),
        _core("", "v1", "ConfigMap", "configmaps", True, False),
        _core("", "v1", "Event", "events", True, False),
        _core("coordination.k8s.io", "v1", "Lease", "leases", True, False),
        _core("events.k8s.io", "v1", "Event", "events", True, False),
    ]


_CACHE: dict[Path, list[ResourceType]] = {}


def crd_types(crds_dir: Path) -> list[ResourceType]:
    """Every CustomResourceDefinition found (recursively) under crds_dir (parsed once per process;
    the types are read-only apart from their cached validators, so servers share them)."""
    key = crds_dir.resolve()
    if key not in _CACHE:
        _CACHE[key] = _load_crds(key)
    return _CACHE[key]


def _load_crds(crds_dir: Path) -> list[ResourceType]:
    out: list[ResourceType] = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for path in sorted(crds_dir.rglob("*.yaml")):
        for doc in yaml.load_all(path.read_text(), Loader=loader):
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            served = [v for v in spec["versions"] if v.get("served")]
            # storage version first: it is the preferred version in discovery
            served.sort(key=lambda v: not v.get("storage"))
            names = spec["names"]
            rt = ResourceType(
                group=spec["group"],
                versions=[v["name"] for v in served],
                kind=names["kind"],
                plural=names["plural"],
                singular=names.get("singular", names["kind"].lower()),
                namespaced=spec["scope"] == "Namespaced",
                has_status=any("status" in (v.get("subresources") or {}) for v in served),
                is_crd=True,
                short_names=list(names.get("shortNames") or []),
            )
            for v in served:
                raw = (v.get("schema") or {}).get("openAPIV3Schema") or {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": True,
                }
                rt._raw_schemas[v["name"]] = raw
                rt.structure[v["name"]] = with_meta_structure(raw)
            out.append(rt)
    return out


class Registry:
    """Lookup by (group, plural) for HTTP and by (apiVersion, kind) for direct access."""

    def __init__(self, types: list[ResourceType]) -> None:
        self.types = types
        self._by_plural = {t.key: t for t in types}
        self._by_kind: dict[tuple[str, str], ResourceType] = {}
        for t in types:
            self._by_kind.setdefault((t.group, t.kind), t)

    def by_plural(self, group: str, plural: str) -> ResourceType | None:
        return self._by_plural.get((group, plural))

    def by_api_version(self, api_version: str, kind: str) -> tuple[ResourceType, str]:
        group, _, version = api_version.rpartition("/")
        rt = self._by_kind.get((group, kind))
        if rt is None or version not in rt.versions:
            raise KeyError(f"no resource for apiVersion={api_version!r} kind={kind!r}")
        return rt, version

    def groups(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for t in self.types:
            if t.group:
                vs = out.setdefault(t.group, [])
                for v in t.versions:
                    if v not in vs:
                        vs.append(v)
        return out
