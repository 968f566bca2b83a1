"""The Ray signal against a real Ray head (``ray[default]`` on the CPU), one head for the module.

The head runs ``ray start --head --block`` in its own process group with every port chosen
free, ``--num-gpus=2`` (Ray believes in 2 GPUs without a device), autoscaler v2 (the KubeRay
default: ``/api/cluster_status`` JSON is null), token authentication, and the two variables
KubeRay sets on every Ray container (``RAY_CLOUD_INSTANCE_ID`` = Pod name,
``RAY_NODE_TYPE_NAME`` = group).  A driver subprocess
(``ray_driver.py``) submits: 2 running GPU tasks, 3 more waiting for GPUs, a 4-GPU task (no node
can hold it), a task pinned to a worker group that does not exist, a GPU actor, a STRICT_PACK
PG of 2 x 1 GPU (waits) and a PACK PG of 1 x {4 GPU, 1 CPU} (infeasible), and request_resources
of 3 x 1 GPU.  Teardown stops both process groups and asserts that nothing of them is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import aiohttp
import pytest

from autoscaler.signals.ray_demand import RayDashboardClient, RaySignalError, RayStatus
from tests.support.eventually import eventually_sync
from tests.support.ports import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

RAY_BIN = Path(sys.executable).parent / "ray"
DRIVER = Path(__file__).with_name("ray_driver.py")
POD_NAME = "qp-test-head-x7k2p"

EXPECTED = {
    ("task", (("GPU", 1.0),), 3, False, "", None),  # waits for the 2 busy GPUs (NO_RESOURCES)
    ("task", (("GPU", 4.0),), 1, True, "", None),  # no node has 4 GPUs
    ("task", (("GPU", 1.0),), 1, True, "", "gpu-workers"),  # pinned to a group no node is in
    ("actor", (("GPU", 1.0),), 1, False, "", None),
    ("placement_group", (("GPU", 1.0),), 2, False, "STRICT_PACK", None),  # NO_RESOURCES
    ("placement_group", (("CPU", 1.0), ("GPU", 4.0)), 1, True, "PACK", None),  # INFEASIBLE
}


T = TypeVar("T")

@dataclass
class Head:
    url: str
    token: str
    started_at: float


def _group_alive(pgid: int) -> list[int]:
    """Pids whose process group is ``pgid`` (from /proc, so zombies of others are not counted)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids


