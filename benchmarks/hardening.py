"""Hostile inputs against the real processes, before and after: peak memory and probe latency.

Every scenario starts the process as it is deployed (``queuepilot controller`` / ``queuepilot
exporter`` in a subprocess, so its RSS is its own) and attacks it over loopback, bounded in count and
time; ``/healthz`` and ``/metrics`` are probed from a process of their own (``--probe``), so the
attackers' work in this process never shows in the probes' latency.  With ``--baseline REF`` each scenario runs twice in one invocation, once from a temporary
``git worktree`` of REF and once from this checkout, against the same attackers, and the table puts
the two side by side.  Results are reported, not asserted.

Scenarios (``--only`` picks some):

- ``ray``: one opted-in RayCluster whose head answers every dashboard request with ``--ray-mb`` MB of
  ``[{},{},...]``, next to ``--honest`` RayClusters in other namespaces whose heads answer the recorded
  Ray 2.60 fixtures; the controller polls every 2 s for ``--seconds``: its peak RSS (VmHWM), the
  latency of ``/healthz`` (every 100 ms) and ``/metrics`` (every second), and at the end the Ray
  signal age of the honest clusters and the hostile one's error kinds;
- ``ray-bound``: the same with the costliest answer the new bounds let through (``costliest_answer``):
  ``nodes_summary``'s allowance of objects as one-key ``{"a":1}`` and the rest of its JSON values as
  two-character strings (about 14 MB; every other part refuses it by its byte cap);
- ``webhook-bodies``: ``--senders`` connections (default 100) each POST an 8 MB AdmissionReview to the
  webhook at once: peak RSS, ``/healthz`` meanwhile, the answers' status codes;
- ``webhook-dense``: the same with bodies just under the new body limit (3 MiB) of dense JSON
  (``[{},{},...]``), the worst a body the limit admits can build;
- ``webhook-flood``: 16 senders post valid reviews back to back for ``--seconds``: ``/healthz``
  latency, reviews answered, and the controller's log lines;
- ``webhook-large-flood``: the same with large valid reviews (a RayCluster whose head template has
  20 000 environment variables, 2.7 MB, under the new body limit, so both trees answer them);
- ``webhook-8mb-flood``: the same with 8 MB reviews (the old body limit; the new one refuses them);
- ``exporter-idle``: 128 connections (the exporter's cap) that each sent one request and stay idle,
  re-opened whenever the exporter closes one, then 5 real scrapes: their latency.

    .venv/bin/python benchmarks/hardening.py --baseline b235e8d [--only ray,webhook-bodies]
        [--seconds 30] [--ray-mb 32] [--out benchmarks/results/hardening.md]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

REPO = Path(__file__).resolve().parents[1]
THIS = str(Path(__file__).resolve())
sys.path.insert(0, str(REPO))

SCENARIOS = ("ray", "ray-bound", "webhook-bodies", "webhook-dense", "webhook-flood", "webhook-large-flood",
             "webhook-8mb-flood", "exporter-idle")
RAY_PATHS = ("/api/cluster_status", "/api/v0/tasks", "/api/v0/actors", "/api/v0/placement_groups",
             "/api/v0/nodes", "/nodes")
FIXTURE_OF = {"/api/cluster_status": "cluster_status_v2.json", "/api/v0/tasks": "tasks_pending_detail.json",
              "/api/v0/actors": "actors.json", "/api/v0/placement_groups": "placement_groups.json",
              "/api/v0/nodes": "nodes.json", "/nodes": "nodes_view_summary.json"}


# ------------------------------------------------------------------------------------------ helpers
def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    m = re.search(r"VmHWM:\s+(\d+)", status)
    return int(m.group(1)) / 1024 if m else float("nan")


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * (len(s) - 1)))] if s else float("nan")


def lat(values: list[float]) -> str:
    if not values:
        return "no answer"
    return (f"p50 {1000 * statistics.median(values):.0f} / p99 {1000 * pct(values, 0.99):.0f} / "
            f"max {1000 * max(values):.0f} ms ({len(values)})")


@dataclass
class Tree:
    """Where a subprocess imports queuepilot from: this checkout, or a worktree of the baseline."""

    label: str
    path: Path


@dataclass
class Proc:
    proc: asyncio.subprocess.Process
    lines: list[str] = field(default_factory=list)
    _reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while True:
            line = await self.proc.stderr.readline()
            if not line:
                return
            self.lines.append(line.decode(errors="replace").rstrip())

    def start_reading(self) -> None:
        self._reader = asyncio.create_task(self._read())

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._reader, 5)


async def spawn(tree: Tree, args: list[str]) -> Proc:
    env = {**os.environ, "KUBERNETES_SERVICE_HOST": "", "PYTHONPATH": str(tree.path), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "queuepilot", *args, cwd=tree.path, env=env,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    p = Proc(proc)
    p.start_reading()
    return p


async def wait_ready(session: aiohttp.ClientSession, url: str, p: Proc, limit: float = 90.0) -> None:
    t0 = time.monotonic()
    while True:
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return
        if p.proc.returncode is not None or time.monotonic() - t0 > limit:
            raise RuntimeError(f"{url} never answered 200:\n" + "\n".join(p.lines[-20:]))
        await asyncio.sleep(0.1)


def probe_forever(url: str, every: float) -> None:
    """``--probe URL``: GET ``url`` every ``every`` seconds until terminated, one line per probe on stdout
    (``ok SECONDS`` or ``fail KIND SECONDS``).  Run in its own process, so the attack's work in the
    benchmark process never shows in the probe's latency."""
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    while True:
        t = time.perf_counter()
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
            c.request("GET", u.path)
            r = c.getresponse()
            r.read()
            c.close()
            line = f"ok {time.perf_counter() - t:.6f}" if r.status == 200 else f"fail {r.status} {time.perf_counter() - t:.6f}"
        except (OSError, http.client.HTTPException) as e:
            line = f"fail {type(e).__name__} {time.perf_counter() - t:.6f}"
        print(line, flush=True)
        time.sleep(every)


