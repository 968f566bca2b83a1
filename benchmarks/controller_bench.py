"""Controller at scale: RSS, time to initial sync, pass (snapshot build) time, /metrics render time and
event -> metric latency with 50 000 Workloads, 2 000 RayClusters and 2 000 GPU nodes (16 000 GPUs).

The cluster is served by the tests' fake API server (bulk-loaded through its store, no validation)
and the GPU signal by a stub Prometheus HTTP API (16 000 GPUs, 4 families), both in this process;
the controller runs as it is deployed, ``queuepilot controller`` in a subprocess (``--dry-run``,
no leader election), so its RSS is its own.  Results are reported, not asserted.

    .venv/bin/python benchmarks/controller_bench.py [--workloads 50000] [--rayclusters 2000] [--nodes 2000]
        [--out benchmarks/results/controller.md]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.controller import objects as o  # noqa: E402
from tests.fakeapi.server import FakeApiServer  # noqa: E402
from tests.support import paths  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

NAMESPACES = 20
QUEUES = 20
GPUS_PER_NODE = 8


def cluster(n_workloads: int, n_rc: int, n_nodes: int, now: float) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for i in range(NAMESPACES):
        objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": f"team-{i}"}})
    objs += [o.resource_flavor("h100", {"gpu": "h100"}), o.resource_flavor("a100", {"gpu": "a100"}),
             o.admission_check("gpu-capacity")]
    for q in range(QUEUES):
        objs.append(o.cluster_queue(f"cq-{q}", {"h100": 400, "a100": 400}, cohort="all", checks=("gpu-capacity",)))
        objs.append(o.local_queue(f"lq-{q}", f"team-{q % NAMESPACES}", f"cq-{q}"))
    for n in range(n_nodes):
        objs.append(o.node(f"node-{n}", GPUS_PER_NODE, {"gpu": "h100" if n % 2 == 0 else "a100"}))
    for r in range(n_rc):
        ns = f"team-{r % NAMESPACES}"
        objs.append(o.ray_cluster(f"rc-{r}", ns, groups=[o.ray_group("gpu", 2, 0, 8, gpus=1)], head_ip=None,
                                  annotations={"queuepilot.io/autoscale": "true"}))
        for w in range(2):
            objs.append(o.ray_worker_pod(f"rc-{r}", "gpu", f"rc-{r}-gpu-worker-{w}", ns,
                                         node=f"node-{(2 * r + w) % n_nodes}", gpus=1, ip=f"10.{r // 250}.{r % 250}.{w}"))
    for i in range(n_workloads):
        q = i % QUEUES
        ns = f"team-{q % NAMESPACES}"
        created = now - 10 - (i % 3600)
        if i % 10 < 3:  # 30 % pending
            objs.append(o.workload(f"wl-{i}", ns, f"lq-{q}", created=created, pod_sets=[("main", 1 + i % 4, 8)]))
        else:
            flavor = "h100" if i % 2 else "a100"
            objs.append(o.workload(
                f"wl-{i}", ns, f"lq-{q}", created=created, pod_sets=[("main", 1, 1 + i % 8)],
                conditions=[o.condition("QuotaReserved", True, created + 5), o.condition("Admitted", True, created + 6)],
                admission=o.admission(f"cq-{q}", [("main", flavor, 1)]),
                checks=[{"name": "gpu-capacity", "state": "Ready", "lastTransitionTime": o.ts(created + 6),
                         "message": "capacity confirmed"}],
            ))
    return objs


def prometheus_answers(n_nodes: int) -> dict[str, bytes]:
    import json

    def vec(family: str, value: Any) -> bytes:
        result = []
        for n in range(n_nodes):
            for g in range(GPUS_PER_NODE):
                labels = {"__name__": family, "Hostname": f"node-{n}", "UUID": f"GPU-{n}-{g}", "gpu": str(g),
                          "modelName": "NVIDIA H100 80GB HBM3"}
                if family == "queuepilot_gpu_healthy":
                    labels["reason"] = "" if (n * 8 + g) % 97 else "xid_fatal"
                result.append({"metric": labels, "value": [time.time(), str(value(n, g))]})
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()

    return {
        "queuepilot_gpu_healthy": vec("queuepilot_gpu_healthy", lambda n, g: 0 if (n * 8 + g) % 97 == 0 else 1),
        "queuepilot_gpu_allocated": vec("queuepilot_gpu_allocated", lambda n, g: 0),
        "DCGM_FI_DEV_GPU_UTIL": vec("DCGM_FI_DEV_GPU_UTIL", lambda n, g: (n + g) % 100),
        "DCGM_FI_DEV_FB_USED": vec("DCGM_FI_DEV_FB_USED", lambda n, g: 1024),
    }


def rss_mib(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024
    hwm = int(re.search(r"VmHWM:\s+(\d+)", status).group(1)) / 1024
    return rss, hwm


def hist(text: str, name: str, loop: str) -> tuple[float, float]:
    s = re.search(rf'{name}_sum\{{loop="{loop}"\}} ([0-9.e+-]+)', text)
    c = re.search(rf'{name}_count\{{loop="{loop}"\}} ([0-9.e+-]+)', text)
    return (float(s.group(1)), float(c.group(1))) if s and c else (0.0, 0.0)


async def scrape(session: aiohttp.ClientSession, url: str) -> tuple[float, str]:
    t = time.perf_counter()
    async with session.get(url) as r:
        text = await r.text()
    return time.perf_counter() - t, text


async def main(args: argparse.Namespace) -> int:
    now = time.time()
    t0 = time.perf_counter()
    api = FakeApiServer(paths.crds_dir(), history_limit=400_000)
    objs = cluster(args.workloads, args.rayclusters, args.nodes, now)
    api.load(objs)
    load_s = time.perf_counter() - t0
    await api.start()

    answers = prometheus_answers(args.nodes)

    async def query(request: web.Request) -> web.Response:
        return web.Response(body=answers[request.query["query"]], content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    prom_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", prom_port).start()

    port = free_port()
    if args.with_reconcilers:
        entry = [sys.executable, "-m", "queuepilot", "controller"]
    else:  # the controller core alone: no deciders (their cost is reported by their own benchmark)
        entry = [sys.executable, "-c", "import sys, autoscaler.reconcilers as r; r.build_reconcilers = lambda ctx: []; "
                 "from autoscaler.controller_cli import main; sys.exit(main(sys.argv[1:]))"]
    cmd = [*entry, "--kubeconfig", str(api.kubeconfig_path),
           "--listen", f"127.0.0.1:{port}", "--no-leader-elect", "--dry-run", "--log-level", "WARNING",
           "--prometheus-url", f"http://127.0.0.1:{prom_port}", "--gpu-poll-seconds", "15"]
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=REPO, env={**os.environ, "KUBERNETES_SERVICE_HOST": ""})
    base = f"http://127.0.0.1:{port}"
    rows: list[tuple[str, str]] = []
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
            while True:
                try:
                    async with s.get(f"{base}/readyz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientError:
                    pass
                if proc.returncode is not None or time.perf_counter() - start > 150:
                    raise RuntimeError("controller did not sync")
                await asyncio.sleep(0.1)
            sync_s = time.perf_counter() - start
            rss_sync, _ = rss_mib(proc.pid)
            # steady state: wait for a GPU poll and a few passes
            await asyncio.sleep(args.settle)
            renders = []
            text = ""
            for _ in range(5):
                dt, text = await scrape(s, f"{base}/metrics")
                renders.append(dt)
            snap_sum, snap_n = hist(text, "queuepilot_reconcile_seconds", "snapshot")
            loops = {loop: hist(text, "queuepilot_reconcile_seconds", loop) for loop in ("admission", "scaling")}
            # event -> metric: a workload created in an otherwise empty LocalQueue shows up in /metrics
            api.create(o.local_queue("lq-probe", "team-0", "cq-0"))
            await asyncio.sleep(1.0)
            latencies = []
            for i in range(1, 6):
                t = time.perf_counter()
                api.load([o.workload(f"probe-{i}", "team-0", "lq-probe", created=time.time())])
                want = f'queuepilot_queue_pending_workloads{{cluster_queue="cq-0",local_queue="lq-probe",namespace="team-0"}} {float(i)}'
                while True:
                    _, text = await scrape(s, f"{base}/metrics")
                    if want in text:
                        break
                latencies.append(time.perf_counter() - t)
            rss, hwm = rss_mib(proc.pid)
    finally:
        if proc.returncode is None:
            proc.terminate()
            await proc.wait()
        await runner.cleanup()
        await api.stop()

    n_pods = sum(1 for x in objs if x["kind"] == "Pod")
    rows = [
        ("objects served", f"{args.workloads} Workloads, {args.rayclusters} RayClusters, {n_pods} pods, "
                           f"{args.nodes} nodes ({args.nodes * GPUS_PER_NODE} GPUs), {QUEUES} ClusterQueues"),
        ("fake API bulk load (bench process)", f"{load_s:.1f} s"),
        ("start -> all caches synced (/readyz 200)", f"{sync_s:.1f} s"),
        ("controller RSS after sync", f"{rss_sync:.0f} MiB"),
        ("controller RSS at the end / peak (VmHWM)", f"{rss:.0f} MiB / {hwm:.0f} MiB"),
        ("snapshot build per pass (mean)", f"{1000 * snap_sum / max(snap_n, 1):.0f} ms over {snap_n:.0f} passes"),
        *((f"reconciler `{k}` per pass (mean, dry-run)", f"{1000 * v[0] / max(v[1], 1):.0f} ms over {v[1]:.0f} passes")
          for k, v in loops.items() if v[1]),
        ("/metrics render (scrape latency, median of 5)", f"{1000 * statistics.median(renders):.0f} ms, "
                                                         f"{len(text.encode()) / 1024:.0f} KiB"),
        ("event -> metric latency (median / max of 5)", f"{statistics.median(latencies):.2f} s / {max(latencies):.2f} s "
                                                         "(includes one /metrics render per poll)"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    cmdline = "python benchmarks/controller_bench.py " + " ".join(sys.argv[1:])
    report = (
        "# Controller benchmark\n\n"
        f"Command: `{cmdline.strip()}`  \n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        "The controller runs as a subprocess (`queuepilot controller --dry-run --no-leader-elect`"
        + ("" if args.with_reconcilers else "; the deciders left out, so the numbers are the controller core's") +
        ") against the "
        "tests' fake API server and a stub Prometheus API serving the 16 000 GPUs' four series; RayClusters "
        "have no head address yet, so no Ray dashboards are polled. Reported, not asserted.\n\n"
        + table + "\n"
    )
    print(report)
    if args.out:
        Path(args.out).write_text(report)  # noqa: ASYNC240 (once, at the end)
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", type=int, default=50_000)
    p.add_argument("--rayclusters", type=int, default=2_000)
    p.add_argument("--nodes", type=int, default=2_000)
    p.add_argument("--settle", type=float, default=20.0, help="seconds of steady state before measuring")
    p.add_argument("--out", default="")
    p.add_argument("--with-reconcilers", action="store_true",
                   help="also run the admission and scaling reconcilers (dry-run) in each pass")
    sys.exit(asyncio.run(main(p.parse_args())))
