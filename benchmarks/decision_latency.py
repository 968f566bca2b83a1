"""Decision latency through the fake API server with the real controller loop (reported, not asserted).

1. **admission**: from the moment Kueue's part (this script) writes a Workload status with quota
   reserved and our check ``Pending``, to our check state landing in the API server's store
   (watch event -> debounced pass -> snapshot -> policy -> fresh GET -> server-side apply);
2. **scale-down**: from the moment a Ray worker goes idle (Ray reports no work, its GPU at 0 %),
   with idle window and stabilization set to 0, to the RayCluster patch (replicas - 1 and
   ``workersToDelete``) landing in the store.  This includes waiting for the next Ray poll
   (``ray_poll_seconds``), which dominates.

    .venv/bin/python benchmarks/decision_latency.py --n 50 --out benchmarks/results/decisions.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.cluster.client import make_api_client
from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import Controller
from autoscaler.core.snapshot import GpuState, PodKey, frozen_map
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray_parse import RayNodeInfo, RayStatus
from tests.decisions import kube_world as k
from tests.fakeapi.server import FakeApiServer
from tests.support import paths

RAY_POLL = 0.5
DEBOUNCE = 0.05


class Gpus:
    """GPU signal: 8 GPUs per node, utilization per pod as the script sets it, always fresh."""

    name = "gpu"

    def __init__(self, nodes: list[str]) -> None:
        self.nodes = nodes
        self.util: dict[str, float] = {}  # pod -> util
        self.alloc: dict[tuple[str, int], tuple[str, str]] = {}

    @property
    def reading(self) -> GpuReading:
        gpus = []
        for n in self.nodes:
            for i in range(8):
                owner = self.alloc.get((n, i))
                gpus.append(GpuState(uuid=f"{n}-{i}", node=n, index=i, pod=PodKey(*owner) if owner else None,
                                     utilization=self.util.get(owner[1], 0.0) if owner else 0.0))
        return GpuReading(tuple(gpus), time.time())

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


class Ray:
    def __init__(self) -> None:
        self.busy: dict[str, bool] = {}

    async def fetch_status(self, base_url: str, now: float) -> Any:
        nodes = tuple(RayNodeInfo(node_id=p, node_ip="", pod_name=p, is_head=False, alive=True,
                                  total=frozen_map({"GPU": 1.0}), available=frozen_map({}), busy=b, idle_seconds=None,
                                  cpu_utilization=None, memory_utilization=None) for p, b in self.busy.items())
        return RayStatus(demand=(), nodes=nodes, source="state_api", autoscaler_version="v2", observed_at=now)


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s) + 0.5) - 1))]


async def wait_for(pred, limit: float = 30.0, step: float = 0.001) -> None:
    end = time.perf_counter() + limit
    while not pred():
        if time.perf_counter() > end:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(step)


@contextlib.asynccontextmanager
async def controller_on(api: FakeApiServer, gpus: Gpus, ray: Ray, settings: dict[str, Any]):
    config = ControllerConfig(listen_host="127.0.0.1", listen_port=0, kubeconfig=str(api.kubeconfig_path),
                              resync_seconds=30.0, debounce_seconds=DEBOUNCE, leader_elect=False, identity="bench",
                              gpu_poll_seconds=RAY_POLL, ray_poll_seconds=RAY_POLL, settings=settings)
    client = await make_api_client(config.kubeconfig)
    c = Controller(config, client, gpu_signal=gpus, ray_client=ray)
    await c.start()
    try:
        await wait_for(lambda: c.synced and c.passes > 0, 30)
        yield c
    finally:
        await c.shutdown()
        await client.close()


async def admission(api: FakeApiServer, n: int) -> list[float]:
    w = k.World(api)
    nodes = [f"n{i}" for i in range(8)]
    w.add(k.flavor("a100"), k.cluster_queue("cq-a", {"a100": 64}), k.local_queue("lq-a", "team-a", "cq-a"),
          k.admission_check(), *(k.node(x) for x in nodes))
    out = []
    async with controller_on(api, Gpus(nodes), Ray(), {}):
        for i in range(n):
            name = f"wl-{i}"
            w.add(k.workload(name, pod_sets=(("main", 1, 8),)))
            await asyncio.sleep(0.1)
            t0 = time.perf_counter()
            w.reserve(name, "cq-a", {"main": "a100"}, time.time())
            await wait_for(lambda name=name: w.check_entry(name)["state"] != "Pending")
            out.append(time.perf_counter() - t0)
            api.delete(k.KUEUE, "Workload", name, "team-a")  # frees the reservation for the next one
    return out


async def scale_down(api: FakeApiServer, n: int) -> list[float]:
    w = k.World(api)
    gpus = Gpus(["n0"])
    ray = Ray()
    rc = k.ray_cluster("rc", replicas=2, hi=4)
    rc["status"] = {"head": {"serviceIP": "10.0.0.1", "podIP": "10.9.9.9", "serviceName": "rc-head-svc"}}
    w.add(k.flavor("a100"), k.node("n0"), rc)
    settings = {"scaling": {"idle_window": 0, "pressured_idle_window": 0,
                            "scale_down": {"stabilization_window": 0, "policies": ["Percent:100:1"]}}}
    out = []
    async with controller_on(api, gpus, ray, settings):
        for i in range(n):
            # the two workers' pods exist before their replicas are asked for (as KubeRay makes them): a
            # replica without a pod and without pending demand would be dropped at once (WithinTarget)
            pods = [f"busy-{i}", f"idle-{i}"]
            for j, p in enumerate(pods):
                w.add(k.worker_pod("rc", p))
                gpus.alloc[("n0", j)] = ("team-a", p)
                gpus.util[p] = 0.3  # low enough that the utilization target keeps one worker only
                ray.busy[p] = True
            api.patch(k.RAY, "RayCluster", "rc", [
                {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 2},
                {"op": "add", "path": "/spec/workerGroupSpecs/0/scaleStrategy", "value": {"workersToDelete": []}},
            ], namespace="team-a", content_type="application/json-patch+json")
            await asyncio.sleep(2 * RAY_POLL + 0.2)  # the controller has seen both busy; the 1 s period passed
            t0 = time.perf_counter()
            gpus.util[pods[1]] = 0.0
            ray.busy[pods[1]] = False
            await wait_for(lambda: w.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]["replicas"] == 1)
            out.append(time.perf_counter() - t0)
            g = w.get("RayCluster", "rc")["spec"]["workerGroupSpecs"][0]
            assert g["scaleStrategy"]["workersToDelete"] == [pods[1]], g
            for p in pods:
                api.delete("v1", "Pod", p, "team-a")
                ray.busy.pop(p, None)
    return out


def pure_policies(runs: int = 5) -> list[tuple[str, float]]:
    """The pure decision functions at the benchmark scale: 2 000 GPU nodes, 50 000 workloads (500 of them
    waiting for our check), 2 000 opted-in RayClusters with 4 workers each."""
    from autoscaler.core.policy.admission import AdmissionConfig, decide_admissions
    from autoscaler.core.policy.ledger import Ledger
    from autoscaler.core.policy.scaling import ScalingContext, ScalingDefaults, decide_scaling
    from tests.decisions import builders as b

    nodes = [b.node(f"n{i}", requested=(i * 3) % 9) for i in range(2000)]
    wls = [b.workload(f"w{i}", [("main", 1 + i % 4, 8)], state="Pending" if i % 100 == 0 else "Ready",
                      reserved_at=9_000 + i % 500) for i in range(50_000)]
    rcs = [b.ray_cluster([b.group(workers=[b.worker(f"rc{i}-w{j}", util=0.0 if j == 3 else 0.8, busy=j != 3)
                                           for j in range(4)])], name=f"rc{i}",
                         demand=[b.gpu_demand(1, count=2)] if i % 3 == 0 else ()) for i in range(2000)]
    snap = b.snapshot(nodes, wls, ray=rcs)
    out = []
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        r = decide_admissions(snap, Ledger(), {}, AdmissionConfig(), b.NOW)
        times.append(time.perf_counter() - t)
    out.append((f"decide_admissions: 2 000 nodes, 50 000 workloads, {len(r.decisions)} decided", statistics.median(times)))
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        context = ScalingContext.build(snap, b.NOW)
        for rc in rcs:
            decide_scaling(snap, rc, ScalingDefaults(), {}, b.NOW, context=context)
        times.append(time.perf_counter() - t)
    out.append(("decide_scaling: 2 000 RayClusters x 4 workers (same snapshot)", statistics.median(times)))
    return out


def row(name: str, xs: list[float]) -> str:
    return (f"| {name} | {len(xs)} | {statistics.median(xs) * 1000:.1f} | {pct(xs, 99) * 1000:.1f} | "
            f"{max(xs) * 1000:.1f} |")


async def main_async(n: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeApiServer(paths.crds_dir(), workdir=Path(tmp)) as api:
            adm = await admission(api, n)
        async with FakeApiServer(paths.crds_dir(), workdir=Path(tmp)) as api:
            sd = await scale_down(api, max(5, n // 5))
    pure = pure_policies()
    pure_table = "\n".join(["| pure policy (median of 5) | seconds |", "|---|---|",
                            *(f"| {name} | {sec:.3f} |" for name, sec in pure)])
    table = "\n".join([
        "| path | n | p50 ms | p99 ms | max ms |",
        "|---|---|---|---|---|",
        row("check Pending -> our status apply in the store", adm),
        row(f"worker idle -> scale-down patch in the store (Ray poll {RAY_POLL}s)", sd),
    ])
    text = f"""# Decision latency (fake API server, real controller loop, real kubernetes-asyncio client)

Command: `.venv/bin/python benchmarks/decision_latency.py --n {n}`
(machine: {os.cpu_count()} CPUs, shared; debounce {DEBOUNCE}s, Ray/GPU poll {RAY_POLL}s, one process for
the fake API server, the controller and this driver).

{table}

{pure_table}

- Admission: Kueue's status write -> watch event -> debounced pass ({DEBOUNCE}s) -> snapshot ->
  `decide_admissions` -> fresh GET -> server-side apply.  The debounce is most of it.
- Scale-down: the Ray signal is polled every {RAY_POLL}s, so the expected latency is about half a poll
  period plus a pass (here the driver flips the worker about 0.2 s after a poll, so the numbers sit near
  0.3 s; a random phase gives 0-0.5 s); idle window and stabilization were set to 0 to measure the machinery, not the
  policy (in production the idle window, default 10 min, dominates by design).
"""
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=int(os.environ.get("QUEUEPILOT_BENCH_N", "50")))
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    text = asyncio.run(main_async(args.n))
    if args.out is not None:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