class Prober:
    """A ``--probe`` subprocess: ``await start()``, then ``await stop()`` gives (latencies, failures)."""

    def __init__(self, url: str, every: float) -> None:
        self.url, self.every = url, every
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> Prober:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, THIS, "--probe", self.url, "--every", str(self.every),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
        return self

    async def stop(self) -> tuple[list[float], Counter[str]]:
        assert self.proc is not None and self.proc.stdout is not None
        self.proc.terminate()
        out = await self.proc.stdout.read()
        await self.proc.wait()
        latencies: list[float] = []
        failures: Counter[str] = Counter()
        for line in out.decode().splitlines():
            parts = line.split()
            if not parts:
                continue
            latencies.append(float(parts[-1]))
            if parts[0] == "fail":
                failures[parts[1]] += 1
        return latencies, failures


@contextlib.asynccontextmanager
async def serve(app: web.Application, ssl_context: ssl.SSLContext | None = None) -> AsyncIterator[int]:
    from tests.support.ports import free_port

    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ssl_context).start()
    try:
        yield port
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def fake_api(objects: list[dict[str, Any]]) -> AsyncIterator[Any]:
    from tests.fakeapi.server import FakeApiServer
    from tests.support import paths

    api = FakeApiServer(paths.crds_dir())
    api.load(objects)
    await api.start()
    try:
        yield api
    finally:
        await api.stop()


@contextlib.asynccontextmanager
async def empty_prometheus() -> AsyncIterator[int]:
    empty = b'{"status": "success", "data": {"resultType": "vector", "result": []}}'

    async def query(_: web.Request) -> web.Response:
        return web.Response(body=empty, content_type="application/json")

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    async with serve(app) as port:
        yield port