def _mentioning(text: str) -> list[int]:
    """Pids whose command line mentions ``text`` (our temp dir: catches any escaped child)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmd:
            pids.append(int(entry.name))
    return pids


def _stop_group(pgid: int, grace: float) -> None:
    deadline = time.monotonic() + grace
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if _group_alive(pgid):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            return
        end = time.monotonic() + 5
        while _group_alive(pgid) and time.monotonic() < end:
            time.sleep(0.1)


def _reap(pgids: list[int], tmp: str, within: float) -> list[int]:
    """SIGKILL whatever is left of the groups and of any process naming our temp dir (Ray starts some
    of its daemons outside the head's process group; on a loaded machine they outlive the group's
    grace), until none is left or ``within`` seconds pass; the pids still alive then."""
    deadline = time.monotonic() + within
    while True:
        alive = sorted({pid for g in pgids for pid in _group_alive(g)} | set(_mentioning(tmp)))
        if not alive or time.monotonic() > deadline:
            return alive
        for pid in alive:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _read_line(proc: subprocess.Popen, timeout: float) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise RuntimeError(f"no line from pid {proc.pid} within {timeout} s")
    return proc.stdout.readline()


def _wait_http(url: str, token: str, timeout: float) -> None:
    def answers() -> bool:
        try:
            req = urllib.request.Request(url, headers={"authorization": f"Bearer {token}"})
            with urllib.request.urlopen(req, timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    eventually_sync(answers, f"{url} to answer 200", timeout=timeout, interval=0.3)


@pytest.fixture(scope="module")
def head() -> Iterator[Head]:
    tmp = tempfile.mkdtemp(prefix="qpray-")  # short: Ray's unix socket paths live under it
    token = secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(
        HOME=tmp,  # Ray may write ~/.ray; keep it out of the real home
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",  # keep 127.0.0.1 (on a host with a routable address Ray replaces 127.0.0.1 with it)
        RAY_enable_autoscaler_v2="1",
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN=token,
        RAY_USAGE_STATS_ENABLED="0",
        # what KubeRay puts on every Ray container: the Pod name and the worker group
        RAY_CLOUD_INSTANCE_ID=POD_NAME,
        RAY_NODE_TYPE_NAME="headgroup",
    )
    gcs, dash = free_port(), free_port()
    ports = {
        "--port": gcs,
        "--dashboard-port": dash,
        "--dashboard-agent-listen-port": free_port(),
        "--dashboard-agent-grpc-port": free_port(),
        "--metrics-export-port": free_port(),
        "--node-manager-port": free_port(),
        "--object-manager-port": free_port(),
        "--runtime-env-agent-port": free_port(),
        "--ray-client-server-port": free_port(),
    }
    cmd = [
        str(RAY_BIN),
        "start",
        "--head",
        "--block",
        "--node-ip-address=127.0.0.1",
        "--dashboard-host=127.0.0.1",
        "--include-dashboard=true",
        "--disable-usage-stats",
        "--num-cpus=2",
        "--num-gpus=2",
        '--resources={"my_gpu": 2}',
        f"--temp-dir={tmp}/ray",
        *(f"{k}={v}" for k, v in ports.items()),
    ]
    log = open(Path(tmp) / "head.log", "wb")  # closed in teardown
    started = time.time()
    head_proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
    )
    driver = None
    try:
        _wait_http(f"http://127.0.0.1:{dash}/api/gcs_healthz", token, timeout=60)
        driver = subprocess.Popen(
            [sys.executable, str(DRIVER), f"127.0.0.1:{gcs}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            text=True,
            start_new_session=True,
        )
        line = _read_line(driver, timeout=60)
        assert json.loads(line)["ready"] is True, line
        yield Head(url=f"http://127.0.0.1:{dash}", token=token, started_at=started)
    except BaseException:
        log.flush()
        sys.stderr.write((Path(tmp) / "head.log").read_text(errors="replace")[-4000:])
        raise
    finally:
        if driver is not None:
            driver.stdin.close()
            try:
                driver.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass
            _stop_group(driver.pid, grace=5)
        # `ray start --block` and gcs_server outlive a SIGTERM for 15 s+; the test does not need a
        # graceful Ray shutdown, only that nothing is left: SIGKILL after a short grace.
        _stop_group(head_proc.pid, grace=5)
        head_proc.wait(timeout=10)
        log.close()
        leftovers = _reap([head_proc.pid] + ([driver.pid] if driver else []), tmp, within=20)
        shutil.rmtree(tmp, ignore_errors=True)
        assert leftovers == [], f"Ray processes left running: {leftovers}"
        assert head_proc.returncode is not None


def demand_set(status: RayStatus) -> set[tuple]:
    return {
        (d.kind, tuple(sorted(d.shape.items())), d.count, d.infeasible, d.strategy, d.group)
        for d in status.demand
    }


async def _poll(fetch: Callable[[], Awaitable[T]], done: Callable[[T], bool], wait_s: float = 45.0) -> T:
    """``fetch`` every 0.5 s until ``done`` says its answer shows what the test submitted, or ``wait_s``
    passed (then the last answer, for the test's assertions to explain)."""
    deadline = time.monotonic() + wait_s
    while True:
        got = await fetch()
        if done(got) or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.5)


def _shows_submitted(status: RayStatus) -> bool:
    gpus_in_use = [n.total.get("GPU", 0) - n.available.get("GPU", 0) for n in status.nodes]
    return demand_set(status) == EXPECTED and gpus_in_use == [2.0]


async def _settled(client: RayDashboardClient, url: str) -> RayStatus:
    """The dashboard's views catch up at their own pace (the task list ~1 s behind the driver,
    PGs become INFEASIBLE after a scheduling attempt, node use follows the raylet's reports):
    poll until the signal shows the submitted state, then let the tests assert on it."""
    return await _poll(lambda: client.fetch_status(url, now=time.time()), _shows_submitted)


