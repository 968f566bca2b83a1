"""Controller at scale: RSS, time to initial sync, pass time (snapshot build and each decider), how long a
pass holds the event loop (/healthz latency while passes run), /metrics render time and event -> metric
latency with 50 000 Workloads, 2 000 RayClusters and 2 000 GPU nodes (16 000 GPUs).

The cluster is served by the tests' fake API server (bulk-loaded through its store, no validation)
and the GPU signal by a stub Prometheus HTTP API (16 000 GPUs, 4 families), both in this process;
the controller runs as it is deployed, ``queuepilot controller`` in a subprocess (``--dry-run``,
no leader election), so its RSS is its own: by default twice in turn against the same fake API
server, once as the controller core alone (no deciders) and once with the admission and scaling
reconcilers, so both columns come from one run.  Results are reported, not asserted.

While settling, ``/metrics`` is scraped every ``--scrape-every`` seconds as Prometheus would.
``--stalls SECONDS`` (diagnostics) prints the controller's loop-thread stack whenever its event loop
has not run for that long, and each slow full garbage collection.

    .venv/bin/python benchmarks/controller_bench.py [--workloads 50000] [--rayclusters 2000] [--nodes 2000]
        [--mode both|core|reconcilers|passes [--profile DIR]] [--stalls 0.08]
        [--settle 20] [--resync 5] [--scrape-every 15] [--out benchmarks/results/controller.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

if TYPE_CHECKING:
    from tests.fakeapi.server import FakeApiServer
# the tests' support code is imported where it is used: the controller subprocess imports this module
# (--stalls) and must not carry the fake API server in its RSS

NAMESPACES = 20
QUEUES = 20
GPUS_PER_NODE = 8


def cluster(n_workloads: int, n_rc: int, n_nodes: int, now: float) -> list[dict[str, Any]]:
    from tests.support import objects as o

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


def watch_stalls_from_env() -> None:
    """In the controller subprocess (``--stalls``): start the stall watchdog."""
    if os.environ.get("QP_BENCH_STALLS"):
        _watch_stalls(float(os.environ["QP_BENCH_STALLS"]))


def _watch_stalls(limit: float) -> None:
    """Diagnostics (``--stalls SECONDS``): a thread that prints where the event loop's thread is each
    time the loop has not run for ``limit`` seconds (one stack per stall, to stderr)."""
    import threading
    import traceback

    from autoscaler.controller import loop

    beat = [time.monotonic()]
    t0 = time.monotonic()
    main = threading.get_ident()
    start = loop.Controller.start

    async def heartbeat() -> None:
        while True:
            beat[0] = time.monotonic()
            await asyncio.sleep(0.005)

    async def started(self: Any) -> None:
        self._tasks.append(asyncio.create_task(heartbeat()))
        await start(self)

    def watchdog() -> None:
        reported = 0.0
        while True:
            time.sleep(0.01)
            late = time.monotonic() - beat[0]
            if late > limit and beat[0] != reported:
                reported = beat[0]
                frame = sys._current_frames().get(main)
                stack = "".join(traceback.format_stack(frame, limit=14)) if frame else "?"
                print(f"--- loop stalled {late * 1000:.0f} ms (so far) at t={time.monotonic() - t0:.1f} s in:\n{stack}",
                      file=sys.stderr, flush=True)

    import gc

    gc_start = [0.0]

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start[0] = time.monotonic()
        elif info["generation"] == 2 and time.monotonic() - gc_start[0] > limit / 4:
            print(f"--- full gc {1000 * (time.monotonic() - gc_start[0]):.0f} ms, {info['collected']} collected",
                  file=sys.stderr, flush=True)

    gc.callbacks.append(on_gc)
    loop.Controller.start = started
    threading.Thread(target=watchdog, daemon=True).start()


async def measure(args: argparse.Namespace, api: FakeApiServer, prom_port: int, with_reconcilers: bool,
                  tag: str) -> dict[str, str]:
    """Start one controller subprocess against ``api``, measure it, stop it; the rows of one column."""
    from tests.support import objects as o
    from tests.support.ports import free_port

    port = free_port()
    setup = []
    if not with_reconcilers:  # the controller core alone: no deciders (their cost is reported by their own benchmark)
        setup.append("import autoscaler.controller.reconcilers as r; r.build_reconcilers = lambda ctx, fleet=None: []")
    if args.stalls:
        setup.append("import benchmarks.controller_bench as b; b.watch_stalls_from_env()")
    if setup:
        entry = [sys.executable, "-c", "import sys; " + "; ".join(setup) + "; "
                 "from autoscaler.controller.cli import main; sys.exit(main(sys.argv[1:]))"]
    else:
        entry = [sys.executable, "-m", "queuepilot", "controller"]
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": ""}
    if args.stalls:
        env["QP_BENCH_STALLS"] = str(args.stalls)
    cmd = [*entry, "--kubeconfig", str(api.kubeconfig_path),
           "--listen", f"127.0.0.1:{port}", "--no-leader-elect", "--dry-run", "--log-level", args.log_level,
           "--prometheus-url", f"http://127.0.0.1:{prom_port}", "--gpu-poll-seconds", "15",
           "--ray-poll-seconds", "86400", "--resync-seconds", str(args.resync)]
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=REPO, env=env)
    base = f"http://127.0.0.1:{port}"
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
            if args.stalls:
                print(f"--- synced at t={sync_s:.1f} s", file=sys.stderr, flush=True)
            rss_sync, _ = rss_mib(proc.pid)
            # steady state: a GPU poll and several passes; /healthz is polled all along, so its worst
            # latency is how long a pass (snapshot + deciders) held the controller's event loop
            health: list[float] = []
            t_end = time.perf_counter() + args.settle

            async def prometheus() -> None:  # scrapes as Prometheus would while the probes run
                while True:
                    await asyncio.sleep(args.scrape_every)
                    await scrape(s, f"{base}/metrics")

            scraper = asyncio.create_task(prometheus()) if args.scrape_every > 0 else None
            while time.perf_counter() < t_end:
                t = time.perf_counter()
                async with s.get(f"{base}/healthz") as r:
                    await r.read()
                health.append(time.perf_counter() - t)
                await asyncio.sleep(0.05)
            if scraper is not None:
                scraper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await scraper
            renders = []
            text = ""
            for _ in range(5):
                dt, text = await scrape(s, f"{base}/metrics")
                renders.append(dt)
            snap_sum, snap_n = hist(text, "queuepilot_reconcile_seconds", "snapshot")
            loops = {loop: hist(text, "queuepilot_reconcile_seconds", loop) for loop in ("admission", "scaling", "stall")}
            # event -> metric: a workload created in an otherwise empty LocalQueue shows up in /metrics
            lq = f"lq-probe-{tag}"
            api.create(o.local_queue(lq, "team-0", "cq-0"))
            await asyncio.sleep(1.0)
            latencies = []
            for i in range(1, 6):
                t = time.perf_counter()
                api.load([o.workload(f"probe-{tag}-{i}", "team-0", lq, created=time.time())])
                want = f'queuepilot_queue_pending_workloads{{cluster_queue="cq-0",local_queue="{lq}",namespace="team-0"}} {float(i)}'
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

    health.sort()
    over = sum(1 for h in health if h >= 0.1)
    rows = {
        "start -> all caches synced (/readyz 200)": f"{sync_s:.1f} s",
        "controller RSS after sync": f"{rss_sync:.0f} MiB",
        "controller RSS at the end / peak (VmHWM)": f"{rss:.0f} MiB / {hwm:.0f} MiB",
        "snapshot build per pass (mean; wall time, in a worker thread at this scale)":
            f"{1000 * snap_sum / max(snap_n, 1):.0f} ms over {snap_n:.0f} passes",
    }
    for k, v in loops.items():
        rows[f"reconciler `{k}` per pass (mean, dry-run)"] = (
            f"{1000 * v[0] / max(v[1], 1):.0f} ms over {v[1]:.0f} passes" if v[1] else "not run")
    def pct(q: float) -> float:
        return 1000 * health[int(q * (len(health) - 1))]

    rows["/healthz latency while passes run (p50 / p95 / p99 / max)"] = (
        f"{1000 * statistics.median(health):.0f} / {pct(0.95):.0f} / {pct(0.99):.0f} / "
        f"{1000 * health[-1]:.0f} ms ({len(health)} probes over {args.settle:.0f} s; {over} at 100 ms or more)")
    rows["/metrics render (scrape latency, median of 5)"] = (f"{1000 * statistics.median(renders):.0f} ms, "
                                                             f"{len(text.encode()) / 1024:.0f} KiB")
    rows["event -> metric latency (median / max of 5)"] = (f"{statistics.median(latencies):.2f} s / "
                                                           f"{max(latencies):.2f} s")
    return rows


_KINDS = {"Workload": "workloads", "ClusterQueue": "clusterqueues", "LocalQueue": "localqueues",
          "ResourceFlavor": "resourceflavors", "AdmissionCheck": "admissionchecks", "RayCluster": "rayclusters",
          "Node": "nodes", "Pod": "pods"}


async def passes_in_process(args: argparse.Namespace) -> int:
    """``--mode passes``: the same cluster parsed and built into one snapshot in this process, then
    ``build_reconcilers(ctx)`` (no API client: dry-run) run ``--passes`` times on it, each reconciler
    timed; ``--profile DIR`` writes a cProfile of each reconciler's first pass there.  The way to find
    where a pass spends its time without the subprocess, the fake API server or the watches."""
    import cProfile
    import json
    import pstats

    from prometheus_client import CollectorRegistry

    from autoscaler.cluster.source import PARSERS, ClusterObjects
    from autoscaler.cluster.views import object_key
    from autoscaler.controller.context import ControllerContext
    from autoscaler.controller.counters import ControllerCounters
    from autoscaler.controller.reconcilers import build_reconcilers
    from autoscaler.controller.snapshot_builder import build_snapshot
    from autoscaler.signals.gpu import GpuReading, fold_series

    now = time.time()
    views: dict[str, dict[str, Any]] = {k: {} for k in _KINDS.values()}
    for obj in cluster(args.workloads, args.rayclusters, args.nodes, now):
        kind = _KINDS.get(obj["kind"])
        view = PARSERS[kind](obj) if kind else None
        if view is not None:
            views[kind][object_key(obj)] = view  # type: ignore[index]
    series = [(family, r["metric"], float(r["value"][1]))
              for family, body in prometheus_answers(args.nodes).items() for r in json.loads(body)["data"]["result"]]
    objects = ClusterObjects(
        workloads=views["workloads"], cluster_queues=views["clusterqueues"], local_queues=views["localqueues"],
        flavors=views["resourceflavors"], admission_checks=views["admissionchecks"],
        ray_clusters=views["rayclusters"], nodes=views["nodes"], pods=views["pods"])
    t = time.perf_counter()
    snap = build_snapshot(objects, GpuReading(fold_series(series), observed_at=now), {}, now)
    print(f"snapshot build: {1000 * (time.perf_counter() - t):.0f} ms")
    registry = CollectorRegistry()
    ctx = ControllerContext(api_client=None, registry=registry, counters=ControllerCounters(registry), dry_run=True)
    reconcilers = build_reconcilers(ctx)
    for i in range(args.passes):
        total = 0.0
        for r in reconcilers:
            prof = cProfile.Profile() if args.profile and i == 0 else None
            t = time.perf_counter()
            if prof is not None:
                prof.enable()
            await r.reconcile(snap, now + i)
            if prof is not None:
                prof.disable()
            dt = time.perf_counter() - t
            total += dt
            print(f"pass {i}: {r.name} {1000 * dt:.0f} ms")
            if prof is not None:
                Path(args.profile).mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (a benchmark, once)
                prof.dump_stats(Path(args.profile) / f"{r.name}.prof")
                pstats.Stats(prof).sort_stats("tottime").print_stats(12)
        print(f"pass {i}: all deciders {1000 * total:.0f} ms")
    return 0


async def main(args: argparse.Namespace) -> int:
    from tests.fakeapi.server import FakeApiServer
    from tests.support import paths
    from tests.support.ports import free_port

    if args.mode == "passes":
        return await passes_in_process(args)
    now = time.time()
    t0 = time.perf_counter()
    api = FakeApiServer(paths.crds_dir(), history_limit=400_000)
    objs = cluster(args.workloads, args.rayclusters, args.nodes, now)
    api.load(objs)
    load_s = time.perf_counter() - t0
    await api.start()

    answers = prometheus_answers(args.nodes)

    empty = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'

    async def query(request: web.Request) -> web.Response:  # families the stub does not serve: no series
        return web.Response(body=answers.get(request.query["query"], empty), content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    prom_port = free_port()
    await web.TCPSite(runner, "127.0.0.1", prom_port).start()

    modes = {"core": [False], "reconcilers": [True], "both": [False, True]}[args.mode]
    columns: list[tuple[str, dict[str, str]]] = []
    try:
        for with_rec in modes:
            name = "with the deciders (dry-run)" if with_rec else "controller core (no deciders)"
            columns.append((name, await measure(args, api, prom_port, with_rec, "r" if with_rec else "c")))
    finally:
        await runner.cleanup()
        await api.stop()

    n_pods = sum(1 for x in objs if x["kind"] == "Pod")
    common = [
        ("objects served", f"{args.workloads} Workloads, {args.rayclusters} RayClusters, {n_pods} pods, "
                           f"{args.nodes} nodes ({args.nodes * GPUS_PER_NODE} GPUs), {QUEUES} ClusterQueues"),
        ("fake API bulk load (bench process)", f"{load_s:.1f} s"),
    ]
    keys = list(dict.fromkeys(k for _, rows in columns for k in rows))
    head = "| measure | " + " | ".join(n for n, _ in columns) + " |\n|---|" + "---|" * len(columns) + "\n"
    lines = [f"| {k} | " + " | ".join(v for _ in columns) + " |" for k, v in common]
    lines += [f"| {k} | " + " | ".join(rows.get(k, "") for _, rows in columns) + " |" for k in keys]
    table = head + "\n".join(lines)
    cmdline = "python benchmarks/controller_bench.py " + " ".join(sys.argv[1:])
    report = (
        "# Controller benchmark\n\n"
        f"Command: `{cmdline.strip()}`  \n"
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
        f"{platform.python_version()}; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.\n\n"
        "Each column is one `queuepilot controller --dry-run --no-leader-elect` subprocess, started in turn "
        f"(resync every {args.resync:g} s, `/metrics` scraped every {args.scrape_every:g} s while the "
        "`/healthz` probes run) against the same "
        f"tests' fake API server and a stub Prometheus API serving the {args.nodes * GPUS_PER_NODE} GPUs' four series; RayClusters "
        "have no head address yet, so no Ray dashboards are polled (every cluster's Ray signal is missing: "
        "the scaler holds each group, `RaySignalStale`). Reported, not asserted.\n\n"
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
    p.add_argument("--resync", type=float, default=5.0, help="controller --resync-seconds (passes while settling)")
    p.add_argument("--mode", choices=("core", "reconcilers", "both", "passes"), default="both",
                   help="controller core alone, with the deciders (dry-run), or both side by side (default); "
                        "passes: time (and --profile) the deciders in this process on the same snapshot")
    p.add_argument("--passes", type=int, default=3, help="--mode passes: passes to time")
    p.add_argument("--log-level", default="ERROR", help="the controller's --log-level (WARNING shows asyncio's "
                   "slow-callback lines under PYTHONASYNCIODEBUG=1)")
    p.add_argument("--stalls", type=float, default=0.0,
                   help="diagnostics: print the controller loop thread's stack whenever its loop is held this long")
    p.add_argument("--scrape-every", type=float, default=15.0,
                   help="scrape /metrics this often while /healthz is probed (0: never)")
    p.add_argument("--profile", default="", help="--mode passes: write cProfile stats of the first pass to this folder")
    p.add_argument("--with-reconcilers", dest="mode", action="store_const", const="reconcilers",
                   help="same as --mode reconcilers")
    sys.exit(asyncio.run(main(p.parse_args())))