def controller_args(api: Any, port: int, prom_port: int, *extra: str) -> list[str]:
    return ["controller", "--kubeconfig", str(api.kubeconfig_path), "--listen", f"127.0.0.1:{port}",
            "--no-leader-elect", "--dry-run", "--prometheus-url", f"http://127.0.0.1:{prom_port}",
            "--gpu-poll-seconds", "60", "--resync-seconds", "5", *extra]


def metric_values(text: str, name: str) -> dict[str, float]:
    out = {}
    for m in re.finditer(rf"^{name}\{{([^}}]*)\}} (\S+)$", text, re.M):
        out[m.group(1)] = float(m.group(2))
    return out


def _label(labels: str, name: str) -> str:
    m = re.search(name + r'="([^"]*)"', labels)
    return m.group(1) if m else "?"


# ---------------------------------------------------------------------------------------------- ray
async def scenario_ray(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    return await ray_attack(tree, args, b"[" + b",".join([b"{}"] * (args.ray_mb * 1_000_000 // 3)) + b"]")


def costliest_answer() -> bytes:
    """The answer that builds the most objects within nodes_summary's bounds (the largest part's)."""
    from autoscaler.signals.ray_limits import PART_LIMITS
    from servicekit.boundedjson import container_bound, value_bound

    limit = PART_LIMITS["nodes_summary"]
    dicts = (limit.max_containers or 0) - 1  # (the outer list is one)
    strings = limit.max_values - 2 * dicts - 3
    body = b"[" + b",".join([b'{"a":1}'] * dicts + [b'"ab"'] * strings) + b"]"
    assert value_bound(body) <= limit.max_values and container_bound(body) <= (limit.max_containers or 0)
    assert len(body) <= limit.max_bytes
    return body


async def scenario_ray_bound(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    return await ray_attack(tree, args, costliest_answer())


async def ray_attack(tree: Tree, args: argparse.Namespace, hostile_body: bytes) -> dict[str, str]:
    from tests.support import objects as o
    from tests.support.ports import free_port

    fixtures = Path(os.environ.get("QUEUEPILOT_SHARED", "/work/shared")) / "fixtures" / "ray"
    honest_answers = {p: (fixtures / f).read_bytes() for p, f in FIXTURE_OF.items()}
    served: Counter[str] = Counter()

    def app_for(kind: str) -> web.Application:
        async def handle(request: web.Request) -> web.StreamResponse:
            served[kind] += 1
            if kind == "hostile":
                return web.Response(body=hostile_body, content_type="application/json")
            body = honest_answers.get(request.path)
            if body is None or request.query.get("format") == "1":
                return web.Response(status=404, text="404: Not Found")
            return web.Response(body=body, content_type="application/json")

        app = web.Application()
        app.router.add_route("GET", "/{tail:.*}", handle)
        return app

    async with contextlib.AsyncExitStack() as stack:
        hostile_port = await stack.enter_async_context(serve(app_for("hostile")))
        honest_ports = [await stack.enter_async_context(serve(app_for("honest"))) for _ in range(args.honest)]
        objs: list[dict[str, Any]] = []
        clusters = [("team-x", "hostile", hostile_port)] + [(f"team-{i}", f"honest-{i}", p)
                                                           for i, p in enumerate(honest_ports)]
        for ns, name, port in clusters:
            objs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            objs.append(o.ray_cluster(name, ns, annotations={"queuepilot.io/autoscale": "true"}, head_ip=None,
                                      dashboard_port=port))
            objs.append(o.ray_head_pod(name, ns, ip="127.0.0.1"))
        api = await stack.enter_async_context(fake_api(objs))
        prom_port = await stack.enter_async_context(empty_prometheus())
        port = free_port()
        p = await spawn(tree, controller_args(api, port, prom_port, "--ray-poll-seconds", "2"))
        try:
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as s:
                await wait_ready(s, f"{base}/readyz", p)
                health_p = await Prober(f"{base}/healthz", 0.1).start()
                metrics_p = await Prober(f"{base}/metrics", 1.0).start()
                await asyncio.sleep(args.seconds)
                health, fails = await health_p.stop()
                metrics, metric_fails = await metrics_p.stop()
                fails.update(metric_fails)
                hwm = peak_rss_mib(p.proc.pid)
                async with s.get(f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=60)) as r:
                    text = await r.text()
        finally:
            await p.stop()
    ages = metric_values(text, "queuepilot_signal_age_seconds")
    stale = metric_values(text, "queuepilot_signal_stale")
    errors = {k: v for k, v in metric_values(text, "queuepilot_source_errors_total").items() if 'source="ray"' in k}
    honest_ages = [v for k, v in ages.items() if "ray/team-" in k and "hostile" not in k]
    honest_stale = sum(1 for k, v in stale.items() if "honest" in k and v)
    kinds = ", ".join(f"{_label(k, 'kind')} {v:.0f}" for k, v in sorted(errors.items()))
    return {
        "controller peak RSS (VmHWM)": f"{hwm:.0f} MiB",
        "/healthz latency": lat(health),
        "/metrics latency": lat(metrics),
        "probe failures": ", ".join(f"{k} {v}" for k, v in fails.items()) or "none",
        f"honest clusters: oldest Ray signal age at the end (of {args.honest}); stale": (
            f"{max(honest_ages):.0f} s; {honest_stale} stale" if honest_ages else "no signal"),
        "hostile head: requests served": str(served["hostile"]),
        "Ray source errors by kind": kinds or "none",
    }


# ------------------------------------------------------------------------------------------ webhook
def review(obj: dict[str, Any], uid: str = "u-1") -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": uid, "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
                        "resource": {"group": "ray.io", "version": "v1", "resource": "rayclusters"},
                        "operation": "CREATE", "namespace": "team-a", "name": "rc", "object": obj,
                        "userInfo": {"username": "alice"}}}


def small_raycluster() -> dict[str, Any]:
    from tests.support import objects as o

    return o.ray_cluster("rc", "team-a", head_ip=None)


@contextlib.asynccontextmanager
async def webhook_controller(tree: Tree, workdir: Path) -> AsyncIterator[tuple[Proc, str, str]]:
    from tests.support.ports import free_port
    from tests.webhook.certs import make_pki

    (workdir / "pki").mkdir()
    pki = make_pki(workdir / "pki")
    certdir = workdir / "certs"
    certdir.mkdir()
    shutil.copy(pki.cert_file, certdir / "tls.crt")
    shutil.copy(pki.key_file, certdir / "tls.key")
    (workdir / "config.yaml").write_text("webhook:\n  namespace_queues: {team-a: team-a-queue}\n")
    async with fake_api([]) as api, empty_prometheus() as prom_port:
        port, wport = free_port(), free_port()
        p = await spawn(tree, controller_args(api, port, prom_port, "--config", str(workdir / "config.yaml"),
                                              "--webhook-listen", f"127.0.0.1:{wport}",
                                              "--webhook-cert-dir", str(certdir), "--ray-poll-seconds", "3600"))
        try:
            async with aiohttp.ClientSession() as s:
                await wait_ready(s, f"http://127.0.0.1:{port}/readyz", p)
            yield p, f"http://127.0.0.1:{port}", f"https://127.0.0.1:{wport}/mutate-ray"
        finally:
            await p.stop()


async def bodies_attack(tree: Tree, args: argparse.Namespace, body: bytes) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="qp-hardening-") as tmp:
        async with webhook_controller(tree, Path(tmp)) as (p, base, url):
            conn = aiohttp.TCPConnector(ssl=False, limit=0)
            async with aiohttp.ClientSession(connector=conn) as s:
                prober = await Prober(f"{base}/healthz", 0.1).start()
                statuses: Counter[str] = Counter()

                async def send() -> None:
                    try:
                        async with s.post(url, data=body, headers={"Content-Type": "application/json"},
                                          timeout=aiohttp.ClientTimeout(total=120)) as r:
                            await r.read()
                            statuses[str(r.status)] += 1
                    except (aiohttp.ClientError, TimeoutError) as e:
                        statuses[type(e).__name__] += 1

                t0 = time.perf_counter()
                await asyncio.gather(*(send() for _ in range(args.senders)))
                took = time.perf_counter() - t0
                await asyncio.sleep(2.0)
                health, fails = await prober.stop()
                hwm = peak_rss_mib(p.proc.pid)
    return {
        "controller peak RSS (VmHWM)": f"{hwm:.0f} MiB",
        "/healthz latency": lat(health),
        "probe failures": ", ".join(f"{k} {v}" for k, v in fails.items()) or "none",
        f"answers to the {args.senders} bodies": ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())),
        "time until every body was answered": f"{took:.1f} s",
    }


