"""``queuepilot demo``: the whole system, simulated, in one process (DESIGN.md "The embedded default").

A small cluster (4 nodes x 8 GPUs, three teams with Kueue quotas and autoscaled RayClusters, a
synthetic trace with GPU failures) runs in accelerated real time (60x by default) under the real
admission and scaling decision functions, behind

- the real exporter endpoint (one ``ExporterApp`` + ``SimSource`` per node, driven from the
  simulation: allocations, utilization, XID 79 / fallen-off-the-bus faults), the first on
  ``--exporter-listen`` (default 127.0.0.1:9400, dcgm-exporter's port), the others on the next ports;
- the real controller metrics endpoint (``ControllerCollector`` + ``ControllerCounters`` on a private
  registry) at ``--controller-listen`` (default 127.0.0.1:8080) ``/metrics``;

with a live rich view (``--no-tui``: a plain line every few seconds).  ``--prometheus`` starts a local
Prometheus (when the ``prometheus`` binary is installed) scraping both, on loopback, in a temp dir.
``--duration`` ends it cleanly, as do Ctrl-C and SIGTERM.  Flags are also ``QUEUEPILOT_<FLAG>``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from autoscaler.controller.collector import ControllerCollector
from exporter.server import ExporterApp, parse_listen
from simulator.demo.world import DemoConfig, DemoWorld

log = logging.getLogger("queuepilot.demo")

DEFAULT_EXPORTER_LISTEN = "127.0.0.1:9400"
DEFAULT_CONTROLLER_LISTEN = "127.0.0.1:8080"
STEP_S = 0.25  # real seconds between simulation steps
PLAIN_EVERY_S = 2.0
REPO = Path(__file__).resolve().parents[1]


def _env(name: str, default):
    return os.environ.get("QUEUEPILOT_" + name.upper().replace("-", "_"), default)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="queuepilot demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=float(_env("duration", 0)),
                   help="real seconds to run (0: until Ctrl-C / SIGTERM)")
    p.add_argument("--exporter-listen", default=_env("exporter_listen", DEFAULT_EXPORTER_LISTEN),
                   help="HOST:PORT of the first node's exporter (the others take the next ports; port 0: any)")
    p.add_argument("--controller-listen", default=_env("controller_listen", DEFAULT_CONTROLLER_LISTEN),
                   help="HOST:PORT of the controller metrics endpoint (port 0: any)")
    p.add_argument("--no-tui", action="store_true", default=bool(_env("no_tui", "")),
                   help="print a plain status line every few seconds instead of the live view")
    p.add_argument("--prometheus", action="store_true", default=bool(_env("prometheus", "")),
                   help="start a local Prometheus scraping both endpoints (needs the prometheus binary)")
    p.add_argument("--speed", type=float, default=float(_env("speed", 60.0)), help="simulated seconds per second")
    p.add_argument("--seed", type=int, default=int(_env("seed", 0)))
    p.add_argument("--nodes", type=int, default=int(_env("nodes", 4)), help="8-GPU nodes")
    return p


# ------------------------------------------------------------------------------------ controller
class ControllerEndpoint:
    """The controller's /metrics (collector + counters on a private registry) and /healthz, via aiohttp."""

    def __init__(self, world: DemoWorld, registry: CollectorRegistry, listen: str) -> None:
        self.world = world
        self.registry = registry
        self.listen = listen
        self.registry.register(ControllerCollector(lambda: world.snapshot, world.published, lambda: True))
        self._runner: web.AppRunner | None = None
        self.port = 0
        self.host = ""

    async def start(self) -> None:
        async def metrics(request: web.Request) -> web.Response:
            body = await asyncio.to_thread(generate_latest, self.registry)
            return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

        async def healthz(request: web.Request) -> web.Response:
            return web.json_response({"status": "ok", "simulated_seconds": self.world.sim_now})

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        host, port = parse_listen(self.listen)
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        self.host, self.port = host, sock.getsockname()[1]
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, sock).start()

    @property
    def url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)
        return f"http://{host}:{self.port}/metrics"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def _exporter_listens(first: str, n: int) -> list[str]:
    host, port = parse_listen(first)
    h = f"[{host}]" if ":" in host else host
    return [f"{h}:{0 if port == 0 else port + i}" for i in range(n)]


