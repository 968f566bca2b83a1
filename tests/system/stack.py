"""The deployed stack, wired for real, with only the Kubernetes API server and the GPUs faked.

- the fake API server (``fake_api``) holding Kueue, KubeRay and core objects;
- one real exporter per simulated node (``ExporterApp`` over ``SimSource(hostname=<node>)``);
- a real Prometheus scraping them;
- the real controller as deployed: ``python -m queuepilot controller ...`` in a subprocess, with
  its GPU signal read from that Prometheus;
- the test plays Kueue and the kubelet/scheduler (``tests.decisions.kube_world``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.rbac import CONTROLLER_API_CALLS
from exporter.server import ExporterApp
from exporter.sources.sim import SimSource
from tests.decisions import kube_world as kw
from tests.fakeapi.server import FakeApiServer
from tests.support.eventually import eventually
from tests.support.paths import REPO
from tests.support.ports import free_port
from tests.support.prometheus import Prometheus, run_prometheus

FLAVOR = "h100"
NODES = ("gpu-node-1", "gpu-node-2")
GPUS_PER_NODE = 8
# another controller's AdmissionCheck on the same ClusterQueues: its entries must survive our writes
OTHER_CHECK = "budget"
OTHER_CONTROLLER = "example.com/budget"
TEAMS = (("team-a", "lq-a", "cq-a"), ("team-b", "lq-b", "cq-b"))
# how long a wait on the stack may take: processes start, Prometheus scrapes every second, the controller polls it
STACK_TIMEOUT = 45.0


def cluster_objects(nodes: Sequence[str] = NODES) -> list[dict[str, Any]]:
    """The Kueue set-up of docs/admission.md: flavor, two ClusterQueues using our check (and another
    controller's), the AdmissionChecks, a LocalQueue per team, and the GPU nodes."""
    objs: list[dict[str, Any]] = [
        kw.flavor(FLAVOR),
        kw.admission_check(kw.CHECK, kw.CONTROLLER),
        kw.admission_check(OTHER_CHECK, OTHER_CONTROLLER),
    ]
    for ns, lq, cq in TEAMS:
        objs.append(kw.cluster_queue(cq, {FLAVOR: GPUS_PER_NODE * len(nodes)}, checks=(kw.CHECK, OTHER_CHECK)))
        objs.append(kw.local_queue(lq, ns, cq))
    objs += [kw.node(n, GPUS_PER_NODE, FLAVOR) for n in nodes]
    return objs


# ------------------------------------------------------------------------------------ Kueue's part
def reserve(api: FakeApiServer, name: str, ns: str, cq: str, now: float) -> None:
    """Kueue reserves quota (pod set ``main`` on the h100 flavor), our check entry Pending; the
    other controller's entry is written by that controller with its own field manager, already Ready.
    Both writes happen without yielding to the event loop, so the controller sees them together."""
    kw.World(api).reserve(name, cq, {"main": FLAVOR}, now, ns=ns)
    api.apply(
        {"apiVersion": kw.KUEUE, "kind": "Workload", "metadata": {"name": name, "namespace": ns},
         "status": {"admissionChecks": [{"name": OTHER_CHECK, "state": "Ready", "lastTransitionTime": kw.ts(now),
                                         "message": "within the team's budget"}]}},
        field_manager=OTHER_CONTROLLER, subresource="status",
    )


def check_entries(api: FakeApiServer, name: str, ns: str) -> dict[str, dict[str, Any]]:
    w = api.get(kw.KUEUE, "Workload", name, ns)
    return {c["name"]: c for c in (w.get("status") or {}).get("admissionChecks", [])}


def conditions(api: FakeApiServer, name: str, ns: str) -> dict[str, str]:
    w = api.get(kw.KUEUE, "Workload", name, ns)
    return {c["type"]: c["status"] for c in (w.get("status") or {}).get("conditions", [])}


# -------------------------------------------------------------------------------------- the fleet
@dataclass
class Fleet:
    """One real exporter per simulated node; ``sources[node]`` drives that node's GPUs."""

    sources: dict[str, SimSource]
    apps: dict[str, ExporterApp]

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{app.port}" for app in self.apps.values()]


@contextlib.asynccontextmanager
async def fleet(nodes: Sequence[str] = NODES) -> AsyncIterator[Fleet]:
    sources = {n: SimSource(n, gpus=GPUS_PER_NODE, seed=i, pods=0, fault_script=()) for i, n in enumerate(nodes)}
    apps = {n: ExporterApp(s, listen="127.0.0.1:0", interval=0.5) for n, s in sources.items()}
    async with contextlib.AsyncExitStack() as stack:
        for app in apps.values():
            await stack.enter_async_context(app)
        yield Fleet(sources, apps)


# Prometheus' own job for the exporters, as a ServiceMonitor with honorLabels: true would give.
def exporter_job(targets: Sequence[str], metric_relabel: Sequence[dict] = ()) -> dict[str, Any]:
    job: dict[str, Any] = {"job_name": "queuepilot-exporter", "honor_labels": True,
                           "static_configs": [{"targets": list(targets)}]}
    if metric_relabel:
        job["metric_relabel_configs"] = list(metric_relabel)
    return job


@contextlib.asynccontextmanager
async def prometheus(workdir: Path, jobs: Sequence[dict[str, Any]]) -> AsyncIterator[PromHandle]:
    """A real Prometheus (``tests.support.prometheus``), started and stopped off the event loop so the
    in-process exporters keep answering its scrapes."""
    cm = run_prometheus(workdir, extra_scrape_configs=jobs, scrape_interval="1s")
    prom = await asyncio.to_thread(cm.__enter__)
    handle = PromHandle(prom, cm)
    try:
        yield handle
    finally:
        await handle.stop()


@dataclass
class PromHandle:
    prom: Prometheus
    cm: Any
    stopped: bool = False

    @property
    def url(self) -> str:
        return self.prom.url

    async def query(self, expr: str) -> list[dict]:
        return await asyncio.to_thread(self.prom.query, expr)

    async def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            await asyncio.to_thread(self.cm.__exit__, None, None, None)


# --------------------------------------------------------------------------------- the controller
@dataclass
class ControllerProcess:
    proc: asyncio.subprocess.Process
    url: str
    log_path: Path
    exit_code: int | None = None
    _session: aiohttp.ClientSession | None = field(default=None, repr=False)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    async def get(self, path: str) -> tuple[int, str]:
        assert self._session is not None
        try:
            async with self._session.get(f"{self.url}{path}", timeout=aiohttp.ClientTimeout(total=3)) as r:
                return r.status, await r.text()
        except (aiohttp.ClientError, TimeoutError):
            return 0, ""

    async def metrics(self) -> dict[tuple[str, frozenset], float]:
        """Every sample on /metrics: (name, frozenset of label items) -> value."""
        status, text = await self.get("/metrics")
        assert status == 200, f"/metrics answered {status}"
        return {(s.name, frozenset(s.labels.items())): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples}

    async def metric(self, name: str, **labels: str) -> float | None:
        return (await self.metrics()).get((name, frozenset(labels.items())))

    async def terminate(self) -> int:
        """SIGTERM, as Kubernetes stops a pod; the exit status."""
        if self.exit_code is None:
            self.proc.send_signal(signal.SIGTERM)
            self.exit_code = await asyncio.wait_for(self.proc.wait(), 15)
        return self.exit_code


async def counted(cp: ControllerProcess, name: str, **labels: str) -> float:
    """A counter's value once the controller has it: decisions are counted when the write's answer is
    back, a moment after the fake API server (which a test watches) already holds the write."""
    return await eventually(lambda: cp.metric(name, **labels), f"{name}{labels} on /metrics", timeout=15)


async def read_after(cp: ControllerProcess, t: float) -> bool:
    """Whether the controller's latest snapshot holds a GPU reading polled after ``t``."""
    age = await cp.metric("queuepilot_signal_age_seconds", signal="gpu")
    return age is not None and time.time() - age > t


@contextlib.asynccontextmanager
async def controller(
    api: FakeApiServer, prom_url: str, workdir: Path, *extra: str
) -> AsyncIterator[ControllerProcess]:
    """``python -m queuepilot controller`` as deployed (one replica, no election), tuned to react in ~1 s."""
    port = free_port()
    log_path = _log_file(workdir)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUEPILOT_")}
    args = [
        sys.executable, "-m", "queuepilot", "controller",
        "--kubeconfig", str(api.kubeconfig_path),
        "--gpu-signal", "prometheus", "--prometheus-url", prom_url,
        "--listen", f"127.0.0.1:{port}", "--no-leader-elect",
        "--resync-seconds", "1", "--debounce-seconds", "0.1",
        "--gpu-poll-seconds", "0.5", "--ray-poll-seconds", "0.5",
        *extra,
    ]
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *args, cwd=REPO, env=env, stdout=log, stderr=asyncio.subprocess.STDOUT
        )
    session = aiohttp.ClientSession()
    cp = ControllerProcess(proc, f"http://127.0.0.1:{port}", log_path, _session=session)
    try:
        async def ready() -> bool:
            if proc.returncode is not None:
                raise AssertionError(f"controller exited with {proc.returncode}:\n{cp.log()}")
            return (await cp.get("/readyz"))[0] == 200
        await eventually(ready, "the controller's /readyz", timeout=30)
        yield cp
    except BaseException:
        sys.stderr.write(f"--- controller log ---\n{cp.log()}\n")
        raise
    finally:
        await session.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def _log_file(workdir: Path) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir / "controller.log"


async def finish(api: FakeApiServer, cp: ControllerProcess, admission: bool = True) -> None:
    """Every scenario ends the same way: only declared API calls, and a clean exit on SIGTERM."""
    calls = api.observed_calls()
    assert calls <= CONTROLLER_API_CALLS, f"undeclared API calls: {sorted(calls - CONTROLLER_API_CALLS)}"
    if admission:
        assert ("kueue.x-k8s.io", "workloads/status", "patch") in calls
    assert await cp.terminate() == 0, cp.log()
