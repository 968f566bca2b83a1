"""Full stack: simulated GPUs -> real exporters -> real Prometheus -> the real controller process ->
the fake API server, with the test playing Kueue.  Asserted on the API objects, the controller's
/metrics and Prometheus."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from exporter.sample import PodRef
from tests.decisions import kube_world as kw
from tests.fakeapi.server import FakeApiServer
from tests.support.eventually import eventually
from tests.system.stack import (
    FLAVOR,
    NODES,
    OTHER_CHECK,
    STACK_TIMEOUT,
    ControllerProcess,
    check_entries,
    cluster_objects,
    conditions,
    controller,
    counted,
    exporter_job,
    finish,
    fleet,
    prometheus,
    read_after,
    reserve,
)

pytestmark = pytest.mark.e2e

async def flavor_gpus(cp: ControllerProcess, state: str) -> float | None:
    return await cp.metric("queuepilot_flavor_gpus", flavor=FLAVOR, state=state)


async def test_gpu_fails_between_two_admissions(fake_api: FakeApiServer, tmp_path: Path) -> None:
    api = fake_api
    for obj in cluster_objects():
        api.create(obj)
    config = tmp_path / "queuepilot.yaml"
    config.write_text("admission:\n  capacity_wait: 10s\n")  # B waits 10 s with its quota, then Retry
    async with fleet() as f, prometheus(
        tmp_path / "prom", [exporter_job(f.targets)]
    ) as prom, controller(api, prom.url, tmp_path / "ctl", "--config", str(config)) as cp:
        # the exporters' GPUs reach the controller through Prometheus
        await eventually(lambda: _equals(flavor_gpus(cp, "healthy"), 16.0), "16 healthy h100 GPUs on /metrics", timeout=STACK_TIMEOUT)
        assert await flavor_gpus(cp, "nominal") == 32.0  # two ClusterQueues x 16

        # A: 1 pod x 8 GPUs -> Ready, written by SSA next to the other controller's entry
        now = time.time()
        api.create(kw.workload("a", "team-a", "lq-a", created=now))
        reserve(api, "a", "team-a", "cq-a", now)
        entry = await eventually(lambda: _state(api, "a", "team-a", "Ready"), "A's check Ready", timeout=STACK_TIMEOUT)
        placed = re.fullmatch(r"8 healthy GPUs reserved \(h100: (\S+) 8\)", entry["message"])
        assert placed, entry["message"]
        a_node = placed.group(1)
        other = check_entries(api, "a", "team-a")[OTHER_CHECK]
        assert (other["state"], other["message"]) == ("Ready", "within the team's budget")
        managers = {(m["manager"], m.get("subresource"), m["operation"])
                    for m in api.get(kw.KUEUE, "Workload", "a", "team-a")["metadata"]["managedFields"]}
        assert ("queuepilot.io/gpu-capacity", "status", "Apply") in managers
        assert ("example.com/budget", "status", "Apply") in managers
        assert kw.World(api).kueue_react(time.time()) == [("a", "admitted")]
        assert conditions(api, "a", "team-a")["Admitted"] == "True"

        # A's pod runs on the node it was promised; its exporter attributes the GPUs to it
        api.create(kw.pod("a-main-0", "team-a", a_node, gpus=8))
        for i in range(8):
            f.sources[a_node].set_allocation(i, PodRef("team-a", "a-main-0", "main"))
            f.sources[a_node].set_load(i, 0.9)
        await eventually(lambda: _equals(flavor_gpus(cp, "free"), 8.0), "8 free GPUs after A's pod runs", timeout=STACK_TIMEOUT)

        # a GPU of the other node fails: XID 79 -> exporter -> Prometheus -> controller
        b_node = next(n for n in NODES if n != a_node)
        f.sources[b_node].inject_xid(3, 79)
        expr = f'queuepilot_gpu_healthy{{hostname="{b_node}",gpu="3"}} == 0'
        seen = await eventually(lambda: prom.query(expr), "Prometheus sees the failed GPU", timeout=STACK_TIMEOUT)
        assert seen[0]["metric"]["reason"] == "FatalXid"
        t_seen = time.time()
        await eventually(lambda: read_after(cp, t_seen), "a GPU poll after Prometheus had the failure", timeout=STACK_TIMEOUT)
        await eventually(lambda: _equals(flavor_gpus(cp, "unhealthy"), 1.0), "1 unhealthy GPU", timeout=15)
        assert await flavor_gpus(cp, "free") == 7.0
        assert await cp.metric("queuepilot_flavor_largest_free_block_gpus", flavor=FLAVOR) == 7.0

        # B: 1 pod x 8 GPUs of another team -> Pending with its quota for the capacity wait, then Retry
        # naming the largest free healthy block
        now = time.time()
        api.create(kw.workload("b", "team-b", "lq-b", created=now))
        reserve(api, "b", "team-b", "cq-b", now)
        waiting = await eventually(lambda: _state(api, "b", "team-b", "Pending", "waiting with quota"),
                                   "B waits with its quota", timeout=STACK_TIMEOUT)
        assert waiting["message"] == ("needs 1 pod x 8 GPUs (main) on flavor h100; not enough free healthy GPUs; "
                                      "waiting with quota reserved for up to 10s from its reservation, then Retry")
        assert kw.World(api).kueue_react(time.time()) == []  # Kueue keeps B's quota
        entry = await eventually(lambda: _state(api, "b", "team-b", "Retry"), "B's check Retry", timeout=STACK_TIMEOUT)
        assert entry["message"] == (
            "needs 1 pod x 8 GPUs (main) on flavor h100; largest free healthy blocks: 7 "
            "(7 free, 0 promised, 1 unhealthy); retry in 30s"
        )
        assert entry["requeueAfterSeconds"] == 30
        assert check_entries(api, "b", "team-b")[OTHER_CHECK]["state"] == "Ready"
        assert await counted(cp, "queuepilot_admission_decisions_total", cluster_queue="cq-b", state="Retry",
                             reason="InsufficientGpus", mode="live") == 1.0
        assert await counted(cp, "queuepilot_admission_decisions_total", cluster_queue="cq-a", state="Ready",
                             reason="CapacityConfirmed", mode="live") == 1.0
        # Events are sent by a background sender after the check's write: wait for them, do not race it
        events = await eventually(
            lambda: (lambda evs: evs if len(evs) == 2 else None)(
                [e for e in api.list("v1", "Event", "team-b") if e["involvedObject"]["name"] == "b"]),
            "B's two Events (waiting, Retry)", timeout=15)
        assert [(e["type"], e["reason"]) for e in events] == [("Warning", "InsufficientGpus")] * 2
        assert sorted(e["message"].split(": ")[1] for e in events) == ["Pending", "Retry"]
        assert kw.World(api).kueue_react(time.time()) == [("b", "evicted")]
        assert await flavor_gpus(cp, "unhealthy") == 1.0
        await finish(api, cp)


@pytest.mark.parametrize("mode", ["fail-open", "hold"])
async def test_stale_gpu_signal(fake_api: FakeApiServer, tmp_path: Path, mode: str) -> None:
    """Prometheus goes away: the GPU signal ages past --signal-stale-seconds; the default admits on
    quota alone (``ReadyGpuSignalStale``), ``hold`` keeps the entry Pending with the reason."""
    api = fake_api
    for obj in cluster_objects():
        api.create(obj)
    extra = ["--signal-stale-seconds", "2"]
    if mode == "hold":
        config = tmp_path / "queuepilot.yaml"
        config.write_text("admission:\n  stale_signal_mode: hold\n")
        extra += ["--config", str(config)]
    async with fleet() as f, prometheus(tmp_path / "prom", [exporter_job(f.targets)]) as prom, controller(
        api, prom.url, tmp_path / "ctl", *extra
    ) as cp:
        await eventually(lambda: _equals(flavor_gpus(cp, "healthy"), 16.0), "16 healthy h100 GPUs on /metrics", timeout=STACK_TIMEOUT)
        assert await cp.metric("queuepilot_signal_stale", signal="gpu") == 0.0

        await prom.stop()
        await eventually(lambda: _equals(cp.metric("queuepilot_signal_stale", signal="gpu"), 1.0),
                         "the GPU signal marked stale", timeout=10)
        errors = await cp.metric("queuepilot_source_errors_total", source="gpu", kind="connection")
        assert errors is not None and errors >= 1

        now = time.time()
        api.create(kw.workload("c", "team-a", "lq-a", created=now))
        reserve(api, "c", "team-a", "cq-a", now)
        if mode == "fail-open":
            entry = await eventually(lambda: _state(api, "c", "team-a", "Ready"), "C's check Ready", timeout=STACK_TIMEOUT)
            assert re.fullmatch(r"GPU signal stale \(last data at \d+\); admitting on quota alone "
                                r"\(stale_signal_mode=fail-open\)", entry["message"]), entry["message"]
            reason = "ReadyGpuSignalStale"
            assert await counted(cp, "queuepilot_admission_decisions_total", cluster_queue="cq-a", state="Ready",
                                 reason=reason, mode="live") == 1.0
            assert kw.World(api).kueue_react(time.time()) == [("c", "admitted")]
        else:
            entry = await eventually(
                lambda: (e := check_entries(api, "c", "team-a")[kw.CHECK])["message"] and e, "C's hold message", timeout=STACK_TIMEOUT)
            assert entry["state"] == "Pending"
            assert "holding until it is fresh (stale_signal_mode=hold)" in entry["message"], entry["message"]
            assert conditions(api, "c", "team-a")["QuotaReserved"] == "True"  # it keeps its quota
            assert kw.World(api).kueue_react(time.time()) == []
        assert check_entries(api, "c", "team-a")[OTHER_CHECK]["state"] == "Ready"
        await finish(api, cp)


# ------------------------------------------------------------------------------------------ helpers
async def _equals(value_coro, expected: float) -> bool:
    return (await value_coro) == expected


def _state(api: FakeApiServer, name: str, ns: str, state: str, says: str = "") -> dict | None:
    entry = check_entries(api, name, ns).get(kw.CHECK)
    return entry if entry and entry["state"] == state and says in entry.get("message", "") else None
