"""Every recorded dashboard answer that carries demand or node state, parsed.

The expected values were read off the fixture files (shared/fixtures/ray, Ray 2.60.0, a head with
2 CPUs and 2 ``fakegpu``; load: 6 tasks x fakegpu 1, 1 task x fakegpu 8, 2 actors x fakegpu 1,
a STRICT_PACK PG of 2 x fakegpu 1, a PACK PG of 1 x {CPU 1, fakegpu 4}, request_resources 3 x
fakegpu 1; see the fixtures' README).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from autoscaler.core.snapshot import RayDemand
from autoscaler.signals import ray_parse as rp

V1_NODE = "a16ccebcc6f2e8100417393baeee43c935e3497bbc614837982b941d"
V2_NODE = "025d26f09e10aa69c5eef5e4872f1de9cfca6d10838267c433d48969"


def demand_set(demand: Iterable[RayDemand]) -> set[tuple]:
    return {
        (d.kind, tuple(sorted(d.shape.items())), d.count, d.infeasible, d.strategy, d.group) for d in demand
    }


def item_set(items: Iterable[rp.PendingItem]) -> set[tuple]:
    return {(i.kind, tuple(sorted(i.shape.items())), i.count, i.infeasible, i.strategy) for i in items}


# the autoscaler's aggregated report of the load (v1 and v2 print the same lines)
REPORT_ITEMS = {
    ("task", (("fakegpu", 1.0),), 2, None, ""),
    ("task", (("CPU", 1.0), ("fakegpu", 1.0)), 4, None, ""),
    ("task", (("CPU", 1.0), ("fakegpu", 8.0)), 1, None, ""),
    ("placement_group", (("fakegpu", 1.0),), 2, None, "STRICT_PACK"),
    ("placement_group", (("CPU", 1.0), ("fakegpu", 4.0)), 1, None, "PACK"),
}


# --------------------------------------------------------------------------- /api/cluster_status
def test_v1_cluster_status_json(load):
    report = rp.parse_cluster_status(load("cluster_status.json"))
    assert report is not None and report.autoscaler_version == "v1"
    assert item_set(report.items) == REPORT_ITEMS
    assert [(dict(r.shape), r.count) for r in report.requests] == [({"fakegpu": 1.0}, 3)]
    # usageByNode is camelCased by the dashboard (objectStoreMemory, node:InternalHead): restored
    total, available = report.node_usage[V1_NODE]
    assert total["CPU"] == 2.0 and total["fakegpu"] == 2.0
    assert total["object_store_memory"] == 7422334156.0
    assert total["node:__internal_head__"] == 1.0
    assert "objectStoreMemory" not in total and "node:InternalHead" not in total
    assert available["fakegpu"] == 0.0 and available["CPU"] == 0.0  # 2.0/2.0 in use


def test_v1_cluster_status_idle_has_no_demand_and_free_resources(load):
    report = rp.parse_cluster_status(load("cluster_status_idle.json"))
    assert report is not None
    assert report.items == () and report.requests == ()
    total, available = report.node_usage[V1_NODE]
    assert available["fakegpu"] == total["fakegpu"] == 2.0
    nodes = rp.merge_nodes(None, None, report.node_usage)
    assert len(nodes) == 1 and nodes[0].busy is False


def test_v2_cluster_status_json_is_null(load):
    assert rp.parse_cluster_status(load("cluster_status_v2.json")) is None


def test_v1_demand_judged_against_the_node_like_ray_does(load):
    """No flag in the v1 JSON: infeasible = no node's total can hold it (fakegpu 8 and 4 on a
    2-fakegpu node), which agrees with the INFEASIBLE/NO_RESOURCES the PG state API reported."""
    report = rp.parse_cluster_status(load("cluster_status.json"))
    nodes = rp.merge_nodes(rp.parse_nodes(load("nodes.json")), None, report.node_usage)
    assert demand_set(rp.to_demand(report.items, nodes)) == {
        ("task", (("fakegpu", 1.0),), 2, False, "", None),
        ("task", (("CPU", 1.0), ("fakegpu", 1.0)), 4, False, "", None),
        ("task", (("CPU", 1.0), ("fakegpu", 8.0)), 1, True, "", None),
        ("placement_group", (("fakegpu", 1.0),), 2, False, "STRICT_PACK", None),
        ("placement_group", (("CPU", 1.0), ("fakegpu", 4.0)), 1, True, "PACK", None),
    }
    pg_states = {
        (tuple(sorted(i.shape.items())), i.infeasible)
        for i in rp.parse_placement_groups(load("placement_groups.json")).items
    }
    judged = {
        (tuple(sorted(d.shape.items())), d.infeasible)
        for d in rp.to_demand(report.items, nodes)
        if d.kind == "placement_group"
    }
    assert judged == pg_states


# ------------------------------------------------------------------------------ ?format=1 text
@pytest.mark.parametrize(
    ("name", "version"), [("cluster_status_format1.json", "v1"), ("cluster_status_v2_format1.json", "v2")]
)
def test_format1_text(load, name, version):
    report = rp.parse_cluster_status_format1(load(name))
    assert report is not None and report.autoscaler_version == version
    assert item_set(report.items) == REPORT_ITEMS
    assert [(dict(r.shape), r.count) for r in report.requests] == [({"fakegpu": 1.0}, 3)]


@pytest.mark.parametrize(
    ("name", "version"),
    [
        ("ray_status_v1.txt", "v1"),
        ("ray_status_v1_verbose.txt", "v1"),
        ("ray_status_v2.txt", "v2"),
        ("ray_status_v2_verbose.txt", "v2"),
    ],
)
def test_cli_status_text_same_as_dashboard(ray_fixtures, name, version):
    """``ray status`` (and ``-v``, with its per-node block after the demand) parses to the same demand."""
    report = rp.parse_status_text((ray_fixtures / name).read_text())
    assert report is not None and report.autoscaler_version == version
    assert item_set(report.items) == REPORT_ITEMS
    assert sum(r.count for r in report.requests) == 3


def test_idle_status_text(ray_fixtures):
    report = rp.parse_status_text((ray_fixtures / "ray_status_idle.txt").read_text())
    assert report is not None and report.items == () and report.requests == ()


# ---------------------------------------------------------------------------------- state API
def test_pending_tasks_detail(load):
    lst = rp.parse_tasks(load("tasks_pending_detail.json"))
    # 7 rows: 5 normal tasks + 2 actor-creation tasks (left to the actor list)
    assert (lst.total, lst.returned, lst.truncated) == (7, 7, False)
    assert sorted((tuple(sorted(i.shape.items())), i.kind) for i in lst.items) == sorted(
        [((("CPU", 1.0), ("fakegpu", 1.0)), "task")] * 4 + [((("CPU", 1.0), ("fakegpu", 8.0)), "task")]
    )
    assert min(i.created_at for i in lst.items) == pytest.approx(1796019911.506)
    assert all(i.infeasible is None and i.group is None for i in lst.items)


def test_tasks_without_detail_are_refused(load):
    """``/api/v0/tasks`` without ``detail=1`` has no required_resources: a parse error, not zero demand."""
    with pytest.raises(rp.RayParseError, match="required_resources"):
        rp.parse_tasks(load("tasks.json"))


def test_pending_actors(load):
    lst = rp.parse_actors(load("actors.json"))
    assert lst.total == 3  # 2 GpuActor PENDING_CREATION + the ALIVE JobSupervisor
    assert [(i.kind, dict(i.shape)) for i in lst.items] == [("actor", {"fakegpu": 1.0})] * 2


def test_placement_groups_infeasible_vs_no_resources(load):
    lst = rp.parse_placement_groups(load("placement_groups.json"))
    by_id = {i.pg_id: i for i in lst.items}
    waiting = by_id["996a805af068eeb86b6645ba71c202000000"]  # pg_2x_fakegpu, NO_RESOURCES
    assert (dict(waiting.shape), waiting.count, waiting.infeasible) == ({"fakegpu": 1.0}, 2, False)
    never = by_id["ef563e50871f279a69921d22759302000000"]  # pg_infeasible_4_fakegpu, INFEASIBLE
    assert (dict(never.shape), never.count, never.infeasible) == ({"CPU": 1.0, "fakegpu": 4.0}, 1, True)
    assert waiting.created_at == pytest.approx(1796019911.5276499)
    # the state API has no strategy; the status text of the same load supplies it
    filled = rp.with_strategies(
        lst.items, rp.parse_cluster_status_format1(load("cluster_status_format1.json"))
    )
    assert {i.pg_id: i.strategy for i in filled} == {
        "996a805af068eeb86b6645ba71c202000000": "STRICT_PACK",
        "ef563e50871f279a69921d22759302000000": "PACK",
    }


def test_state_api_and_status_text_count_the_same_work(load):
    """Two independent sources of the same load agree on what waits (7 tasks/actors, 2 PGs)."""
    text = rp.parse_cluster_status_format1(load("cluster_status_format1.json"))
    tasks = rp.parse_tasks(load("tasks_pending_detail.json")).items
    actors = rp.parse_actors(load("actors.json")).items
    pgs = rp.parse_placement_groups(load("placement_groups.json")).items

    def fakegpus(items):
        return sum(i.shape.get("fakegpu", 0.0) * i.count for i in items)

    text_tasks = [i for i in text.items if i.kind == "task"]
    assert sum(i.count for i in text_tasks) == len(tasks) + len(actors) == 7
    assert fakegpus(text_tasks) == fakegpus(tasks) + fakegpus(actors) == 14.0
    assert fakegpus(i for i in text.items if i.kind == "placement_group") == fakegpus(pgs) == 6.0


# ------------------------------------------------------------------------------------- nodes
def test_state_nodes(load):
    (node,) = rp.parse_nodes(load("nodes.json"))
    assert node.node_id == V1_NODE and node.node_ip == "127.0.0.1"
    assert node.is_head and node.alive
    assert node.total["fakegpu"] == 2.0 and node.total["object_store_memory"] == 7422334156.0
    assert node.labels["ray.io/node-id"] == V1_NODE


def test_nodes_summary(load):
    summary = rp.parse_nodes_summary(load("nodes_view_summary.json"))
    s = summary[V2_NODE]
    assert s.is_head is True and s.alive is True
    assert s.instance_id is None  # bare `ray start`: RAY_CLOUD_INSTANCE_ID unset (KubeRay sets the Pod name)
    assert s.state == "ACTIVE" and s.idle_seconds == 0.0
    assert s.cpu_utilization == pytest.approx(0.081) and s.memory_utilization == pytest.approx(0.035)
    # nodeLogicalResources "2.0/2.0 CPU\n2.0/2.0 fakegpu\n0B/16.13GiB memory\n0B/6.91GiB object_store_memory"
    assert s.total["CPU"] == 2.0 and s.total["fakegpu"] == 2.0
    assert s.total["memory"] == pytest.approx(16.13 * 2**30)
    assert s.used["fakegpu"] == 2.0 and s.used["memory"] == 0.0
    (info,) = rp.merge_nodes(None, summary)
    assert info.busy is True and info.available["fakegpu"] == 0.0 and info.available["CPU"] == 0.0
    # coreWorkersStats: 2 drivers (0 running), 2 workers each running gpu_task (1 each), and the job's
    # supervisor actor running its entrypoint method (1): what executes on the node, drivers left out
    assert s.running_tasks == 3 and info.running_tasks == 3


def test_nodes_summary_running_tasks_tell_an_idle_actor_from_a_running_task(load):
    doc = load("nodes_view_summary.json")
    raylet = doc["data"]["summary"][0]["raylet"]
    workers = [cw for cw in raylet["coreWorkersStats"] if cw["workerType"] != "DRIVER"]
    for cw in workers:
        cw["numRunningTasks"] = "0"  # every actor/worker idle, resources still held
    assert rp.parse_nodes_summary(doc)[V2_NODE].running_tasks == 0
    workers[0]["numRunningTasks"] = 2
    assert rp.parse_nodes_summary(doc)[V2_NODE].running_tasks == 2
    del raylet["coreWorkersStats"]  # an older raylet, or none reported: unknown, never 0
    assert rp.parse_nodes_summary(doc)[V2_NODE].running_tasks is None
    raylet["coreWorkersStats"] = [{"workerType": "WORKER", "numRunningTasks": "-1"}]
    with pytest.raises(rp.RayParseError, match="numRunningTasks"):
        rp.parse_nodes_summary(doc)


def test_nodes_summary_without_logical_text_restores_camel_names(load):
    doc = load("nodes_view_summary.json")
    doc["data"]["nodeLogicalResources"] = {}
    names = rp.ResourceNames(rp.parse_nodes(load("nodes.json"))[0].total)
    s = rp.parse_nodes_summary(doc, names)[V2_NODE]
    # raylet.resourcesTotal is camelCased ("objectStoreMemory", "node:InternalHead")
    assert set(s.total) == {
        "node:127.0.0.1",
        "node:__internal_head__",
        "memory",
        "CPU",
        "object_store_memory",
        "fakegpu",
    }
    assert s.used is None


def test_v1_json_and_state_nodes_join(load):
    """Joined by node id: identity and totals from the state API, use from the v1 report."""
    report = rp.parse_cluster_status(load("cluster_status.json"))
    (node,) = rp.merge_nodes(rp.parse_nodes(load("nodes.json")), None, report.node_usage)
    assert (node.node_id, node.node_ip, node.is_head, node.alive) == (V1_NODE, "127.0.0.1", True, True)
    assert node.total["memory"] == 17318779700.0
    assert node.available["fakegpu"] == 0.0 and node.available["memory"] == 17318779700.0
    assert node.busy is True
    assert node.pod_name is None and node.idle_seconds is None  # only /nodes?view=summary has them


@pytest.mark.parametrize(
    "name",
    [
        "cluster_status.json",
        "cluster_status_v2_format1.json",
        "tasks_pending_detail.json",
        "actors.json",
        "placement_groups.json",
        "nodes.json",
        "nodes_view_summary.json",
    ],
)
def test_every_shape_rejects_its_own_mangled_forms(load, name):
    """Wrong types where the real answer has objects/lists are parse errors, never other exceptions."""
    parsers = {
        "cluster_status.json": rp.parse_cluster_status,
        "cluster_status_v2_format1.json": rp.parse_cluster_status_format1,
        "tasks_pending_detail.json": rp.parse_tasks,
        "actors.json": rp.parse_actors,
        "placement_groups.json": rp.parse_placement_groups,
        "nodes.json": rp.parse_nodes,
        "nodes_view_summary.json": rp.parse_nodes_summary,
    }
    parse = parsers[name]
    doc = load(name)
    for broken in (
        None,
        [],
        "x",
        {"result": True},
        {"result": False, "msg": "boom", "data": {}},
        {"result": True, "data": []},
        {"result": True, "data": {"result": []}},
    ):
        with pytest.raises(rp.RayParseError):
            parse(broken)
    # replace every leaf of the real answer, one at a time, with a value of another type:
    # either a parse error or an accepted answer, never another exception
    refused = 0
    for path in _paths(doc):
        for value in (["not", "a", "number"], {"x": {"y": 1}}, None, "text", -1, True):
            try:
                parse(_set(load(name), path, value))
            except rp.RayParseError:
                refused += 1
    assert refused > 0


def _paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):
            yield from _paths(v, (*prefix, i))
    else:
        yield prefix


def _set(doc, path, value):
    target = doc
    for p in path[:-1]:
        target = target[p]
    if path:
        target[path[-1]] = value
    return doc


def test_work_inside_a_placement_group_is_the_groups_demand(load):
    """A task or actor scheduled into a PG bundle waits for the PG; counting it again would
    double the demand.  The v1 report names such demand ``<resource>_group_[<index>_]<pg id>``."""
    pg_id = "996a805af068eeb86b6645ba71c202000000"
    tasks = load("tasks_pending_detail.json")
    tasks["data"]["result"]["result"][1]["placement_group_id"] = pg_id  # gpu_task_3 into the PG
    assert len(rp.parse_tasks(tasks).items) == 4
    actors = load("actors.json")
    actors["data"]["result"]["result"][0]["placement_group_id"] = pg_id
    assert len(rp.parse_actors(actors).items) == 1
    status = load("cluster_status.json")
    status["data"]["clusterStatus"]["loadMetricsReport"]["resourceDemand"] += [
        [{f"CPU_group_{pg_id}": 1.0, f"fakegpu_group_0_{pg_id}": 1.0}, 3],
        [{f"bundle_group_{pg_id}": 0.001}, 1],
    ]
    report = rp.parse_cluster_status(status)
    assert sum(i.count for i in report.items if i.kind == "task") == 7
