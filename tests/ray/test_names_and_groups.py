"""The camelCase quirk (against Ray's own function), label selectors, and demand -> worker groups."""

from __future__ import annotations

import pytest
from ray.dashboard.utils import to_camel_case as ray_to_camel_case
from ray.dashboard.utils import to_google_style

from autoscaler.signals import ray_parse as rp

NAMES = [
    "CPU",
    "GPU",
    "memory",
    "object_store_memory",
    "node:__internal_head__",
    "node:10.0.0.1",
    "accelerator_type:A100",
    "accelerator_type:A10G",
    "my_gpu",
    "nvidia_a100_80gb",
    "TPU-v4-8-head",
    "custom__double",
    "x_",
]


@pytest.mark.parametrize("name", NAMES)
def test_camel_case_is_rays(name):
    assert rp.to_camel_case(name) == ray_to_camel_case(name)


def test_resource_names_undo_rays_own_mangling():
    """Run Ray's recursive ``to_google_style`` (what ``rest_response`` does) over real names,
    then restore them from the names an unmangled answer carries."""
    real = {name: float(i + 1) for i, name in enumerate(NAMES)}
    mangled = to_google_style({"usage": real})["usage"]
    assert mangled != real  # the quirk is real: e.g. my_gpu -> myGpu
    assert "myGpu" in mangled and "objectStoreMemory" in mangled and "node:InternalHead" in mangled
    names = rp.ResourceNames(real)
    assert names.restore_map(mangled) == real
    # without the real names only the built-ins come back; unknown mangled names stay visible
    bare = rp.ResourceNames().restore_map(mangled)
    assert bare["object_store_memory"] == real["object_store_memory"]
    assert bare["node:__internal_head__"] == real["node:__internal_head__"]
    assert "myGpu" in bare and "my_gpu" not in bare


def test_v1_usage_restored_with_names_from_demand_lists():
    """In /api/cluster_status the list-of-lists (resourceDemand, nodeTypes) keep real names; the
    usage dicts do not.  The parser learns the names from the former to fix the latter."""
    real_node = {"CPU": 8.0, "GPU": 4.0, "my_gpu": 4.0, "object_store_memory": 1e9}
    doc = {
        "result": True,
        "msg": "Got cluster status.",
        "data": to_google_style(
            {
                "autoscaling_status": "x",
                "autoscaling_error": None,
                "cluster_status": {
                    "load_metrics_report": {
                        "usage": {k: [0.0, v] for k, v in real_node.items()},
                        "usage_by_node": {
                            "abc": {k: [1.0 if k == "my_gpu" else 0.0, v] for k, v in real_node.items()}
                        },
                        "resource_demand": [],
                        "pg_demand": [],
                        "request_demand": [],
                    },
                },
            }
        ),
    }
    doc["data"]["clusterStatus"]["loadMetricsReport"]["resourceDemand"] = [[{"my_gpu": 1.0}, 2]]
    doc["data"]["clusterStatus"]["loadMetricsReport"]["nodeTypes"] = [[real_node, 1]]
    report = rp.parse_cluster_status(doc)
    total, available = report.node_usage["abc"]
    assert dict(total) == real_node
    assert available["my_gpu"] == 3.0
    assert [(dict(i.shape), i.count) for i in report.items] == [({"my_gpu": 1.0}, 2)]


@pytest.mark.parametrize(
    ("selector", "labels", "match"),
    [
        ({"ray.io/node-group": "gpu"}, {"ray.io/node-group": "gpu"}, True),
        ({"ray.io/node-group": "gpu"}, {"ray.io/node-group": "cpu"}, False),
        ({"ray.io/node-group": "gpu"}, {}, False),
        ({"ray.io/node-group": "!gpu"}, {"ray.io/node-group": "cpu"}, True),
        ({"ray.io/node-group": "!gpu"}, {}, True),
        ({"ray.io/accelerator-type": "in(A100,H100)"}, {"ray.io/accelerator-type": "H100"}, True),
        ({"ray.io/accelerator-type": "!in(A100,H100)"}, {"ray.io/accelerator-type": "H100"}, False),
        ({}, {"anything": "x"}, True),
    ],
)
def test_label_selectors(selector, labels, match):
    assert rp.labels_match(selector, labels) is match


@pytest.mark.parametrize(
    ("selector", "group"),
    [
        ({"ray.io/node-group": "gpu"}, "gpu"),
        ({"ray.io/node-group": "in(gpu)"}, "gpu"),
        ({"ray.io/node-group": "in(a,b)"}, None),
        ({"ray.io/node-group": "!gpu"}, None),
        ({}, None),
    ],
)
def test_group_from_selector(selector, group):
    assert rp.group_from_selector(selector) == group


def test_to_demand_aggregates_tasks_but_keeps_placement_groups_apart():
    node = rp.RayNodeInfo(
        "n",
        "1.2.3.4",
        None,
        True,
        True,
        {"GPU": 2.0, "CPU": 4.0},
        {},
        True,
        None,
        None,
        None,
        labels={"ray.io/node-group": "head"},
    )
    items = [
        rp.PendingItem("task", {"GPU": 1.0}),
        rp.PendingItem("task", {"GPU": 1.0}),
        rp.PendingItem("task", {"GPU": 1.0}, label_selector={"ray.io/node-group": "gpu"}, group="gpu"),
        rp.PendingItem("task", {"GPU": 3.0}),
        rp.PendingItem("placement_group", {"GPU": 1.0}, count=2, strategy="STRICT_PACK", pg_id="a"),
        rp.PendingItem("placement_group", {"GPU": 1.0}, count=2, strategy="STRICT_PACK", pg_id="b"),
        rp.PendingItem("placement_group", {"GPU": 1.0}, count=3, strategy="STRICT_PACK", pg_id="c"),
    ]
    out = rp.to_demand(items, (node,))
    assert [(d.kind, d.shape.get("GPU"), d.count, d.infeasible, d.group) for d in out] == [
        ("task", 1.0, 2, False, None),
        ("task", 1.0, 1, True, "gpu"),  # no node carries the label
        ("task", 3.0, 1, True, None),
        ("placement_group", 1.0, 2, False, None),
        ("placement_group", 1.0, 2, False, None),
        ("placement_group", 1.0, 3, True, None),  # 3 GPUs on one 2-GPU node
    ]
    # without nodes nothing can be judged: nothing is called infeasible
    assert not any(d.infeasible for d in rp.to_demand(items, None))
