"""A Ray head's dashboard for tests that run the controller's Ray signal end to end: a real aiohttp server
on 127.0.0.1 whose answers are the recorded Ray 2.60 answers in ``fixtures/ray`` (autoscaler v2, so the
signal reads the state API), rewritten for the worker nodes and the pending tasks the test sets.  Every
request is recorded with its Authorization header.

- ``/api/cluster_status``: the recorded v2 answer (every field null); ``?format=1``: 404;
- ``/api/v0/nodes`` and ``/nodes?view=summary``: one Ray node per worker set with :meth:`set_worker`
  (its Pod name as the raylet's ``instanceId``, its IP, one GPU), whose core workers run ``running``
  tasks beside one idle actor that holds the GPU (so Ray calls the node busy either way: only the
  running-task count tells work from an idle actor);
- ``/api/v0/tasks``: ``pending_tasks`` tasks waiting for a node (each asks for 1 CPU and 1 GPU);
- ``/api/v0/actors``, ``/api/v0/placement_groups``: none pending;
- a path in ``failing``: 500.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.support import paths
from tests.support.ports import free_port


@dataclass
class RayWorker:
    pod: str
    ip: str
    running: int = 0  # tasks or actor methods executing on it


@dataclass
class RayHead:
    fixtures: Path = field(default_factory=lambda: paths.fixtures_dir() / "ray")
    workers: dict[str, RayWorker] = field(default_factory=dict)
    pending_tasks: int = 0
    failing: set[str] = field(default_factory=set)  # paths answered 500 (``/api/v0/tasks``, ``/nodes``, ...)
    hits: list[tuple[str, str | None]] = field(default_factory=list)  # (path and query, Authorization)
    server: TestServer | None = None

    def set_worker(self, pod: str, ip: str, running: int = 0) -> None:
        self.workers[pod] = RayWorker(pod, ip, running)

    @property
    def port(self) -> int:
        assert self.server is not None and self.server.port is not None
        return self.server.port

    @property
    def authorizations(self) -> set[str | None]:
        return {auth for _, auth in self.hits}

    # ------------------------------------------------------------------------------------ answers
    def _load(self, name: str) -> Any:
        return json.loads((self.fixtures / name).read_text())

    @staticmethod
    def _node_id(pod: str) -> str:
        return hashlib.sha256(pod.encode()).hexdigest()[:56]  # Ray node ids are 28 bytes, in hex

    @staticmethod
    def _listing(doc: Any, rows: list[Any], limit: int) -> Any:
        """A state-API list answer: at most ``limit`` rows, ``total`` all of them."""
        out = copy.deepcopy(doc)
        kept = rows[:limit]
        out["data"]["result"].update(total=len(rows), num_after_truncation=len(kept), num_filtered=len(rows),
                                     result=kept)
        return out

    def nodes(self, limit: int = 100) -> Any:
        doc = self._load("nodes.json")
        template = doc["data"]["result"]["result"][0]
        rows = []
        for w in self.workers.values():
            row = copy.deepcopy(template)
            node_id = self._node_id(w.pod)
            row.update(node_id=node_id, node_ip=w.ip, node_name=w.ip, is_head_node=False,
                       resources_total={"CPU": 8.0, "GPU": 1.0, "memory": 34359738368.0,
                                        "object_store_memory": 8589934592.0, f"node:{w.ip}": 1.0},
                       labels={"ray.io/node-id": node_id})
            rows.append(row)
        return self._listing(doc, rows, limit)

    def nodes_summary(self) -> Any:
        doc = self._load("nodes_view_summary.json")
        template = doc["data"]["summary"][0]
        stats = template["raylet"]["coreWorkersStats"]
        busy_worker = next(c for c in stats if c.get("workerType") == "WORKER" and c.get("numRunningTasks") == "1")
        summary, logical = [], {}
        for w in self.workers.values():
            row = copy.deepcopy(template)
            node_id = self._node_id(w.pod)
            idle_actor = dict(copy.deepcopy(busy_worker), numRunningTasks="0", pid=1000)
            running = [dict(copy.deepcopy(busy_worker), pid=2000 + i) for i in range(w.running)]
            row["ip"] = w.ip
            row["raylet"].update(nodeId=node_id, instanceId=w.pod, isHeadNode=False, nodeManagerAddress=w.ip,
                                 stateSnapshot={"state": "ACTIVE", "idleDurationMs": "0", "nodeActivity": []},
                                 coreWorkersStats=[idle_actor, *running])
            summary.append(row)
            cpus = float(min(8, w.running))
            logical[node_id] = f"{cpus}/8.0 CPU\n1.0/1.0 GPU\n0B/32.00GiB memory\n0B/8.00GiB object_store_memory"
        out = copy.deepcopy(doc)
        out["data"] = {"summary": summary, "nodeLogicalResources": logical}
        return out

    def tasks(self, limit: int = 100) -> Any:
        doc = self._load("tasks_pending_detail.json")
        template = doc["data"]["result"]["result"][0]
        rows = []
        for i in range(self.pending_tasks):
            row = copy.deepcopy(template)
            row.update(task_id=f"{i:048x}", name="train_step", func_or_class_name="train_step",
                       state="PENDING_NODE_ASSIGNMENT", required_resources={"CPU": 1.0, "GPU": 1.0},
                       placement_group_id=None, label_selector={})
            rows.append(row)
        return self._listing(doc, rows, limit)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.hits.append((request.path_qs, request.headers.get("Authorization")))
        if request.path in self.failing:
            return web.Response(status=500, text="500: Internal Server Error")
        if request.query.get("format") == "1":
            return web.Response(status=404, text="404: Not Found")
        limit = int(request.query.get("limit", "100"))  # Ray's default
        answers = {
            "/api/cluster_status": lambda: self._load("cluster_status_v2.json"),
            "/api/v0/nodes": lambda: self.nodes(limit),
            "/nodes": self.nodes_summary,
            "/api/v0/tasks": lambda: self.tasks(limit),
            "/api/v0/actors": lambda: self._listing(self._load("actors.json"), [], limit),
            "/api/v0/placement_groups": lambda: self._listing(self._load("placement_groups.json"), [], limit),
        }
        answer = answers.get(request.path)
        if answer is None:
            return web.Response(status=404, text="404: Not Found")
        return web.json_response(answer())

    async def start(self) -> RayHead:
        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", self.handle)
        self.server = TestServer(app, host="127.0.0.1", port=free_port())
        await self.server.start_server()
        return self

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()
