"""Pod attribution against a real gRPC PodResources server on a unix socket."""

from __future__ import annotations

from pathlib import Path

from exporter.agent import Agent
from exporter.attribution import attribute
from exporter.collector import ExporterCollector, new_registry, render_text
from exporter.podresources import api_pb2
from exporter.podresources.client import PodResourcesClient, allocations_from_response, normalize_device_id
from exporter.sample import FleetSample, GpuSample, MigInstance, PodRef
from exporter.sources.sim import SimSource
from tests.exporter.expo import by_gpu, series
from tests.exporter.kubelet import FakeKubelet, KubeletServer, pod

UTIL = "DCGM_FI_DEV_GPU_UTIL"


def make_agent(socket_path: Path, gpus: int = 4) -> tuple[Agent, SimSource, object]:
    source = SimSource("node-a", gpus=gpus, pods=0, fault_script=())  # no simulated pods: only the kubelet's
    collector = ExporterCollector(clock=lambda: 1_000.0)
    agent = Agent(
        source, collector, hostname="node-a", interval=1.0,
        pod_resources=PodResourcesClient(str(socket_path), timeout=2.0), clock=lambda: 1_000.0,
    )
    return agent, source, new_registry(collector)


def pod_labels(labels: dict[str, str]) -> tuple[str, str, str] | None:
    if "pod" not in labels:
        assert "namespace" not in labels and "container" not in labels
        return None
    return labels["namespace"], labels["pod"], labels["container"]


async def test_gpus_are_attributed_to_the_pods_the_kubelet_lists(kubelet: KubeletServer) -> None:
    agent, source, registry = make_agent(kubelet.socket_path)
    u = source.uuids
    kubelet.servicer.pods = [
        pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0], u[1]),
        pod("infer-0", "team-b", "server", "nvidia.com/gpu", f"{u[2]}::1"),  # time-slicing replica id
        pod("fpga-0", "team-c", "main", "example.com/fpga", u[3]),  # not a GPU resource: ignored
    ]
    await agent.collect_once()
    text = render_text(registry).decode()
    labels = by_gpu(text, UTIL)
    assert pod_labels(labels["0"]) == ("team-a", "train-0", "worker")
    assert pod_labels(labels["1"]) == ("team-a", "train-0", "worker")
    assert pod_labels(labels["2"]) == ("team-b", "infer-0", "server")
    assert pod_labels(labels["3"]) is None
    assert list(labels["0"])[-3:] == ["container", "namespace", "pod"]
    allocated = {lab["gpu"]: v for lab, v in series(text, "queuepilot_gpu_allocated")}
    assert allocated == {"0": 1.0, "1": 1.0, "2": 1.0, "3": 0.0}
    assert series(text, "queuepilot_exporter_pod_resources_up") == [({"hostname": "node-a"}, 1.0)]
    await agent.pod_resources.close()


async def test_a_departed_pod_disappears_from_the_next_render(kubelet: KubeletServer) -> None:
    agent, source, registry = make_agent(kubelet.socket_path)
    u = source.uuids
    kubelet.servicer.pods = [pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0]),
                             pod("infer-0", "team-b", "server", "nvidia.com/gpu", u[1])]
    await agent.collect_once()
    assert "infer-0" in render_text(registry).decode()
    kubelet.servicer.pods = [pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0])]
    await agent.collect_once()
    text = render_text(registry).decode()
    assert "infer-0" not in text  # no stale series anywhere
    assert pod_labels(by_gpu(text, UTIL)["1"]) is None
    assert pod_labels(by_gpu(text, UTIL)["0"]) == ("team-a", "train-0", "worker")
    await agent.pod_resources.close()


async def test_socket_absent_is_skipped_and_counted_then_picked_up_when_it_appears(kubelet_socket: Path) -> None:
    agent, source, registry = make_agent(kubelet_socket)
    await agent.collect_once()
    await agent.collect_once()
    text = render_text(registry).decode()
    assert series(text, "queuepilot_exporter_pod_resources_up") == [({"hostname": "node-a"}, 0.0)]
    errors = {lab["kind"]: v for lab, v in series(text, "queuepilot_exporter_source_errors")
              if lab["source"] == "pod_resources"}
    assert errors["socket_absent"] == 2.0
    assert all(pod_labels(lab) is None for lab in by_gpu(text, UTIL).values())
    assert len(by_gpu(text, UTIL)) == 4  # GPU metrics are still served

    server = KubeletServer(kubelet_socket, FakeKubelet())
    server.servicer.pods = [pod("late-0", "team-a", "worker", "nvidia.com/gpu", source.uuids[3])]
    await server.start()
    try:
        await agent.collect_once()
        text = render_text(registry).decode()
        assert pod_labels(by_gpu(text, UTIL)["3"]) == ("team-a", "late-0", "worker")
        assert series(text, "queuepilot_exporter_pod_resources_up") == [({"hostname": "node-a"}, 1.0)]
    finally:
        await agent.pod_resources.close()
        await server.stop()


