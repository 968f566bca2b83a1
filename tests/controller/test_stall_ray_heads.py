"""The deployed controller has Ray's view of the RayJobs its stall detector judges.

Everything runs through the real parts: a RayJob, its Kueue Workload (admitted in ClusterQueue cq-a,
opted in to deactivation), the RayCluster KubeRay made for it (origin labels, no queuepilot annotation)
and its pods live in the fake API server and reach the controller through its watch caches and the real
kubernetes-asyncio client; the Ray signal asks a real HTTP Ray head (``tests.support.ray_head``) at the
head pod's IP and the port the cluster's spec names, through the real ``RayHeadClient``.  The GPU signal
says every GPU of the RayJob's workers is idle.  The clock is the test's: one pass every 10 s, a 1 min
stall window, deactivation due at 2 min, Ray quiet for 1 min before it may go.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from autoscaler.cluster.cache import cancel_tasks
from autoscaler.cluster.client import make_api_client
from autoscaler.cluster.secrets import SecretTokens
from autoscaler.controller.loop import Controller
from autoscaler.core import reasons as R
from autoscaler.core.snapshot import GpuState, PodKey
from autoscaler.rbac import CONTROLLER_API_CALLS
from autoscaler.signals.gpu import GpuReading
from autoscaler.signals.ray import RayHeadClient
from autoscaler.signals.ray_demand import RayDashboardClient
from tests.controller.harness import config_for
from tests.support import objects as o
from tests.support.eventually import eventually
from tests.support.ports import free_port
from tests.support.ray_head import RayHead

T0 = 1_796_000_000.0
STEP = 10.0
DUE = T0 + 120.0  # the stall starts at the first pass (T0); stall.deactivate_after 2m
SETTINGS = {"stall": {"deactivate_cluster_queues": ["cq-a"], "window": "1m", "deactivate_after": "2m",
                      "ray_quiet": "1m"}}
NS = "team-a"


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class IdleGpus:
    """The GPU signal: one idle GPU (0 %) per listed pod on node n0, always read now."""

    name = "gpu"

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.pods: list[str] = []

    @property
    def reading(self) -> GpuReading:
        return GpuReading(tuple(
            GpuState(uuid=f"GPU-{i}", node="n0", index=i, utilization=0.0, utilization_source="gpu_util",
                     pod=PodKey(NS, pod)) for i, pod in enumerate(self.pods)), self.clock())

    async def poll(self, now: float) -> None:
        return None

    async def close(self) -> None:
        return None


def queues(fake_api) -> None:
    for obj in (o.resource_flavor("a100", {"gpu": "a100"}), o.node("n0", labels={"gpu": "a100"}),
                o.cluster_queue("cq-a", {"a100": 16}), o.cluster_queue("cq-b", {"a100": 16}),
                o.local_queue("lq-a", NS, "cq-a"), o.local_queue("lq-b", NS, "cq-b")):
        fake_api.create(obj)


def rayjob(fake_api, gpus: IdleGpus, job: str, queue: str, dashboard_port: int, *, ip_base: int,
           annotations: dict[str, str] | None = None) -> str:
    """A running RayJob as KubeRay and Kueue leave it: the RayJob (Ray job RUNNING), its admitted
    Workload, the RayCluster made for it and its head and two GPU worker pods.  Returns the RayCluster's
    key "ns/name"."""
    rc = f"{job}-raycluster-x7k2p"
    cq = {"lq-a": "cq-a", "lq-b": "cq-b"}[queue]
    labels = {o.QUEUE_NAME_LABEL: queue}
    spec = o.ray_cluster_spec([o.ray_group("workers", 2, 0, 2, gpus=1)])
    created = fake_api.create(o.ray_job(job, NS, spec, labels=labels))
    created["status"] = {"jobStatus": "RUNNING", "jobDeploymentStatus": "Running", "rayClusterName": rc}
    fake_api.update_status(created)
    wl = o.workload(f"rayjob-{job}-3f9a1", NS, queue, pod_sets=[("head", 1, 0), ("workers", 2, 1)])
    wl["metadata"]["ownerReferences"] = [{"apiVersion": o.RAY, "kind": "RayJob", "name": job,
                                          "uid": created["metadata"]["uid"], "controller": True}]
    wl = fake_api.create(wl)
    wl["status"] = {"conditions": [o.condition("QuotaReserved", True, T0 - 600), o.condition("Admitted", True, T0 - 600)],
                    "admission": o.admission(cq, [("head", "a100", 1), ("workers", "a100", 2)])}
    fake_api.update_status(wl)
    # KubeRay copies the RayJob's labels and annotations and adds the origin labels; no queuepilot opt-in
    fake_api.create(o.ray_cluster(rc, NS, groups=spec["workerGroupSpecs"], head_ip=None, dashboard_port=dashboard_port,
                                  labels={**labels, "ray.io/originated-from-cr-name": job,
                                          "ray.io/originated-from-crd": "RayJob"}, annotations=annotations))
    fake_api.create(o.ray_head_pod(rc, NS, ip="127.0.0.1"))
    for i in range(2):
        pod = f"{rc}-workers-worker-{i}abcd"
        fake_api.create(o.ray_worker_pod(rc, "workers", pod, NS, node="n0", ip=f"10.1.{ip_base}.{i}"))
        gpus.pods.append(pod)
    return f"{NS}/{rc}"


@contextlib.asynccontextmanager
async def controller(fake_api, clock: Clock, gpus: IdleGpus) -> AsyncIterator[Controller]:
    """The controller's watches, snapshot, Ray signal (the real head client) and reconcilers; the test
    drives its polls and passes with its own clock."""
    config = config_for(fake_api, settings=SETTINGS)
    api = await make_api_client(config.kubeconfig)
    session = aiohttp.ClientSession()
    heads = RayHeadClient(RayDashboardClient(session, timeout=3.0), read_secret=SecretTokens(api).token)
    c = Controller(config, api, clock=clock, gpu_signal=gpus, ray_client=heads, session=session)
    watches = [asyncio.create_task(coro, name=name) for name, coro in c.source.runners()]
    try:
        await eventually(lambda: c.synced, "the watch caches to sync")
        yield c
    finally:
        await cancel_tasks(watches)
        for r in c.reconcilers:
            await r.close()
        await c.shutdown()
        await session.close()
        await api.close()


async def step(c: Controller, clock: Clock, t: float) -> None:
    """One Ray poll (over the heads the controller chooses) and one pass, at ``t``."""
    clock.t = t
    await c.ray.poll(await c.ray_targets(), t)
    await c.run_pass()


def workload_active(fake_api, job: str) -> bool:
    return fake_api.get(o.KUEUE, "Workload", f"rayjob-{job}-3f9a1", NS)["spec"].get("active", True) is not False


async def events_of(c: Controller, fake_api, job: str) -> list[tuple[str, str, str]]:
    await c.context.writer.events.drain()
    return [(e["type"], e["reason"], e["message"]) for e in fake_api.list("v1", "Event", NS)
            if e["involvedObject"]["name"] == f"rayjob-{job}-3f9a1"]


async def run_until(c: Controller, clock: Clock, fake_api, job: str, end: float,
                    before_step: Any = None) -> float | None:
    """Steps from T0 + STEP to ``end``; when (if) the workload was deactivated."""
    t = T0 + STEP
    while t <= end:
        if before_step is not None:
            await before_step(t)
        await step(c, clock, t)
        if not workload_active(fake_api, job):
            return t
        t += STEP
    return None


async def test_tasks_running_hold_the_deactivation_and_only_the_opted_in_rayjob_is_polled(fake_api):
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    head, other_head = await RayHead().start(), await RayHead().start()
    try:
        key = rayjob(fake_api, gpus, "train", "lq-a", head.port, ip_base=1)
        other = rayjob(fake_api, gpus, "other", "lq-b", other_head.port, ip_base=2)  # cq-b: not opted in
        for i, pod in enumerate(p for p in gpus.pods if p.startswith("train")):
            head.set_worker(pod, f"10.1.1.{i}", running=1)
        head.pending_tasks = 1
        async with controller(fake_api, clock, gpus) as c:
            await c.run_pass()  # T0: every GPU idle, the stall timers start
            assert await run_until(c, clock, fake_api, "train", DUE + 30) is None
            assert workload_active(fake_api, "train") and workload_active(fake_api, "other")
            evs = await events_of(c, fake_api, "train")
            held = [e for e in evs if e[1] == R.STALL_DEACTIVATION_HELD]
            assert len(held) == 1 and held[0][0] == "Normal"  # once per reason, not every pass
            assert "Ray reports 2 task(s) running and 1 waiting on RayCluster train-raycluster-x7k2p" in held[0][2]
            assert "deactivation held: Ray shows the workload at work" in held[0][2]
            # the RayJob's head was asked, at the head pod's IP and the spec's port, with no token
            assert head.hits and head.authorizations == {None}
            targets = await c.ray_targets()
            assert targets[key] is not None and targets[key].base_url == f"http://127.0.0.1:{head.port}"
            # the other RayJob's queue is not opted in to deactivation: reported, its head never asked
            assert other_head.hits == [] and targets[other] is None
            assert [e[1] for e in await events_of(c, fake_api, "other")] == [R.STALLED_WORKLOAD]
            # the per-cluster Ray signal age covers the polled RayJob cluster only
            age = c.registry.get_sample_value("queuepilot_signal_age_seconds", {"signal": f"ray/{key}"})
            assert age is not None and 0 <= age < 120
            assert c.registry.get_sample_value("queuepilot_signal_age_seconds", {"signal": f"ray/{other}"}) is None
            assert c.registry.get_sample_value("queuepilot_source_errors_total", {"source": "ray", "kind": "connect"}) is None
            assert fake_api.observed_calls() <= CONTROLLER_API_CALLS
    finally:
        await head.close()
        await other_head.close()


async def test_ray_quiet_for_ray_quiet_then_deactivated(fake_api):
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    head = await RayHead().start()
    try:
        rayjob(fake_api, gpus, "train", "lq-a", head.port, ip_base=1)
        for i, pod in enumerate(gpus.pods):
            head.set_worker(pod, f"10.1.1.{i}", running=1)
        quiet_from = T0 + 100

        async def ray_goes_quiet(t: float) -> None:
            if t >= quiet_from:  # the last task ends; an idle actor still holds each GPU
                for i, pod in enumerate(gpus.pods):
                    head.set_worker(pod, f"10.1.1.{i}", running=0)

        async with controller(fake_api, clock, gpus) as c:
            await c.run_pass()
            deactivated_at = await run_until(c, clock, fake_api, "train", DUE + 120, ray_goes_quiet)
            assert deactivated_at == quiet_from + 60  # due at DUE, but Ray was quiet only from T0+100
            evs = await events_of(c, fake_api, "train")
            held = [m for _, r, m in evs if r == R.STALL_DEACTIVATION_HELD]
            assert len(held) == 1 and "Ray quiet for 20s of the 1m it must be (stall.ray_quiet)" in held[0]
            done = [(t, m) for t, r, m in evs if r == R.STALLED_WORKLOAD_DEACTIVATED]
            assert len(done) == 1 and done[0][0] == "Warning"
            assert "Ray reports no task running or waiting on RayCluster train-raycluster-x7k2p" in done[0][1]
    finally:
        await head.close()


async def test_an_unreachable_head_holds_the_deactivation(fake_api):
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    key = rayjob(fake_api, gpus, "train", "lq-a", free_port(), ip_base=1)  # nothing listens there
    async with controller(fake_api, clock, gpus) as c:
        await c.run_pass()
        assert await run_until(c, clock, fake_api, "train", DUE + 30) is None
        held = [m for _, r, m in await events_of(c, fake_api, "train") if r == R.STALL_DEACTIVATION_HELD]
        assert len(held) == 1
        assert "the Ray signal of RayCluster train-raycluster-x7k2p is missing" in held[0]
        assert "no verdict without Ray's view (stall.without_ray_signal)" in held[0]
        assert c.registry.get_sample_value("queuepilot_source_errors_total", {"source": "ray", "kind": "connect"}) >= 1
        assert (await c.ray_targets())[key] is not None  # still asked every poll


async def test_a_finished_ray_job_is_deactivated_without_asking_its_head(fake_api):
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    head = await RayHead().start()
    try:
        key = rayjob(fake_api, gpus, "train", "lq-a", head.port, ip_base=1)
        for i, pod in enumerate(gpus.pods):
            head.set_worker(pod, f"10.1.1.{i}", running=1)  # whatever the head says
        async with controller(fake_api, clock, gpus) as c:
            await c.run_pass()
            await step(c, clock, T0 + STEP)
            assert head.hits
            job = fake_api.get(o.RAY, "RayJob", "train", NS)
            job["status"].update(jobStatus="SUCCEEDED", jobDeploymentStatus="Complete")
            fake_api.update_status(job)
            await eventually(lambda: c.objects().ray_jobs[f"{NS}/train"].job_status == "SUCCEEDED",
                             "the RayJob's new status in the cache")
            await c.run_pass()  # the heads to ask are chosen on the last pass's snapshot
            asked = len(head.hits)
            t = T0 + 2 * STEP
            while t < DUE:
                await step(c, clock, t)
                t += STEP
            assert (await c.ray_targets())[key] is None  # the decision no longer needs Ray's view
            assert workload_active(fake_api, "train")  # not before the delay
            await step(c, clock, DUE)
            assert not workload_active(fake_api, "train")
            done = [m for _, r, m in await events_of(c, fake_api, "train") if r == R.STALLED_WORKLOAD_DEACTIVATED]
            assert len(done) == 1 and "its RayJob's Ray job ended (SUCCEEDED)" in done[0]
            assert len(head.hits) == asked  # not asked once the Ray job had ended
    finally:
        await head.close()


async def test_a_head_that_gives_only_part_of_its_pending_work_holds_the_deactivation(fake_api):
    """Its task list fails (say, too large to read): the idle actors and the empty actor and placement-group
    lists do not make it quiet."""
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    head = await RayHead(failing={"/api/v0/tasks"}).start()
    try:
        rayjob(fake_api, gpus, "train", "lq-a", head.port, ip_base=1)
        for i, pod in enumerate(gpus.pods):
            head.set_worker(pod, f"10.1.1.{i}", running=0)
        async with controller(fake_api, clock, gpus) as c:
            await c.run_pass()
            assert await run_until(c, clock, fake_api, "train", DUE + 90) is None
            held = [m for _, r, m in await events_of(c, fake_api, "train") if r == R.STALL_DEACTIVATION_HELD]
            assert len(held) == 1 and "misses part of its pending work" in held[0]
    finally:
        await head.close()


async def test_a_head_that_cannot_be_derived_is_counted_logged_once_and_holds(fake_api, caplog):
    clock = Clock(T0)
    gpus = IdleGpus(clock)
    queues(fake_api)
    key = rayjob(fake_api, gpus, "train", "lq-a", free_port(), ip_base=1,
                 annotations={"queuepilot.io/ray-dashboard-scheme": "ftp"})  # the RayJob's, copied by KubeRay
    caplog.set_level(logging.WARNING, logger="queuepilot.controller")
    async with controller(fake_api, clock, gpus) as c:
        await c.run_pass()
        assert await run_until(c, clock, fake_api, "train", DUE + 30) is None
        assert (await c.ray_targets())[key] is None
        held = [m for _, r, m in await events_of(c, fake_api, "train") if r == R.STALL_DEACTIVATION_HELD]
        assert len(held) == 1 and "Ray signal of RayCluster train-raycluster-x7k2p is missing" in held[0]
        errors = c.registry.get_sample_value("queuepilot_source_errors_total", {"source": "ray", "kind": "target"})
        assert errors is not None and errors >= 10  # every poll that needed it
        lines = [r.getMessage() for r in caplog.records if "cannot be asked" in r.getMessage()]
        assert len(lines) == 1 and key in lines[0] and "ray-dashboard-scheme" in lines[0]
