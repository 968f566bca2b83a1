"""queuepilot demo: the whole system, simulated, in one process.

A small cluster (4 nodes x 8 GPUs, three teams with Kueue quotas and autoscaled RayClusters, a
synthetic trace with GPU failures) runs in accelerated real time (60x by default) behind

- the real exporter endpoint (one ``ExporterApp`` + ``SimSource`` per node, driven from the
  simulation: utilization, XID 79 / fallen-off-the-bus faults; GPU-to-pod attribution through its
  PodResources client), the first on ``--exporter-listen`` (default 127.0.0.1:9400, dcgm-exporter's
  port), the others on the next ports;
- the real controller (``autoscaler.controller.loop.Controller``: its pass loop, reconcilers,
  metrics, ``/healthz`` and ``/readyz``) at ``--controller-listen`` (default 127.0.0.1:8080), reading
  the simulated Kueue/KubeRay objects, scraping the exporters for GPU readings, asking the simulated
  Ray for demand, and writing its decisions back into the simulation;

with a live rich view when stdout is a terminal; with ``--no-tui``, or when stdout is not a terminal (a
pipe, a file, a CI log), one line per decision as it happens and a status line every few seconds.
``--prometheus`` starts a local Prometheus (when the ``prometheus`` binary is installed) scraping both,
on loopback, in a temp dir, with the generated alert and recording rules loaded (``queuepilot report``
works against it).  ``--duration`` ends it cleanly, as do Ctrl-C, SIGTERM and SIGHUP (a closed
terminal or ``tmux kill-session``, also when a parent such as make ignores SIGHUP): every port is
released and the Prometheus child stops.  Every flag can also be set as ``QUEUEPILOT_<FLAG>`` (on/off
flags: 1/true/yes/on or 0/false/no/off).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from autoscaler.controller.config import ControllerConfig
from autoscaler.controller.loop import Controller
from exporter.server import ExporterApp
from servicekit.argtypes import count, non_negative_seconds
from servicekit.cli import Parser, fail
from servicekit.envflags import EnvError, apply_env
from servicekit.listen import ListenAddress, listen_arg
from simulator.demo.sources import SimRayClient
from simulator.demo.world import DemoConfig, DemoWorld, _clock
from simulator.utilization import MODELS

log = logging.getLogger("queuepilot.demo")

DEFAULT_EXPORTER_LISTEN = "127.0.0.1:9400"
DEFAULT_CONTROLLER_LISTEN = "127.0.0.1:8080"
STEP_S = 0.25  # real seconds between simulation steps
CONTROL_INTERVAL_S = 30.0  # simulated seconds between the controller's resync passes
POLL_S = 0.5  # real seconds between GPU scrapes and Ray polls
EXPORTER_INTERVAL_S = 0.5  # real seconds between exporter collections
PLAIN_EVERY_S = 10.0  # real seconds between status lines without the live view
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REPO = Path(__file__).resolve().parents[2]
RULE_FILES = (REPO / "alerts" / "generated" / "queuepilot-rules.yaml",
              REPO / "alerts" / "generated" / "queuepilot-economics.yaml")


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="queuepilot demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=non_negative_seconds, default=0.0,
                   help="real seconds to run (0: until Ctrl-C / SIGTERM)")
    p.add_argument("--exporter-listen", type=listen_arg, default=DEFAULT_EXPORTER_LISTEN,
                   help="HOST:PORT of the first node's exporter (the others take the next ports; port 0: any)")
    p.add_argument("--controller-listen", type=listen_arg, default=DEFAULT_CONTROLLER_LISTEN,
                   help="HOST:PORT of the controller's /metrics, /healthz and /readyz (port 0: any)")
    p.add_argument("--no-tui", action="store_true", default=False,
                   help="one line per decision and a status line every few seconds instead of the live view "
                        "(also when stdout is not a terminal)")
    p.add_argument("--prometheus", action="store_true", default=False,
                   help="start a local Prometheus scraping both endpoints (needs the prometheus binary)")
    p.add_argument("--speed", type=positive_number, default=60.0, help="simulated seconds per real second")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic trace and the failures")
    p.add_argument("--nodes", type=count(1, 64), default=4, help="8-GPU nodes")
    p.add_argument("--util-model", choices=sorted(MODELS), default="scattered",
                   help="GPU utilization model of the synthetic trace (docs/simulation.md); the demo's story "
                        "uses scattered, whose tasks leave empty workers soon")
    return p


def positive_number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


# ------------------------------------------------------------------------------------ controller
def demo_controller(world: DemoWorld, listen: ListenAddress, exporters: list[ExporterApp],
                    gpu_signal: Any = None) -> Controller:
    """The real ``Controller`` over the simulated world: objects from ``SimClusterSource``, GPU readings
    scraped from ``exporters``, Ray demand from ``SimRayClient``, writes through the engine's
    ``SimWriter``; its clock is the simulation's.  Periods are in real seconds; ages and staleness in
    simulated ones (a reading is at most a couple of real seconds, ``speed`` x as many simulated, old).
    ``gpu_signal``: the controller's own ``ScrapeGpuSignal`` over ``exporters`` when None (a test that
    steps the world passes one it polls itself)."""
    speed = world.cfg.speed
    config = ControllerConfig(
        listen_host=listen.host, listen_port=listen.port, gpu_signal="scrape", leader_elect=False,
        resync_seconds=max(0.05, CONTROL_INTERVAL_S / speed), debounce_seconds=0.05,
        gpu_poll_seconds=POLL_S, ray_poll_seconds=POLL_S, ray_timeout_seconds=2.0,
        signal_stale_seconds=max(120.0, 6 * POLL_S * speed),
    )

    async def discover() -> list[tuple[str, str]]:
        return [(app.hostname, app.metrics_url.removesuffix("/metrics")) for app in exporters]

    return Controller(config, None, clock=lambda: world.sim_now, ray_client=SimRayClient(world.engine),
                      source=world.source, writer=world.engine.writer, discover_exporters=discover,
                      gpu_signal=gpu_signal)


def demo_exporters(world: DemoWorld, listens: list[str]) -> list[ExporterApp]:
    """One real ``ExporterApp`` per simulated node, on the simulation's clock: its health windows (a fatal
    XID keeps a GPU unhealthy ``--fatal-xid-window`` seconds), XID hold and sample ages run in simulated
    seconds, as the controller's do, so both say the same about a GPU at the same moment.  Collections run
    every ``EXPORTER_INTERVAL_S`` real seconds (``speed`` x as many simulated), so the health endpoint's
    staleness limit, counted in the clock's seconds, is as many real intervals as a real exporter's.  Which
    pod holds which GPU reaches it through its PodResources client (the kubelet's answer, simulated)."""
    apps = []
    for (name, src), listen in zip(world.sources.items(), listens, strict=True):
        app = ExporterApp(src, listen=listen, hostname=name, interval=EXPORTER_INTERVAL_S,
                          clock=lambda: world.sim_now, stale_after_intervals=3.0 * world.cfg.speed)
        app.pod_resources = app.agent.pod_resources = world.pod_resources[name]
        apps.append(app)
    return apps


def _exporter_listens(first: ListenAddress, n: int) -> list[str]:
    h = f"[{first.host}]" if ":" in first.host else first.host
    return [f"{h}:{0 if first.port == 0 else first.port + i}" for i in range(n)]


# ------------------------------------------------------------------------------------ prometheus
class LocalPrometheus:
    """A Prometheus on 127.0.0.1 with a temp dir, scraping the demo's endpoints every 5 s and evaluating
    ``rule_files`` (the generated alert and economics recording rules) every 15 s."""

    def __init__(self, targets: dict[str, list[str]], rule_files: tuple[Path, ...] = RULE_FILES) -> None:
        self.targets = targets
        self.rule_files = tuple(p for p in rule_files if p.is_file())
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
            "global": {"scrape_interval": "5s", "evaluation_interval": "15s"},
            "rule_files": [str(p) for p in self.rule_files],
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
    world = DemoWorld(DemoConfig(nodes=args.nodes, speed=args.speed, seed=args.seed, util_model=args.util_model))
    await world.warm_up()
    exporters = demo_exporters(world, _exporter_listens(args.exporter_listen, len(world.sources)))
    controller = demo_controller(world, args.controller_listen, exporters)
    world.hand_over(controller.published, controller.counters, lambda: controller.request_pass("world"))
    prom: LocalPrometheus | None = None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:  # a handler, not the default: SIGHUP may arrive ignored from the parent (make)
        loop.add_signal_handler(sig, stop.set)
    say = _Output(stop)
    started: list[ExporterApp] = []
    try:
        for app in exporters:
            await app.start()
            started.append(app)
        await controller.start()
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(controller.config.listen_host,
                                                          controller.config.listen_host)
        controller_url = f"http://{'[' + host + ']' if ':' in host else host}:{controller.port}/metrics"
        urls = [app.metrics_url for app in exporters] + [controller_url]
        say(f"queuepilot demo: {len(exporters)} nodes x {world.cfg.gpus_per_node} GPUs, 3 teams, x{args.speed:g} "
            f"real time, opening {_clock(world.sim_now)}; the first real minute shows a Ray scale-up and "
            "scale-down, Retries with their reasons, a Rejected request, idle GPUs reclaimed, a stalled "
            "workload and a GPU failure")
        for app in exporters:
            say(f"  exporter   {app.hostname}: {app.metrics_url}")
        say(f"  controller: {controller_url} (and /healthz, /readyz)")
        if args.prometheus:
            prom = LocalPrometheus({
                "queuepilot-exporter": [_hostport(a.metrics_url) for a in exporters],
                "queuepilot-controller": [_hostport(controller_url)],
            })
            if prom.start():
                if not await asyncio.to_thread(prom.wait_ready):
                    print("--prometheus: Prometheus did not become ready (see its log); continuing", file=sys.stderr)
                dashboards = sorted((REPO / "dashboards" / "generated").glob("*.json"))
                say(f"  prometheus: {prom.url} (scraping every 5s; alert and recording rules loaded: "
                    f"queuepilot report --prometheus-url {prom.url} --window 30m)")
                say("  dashboards: in Grafana add a Prometheus data source at "
                    f"{prom.url}, then Dashboards > Import each of: "
                    + (", ".join(str(p) for p in dashboards) or "dashboards/generated/*.json (run make generate)"))
        await _loop(world, args, urls, stop, say, prom.url if prom is not None and prom.proc is not None else None)
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
        await controller.shutdown()
        for app in started:
            await app.stop()
        if prom is not None:
            prom.stop()
    say(f"queuepilot demo: stopped at simulated {world.sim_now / 3600:.1f} h; "
        f"{world.engine.metrics.jobs_completed} jobs completed")
    return 0


class _Output:
    """Lines on stdout, flushed one by one; when stdout is gone (a closed terminal, a closed pipe) the
    demo stops instead of failing on the next write."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.gone = False

    def __call__(self, line: str) -> None:
        if self.gone:
            return
        try:
            print(line, flush=True)
        except OSError:  # BrokenPipeError, EIO from a hung-up terminal
            self.gone = True
            self.stop.set()


def live_view(no_tui: bool, stdout: Any = None) -> bool:
    """Whether to draw the live view: asked for (no ``--no-tui``) and stdout is a terminal."""
    stream = sys.stdout if stdout is None else stdout
    return not no_tui and bool(getattr(stream, "isatty", lambda: False)())


async def _loop(world: DemoWorld, args: argparse.Namespace, urls: list[str], stop: asyncio.Event, say: _Output,
                prometheus: str | None) -> None:
    from simulator.demo.view import hint_lines, plain_line, render, story_line

    t_real0 = time.monotonic()
    sim0 = world.sim_now
    deadline = t_real0 + args.duration if args.duration > 0 else None
    live = None
    if live_view(args.no_tui):
        from rich.live import Live

        live = Live(refresh_per_second=4, screen=False, vertical_overflow="crop")
        live.update(_view(world, urls, live, render, prometheus))
        live.start()

    next_plain = 0.0
    told = 0  # story entries printed (--no-tui)
    hinted: set[str] = set()
    try:
        while not stop.is_set() and not world.finished:
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                break
            await world.step_to(sim0 + (now - t_real0) * args.speed)
            if live is not None:
                live.update(_view(world, urls, live, render, prometheus))
            else:
                total = sum(world.counts.values())
                for entry in list(world.story)[len(world.story) - min(len(world.story), total - told):]:
                    say(story_line(entry))
                told = total
                starving = {key for key, _, _ in world.starving()}
                if starving - hinted:
                    for line in hint_lines(world):
                        say(line)
                hinted |= starving
                if now >= next_plain:
                    say(plain_line(world))
                    next_plain = now + PLAIN_EVERY_S
            timeout = STEP_S if deadline is None else max(0.0, min(STEP_S, deadline - time.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout)
    finally:
        if live is not None:
            live.stop()


def _view(world: DemoWorld, urls: list[str], live: Any, render: Any, prometheus: str | None) -> Any:
    size = live.console.size
    return render(world, urls, size.width, size.height, prometheus)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        apply_env(parser)
    except EnvError as e:
        return fail(parser.prog, str(e))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if live_view(args.no_tui):  # the live view shows the failed GPUs; log lines would scroll it out of an 80x24 terminal
        logging.getLogger("exporter").setLevel(logging.ERROR)
    try:
        return asyncio.run(run(args))
    except OSError as e:
        print(f"queuepilot demo: cannot listen: {e}", file=sys.stderr)
        return 1