async def test_kubelet_restart_reconnects(kubelet: KubeletServer) -> None:
    agent, source, registry = make_agent(kubelet.socket_path)
    u = source.uuids
    kubelet.servicer.pods = [pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0])]
    await agent.collect_once()
    assert agent.pod_resources_up

    await kubelet.stop(leave_stale_socket=True)  # kubelet crashed: a dead socket file is left behind
    state = await agent.collect_once()
    assert not agent.pod_resources_up
    assert state.errors_total[("pod_resources", "rpc_error")] == 1
    text = render_text(registry).decode()
    assert len(by_gpu(text, UTIL)) == 4  # still serving GPU metrics

    restarted = KubeletServer(kubelet.socket_path, FakeKubelet())  # a new process, new allocations
    restarted.servicer.pods = [pod("train-1", "team-b", "worker", "nvidia.com/gpu", u[1])]
    await restarted.start()
    try:
        await agent.collect_once()
        assert agent.pod_resources_up
        text = render_text(registry).decode()
        assert pod_labels(by_gpu(text, UTIL)["1"]) == ("team-b", "train-1", "worker")
        assert pod_labels(by_gpu(text, UTIL)["0"]) is None
    finally:
        await agent.pod_resources.close()
        await restarted.stop()


async def test_kubelet_restart_between_two_collections_loses_nothing(kubelet: KubeletServer) -> None:
    agent, source, _registry = make_agent(kubelet.socket_path)
    u = source.uuids
    kubelet.servicer.pods = [pod("train-0", "team-a", "worker", "nvidia.com/gpu", u[0])]
    await agent.collect_once()
    await kubelet.stop()
    restarted = KubeletServer(kubelet.socket_path, FakeKubelet())
    restarted.servicer.pods = [pod("train-2", "team-a", "worker", "nvidia.com/gpu", u[2])]
    await restarted.start()
    try:
        state = await agent.collect_once()  # the old channel fails once; the client redials at once
        assert agent.pod_resources_up
        assert state.errors_total[("pod_resources", "rpc_error")] == 0
        assert [g.pod.pod if g.pod else None for g in state.sample.gpus] == [None, None, "train-2", None]
    finally:
        await agent.pod_resources.close()
        await restarted.stop()


async def test_unavailable_answer_is_counted_and_sources_pods_kept(kubelet: KubeletServer) -> None:
    source = SimSource("node-a", gpus=4, fault_script=())  # two GPUs in a simulated pod
    collector = ExporterCollector(clock=lambda: 1.0)
    agent = Agent(source, collector, hostname="node-a",
                  pod_resources=PodResourcesClient(str(kubelet.socket_path), timeout=2.0), clock=lambda: 1.0)
    kubelet.servicer.fail = True
    state = await agent.collect_once()
    assert state.errors_total[("pod_resources", "rpc_error")] == 1
    assert state.sample.gpus[0].pod == source.allocation(0) is not None  # the source's own pods stay
    await agent.pod_resources.close()


def test_device_ids_and_resources_are_normalized() -> None:
    assert normalize_device_id("GPU-abc::3") == "GPU-abc"
    assert normalize_device_id("MIG-def") == "MIG-def"
    assert normalize_device_id("2") == "index:2"
    assert normalize_device_id("nvidia5") == "index:5"
    assert normalize_device_id("nvidia0/gi1") is None
    resp = api_pb2.ListPodResourcesResponse(pod_resources=[
        pod("a", "ns", "c", "nvidia.com/mig-1g.10gb", "MIG-111"),
        pod("b", "ns", "c", "nvidia.com/gpu", "1"),
        pod("x", "ns", "c", "nvidia.com/gpu-not-really", "GPU-zzz"),
    ])
    alloc = allocations_from_response(resp)
    assert set(alloc.by_device) == {"MIG-111", "index:1"}


def test_mig_instances_are_attributed_by_mig_uuid() -> None:
    gpu = GpuSample(index=0, uuid="GPU-p", pci_bus_id="b", model_name="NVIDIA A100-SXM4-80GB",
                    mig=(MigInstance(1, "1g.10gb", "MIG-111"), MigInstance(2, "1g.10gb", "MIG-222")),
                    pod=PodRef("old", "gone", "c"))
    resp = api_pb2.ListPodResourcesResponse(pod_resources=[pod("a", "ns", "c", "nvidia.com/mig-1g.10gb", "MIG-222")])
    out = attribute(FleetSample(1.0, "node-a", (gpu,), "test"), allocations_from_response(resp)).gpus[0]
    assert out.pod is None  # the whole GPU is not listed: the old pod is gone
    assert [m.pod for m in out.mig] == [None, PodRef("ns", "a", "c")]
