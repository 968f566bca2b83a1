"""Exporter benchmark: scrape latency under concurrent scrapes, CPU per collection cycle, RSS.

For 8 and 64 simulated GPUs (half allocated to pods), each beside the floor: the same series in a
plain ``prometheus_client`` registry of Gauges rendered by ``generate_latest``; and the ``nvml``
source (with GPM) over the test suite's fake ``libnvidia-ml.so.1``, so the RSS of the real NVML
path (pynvml, ctypes, GPM samples) is measured too.  Each server runs in its own process (so RSS and
CPU are its own); this process is the load generator.

    .venv/bin/python benchmarks/exporter_bench.py [--clients 8] [--requests 100] [--out benchmarks/results/exporter.md]

Reported, never asserted.  Writes a markdown table with the command and the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

T0 = 1_700_000_000.0
FAKE_MAX_GPUS = 16  # tests/nvml/fake_nvml.c MAX_GPUS


# --- server side (a child process) ----------------------------------------------------------------
def _floor_registry(families):
    """Gauges holding exactly the exporter's series (counters too: a Gauge keeps the name)."""
    from prometheus_client import CollectorRegistry, Gauge

    registry = CollectorRegistry(auto_describe=False)
    gauges = []
    for m in families:
        names = list(dict.fromkeys(k for s in m.samples for k in s.labels))
        g = Gauge(m.samples[0].name if m.samples else m.name, m.documentation, names, registry=registry)
        gauges.append((g, names))
    return registry, gauges


def _fill_floor(gauges, families) -> None:
    for (g, names), m in zip(gauges, families, strict=True):
        for s in m.samples:
            (g.labels(*[s.labels.get(k, "") for k in names]) if names else g).set(s.value)


