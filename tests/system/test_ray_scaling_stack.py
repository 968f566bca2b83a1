"""Full stack, Ray side: idle Ray workers (0 % GPU in the simulated fleet, idle per the Ray head's
dashboard) are removed by name while another team's GPU workload waits.

GPU utilization per worker comes from the real exporter -> real Prometheus -> the controller process;
Ray's view comes from a head dashboard served by an aiohttp server from the recorded answers in
``shared/fixtures/ray`` (a v1 autoscaler report with no demand, the recorded node list, and a
``/nodes?view=summary`` whose rows are the recorded row re-labelled for each worker Pod, as
KubeRay's ``RAY_CLOUD_INSTANCE_ID`` makes them).  The test plays KubeRay (``kube_world.World``).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from exporter.sample import PodRef
from tests.decisions import kube_world as kw
from tests.fakeapi.server import FakeApiServer
from tests.support import objects as o
from tests.support.eventually import eventually
from tests.support.http import port_of, serve
from tests.support.paths import fixtures_dir
from tests.system.stack import (
    NODES,
    STACK_TIMEOUT,
    cluster_objects,
    controller,
    counted,
    exporter_job,
    finish,
    fleet,
    prometheus,
    read_after,
)

pytestmark = pytest.mark.e2e

NS, RC, GROUP = "team-a", "tuning", "gpu"
BUSY, IDLE = f"{RC}-{GROUP}-worker-b7x2k", (f"{RC}-{GROUP}-worker-q4m9t", f"{RC}-{GROUP}-worker-z8c3d")
NODE = NODES[0]


def _fixture(name: str) -> Any:
    return json.loads((fixtures_dir() / "ray" / name).read_text())


def head_answers(workers: dict[str, bool]) -> dict[str, Any]:
    """The dashboard's answers for a head with ``workers`` (Pod name -> Ray has work on it)."""
    status = _fixture("cluster_status_idle.json")  # v1 report, nothing pending
    status["data"]["clusterStatus"]["time"] = time.time()  # the autoscaler reports every few seconds
    summary = _fixture("nodes_view_summary.json")
    template = summary["data"]["summary"][0]
    rows, logical = [], {}
    for pod, busy in workers.items():
        node_id = hashlib.sha224(pod.encode()).hexdigest()  # 56 hex digits, like a Ray node id
        row = copy.deepcopy(template)
        raylet = row["raylet"]
        raylet.update(nodeId=node_id, instanceId=pod, isHeadNode=False, nodeTypeName=GROUP,
                      labels={"ray.io/node-group": GROUP}, coreWorkersStats=[],
                      stateSnapshot={"state": "ACTIVE" if busy else "IDLE",
                                     "idleDurationMs": "0" if busy else "600000", "nodeActivity": []})
        rows.append(row)
        used = "1.0" if busy else "0.0"
        logical[node_id] = f"{used}/8.0 CPU\n{used}/1.0 GPU\n0B/32.00GiB memory"
    summary["data"]["summary"] = rows
    summary["data"]["nodeLogicalResources"] = logical
    return {"cluster_status": status, "nodes": _fixture("nodes.json"), "nodes_summary": summary}


@contextlib.asynccontextmanager
async def ray_head(workers: dict[str, bool]) -> AsyncIterator[tuple[int, list[str]]]:
    """A dashboard on 127.0.0.1: (port, paths asked)."""
    hits: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        hits.append(request.path_qs)
        answers = head_answers(workers)
        part = {"/api/cluster_status": "cluster_status", "/api/v0/nodes": "nodes",
                "/nodes": "nodes_summary"}.get(request.path)
        if part is None or request.query.get("format") == "1":
            return web.Response(status=404, text="404: Not Found")
        return web.json_response(answers[part])

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    async with serve(app) as url:
        yield port_of(url), hits


