"""Pure parsers for the answers of a Ray head's dashboard (no I/O, no clock).

Each ``parse_*`` function takes one decoded answer (the JSON document, already ``json.loads``-ed)
and returns typed values, or raises :class:`RayParseError` when the shape is not the one Ray
2.4x-2.60 serves (see ``docs/ray-signal.md``).  The client in
``autoscaler.signals.ray_demand`` does the HTTP and puts the pieces together.

Vocabulary:

- a *pending item* is one unscheduled task, actor or placement group (or an aggregated line of
  ``ray status``) with the resources it asks for;
- ``infeasible`` on a pending item is Ray's own meaning: no *current* Ray node could ever hold it
  (``INFEASIBLE``), as opposed to waiting for resources that are in use (``NO_RESOURCES``).
  The scaler re-judges demand against the RayCluster's worker-group shapes
  (``autoscaler.core.policy.scaling.assign_demand``): a GPU task is infeasible to Ray while the
  GPU group has 0 workers.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from autoscaler.core.snapshot import DemandKind, RayDemand, ResourceMap, frozen_map

EPSILON = 1e-9
NODE_GROUP_LABEL = "ray.io/node-group"  # Ray sets it from RAY_NODE_TYPE_NAME = KubeRay's ray.io/group

# Resources that say nothing about work running on a node (they are never "used" by tasks in a
# way that marks a node busy, or they are markers).
_MARKER_PREFIXES = ("node:", "accelerator_type:")
_NON_WORK_RESOURCES = frozenset({"memory", "object_store_memory"})

# A resource Ray renames for a placement group bundle: ``CPU_group_<pgid>``, ``CPU_group_0_<pgid>``.
_PG_RESOURCE = re.compile(r"^(?P<name>.+)_group_(?:\d+_)?[0-9a-f]{16,}$")

# Ray built-in resource names that camelCasing mangles; the general fix is :class:`ResourceNames`.
BUILTIN_RESOURCES = ("CPU", "GPU", "TPU", "memory", "object_store_memory", "node:__internal_head__")

PENDING_PG_STATES = frozenset({"PENDING", "RESCHEDULING"})


class RayParseError(ValueError):
    """An answer that is not the shape the Ray dashboard serves (HTML, truncated, wrong types)."""


# ------------------------------------------------------------------------------------ data types
@dataclass(frozen=True, slots=True)
class PendingItem:
    """One unscheduled unit of Ray work (or one aggregated line of a status report)."""

    kind: DemandKind
    shape: ResourceMap  # per bundle
    count: int = 1  # bundles of ``shape``
    infeasible: bool | None = None  # None: the source does not say; judge against the nodes
    strategy: str = ""
    group: str | None = None  # from a ``ray.io/node-group`` label selector
    label_selector: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    created_at: float | None = None  # unix seconds
    pg_id: str | None = None  # placement group id (one RayDemand per PG and bundle shape)


@dataclass(frozen=True, slots=True)
class RayResourceRequest:
    """Bundles asked for with ``ray.autoscaler.sdk.request_resources`` (a floor, not work)."""

    shape: ResourceMap
    count: int


@dataclass(frozen=True, slots=True)
class ItemList:
    """A state API list answer: the items plus how complete it is."""

    items: tuple[PendingItem, ...]
    total: int  # items matching the filter on the head
    returned: int  # items in this answer (``limit`` truncates)
    warning: str = ""  # ``partial_failure_warning`` (some raylets did not answer)

    @property
    def truncated(self) -> bool:
        return self.returned < self.total


@dataclass(frozen=True, slots=True)
class StatusReport:
    """Demand from the autoscaler's report (``/api/cluster_status`` v1 JSON or ``?format=1`` text)."""

    items: tuple[PendingItem, ...]
    requests: tuple[RayResourceRequest, ...]
    # node id -> (total, available), only the v1 JSON has it (names restored from camelCase)
    node_usage: Mapping[str, tuple[ResourceMap, ResourceMap]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    autoscaler_version: str | None = None
    report_time: float | None = None  # unix seconds the autoscaler wrote it (v1 JSON ``time``)


@dataclass(frozen=True, slots=True)
class StateNode:
    """One node of ``/api/v0/nodes?detail=1`` (snake_case keys, real resource names)."""

    node_id: str
    node_ip: str
    is_head: bool
    alive: bool
    total: ResourceMap
    labels: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """One node of ``/nodes?view=summary`` (camelCase keys) plus its logical-resource line."""

    node_id: str
    node_ip: str
    is_head: bool | None
    alive: bool | None
    instance_id: str | None  # RAY_CLOUD_INSTANCE_ID: the Pod name on KubeRay
    node_type: str | None  # RAY_NODE_TYPE_NAME: the worker group on KubeRay
    labels: Mapping[str, str]
    total: ResourceMap  # from the logical-resources text when present, else camelCase-restored
    used: ResourceMap | None  # from the logical-resources text; None when the head gave none
    state: str | None  # raylet stateSnapshot.state: ACTIVE | IDLE | DRAINING
    idle_seconds: float | None
    cpu_utilization: float | None
    memory_utilization: float | None
    running_tasks: int | None = None  # numRunningTasks over its non-driver core workers; None: not reported


@dataclass(frozen=True, slots=True)
class RayNodeInfo:
    """One Ray node (head or worker) as the dashboard reports it."""

    node_id: str
    node_ip: str
    pod_name: str | None  # from the raylet's instanceId (RAY_CLOUD_INSTANCE_ID, set by KubeRay)
    is_head: bool
    alive: bool
    total: ResourceMap
    available: ResourceMap
    busy: bool | None  # tasks/actors hold some CPU/GPU/custom resource; None when unknown
    idle_seconds: float | None  # raylet idle duration (lags GCS by a report period)
    cpu_utilization: float | None  # 0-1
    memory_utilization: float | None  # 0-1
    group: str | None = None  # worker group (ray.io/node-group label or nodeTypeName)
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # tasks and actor methods executing on the node now (``/nodes?view=summary`` core workers):
    # 0 while ``busy`` means only idle actors hold its resources; None when not reported
    running_tasks: int | None = None


DEMAND_PARTS = frozenset({"tasks", "actors", "placement_groups"})  # the state API's lists of pending work


@dataclass(frozen=True, slots=True)
class RayPartError:
    """One part of the answer that could not be had. ``kind`` is bounded (metric label)."""

    part: str  # cluster_status | cluster_status_format1 | tasks | actors | placement_groups | nodes | nodes_summary
    kind: str  # timeout | connect | http_status | parse | auth | incomplete
    message: str


@dataclass(frozen=True, slots=True)
class RayStatus:
    """What the Ray signal knows about one RayCluster at ``observed_at``."""

    demand: tuple[RayDemand, ...]
    nodes: tuple[RayNodeInfo, ...]
    source: str  # cluster_status_v1 | state_api | cluster_status_format1
    autoscaler_version: str | None  # "v1" | "v2" | None (unknown, or no autoscaler)
    observed_at: float
    resource_requests: tuple[RayResourceRequest, ...] = ()
    oldest_pending_since: float | None = None  # creation time of the oldest pending item (state API)
    errors: tuple[RayPartError, ...] = ()

    @property
    def partial(self) -> bool:
        return bool(self.errors)

    @property
    def demand_partial(self) -> bool:
        """Whether ``demand`` may miss pending work: it came from the state API and one of its lists
        (tasks, actors, placement groups) failed, was cut short or came with a partial-failure warning.
        (The v1 report and the ``format=1`` text each give the whole demand at once.)"""
        return self.source == "state_api" and any(e.part in DEMAND_PARTS for e in self.errors)

    def pending_gpus(self, resource: str = "GPU") -> float:
        return sum(d.shape.get(resource, 0.0) * d.count for d in self.demand)


# ------------------------------------------------------------------------------------ camelCase
def to_camel_case(name: str) -> str:
    """Ray's ``dashboard.utils.to_camel_case``: split on ``_``, title-case every part but the first."""
    first, *rest = name.split("_")
    return first + "".join(part.title() for part in rest)


class ResourceNames:
    """Undo the dashboard's camelCasing of resource names.

    ``rest_response`` camelCases dict keys recursively, resource names included
    (``object_store_memory`` -> ``objectStoreMemory``, ``my_gpu`` -> ``myGpu``,
    ``node:__internal_head__`` -> ``node:InternalHead``).  The mapping is lossy, so it cannot be
    inverted by rule; instead every real name seen in an answer that keeps them (the state API,
    the ``nodeTypes`` and demand lists of ``/api/cluster_status``, the logical-resources text) is
    registered, and a mangled name is looked up by its camelCase form.  Names that are already
    real are returned unchanged; unknown mangled names stay as they are.
    """

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._by_camel: dict[str, str] = {}
        self.add(BUILTIN_RESOURCES)
        self.add(known)

    def add(self, names: Iterable[str]) -> None:
        for name in names:
            camel = to_camel_case(name)
            if camel != name:
                self._by_camel.setdefault(camel, name)

    def restore(self, name: str) -> str:
        return self._by_camel.get(name, name)

    def restore_map(self, resources: Mapping[str, Any]) -> dict[str, Any]:
        return {self.restore(k): v for k, v in resources.items()}


# ------------------------------------------------------------------------------------ helpers
def _require(cond: bool, what: str) -> None:
    if not cond:
        raise RayParseError(what)


def _dict(value: Any, what: str) -> dict[str, Any]:
    _require(isinstance(value, dict), f"{what}: expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    _require(isinstance(value, list), f"{what}: expected a list, got {type(value).__name__}")
    return value


def _num(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RayParseError(f"{what}: expected a number, got {type(value).__name__}")
    try:
        return float(value)
    except ValueError as e:
        raise RayParseError(f"{what}: not a number: {value!r}") from e


def _opt_num(value: Any, what: str) -> float | None:
    return None if value is None else _num(value, what)


def _count(value: Any, what: str) -> int:
    n = _num(value, what)
    _require(n >= 0 and n == int(n), f"{what}: expected a count, got {value!r}")
    return int(n)


def _shape(value: Any, what: str) -> dict[str, float]:
    """A resource map: names -> positive amounts (zeros dropped)."""
    out: dict[str, float] = {}
    for k, v in _dict(value, what).items():
        amount = _num(v, f"{what}[{k}]")
        if amount > 0:
            out[str(k)] = amount
    return out


def _labels(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    return {str(k): str(v) for k, v in _dict(value, what).items()}


def unwrap(doc: Any, what: str) -> Any:
    """The ``data`` of a dashboard ``rest_response`` (``{"result": true, "msg", "data"}``)."""
    d = _dict(doc, what)
    _require("result" in d and "data" in d, f"{what}: not a dashboard answer (no result/data)")
    if d["result"] is not True:
        raise RayParseError(f"{what}: the head answered result=false: {str(d.get('msg', ''))[:200]}")
    return d["data"]


def is_pg_resource(name: str) -> bool:
    """``CPU_group_<pgid>``-style names: the demand of a task inside a placement group."""
    return name == "bundle" or _PG_RESOURCE.match(name) is not None


def group_from_selector(selector: Mapping[str, str]) -> str | None:
    """The worker group a label selector pins work to (``ray.io/node-group: g`` or ``in(g)``)."""
    value = selector.get(NODE_GROUP_LABEL)
    if not value:
        return None
    value = value.strip()
    if value.startswith("in(") and value.endswith(")"):
        options = [v.strip() for v in value[3:-1].split(",") if v.strip()]
        return options[0] if len(options) == 1 else None
    if value.startswith("!"):
        return None
    return value


def labels_match(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Ray label-selector semantics: ``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``."""
    for key, raw in selector.items():
        value = raw.strip()
        negate = value.startswith("!")
        if negate:
            value = value[1:].strip()
        if value.startswith("in(") and value.endswith(")"):
            options = {v.strip() for v in value[3:-1].split(",") if v.strip()}
        else:
            options = {value}
        have = labels.get(key)
        hit = have is not None and have in options
        if hit == negate:
            return False
    return True


def shape_fits(shape: Mapping[str, float], capacity: Mapping[str, float], times: int = 1) -> bool:
    return all(capacity.get(r, 0.0) + EPSILON >= q * times for r, q in shape.items() if q > 0)


def is_work_resource(name: str) -> bool:
    """CPU, GPU and custom resources; not memory, object store or marker resources."""
    return name not in _NON_WORK_RESOURCES and not name.startswith(_MARKER_PREFIXES)


# ---------------------------------------------------------------------------- /api/cluster_status
def _demand_list(value: Any, what: str) -> list[tuple[dict[str, float], int]]:
    out = []
    for i, entry in enumerate(_list(value, what) if value is not None else []):
        pair = _list(entry, f"{what}[{i}]")
        _require(len(pair) == 2, f"{what}[{i}]: expected [bundle, count]")
        out.append((_shape(pair[0], f"{what}[{i}][0]"), _count(pair[1], f"{what}[{i}][1]")))
    return out


def _task_items(pairs: Iterable[tuple[dict[str, float], int]]) -> list[PendingItem]:
    items = []
    for shape, n in pairs:
        if not shape or n <= 0 or any(is_pg_resource(r) for r in shape):
            continue  # tasks waiting inside a placement group: the PG is the demand
        items.append(PendingItem(kind="task", shape=frozen_map(shape), count=n))
    return items


def _pg_items(pgs: Iterable[tuple[str, list[tuple[dict[str, float], int]], int]]) -> list[PendingItem]:
    """One item per placement group and bundle shape, as the state API path gives them."""
    items = []
    for strategy, bundles, n in pgs:
        for i in range(n):
            for shape, k in bundles:
                if shape and k > 0:
                    items.append(
                        PendingItem(
                            kind="placement_group",
                            shape=frozen_map(shape),
                            count=k,
                            strategy=strategy,
                            pg_id=f"#{len(items)}-{i}",
                        )
                    )
    return items


def parse_cluster_status(doc: Any) -> StatusReport | None:
    """``GET /api/cluster_status``: the autoscaler v1 report, or None when it is all null (v2).

    Under autoscaler v2 (or with no autoscaler) ``clusterStatus`` is null: the caller falls
    through to the state API.  ``resourceDemand`` mixes tasks and actors and says nothing about
    infeasibility (``infeasible`` stays None).  Dicts inside list-of-lists keep their real key
    names; ``usage``/``usageByNode`` are camelCased and restored through :class:`ResourceNames`.
    """
    data = _dict(unwrap(doc, "cluster_status"), "cluster_status.data")
    _require("clusterStatus" in data, "cluster_status: no clusterStatus field")
    status = data["clusterStatus"]
    if status is None:
        return None
    status = _dict(status, "clusterStatus")
    lm = _dict(status.get("loadMetricsReport"), "clusterStatus.loadMetricsReport")

    task_pairs = _demand_list(lm.get("resourceDemand"), "resourceDemand")
    request_pairs = _demand_list(lm.get("requestDemand"), "requestDemand")
    pgs = []
    for i, entry in enumerate(_list(lm.get("pgDemand") or [], "pgDemand")):
        pair = _list(entry, f"pgDemand[{i}]")
        _require(len(pair) == 2, f"pgDemand[{i}]: expected [pg, count]")
        pg = _dict(pair[0], f"pgDemand[{i}][0]")
        bundles = _demand_list(pg.get("bundles"), f"pgDemand[{i}].bundles")
        pgs.append((str(pg.get("strategy") or ""), bundles, _count(pair[1], f"pgDemand[{i}][1]")))

    names = ResourceNames()
    for shape, _ in task_pairs + request_pairs:
        names.add(shape)
    for _, bundles, _ in pgs:
        for shape, _ in bundles:
            names.add(shape)
    for i, entry in enumerate(_list(lm.get("nodeTypes") or [], "nodeTypes")):
        names.add(_dict(_list(entry, f"nodeTypes[{i}]")[0], f"nodeTypes[{i}][0]"))

    usage: dict[str, tuple[ResourceMap, ResourceMap]] = {}
    for node_id, res in _dict(lm.get("usageByNode") or {}, "usageByNode").items():
        total: dict[str, float] = {}
        avail: dict[str, float] = {}
        for name, pair in _dict(res, f"usageByNode[{node_id}]").items():
            used_total = _list(pair, f"usageByNode[{node_id}][{name}]")
            _require(len(used_total) == 2, f"usageByNode[{node_id}][{name}]: expected [used, total]")
            used, tot = (_num(x, f"usageByNode[{node_id}][{name}]") for x in used_total)
            real = names.restore(name)
            total[real] = tot
            avail[real] = max(0.0, tot - used)
        usage[str(node_id)] = (frozen_map(total), frozen_map(avail))

    return StatusReport(
        items=(*_task_items(task_pairs), *_pg_items(pgs)),
        requests=tuple(RayResourceRequest(frozen_map(s), n) for s, n in request_pairs if s and n > 0),
        node_usage=frozen_map(usage),
        autoscaler_version="v1",
        report_time=_opt_num(status.get("time"), "clusterStatus.time"),
    )


_TASK_LINE = re.compile(r"^\s*(?P<bundle>\{.*\}):\s*(?P<count>\d+)\+? pending tasks/actors")
_PG_LINE = re.compile(
    r"^\s*(?P<bundles>.*) \((?P<strategy>[A-Z_]+)\):\s*(?P<count>\d+)\+? pending placement groups"
)
_PG_BUNDLE = re.compile(r"(\{[^{}]*\}) \* (\d+)")
_REQUEST_LINE = re.compile(r"^\s*(?P<bundle>\{.*\}):\s*(?P<count>\d+) from request_resources\(\)")


def _literal_shape(text: str, what: str) -> dict[str, float]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError) as e:
        raise RayParseError(f"{what}: not a resource dict: {text[:120]!r}") from e
    return _shape(value, what)


def parse_status_text(text: str) -> StatusReport | None:
    """The ``ray status`` text (``/api/cluster_status?format=1`` or the CLI), v1 or v2 layout.

    Returns None when the text holds no report (no autoscaler has written one yet).  Pending
    demand lines carry no infeasibility flag and no task/actor split: every line is a ``task``
    item with ``infeasible=None``.  The v2 layout is told by its ``Idle:`` node section.
    """
    lines = text.splitlines()
    if not any(line.strip() == "Pending Demands:" for line in lines):
        return None
    version = "v2" if any(line.strip() == "Idle:" for line in lines) else "v1"
    section = ""
    task_pairs: list[tuple[dict[str, float], int]] = []
    request_pairs: list[tuple[dict[str, float], int]] = []
    pgs: list[tuple[str, list[tuple[dict[str, float], int]], int]] = []
    for n, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped.endswith(":") and not line.startswith(" "):
            section = stripped[:-1]
            continue
        if not stripped or stripped.startswith("(") or not line.startswith(" "):
            if (
                not line.startswith(" ")
                and stripped
                and section in ("Pending Demands", "From request_resources")
            ):
                section = ""  # a following block (e.g. the verbose per-node report)
            continue
        if section == "From request_resources":
            m = _REQUEST_LINE.match(line)
            _require(m is not None, f"status text line {n}: unexpected request line {stripped[:120]!r}")
            request_pairs.append((_literal_shape(m["bundle"], f"line {n}"), int(m["count"])))
        elif section == "Pending Demands":
            m = _PG_LINE.match(line)
            if m is not None and "pending placement groups" in line:
                bundles = [
                    (_literal_shape(b, f"line {n}"), int(k)) for b, k in _PG_BUNDLE.findall(m["bundles"])
                ]
                _require(bool(bundles), f"status text line {n}: no bundles in {stripped[:120]!r}")
                pgs.append((m["strategy"], bundles, int(m["count"])))
                continue
            m = _TASK_LINE.match(line)
            _require(m is not None, f"status text line {n}: unexpected demand line {stripped[:120]!r}")
            task_pairs.append((_literal_shape(m["bundle"], f"line {n}"), int(m["count"])))
    return StatusReport(
        items=(*_task_items(task_pairs), *_pg_items(pgs)),
        requests=tuple(RayResourceRequest(frozen_map(s), k) for s, k in request_pairs if s and k > 0),
        autoscaler_version=version,
    )


def parse_cluster_status_format1(doc: Any) -> StatusReport | None:
    """``GET /api/cluster_status?format=1``: ``data.clusterStatus`` is the ``ray status`` text."""
    data = _dict(unwrap(doc, "cluster_status_format1"), "cluster_status_format1.data")
    _require("clusterStatus" in data, "cluster_status_format1: no clusterStatus field")
    text = data["clusterStatus"]
    if text is None:
        return None
    _require(isinstance(text, str), "cluster_status_format1: clusterStatus is not text")
    return parse_status_text(text)


# ------------------------------------------------------------------------------------ state API
def _state_list(doc: Any, what: str) -> tuple[list[Any], int, int, str]:
    data = _dict(unwrap(doc, what), f"{what}.data")
    res = _dict(data.get("result"), f"{what}.data.result")
    rows = _list(res.get("result"), f"{what}.data.result.result")
    returned = len(rows)
    total = _count(res.get("total", returned), f"{what}.total")
    # num_filtered: rows left after the filter; the best count of what matched
    matched = _count(res.get("num_filtered", total), f"{what}.num_filtered")
    warning = res.get("partial_failure_warning") or ""
    return rows, max(matched, returned), returned, str(warning)


def _ms(value: Any, what: str) -> float | None:
    v = _opt_num(value, what)
    return None if v is None or v <= 0 else v / 1000.0


def parse_tasks(doc: Any) -> ItemList:
    """``/api/v0/tasks?...state=PENDING_NODE_ASSIGNMENT&detail=1``: pending normal tasks.

    Actor-creation tasks are left to :func:`parse_actors`, tasks inside a placement group to the
    PG itself; tasks in other states are ignored (the filter may not have been applied).
    """
    rows, total, returned, warning = _state_list(doc, "tasks")
    items = []
    for i, row in enumerate(rows):
        t = _dict(row, f"tasks[{i}]")
        if t.get("state") != "PENDING_NODE_ASSIGNMENT" or t.get("type") == "ACTOR_CREATION_TASK":
            continue
        if t.get("placement_group_id"):
            continue
        item = _pending_item(t, f"tasks[{i}]", "task",
                             created_at=_ms(t.get("creation_time_ms"), f"tasks[{i}].creation_time_ms"))
        if item is not None:
            items.append(item)
    return ItemList(tuple(items), total, returned, warning)


def _pending_item(row: Mapping[str, Any], where: str, kind: DemandKind, created_at: float | None = None) -> PendingItem | None:
    """A pending task or actor row of the state API -> PendingItem (None when it asks for nothing)."""
    _require("required_resources" in row, f"{where}: no required_resources (detail=1 missing?)")
    shape = _shape(row.get("required_resources") or {}, f"{where}.required_resources")
    if not shape:
        return None
    selector = _labels(row.get("label_selector"), f"{where}.label_selector")
    return PendingItem(
        kind=kind,
        shape=frozen_map(shape),
        label_selector=frozen_map(selector),
        group=group_from_selector(selector),
        created_at=created_at,
    )


def parse_actors(doc: Any) -> ItemList:
    """``/api/v0/actors?detail=1``: actors in ``PENDING_CREATION`` (outside placement groups)."""
    rows, total, returned, warning = _state_list(doc, "actors")
    items = []
    for i, row in enumerate(rows):
        a = _dict(row, f"actors[{i}]")
        if a.get("state") != "PENDING_CREATION" or a.get("placement_group_id"):
            continue
        item = _pending_item(a, f"actors[{i}]", "actor")
        if item is not None:
            items.append(item)
    return ItemList(tuple(items), total, returned, warning)


def parse_placement_groups(doc: Any) -> ItemList:
    """``/api/v0/placement_groups?detail=1``: PENDING / RESCHEDULING groups and their unplaced bundles.

    ``stats.scheduling_state`` tells ``INFEASIBLE`` (no node could ever hold it) from
    ``NO_RESOURCES``/``QUEUED``/... (waiting); when it is missing, ``infeasible`` stays None.
    """
    rows, total, returned, warning = _state_list(doc, "placement_groups")
    items: list[PendingItem] = []
    for i, row in enumerate(rows):
        pg = _dict(row, f"placement_groups[{i}]")
        if not isinstance(pg.get("state"), str) or pg["state"] not in PENDING_PG_STATES:
            continue
        stats = pg.get("stats")
        stats = _dict(stats, f"placement_groups[{i}].stats") if stats is not None else {}
        sched = stats.get("scheduling_state")
        infeasible = None if sched is None else sched == "INFEASIBLE"
        created_ns = _opt_num(stats.get("creation_request_received_ns"), f"placement_groups[{i}].stats")
        created = created_ns / 1e9 if created_ns else None
        # Ray 2.60's state API rows carry no strategy; ``with_strategies`` fills it from the status text
        strategy = str(pg.get("strategy") or pg.get("placement_strategy") or "")
        pg_id = str(pg.get("placement_group_id") or f"#{i}")
        by_shape: dict[tuple[tuple[str, float], ...], tuple[int, dict[str, str]]] = {}
        for j, b in enumerate(_list(pg.get("bundles"), f"placement_groups[{i}].bundles")):
            bundle = _dict(b, f"placement_groups[{i}].bundles[{j}]")
            if bundle.get("node_id"):
                continue  # already placed (RESCHEDULING keeps the placed ones)
            shape = _shape(bundle.get("unit_resources") or {}, f"placement_groups[{i}].bundles[{j}]")
            if not shape:
                continue
            key = tuple(sorted(shape.items()))
            sel = _labels(bundle.get("label_selector"), f"placement_groups[{i}].bundles[{j}].label_selector")
            n, _ = by_shape.get(key, (0, sel))
            by_shape[key] = (n + 1, sel)
        for key, (n, sel) in by_shape.items():
            items.append(
                PendingItem(
                    kind="placement_group",
                    shape=frozen_map(dict(key)),
                    count=n,
                    infeasible=infeasible,
                    strategy=strategy,
                    label_selector=frozen_map(sel),
                    group=group_from_selector(sel),
                    created_at=created,
                    pg_id=pg_id,
                )
            )
    return ItemList(tuple(items), total, returned, warning)


def parse_nodes(doc: Any) -> tuple[StateNode, ...]:
    """``/api/v0/nodes?detail=1``: id, IP, head flag, ALIVE/DEAD, total resources, labels."""
    rows, _, _, _ = _state_list(doc, "nodes")
    nodes = []
    for i, row in enumerate(rows):
        n = _dict(row, f"nodes[{i}]")
        _require(isinstance(n.get("node_id"), str) and n["node_id"], f"nodes[{i}]: no node_id")
        nodes.append(
            StateNode(
                node_id=n["node_id"],
                node_ip=str(n.get("node_ip") or ""),
                is_head=bool(n.get("is_head_node")),
                alive=n.get("state") == "ALIVE",
                total=frozen_map(_shape(n.get("resources_total") or {}, f"nodes[{i}].resources_total")),
                labels=frozen_map(_labels(n.get("labels"), f"nodes[{i}].labels")),
            )
        )
    return tuple(nodes)


_UNITS = {
    "B": 1.0,
    "KiB": 2.0**10,
    "MiB": 2.0**20,
    "GiB": 2.0**30,
    "TiB": 2.0**40,
    "PiB": 2.0**50,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "TB": 1e12,
}
_QUANTITY = re.compile(r"^(?P<num>[0-9.eE+-]+)(?P<unit>[A-Za-z]*)$")


def _quantity(text: str, what: str) -> float:
    m = _QUANTITY.match(text.strip())
    _require(m is not None and (m["unit"] in _UNITS or m["unit"] == ""), f"{what}: bad quantity {text!r}")
    return _num(m["num"], what) * (_UNITS[m["unit"]] if m["unit"] else 1.0)


def parse_logical_resources(text: str) -> tuple[dict[str, float], dict[str, float]]:
    """A node's ``nodeLogicalResources`` text (``2.0/2.0 CPU\\n0B/16.13GiB memory``) -> (total, used).

    Memory amounts are rounded by Ray's formatting; CPU/GPU/custom counts are exact.
    """
    total: dict[str, float] = {}
    used_by: dict[str, float] = {}
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        amounts, _, name = line.partition(" ")
        used_s, slash, total_s = amounts.partition("/")
        _require(bool(slash) and bool(name), f"logical resources line {n}: {line[:120]!r}")
        used = _quantity(used_s, f"logical resources line {n}")
        tot = _quantity(total_s, f"logical resources line {n}")
        total[name.strip()] = tot
        used_by[name.strip()] = used
    return total, used_by


def parse_nodes_summary(doc: Any, names: ResourceNames | None = None) -> dict[str, NodeSummary]:
    """``GET /nodes?view=summary`` (camelCase): per node host stats, raylet state, Pod name.

    ``cpu`` is a percentage, ``mem`` is psutil's ``[total, available, percent, used]``.
    """
    names = names or ResourceNames()
    data = _dict(unwrap(doc, "nodes_summary"), "nodes_summary.data")
    logical = _dict(data.get("nodeLogicalResources") or {}, "nodeLogicalResources")
    out: dict[str, NodeSummary] = {}
    for i, row in enumerate(_list(data.get("summary"), "nodes_summary.summary")):
        s = _dict(row, f"summary[{i}]")
        raylet = _dict(s.get("raylet") or {}, f"summary[{i}].raylet")
        node_id = raylet.get("nodeId")
        if not isinstance(node_id, str) or not node_id:
            continue  # a node whose raylet has not reported yet
        total: dict[str, float]
        used: dict[str, float] | None
        text = logical.get(node_id)
        if isinstance(text, str):
            total, used = parse_logical_resources(text)
            names.add(total)
        else:
            total = names.restore_map(
                _shape(raylet.get("resourcesTotal") or {}, f"summary[{i}].resourcesTotal")
            )
            used = None
        snap = raylet.get("stateSnapshot")
        snap = _dict(snap, f"summary[{i}].stateSnapshot") if snap is not None else {}
        state = snap.get("state")
        idle_ms = _opt_num(snap.get("idleDurationMs"), f"summary[{i}].idleDurationMs")
        cpu = _opt_num(s.get("cpu"), f"summary[{i}].cpu")
        mem = s.get("mem")
        mem_util = None
        if isinstance(mem, list) and len(mem) >= 3:
            mem_util = _num(mem[2], f"summary[{i}].mem[2]") / 100.0
        alive = raylet.get("state")
        running = _running_tasks(raylet.get("coreWorkersStats"), f"summary[{i}].coreWorkersStats")
        out[node_id] = NodeSummary(
            node_id=node_id,
            node_ip=str(raylet.get("nodeManagerAddress") or s.get("ip") or ""),
            is_head=raylet.get("isHeadNode") if isinstance(raylet.get("isHeadNode"), bool) else None,
            alive=None if alive is None else alive == "ALIVE",
            instance_id=str(raylet["instanceId"]) if raylet.get("instanceId") else None,
            node_type=str(raylet["nodeTypeName"]) if raylet.get("nodeTypeName") else None,
            labels=frozen_map(_labels(raylet.get("labels"), f"summary[{i}].labels")),
            total=frozen_map(total),
            used=None if used is None else frozen_map(used),
            state=str(state) if state else None,
            idle_seconds=None if idle_ms is None else idle_ms / 1000.0,
            cpu_utilization=None if cpu is None else cpu / 100.0,
            memory_utilization=mem_util,
            running_tasks=running,
        )
    return out


def _running_tasks(value: Any, what: str) -> int | None:
    """Tasks and actor methods executing on a node: ``numRunningTasks`` summed over its core workers
    that are not drivers (a driver "runs" nothing that holds the node's resources).  An idle actor's
    worker reports 0; a worker running a task or an actor method reports 1 or more.  None when the
    raylet gave no core-worker list (then nobody can tell an idle actor from a busy one)."""
    if value is None:
        return None
    total = 0
    for j, row in enumerate(_list(value, what)):
        cw = _dict(row, f"{what}[{j}]")
        if cw.get("workerType") == "DRIVER":
            continue
        total += _count(cw.get("numRunningTasks", 0), f"{what}[{j}].numRunningTasks")
    return total


# ------------------------------------------------------------------------------ putting together
def merge_nodes(
    state_nodes: Iterable[StateNode] | None,
    summaries: Mapping[str, NodeSummary] | None,
    usage: Mapping[str, tuple[ResourceMap, ResourceMap]] | None = None,
) -> tuple[RayNodeInfo, ...]:
    """Join the node sources by node id.  Totals: state API > logical text > v1 usage; in use:
    v1 usage (exact) > logical text; ``available = total - used``.  ``busy`` from the work
    resources in use, else from the raylet's IDLE/ACTIVE state."""
    by_id: dict[str, StateNode] = {n.node_id: n for n in state_nodes or ()}
    summaries = summaries or {}
    usage = usage or {}
    ids = (
        list(by_id)
        + [k for k in summaries if k not in by_id]
        + [k for k in usage if k not in by_id and k not in summaries]
    )
    out = []
    for node_id in ids:
        sn, sm, us = by_id.get(node_id), summaries.get(node_id), usage.get(node_id)
        total: Mapping[str, float] = (
            sn.total if sn is not None else sm.total if sm is not None else us[0] if us is not None else {}
        )
        used: Mapping[str, float] | None = None
        if us is not None:
            used = {r: max(0.0, t - us[1].get(r, t)) for r, t in us[0].items()}
        elif sm is not None and sm.used is not None:
            used = sm.used
        available = None if used is None else {r: max(0.0, t - used.get(r, 0.0)) for r, t in total.items()}
        busy: bool | None = None
        if available is not None:
            busy = any(is_work_resource(r) and available.get(r, 0.0) + EPSILON < q for r, q in total.items())
        elif sm is not None and sm.state:
            busy = sm.state != "IDLE"
        labels = dict(sm.labels) if sm is not None else {}
        if sn is not None:
            labels.update(sn.labels)
        group = labels.get(NODE_GROUP_LABEL) or (sm.node_type if sm is not None else None)
        out.append(
            RayNodeInfo(
                node_id=node_id,
                node_ip=sn.node_ip if sn is not None else sm.node_ip if sm is not None else "",
                pod_name=sm.instance_id if sm is not None else None,
                is_head=sn.is_head if sn is not None else bool(sm.is_head) if sm is not None else False,
                alive=sn.alive if sn is not None else (sm.alive is not False) if sm is not None else True,
                total=frozen_map(total),
                available=frozen_map(available if available is not None else {}),
                busy=busy,
                idle_seconds=sm.idle_seconds if sm is not None else None,
                cpu_utilization=sm.cpu_utilization if sm is not None else None,
                memory_utilization=sm.memory_utilization if sm is not None else None,
                group=group or None,
                labels=frozen_map(labels),
                running_tasks=sm.running_tasks if sm is not None else None,
            )
        )
    return tuple(out)


def _fits_somewhere(item: PendingItem, nodes: Iterable[RayNodeInfo]) -> bool:
    times = item.count if item.kind == "placement_group" and item.strategy == "STRICT_PACK" else 1
    return any(
        n.alive and labels_match(item.label_selector, n.labels) and shape_fits(item.shape, n.total, times)
        for n in nodes
    )


def to_demand(items: Iterable[PendingItem], nodes: tuple[RayNodeInfo, ...] | None) -> tuple[RayDemand, ...]:
    """Aggregate pending items into ``RayDemand``s.

    Tasks and actors with the same (kind, shape, infeasible, group) are summed; placement groups
    stay one entry per group and bundle shape.  Where the source gave no infeasibility flag it
    is judged as Ray does: infeasible when no alive node's *total* resources (and labels) could
    hold it.  Without nodes that judgement is impossible and such items count as feasible.
    """
    counts: dict[tuple[Any, ...], int] = {}
    for it in items:
        infeasible = it.infeasible
        if infeasible is None:
            infeasible = False if not nodes else not _fits_somewhere(it, nodes)
        per_pg = it.pg_id if it.kind == "placement_group" else None
        key = (it.kind, tuple(sorted(it.shape.items())), infeasible, it.strategy, it.group, per_pg)
        counts[key] = counts.get(key, 0) + it.count
    return tuple(
        RayDemand(
            kind=kind, shape=frozen_map(dict(shape)), count=n, infeasible=inf, strategy=strategy, group=group
        )
        for (kind, shape, inf, strategy, group, _), n in counts.items()
    )


def with_strategies(items: Iterable[PendingItem], report: StatusReport | None) -> tuple[PendingItem, ...]:
    """Fill the strategy of state-API placement groups (Ray 2.60 omits it) from the status text,
    matching on (bundle shape, bundle count) when that names exactly one strategy."""
    items = tuple(items)
    if report is None:
        return items
    known: dict[tuple[Any, ...], set[str]] = {}
    for r in report.items:
        if r.kind == "placement_group" and r.strategy:
            known.setdefault((tuple(sorted(r.shape.items())), r.count), set()).add(r.strategy)
    out = []
    for it in items:
        if it.kind == "placement_group" and not it.strategy:
            options = known.get((tuple(sorted(it.shape.items())), it.count), set())
            if len(options) == 1:
                it = replace(it, strategy=next(iter(options)))
        out.append(it)
    return tuple(out)