async def _serve(mode: str, gpus: int) -> None:
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from exporter.collector import render_families
    from exporter.server import ExporterApp
    from exporter.sources.sim import SimSource

    source = SimSource("bench-node", gpus=gpus, fault_script=())
    if mode == "nvml":
        import ctypes

        import pynvml

        from exporter.sources.nvml import NvmlSource

        sys.path.insert(0, str(REPO / "benchmarks"))
        from nvml_latency import build_fake

        lib, control = build_fake(gpus)
        os.environ["FAKE_NVML_CONTROL"] = str(control)
        pynvml.nvmlLib = ctypes.CDLL(str(lib))
        app = ExporterApp(NvmlSource("bench-node"), listen="127.0.0.1:0", interval=10.0, pod_resources_socket=None)
        await app.start()
        port = app.port
    elif mode == "exporter":
        app = ExporterApp(source, listen="127.0.0.1:0", interval=10.0)
        await app.start()
        port = app.port
    else:
        async with ExporterApp(SimSource("bench-node", gpus=gpus, fault_script=()), listen="127.0.0.1:0") as tmp:
            families = [m for m in render_families(tmp.collector.state, time.time()) if m.samples]
        registry, gauges = _floor_registry(families)
        _fill_floor(gauges, families)

        async def metrics(request: web.Request) -> web.Response:
            return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

        wapp = web.Application()
        wapp.router.add_get("/metrics", metrics)
        runner = web.AppRunner(wapp, access_log=None)
        await runner.setup()
        sock = socket.create_server(("127.0.0.1", 0))
        await web.SockSite(runner, sock).start()
        port = sock.getsockname()[1]
    print(f"READY {port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent closes stdin


# --- measurements in this process ------------------------------------------------------------------
def cycle_cpu(gpus: int, cycles: int) -> tuple[float, float]:
    """CPU seconds per collection cycle: the agent (sim + health + publish) vs refilling the Gauges."""
    from exporter.agent import Agent
    from exporter.collector import ExporterCollector, new_registry, render_families, render_text
    from exporter.sources.sim import SimSource

    t = [T0]
    source = SimSource("bench-node", gpus=gpus, fault_script=())
    collector = ExporterCollector(clock=lambda: t[0])
    registry = new_registry(collector)
    agent = Agent(source, collector, hostname="bench-node", clock=lambda: t[0])
    asyncio.run(agent.collect_once())

    async def agent_cycles() -> float:
        start = time.process_time()
        for i in range(cycles):
            t[0] = T0 + 10 * (i + 1)
            await agent.collect_once()
            render_text(registry)  # building + formatting the families happens once per collection
        return (time.process_time() - start) / cycles

    ours = asyncio.run(agent_cycles())

    # the floor keeps one Gauge child per series and only .set()s the new values each cycle
    floor_source = SimSource("bench-node", gpus=gpus, fault_script=())
    first = [m for m in render_families(agent.collector.state, T0) if m.samples]
    _, gauges = _floor_registry(first)
    children = {}
    for (g, names), m in zip(gauges, first, strict=True):
        for smp in m.samples:
            uuid = smp.labels.get("UUID") or smp.labels.get("uuid")
            children[(m.name, uuid)] = g.labels(*[smp.labels.get(k, "") for k in names]) if names else g
    start = time.process_time()
    for i in range(cycles):
        sample = floor_source.sample(T0 + 10 * (i + 1))
        for gpu in sample.gpus:
            for name, value in gpu.fields.items():
                children[(name, gpu.uuid)].set(value)
    floor = (time.process_time() - start) / cycles
    return ours, floor


def _proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _load(port: int, clients: int, requests: int) -> tuple[list[float], int]:
    import aiohttp

    url = f"http://127.0.0.1:{port}/metrics"
    latencies: list[float] = []
    size = 0

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal size
        for _ in range(requests):
            start = time.perf_counter()
            async with session.get(url) as r:
                body = await r.read()
            latencies.append(time.perf_counter() - start)
            size = len(body)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:
        for _ in range(5):  # warm-up
            async with session.get(url) as r:
                await r.read()
        await asyncio.gather(*(client(session) for _ in range(clients)))
    return latencies, size


def scrape(mode: str, gpus: int, clients: int, requests: int) -> dict[str, float]:
    proc = subprocess.Popen(
        [sys.executable, __file__, "--serve", mode, "--gpus", str(gpus)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        line = proc.stdout.readline()
        if not line.startswith("READY"):
            raise RuntimeError(f"{mode} server did not start: {line!r}")
        port = int(line.split()[1])
        cpu0 = _proc_cpu(proc.pid)
        latencies, size = asyncio.run(_load(port, clients, requests))
        cpu = _proc_cpu(proc.pid) - cpu0
        rss = _proc_rss_mib(proc.pid)
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    q = statistics.quantiles(latencies, n=100)
    return {"p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000, "cpu_ms_per_scrape": cpu / len(latencies) * 1000,
            "rss_mib": rss, "bytes": size}


def machine() -> str:
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    return f"{os.cpu_count()} CPU cores ({model}), Python {platform.python_version()}, {platform.system()} {platform.release()}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=100, help="requests per client")
    p.add_argument("--cycles", type=int, default=200, help="collection cycles measured for CPU")
    p.add_argument("--gpus", type=int, nargs="*", default=[8, 64])
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "exporter.md")
    p.add_argument("--serve", choices=("exporter", "floor", "nvml"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.serve:
        asyncio.run(_serve(args.serve, args.gpus[0]))
        return 0

    from rich.console import Console
    from rich.table import Table

    rows = []
    for gpus in args.gpus:
        ours_cpu, floor_cpu = cycle_cpu(gpus, args.cycles)
        for mode, server, cpu_cycle in (
            ("queuepilot (sim)", "exporter", ours_cpu),
            ("floor (generate_latest)", "floor", floor_cpu),
            ("queuepilot (nvml + GPM, fake library)", "nvml", None),
        ):
            if server == "nvml" and gpus > FAKE_MAX_GPUS:
                continue
            r = scrape(server, gpus, args.clients, args.requests)
            rows.append((gpus, mode, r, cpu_cycle))

    headers = ["GPUs", "server", "scrape p50 ms", "scrape p99 ms", "server CPU ms / scrape", "CPU ms / collection cycle",
               "RSS MiB", "body KiB"]
    table = Table(title=f"exporter: {args.clients} concurrent clients x {args.requests} scrapes")
    for h in headers:
        table.add_column(h, justify="right" if h not in ("server",) else "left")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for gpus, mode, r, cpu_cycle in rows:
        cells = [str(gpus), mode, f"{r['p50_ms']:.2f}", f"{r['p99_ms']:.2f}", f"{r['cpu_ms_per_scrape']:.2f}",
                 "–" if cpu_cycle is None else f"{cpu_cycle * 1000:.2f}", f"{r['rss_mib']:.1f}", f"{r['bytes'] / 1024:.0f}"]
        table.add_row(*cells)
        lines.append("| " + " | ".join(cells) + " |")
    Console(width=150).print(table)

    command = ".venv/bin/python benchmarks/exporter_bench.py " + " ".join(argv if argv is not None else sys.argv[1:])
    text = f"""# Exporter benchmark

Produced by `{command.strip()}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.
Machine: {machine()} (shared with other work while measured).

{args.clients} concurrent HTTP clients x {args.requests} scrapes each against one server process; simulated
fleet with half the GPUs allocated to pods (two GPUs per pod).  "floor" is the same series held in a plain
`prometheus_client` registry of Gauges and rendered by `generate_latest` on every scrape.

- *scrape p50/p99*: client-side latency of a whole `/metrics` response (the load generator shares the cores).
- *server CPU / scrape*: the server process's user+system CPU during the load, divided by the scrapes.
- *CPU / collection cycle*: one collection, in-process: queuepilot = `Agent.collect_once` (sim sample, health,
  publish) plus the one-time build and formatting of the families that the first scrape after a publish does;
  floor = the same sim sample written into the Gauges' cached children with `.set()` (its formatting is paid
  on every scrape instead).
  For the nvml source see `benchmarks/results/nvml-latency-fake.md` (a whole collection, per GPU).
- *RSS*: the server process after the load (target: at most 60 MiB for 8 GPUs).  The nvml rows load the
  real nvidia-ml-py over the fake library, with GPM on every GPU and two MIG instances on the last one (the
  fake has at most 16 GPUs, so there is no 64-GPU nvml row).

{chr(10).join(lines)}

The queuepilot exporter formats each family once per published sample and re-serves the text until the next
collection (only `queuepilot_exporter_sample_age_seconds` is rebuilt per scrape), so a scrape costs about the
same whatever the GPU count; `generate_latest` formats every series on every scrape.
"""
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
