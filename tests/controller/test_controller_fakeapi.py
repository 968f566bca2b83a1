"""The controller against the fake API server: metrics of a scripted cluster, readiness, RBAC, events."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.core.snapshot import GpuState
from autoscaler.rbac import CONTROLLER_API_CALLS
from autoscaler.signals.gpu import GpuReading
from tests.controller import scenario
from tests.controller.harness import StaticGpu, http_get, running_controller, synced_snapshot
from tests.support import objects as o
from tests.support.eventually import eventually
from tests.support.prometheus import promtool


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def metric(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, tuple(sorted(labels.items()))))


def load_scenario(fake_api, now: float) -> None:
    for ns in ("team-a", "team-b"):
        fake_api.create(o.namespace(ns))
    for obj in scenario.raw_objects(now):
        if obj["kind"] == "Pod" and obj["status"]["phase"] == "Succeeded":
            continue
        fake_api.create(obj)


async def test_metrics_match_a_scripted_cluster(fake_api):
    now = time.time()
    load_scenario(fake_api, now)
    unhealthy = tuple(GpuState(f"GPU-h2-{i}", "h2", i, healthy=i != 7, health_reason="" if i != 7 else "Xid79")
                      for i in range(8))
    gpu = StaticGpu(GpuReading(unhealthy, observed_at=now))
    async with running_controller(fake_api, gpu=gpu) as c:
        base = f"http://127.0.0.1:{c.port}"
        await synced_snapshot(c)
        assert c.snapshot is not None and len(c.snapshot.workloads) == 5
        status, text = await http_get(f"{base}/metrics")
        assert status == 200
        assert metric(text, "queuepilot_queue_pending_workloads", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a") == 2
        oldest = metric(text, "queuepilot_queue_oldest_pending_seconds", cluster_queue="cq-a", namespace="team-a", local_queue="lq-a")
        assert 300 <= oldest < 330
        assert metric(text, "queuepilot_queue_pending_gpus", cluster_queue="cq-b", flavor="h100") == 8
        flavor = {s: metric(text, "queuepilot_flavor_gpus", flavor="h100", state=s)
                  for s in ("nominal", "healthy", "unhealthy", "allocated", "free")}
        assert flavor == {"nominal": 24, "healthy": 15, "unhealthy": 1, "allocated": 6, "free": 9}
        assert metric(text, "queuepilot_flavor_largest_free_block_gpus", flavor="h100") == 5
        assert metric(text, "queuepilot_raycluster_workers", namespace="team-a", raycluster="rc", group="gpu",
                      kind="current") == 1
        assert metric(text, "queuepilot_cache_synced", resource="workloads") == 1
        assert metric(text, "queuepilot_cache_objects", resource="workloads") == 5
        assert metric(text, "queuepilot_controller_is_leader") == 1
        lint = promtool("check", "metrics", stdin=text)  # the live endpoint, every family
        assert lint.returncode == 0 and not (lint.stdout + lint.stderr).strip(), lint.stdout + lint.stderr

        # event-driven: a new pending workload shows up well before the 1 s resync would matter
        fake_api.create(o.workload("wl-new", "team-b", "lq-b", created=now - 7))

        async def seen():
            _, t = await http_get(f"{base}/metrics")
            return metric(t, "queuepilot_queue_pending_workloads", cluster_queue="cq-b", namespace="team-b", local_queue="lq-b") == 2

        await eventually(seen, timeout=15)
        assert await http_get(f"{base}/healthz") == (200, "ok\n")
    calls = fake_api.observed_calls()
    assert calls <= CONTROLLER_API_CALLS, calls - CONTROLLER_API_CALLS


async def test_readyz_only_after_sync(fake_api):
    fake_api.set_latency(0.5)  # the first lists are slow
    async with running_controller(fake_api) as c:
        status, body = await http_get(f"http://127.0.0.1:{c.port}/readyz")
        assert status == 503 and "not synced" in body
        assert not c.synced
        await eventually(lambda: c.synced, timeout=20)
        fake_api.set_latency(0)
        status, _ = await http_get(f"http://127.0.0.1:{c.port}/readyz")
        assert status == 200


async def test_reconcilers_run_on_events_and_their_failures_are_contained(fake_api):
    load_scenario(fake_api, time.time())
    seen: list[int] = []

    class Broken:
        name = "broken"

        async def reconcile(self, snapshot, now):
            raise RuntimeError("boom")

    class Recorder:
        name = "recorder"

        async def reconcile(self, snapshot, now):
            seen.append(len(snapshot.workloads))

    from autoscaler.cluster.client import make_api_client
    from autoscaler.controller.config import ControllerConfig  # noqa: F401  (documented type of the config)
    from autoscaler.controller.loop import Controller
    from tests.controller.harness import StubRay, config_for

    config = config_for(fake_api, resync_seconds=30.0)
    client = await make_api_client(config.kubeconfig)
    c = Controller(config, client, gpu_signal=StaticGpu(), ray_client=StubRay(),
                   build_reconcilers=lambda ctx: [Broken(), Recorder()])
    await c.start()
    try:
        await eventually(lambda: seen and seen[-1] == 5)
        fake_api.create(o.workload("wl-x", "team-a", "lq-a"))
        # with a 30 s resync, only the watch event can trigger this pass
        await eventually(lambda: seen[-1] == 6, timeout=15)
        errors = c.counters.source_errors.labels(source="reconciler/broken", kind="exception")._value.get()
        assert errors >= 2
    finally:
        await c.shutdown()
        await client.close()


async def test_scrape_mode_finds_exporters_and_marks_unhealthy_gpus(fake_api, answers):
    """--gpu-signal scrape: exporter pods found by label through the API, scraped, joined to nodes."""
    from urllib.parse import urlparse

    port = urlparse(answers.url).port
    fake_api.create(o.namespace("monitoring"))
    fake_api.create(o.resource_flavor("h100", {"gpu": "h100"}))
    fake_api.create(o.node("h1", 3, {"gpu": "h100"}))
    fake_api.create(o.pod("exporter-h1", "monitoring", node="h1", ip="127.0.0.1",
                          labels={"app.kubernetes.io/name": "queuepilot-exporter"}))
    fake_api.create(o.pod("exporter-pending", "monitoring", phase="Pending",
                          labels={"app.kubernetes.io/name": "queuepilot-exporter"}))
    async with running_controller(fake_api, gpu=None, gpu_signal="scrape", exporter_port=port,
                                  gpu_poll_seconds=0.2) as c:
        await eventually(lambda: c.snapshot is not None and c.snapshot.nodes.get("h1") is not None
                         and len(c.snapshot.nodes["h1"].gpus) == 3)
        snap = c.snapshot
        assert not snap.gpu_signal_stale()
        cap = snap.flavor_capacity("h100")
        # 3 GPUs, one unhealthy (xid), one allocated per the exporter (its pod is not watched here)
        assert (cap.healthy, cap.unhealthy, cap.allocated, cap.free) == (2, 1, 1, 1)
        answers.mode = "500"  # the exporter breaks: errors counted, data kept and aging
        await eventually(lambda: c.counters.source_errors.labels(source="gpu", kind="server")._value.get() >= 1)
        assert len(c.snapshot.nodes["h1"].gpus) == 3
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS


async def test_labeled_pod_mode_watches_one_stream_per_selector(fake_api):
    fake_api.create(o.namespace("team-a"))
    fake_api.create(o.ray_worker_pod("rc", "gpu", "ray-w1", node="n1"))
    fake_api.create(o.pod("kueue-p1", node="n1", gpus=2, labels={"kueue.x-k8s.io/podset": "main"}))
    fake_api.create(o.pod("other", node="n1", gpus=1))
    fake_api.create(o.pod("done", node="n1", gpus=1, phase="Succeeded", labels={"ray.io/cluster": "rc"}))
    async with running_controller(fake_api, pods="labeled") as c:
        await eventually(lambda: c.synced)
        assert set(c.caches) >= {"pods-ray", "pods-kueue"} and "pods" not in c.caches
        assert set(c.caches["pods-ray"].items) == {"team-a/ray-w1"}
        assert set(c.caches["pods-kueue"].items) == {"team-a/kueue-p1"}
        fake_api.create(o.pod("kueue-p2", node="n1", gpus=4, labels={"kueue.x-k8s.io/podset": "main"}))
        await eventually(lambda: "team-a/kueue-p2" in c.caches["pods-kueue"].items)
    assert fake_api.observed_calls() <= CONTROLLER_API_CALLS


async def test_kuberay_not_installed_is_an_empty_synced_resource(tmp_path):
    """A cluster with Kueue but without KubeRay's CRDs: the Ray caches are empty, the controller is ready."""
    from tests.fakeapi.server import FakeApiServer
    from tests.support import paths

    async with FakeApiServer(paths.crds_dir() / "kueue", workdir=tmp_path) as api:
        api.create(o.namespace("team-a"))
        api.create(o.workload("wl-1"))
        async with running_controller(api) as c:
            await synced_snapshot(c)
            assert c.caches["rayclusters"].absent and c.caches["rayjobs"].absent
            assert set(c.caches["workloads"].items) == {"team-a/wl-1"}
            assert (await http_get(f"http://127.0.0.1:{c.port}/readyz"))[0] == 200
            assert c.snapshot is not None and "team-a/wl-1" in c.snapshot.workloads
            assert not c.snapshot.signals["watch/rayclusters"].is_stale(c.snapshot.taken_at)