async def test_idle_ray_workers_scaled_down_by_name(fake_api: FakeApiServer, tmp_path: Path) -> None:
    api = fake_api
    for obj in cluster_objects():
        api.create(obj)
    async with ray_head({BUSY: True, IDLE[0]: False, IDLE[1]: False}) as (port, hits), fleet() as f:
        # the RayCluster (in-tree autoscaler off) and its three 1-GPU workers on NODE
        annotations = {"queuepilot.io/autoscale": "true", "queuepilot.io/idle-window": "1h",
                       "queuepilot.io/pressured-idle-window": "1s", "queuepilot.io/queue-pressure-wait": "30s"}
        api.create(o.ray_cluster(RC, NS, groups=[o.ray_group(GROUP, 3, 0, 4, gpus=1)], annotations=annotations,
                                 head_ip="127.0.0.1", dashboard_port=port))
        api.create(o.ray_head_pod(RC, NS, ip="127.0.0.1"))  # the controller reads Ray at its head pod
        for i, (pod, load) in enumerate(((BUSY, 0.9), (IDLE[0], 0.0), (IDLE[1], 0.0))):
            api.create(o.ray_worker_pod(RC, GROUP, pod, NS, node=NODE, gpus=1, ip=f"10.0.1.{i + 1}"))
            f.sources[NODE].set_allocation(i, PodRef(NS, pod, "ray-worker"))
            f.sources[NODE].set_load(i, load)
        # another team's GPU workload has waited for 2 minutes (no quota yet)
        api.create(kw.workload("waiting", "team-b", "lq-b", created=time.time() - 120))

        async with prometheus(
            tmp_path / "prom", [exporter_job(f.targets)]
        ) as prom, controller(api, prom.url, tmp_path / "ctl") as cp:
            for pod in (BUSY, *IDLE):
                await eventually(lambda pod=pod: prom.query(f'queuepilot_gpu_allocated{{pod="{pod}"}} == 1'),
                                 f"Prometheus attributes {pod}'s GPU", timeout=STACK_TIMEOUT)
            t_seen = time.time()
            await eventually(lambda: read_after(cp, t_seen), "a GPU poll after Prometheus had the attribution", timeout=STACK_TIMEOUT)
            # the controller reads per-worker GPU use through Prometheus (pod attribution)
            await eventually(lambda: _close(cp.metric("queuepilot_raycluster_gpu_utilization_ratio", namespace=NS,
                                                      raycluster=RC, group=GROUP), 0.3),
                             "the group's mean GPU utilization (0.9 + 0 + 0) / 3", timeout=15)

            def scaled() -> dict | None:
                g = api.get(kw.RAY, "RayCluster", RC, NS)["spec"]["workerGroupSpecs"][0]
                return g if g["replicas"] != 3 else None
            group = await eventually(scaled, "the RayCluster patched down", timeout=45)
            assert group["replicas"] == 1
            assert sorted(group["scaleStrategy"]["workersToDelete"]) == sorted(IDLE)
            assert (group["minReplicas"], group["maxReplicas"]) == (0, 4)  # untouched
            assert any(p.startswith("/api/cluster_status") for p in hits)
            down = await counted(cp, "queuepilot_scale_decisions_total", namespace=NS, raycluster=RC, group=GROUP,
                                 direction="down", reason="IdleWorkersQueuePressure", mode="live")
            assert down == 1.0
            # Events are sent by a background sender after the patch: wait for it, do not race it
            scale_event = await eventually(
                lambda: next((e for e in api.list("v1", "Event", NS) if e["involvedObject"]["name"] == RC
                              and e["reason"] == "IdleWorkersQueuePressure"), None),
                "the IdleWorkersQueuePressure Event on the RayCluster", timeout=15)
            assert "scale down 3 -> 1" in scale_event["message"], scale_event["message"]
            assert all(p in scale_event["message"] for p in IDLE), scale_event["message"]
            assert "team-b/waiting" in scale_event["message"], scale_event["message"]

            # KubeRay deletes exactly the named pods; queuepilot then empties workersToDelete
            kw.World(api).kuberay_sync(RC, NS, NODE)
            left = sorted(p["metadata"]["name"] for p in api.list("v1", "Pod", NS))
            assert left == sorted([BUSY, f"{RC}-head"])

            def emptied() -> bool:
                g = api.get(kw.RAY, "RayCluster", RC, NS)["spec"]["workerGroupSpecs"][0]
                return not (g.get("scaleStrategy") or {}).get("workersToDelete")
            await eventually(emptied, "workersToDelete emptied after the pods went", timeout=STACK_TIMEOUT)
            assert api.get(kw.RAY, "RayCluster", RC, NS)["spec"]["workerGroupSpecs"][0]["replicas"] == 1
            calls = api.observed_calls()
            assert ("ray.io", "rayclusters", "patch") in calls
            await finish(api, cp, admission=False)


async def _close(value_coro, expected: float) -> bool:
    v = await value_coro
    return v is not None and abs(v - expected) < 0.01