@pytest.fixture(scope="module")
def settled_status(head: Head) -> RayStatus:
    async def run() -> RayStatus:
        async with aiohttp.ClientSession() as session:
            return await _settled(RayDashboardClient(session, token=head.token), head.url)

    return asyncio.run(run())


def test_demand_kinds_shapes_counts_and_infeasibility(settled_status: RayStatus, head: Head):
    status = settled_status
    assert demand_set(status) == EXPECTED
    assert status.source == "state_api" and status.autoscaler_version == "v2"
    assert status.errors == ()
    assert [(dict(r.shape), r.count) for r in status.resource_requests] == [({"GPU": 1.0}, 3)]
    assert head.started_at <= status.oldest_pending_since <= status.observed_at
    assert status.pending_gpus() == 3 + 4 + 1 + 1 + 2 + 4


def test_node_state(settled_status: RayStatus):
    (node,) = settled_status.nodes
    assert node.is_head and node.alive and node.node_ip == "127.0.0.1"
    assert (node.total["CPU"], node.total["GPU"], node.total["my_gpu"]) == (2.0, 2.0, 2.0)
    assert node.available["GPU"] == 0.0 and node.available["my_gpu"] == 2.0  # the 2 running tasks
    assert node.busy is True
    assert 0.0 <= node.cpu_utilization <= 1.0 and 0.0 < node.memory_utilization <= 1.0
    assert node.idle_seconds is not None
    assert node.pod_name == POD_NAME and node.group == "headgroup"  # from KubeRay's env, through Ray


async def test_each_source_on_its_own(head: Head, settled_status: RayStatus):
    async with aiohttp.ClientSession() as session:
        client = RayDashboardClient(session, token=head.token)
        assert await client.cluster_status(head.url) is None  # autoscaler v2: the JSON is null
        # the autoscaler writes its status text at its own pace (each of its update rounds), which may
        # trail the state API's view that ``settled_status`` waited for: wait for the text's view too
        text = await _poll(lambda: client.cluster_status_text(head.url),
                           lambda t: t is not None and sum(i.count for i in t.items if i.kind == "task") == 6)
        assert text is not None and text.autoscaler_version == "v2"
        # the text aggregates tasks and actors; it counts the same work the state API lists
        work = [d for d in settled_status.demand if d.kind != "placement_group"]
        text_work = [i for i in text.items if i.kind == "task"]
        assert sum(i.count for i in text_work) == sum(d.count for d in work) == 6
        assert (
            sum(i.shape.get("GPU", 0) * i.count for i in text_work)
            == sum(d.shape.get("GPU", 0) * d.count for d in work)
            == 9
        )
        assert {i.strategy for i in text.items if i.kind == "placement_group"} == {"STRICT_PACK", "PACK"}
        assert [(dict(r.shape), r.count) for r in text.requests] == [({"GPU": 1.0}, 3)]
        nodes = await client.nodes(head.url)
        assert [n.node_id for n in nodes] == [n.node_id for n in settled_status.nodes]


async def test_camel_case_quirk_is_real_and_undone(head: Head, settled_status: RayStatus):
    async with aiohttp.ClientSession() as session:
        client = RayDashboardClient(session, token=head.token)
        raw = await client.get_json(head.url, "/nodes?view=summary", "nodes_summary")
    mangled = raw["data"]["summary"][0]["raylet"]["resourcesTotal"]
    assert "myGpu" in mangled and "my_gpu" not in mangled  # the dashboard renamed the resource
    assert "objectStoreMemory" in mangled
    assert "my_gpu" in settled_status.nodes[0].total and "myGpu" not in settled_status.nodes[0].total


async def test_token_is_required(head: Head):
    async with aiohttp.ClientSession() as session:
        for token, code in ((None, "401"), ("0" * 32, "403")):
            with pytest.raises(RaySignalError) as err:
                await RayDashboardClient(session, token=token).fetch_status(head.url, now=time.time())
            assert err.value.kind == "auth" and code in err.value.message