# ------------------------------------------------------------------------------------ prometheus
class LocalPrometheus:
    """A Prometheus on 127.0.0.1 with a temp dir, scraping the demo's endpoints every 5 s."""

    def __init__(self, targets: dict[str, list[str]]) -> None:
        self.targets = targets
        self.proc: subprocess.Popen | None = None
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.url = ""

    def start(self) -> bool:
        binary = shutil.which("prometheus")
        if binary is None:
            print("--prometheus: no 'prometheus' binary found (Debian: apt-get install prometheus); continuing "
                  "without it", file=sys.stderr)
            return False
        self.tmp = tempfile.TemporaryDirectory(prefix="queuepilot-demo-prom-")
        d = Path(self.tmp.name)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        config = {
            "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": t}]} for job, t in self.targets.items()],
        }
        (d / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.url = f"http://127.0.0.1:{port}"
        self._log = open(d / "prometheus.log", "wb")
        self.proc = subprocess.Popen(
            [binary, f"--config.file={d / 'prometheus.yml'}", f"--storage.tsdb.path={d / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--web.external-url={self.url}"],
            stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent,
        )
        return True

    def wait_ready(self, timeout: float = 15.0) -> bool:
        """Block until ``/-/ready`` answers 200 (run it in a thread); False on timeout or exit."""
        import urllib.request

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
            self._log.close()
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM it when the demo dies, even by SIGKILL (no orphan Prometheus)."""
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _hostport(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0]


# ------------------------------------------------------------------------------------------ main
async def run(args: argparse.Namespace) -> int:
    world = DemoWorld(DemoConfig(nodes=args.nodes, speed=args.speed, seed=args.seed))
    await world.warm_up()
    controller = ControllerEndpoint(world, world.engine.context.registry, args.controller_listen)
    exporters = [
        ExporterApp(src, listen=listen, hostname=name, interval=1.0)
        for (name, src), listen in zip(world.sources.items(), _exporter_listens(args.exporter_listen, len(world.sources)),
                                       strict=True)
    ]
    prom: LocalPrometheus | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    started: list[ExporterApp] = []
    try:
        await controller.start()
        for app in exporters:
            await app.start()
            started.append(app)
        urls = [app.metrics_url for app in exporters] + [controller.url]
        print(f"queuepilot demo: {len(exporters)} nodes x {world.cfg.gpus_per_node} GPUs, 3 teams, x{args.speed:g} "
              "real time", flush=True)
        for app in exporters:
            print(f"  exporter   {app.hostname}: {app.metrics_url}", flush=True)
        print(f"  controller: {controller.url}", flush=True)
        if args.prometheus:
            prom = LocalPrometheus({
                "queuepilot-exporter": [_hostport(a.metrics_url) for a in exporters],
                "queuepilot-controller": [_hostport(controller.url)],
            })
            if prom.start():
                if not await asyncio.to_thread(prom.wait_ready):
                    print("--prometheus: Prometheus did not become ready (see its log); continuing", file=sys.stderr)
                dashboards = sorted((REPO / "dashboards" / "generated").glob("*.json"))
                print(f"  prometheus: {prom.url} (scraping every 5s)", flush=True)
                print("  dashboards: in Grafana add a Prometheus data source at "
                      f"{prom.url}, then Dashboards > Import each of: "
                      + (", ".join(str(p) for p in dashboards) or "dashboards/generated/*.json (run make generate)"),
                      flush=True)
        await _loop(world, args, urls, stop)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        for app in started:
            await app.stop()
        await controller.stop()
        if prom is not None:
            prom.stop()
    print(f"queuepilot demo: stopped at simulated {world.sim_now / 3600:.1f} h; "
          f"{world.engine.metrics.jobs_completed} jobs completed", flush=True)
    return 0


async def _loop(world: DemoWorld, args: argparse.Namespace, urls: list[str], stop: asyncio.Event) -> None:
    t_real0 = time.monotonic()
    sim0 = world.sim_now
    deadline = t_real0 + args.duration if args.duration > 0 else None
    live = None
    if not args.no_tui:
        from rich.live import Live

        from simulator.demo.view import render

        live = Live(render(world, urls), refresh_per_second=4, screen=False)
        live.start()
    from simulator.demo.view import plain_line

    next_plain = 0.0
    try:
        while not stop.is_set() and not world.finished:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            await world.step_to(sim0 + (now - t_real0) * args.speed)
            if live is not None:
                from simulator.demo.view import render

                live.update(render(world, urls))
            elif now >= next_plain:
                print(plain_line(world), flush=True)
                next_plain = now + PLAIN_EVERY_S
            timeout = STEP_S if deadline is None else max(0.0, min(STEP_S, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout)
    finally:
        if live is not None:
            live.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        for listen in (args.exporter_listen, args.controller_listen):
            parse_listen(listen)
        if args.speed <= 0 or args.nodes <= 0:
            raise ValueError("--speed and --nodes must be > 0")
    except ValueError as e:
        print(f"queuepilot demo: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args))
    except OSError as e:
        print(f"queuepilot demo: cannot listen: {e}", file=sys.stderr)
        return 1