async def scenario_webhook_bodies(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    obj = small_raycluster()
    obj["metadata"]["annotations"]["filler"] = "x" * 8_000_000
    return await bodies_attack(tree, args, json.dumps(review(obj)).encode())


async def scenario_webhook_dense(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    obj = small_raycluster()
    body = json.dumps(review(obj)).encode()
    n = (3 * 2**20 - 4096 - len(body)) // 3
    filler = b'"filler":[' + b",".join([b"{}"] * n) + b"],"
    body = body.replace(b'"kind": "RayCluster", "metadata"', b'"kind": "RayCluster", ' + filler + b' "metadata"', 1)
    json.loads(body)  # still a valid review
    return await bodies_attack(tree, args, body)


def large_raycluster() -> dict[str, Any]:
    obj = small_raycluster()
    head = obj["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    head["env"] = [{"name": f"VAR_{i}", "value": "x" * 100} for i in range(20_000)]
    return obj


async def scenario_webhook_large_flood(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    return await flood(tree, args, json.dumps(review(large_raycluster())).encode())


async def scenario_webhook_8mb_flood(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    obj = small_raycluster()
    obj["metadata"]["annotations"]["filler"] = "x" * 8_000_000
    return await flood(tree, args, json.dumps(review(obj)).encode())


async def scenario_webhook_flood(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    return await flood(tree, args, json.dumps(review(small_raycluster())).encode())


async def flood(tree: Tree, args: argparse.Namespace, body: bytes) -> dict[str, str]:
    with tempfile.TemporaryDirectory(prefix="qp-hardening-") as tmp:
        async with webhook_controller(tree, Path(tmp)) as (p, base, url):
            lines_before = len(p.lines)
            conn = aiohttp.TCPConnector(ssl=False, limit=0)
            async with aiohttp.ClientSession(connector=conn) as s:
                prober = await Prober(f"{base}/healthz", 0.1).start()
                answered: Counter[str] = Counter()
                deadline = time.monotonic() + args.seconds

                async def sender() -> None:
                    while time.monotonic() < deadline:
                        try:
                            async with s.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
                                await r.read()
                                answered[str(r.status)] += 1
                        except aiohttp.ClientError as e:
                            answered[type(e).__name__] += 1

                await asyncio.gather(*(sender() for _ in range(16)))
                health, fails = await prober.stop()
                await asyncio.sleep(1.0)
                log_lines = len(p.lines) - lines_before
                hwm = peak_rss_mib(p.proc.pid)
    total = sum(answered.values())
    return {
        "controller peak RSS (VmHWM)": f"{hwm:.0f} MiB",
        "/healthz latency": lat(health),
        "probe failures": ", ".join(f"{k} {v}" for k, v in fails.items()) or "none",
        f"reviews answered in {args.seconds:.0f} s": f"{total} ({', '.join(f'{k}: {v}' for k, v in answered.items())})",
        "controller log lines meanwhile": str(log_lines),
    }


# ----------------------------------------------------------------------------------------- exporter
async def scenario_exporter_idle(tree: Tree, args: argparse.Namespace) -> dict[str, str]:
    from tests.support.ports import free_port

    port = free_port()
    p = await spawn(tree, ["exporter", "--source", "sim", "--sim-gpus", "8", "--pod-resources-socket", "",
                           "--listen", f"127.0.0.1:{port}", "--interval", "2", "--max-connections", "128"])
    base = f"http://127.0.0.1:{port}"
    holders: list[asyncio.Task[None]] = []
    reopened = [0]
    try:
        async with aiohttp.ClientSession() as s:
            await wait_ready(s, f"{base}/healthz", p)

            async def hold() -> None:
                request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
                while True:
                    try:
                        reader, writer = await asyncio.open_connection("127.0.0.1", port)
                        writer.write(request)
                        await writer.drain()
                        while await reader.read(65536):  # the answer, then idle until the exporter closes it
                            pass
                        writer.close()
                    except OSError:
                        await asyncio.sleep(0.05)
                    reopened[0] += 1

            holders = [asyncio.create_task(hold()) for _ in range(128)]
            await asyncio.sleep(3.0)
            scrapes: list[float] = []
            fails: Counter[str] = Counter()
            for _ in range(5):
                t = time.perf_counter()
                try:
                    async with aiohttp.ClientSession() as fresh, fresh.get(
                            f"{base}/metrics", timeout=aiohttp.ClientTimeout(total=60)) as r:
                        await r.read()
                        if r.status != 200:
                            fails[str(r.status)] += 1
                except (aiohttp.ClientError, TimeoutError) as e:
                    fails[type(e).__name__] += 1
                scrapes.append(time.perf_counter() - t)
                await asyncio.sleep(0.5)
    finally:
        for h in holders:
            h.cancel()
        await asyncio.gather(*holders, return_exceptions=True)
        await p.stop()
    return {
        "real scrape latency with 128 idle connections held": lat(scrapes),
        "scrape failures (60 s client timeout)": ", ".join(f"{k} {v}" for k, v in fails.items()) or "none",
        "idle connections the exporter closed (re-opened by the attacker)": str(reopened[0]),
    }


RUNNERS: dict[str, Callable[[Tree, argparse.Namespace], Awaitable[dict[str, str]]]] = {
    "ray": scenario_ray, "ray-bound": scenario_ray_bound, "webhook-bodies": scenario_webhook_bodies,
    "webhook-dense": scenario_webhook_dense,
    "webhook-flood": scenario_webhook_flood, "webhook-large-flood": scenario_webhook_large_flood,
    "webhook-8mb-flood": scenario_webhook_8mb_flood,
    "exporter-idle": scenario_exporter_idle,
}

TITLES = {
    "ray": "A tenant's Ray head answers {ray_mb} MB of `[{{}},{{}},...]` to every request ({honest} honest heads beside it, "
           "{seconds:.0f} s, poll every 2 s)",
    "ray-bound": "A tenant's Ray head answers the costliest answer the new bounds let through (`{{'a':1}}` "
                 "objects and short strings, about 14 MB) to every request ({honest} honest heads beside it, "
                 "{seconds:.0f} s)",
    "webhook-bodies": "{senders} connections each POST an 8 MB AdmissionReview to the webhook at once",
    "webhook-dense": "{senders} connections each POST a 3 MiB AdmissionReview of dense JSON (`[{{}},{{}},...]`) at once",
    "webhook-flood": "16 senders post valid reviews back to back for {seconds:.0f} s",
    "webhook-large-flood": "16 senders post large valid reviews (2.7 MB RayClusters) back to back for {seconds:.0f} s",
    "webhook-8mb-flood": "16 senders post 8 MB reviews back to back for {seconds:.0f} s",
    "exporter-idle": "128 idle keep-alive connections hold the exporter's connection cap; 5 real scrapes",
}


# ---------------------------------------------------------------------------------------------- main
def baseline_tree(ref: str, where: Path) -> Tree:
    sha = subprocess.run(["git", "rev-parse", "--short", ref], cwd=REPO, check=True, capture_output=True,
                         text=True).stdout.strip()
    subprocess.run(["git", "worktree", "add", "--detach", str(where), ref], cwd=REPO, check=True,
                   capture_output=True)
    return Tree(f"before ({sha})", where)


def current_label() -> str:
    sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                           text=True).stdout.strip()
    return f"after ({sha}{'+changes' if dirty else ''})"


def render(results: dict[str, list[tuple[str, dict[str, str]]]], args: argparse.Namespace, command: str) -> str:
    out = ["# Hardening: hostile inputs against the real processes", "",
           "Reported, not asserted. Made by:", "", f"    {command}", "",
           f"Machine: {os.cpu_count()} CPUs shared with other jobs, Python {sys.version.split()[0]}. "
           "Each column is one subprocess from the tree it names, attacked over loopback by this script "
           "(`benchmarks/hardening.py`, whose docstring describes each scenario).", ""]
    for name, columns in results.items():
        out += [f"## {name}: {TITLES[name].format(**vars(args))}", ""]
        labels = [label for label, _ in columns]
        out.append("| measure | " + " | ".join(labels) + " |")
        out.append("|---|" + "---|" * len(labels))
        keys: list[str] = []
        for _, rows in columns:
            keys += [k for k in rows if k not in keys]
        for k in keys:
            out.append(f"| {k} | " + " | ".join(rows.get(k, "-") for _, rows in columns) + " |")
        out.append("")
    return "\n".join(out)


async def run_all(trees: list[Tree], only: list[str], args: argparse.Namespace
                  ) -> dict[str, list[tuple[str, dict[str, str]]]]:
    results: dict[str, list[tuple[str, dict[str, str]]]] = {}
    for name in only:
        for tree in trees:
            print(f"{name}: {tree.label} ...", file=sys.stderr, flush=True)
            try:
                rows = await RUNNERS[name](tree, args)
            except Exception as e:  # one scenario failing must not lose the others' numbers
                rows = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
            results.setdefault(name, []).append((tree.label, rows))
            print(json.dumps(rows, indent=1), file=sys.stderr, flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=None, metavar="REF", help="also run every scenario from this git revision")
    p.add_argument("--only", default=None, help=f"comma-separated scenarios ({', '.join(SCENARIOS)})")
    p.add_argument("--seconds", type=float, default=30.0, help="length of the timed scenarios")
    p.add_argument("--ray-mb", type=int, default=32, help="size of the hostile head's answers, MB")
    p.add_argument("--honest", type=int, default=4, help="honest Ray heads beside the hostile one")
    p.add_argument("--senders", type=int, default=100, help="connections of the webhook body attacks")
    p.add_argument("--out", default=None, help="write the markdown table here")
    p.add_argument("--probe", default=None, metavar="URL", help=argparse.SUPPRESS)  # the prober subprocess
    p.add_argument("--every", type=float, default=0.1, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        probe_forever(args.probe, args.every)
        return 0
    only = [s.strip() for s in args.only.split(",")] if args.only else list(SCENARIOS)
    unknown = set(only) - set(SCENARIOS)
    if unknown:
        p.error(f"unknown scenario(s): {', '.join(sorted(unknown))} (known: {', '.join(SCENARIOS)})")
    tmp = Path(tempfile.mkdtemp(prefix="qp-baseline-"))
    trees: list[Tree] = []
    try:
        if args.baseline:
            trees.append(baseline_tree(args.baseline, tmp / "tree"))
        trees.append(Tree(current_label(), REPO))
        results = asyncio.run(run_all(trees, only, args))
    finally:
        if args.baseline:
            subprocess.run(["git", "worktree", "remove", "--force", str(tmp / "tree")], cwd=REPO, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    text = render(results, args, "python benchmarks/hardening.py " + " ".join(sys.argv[1:] if argv is None else argv))
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
