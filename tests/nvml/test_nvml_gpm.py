"""GPM (DCGM's profiling fields from NVML) through the real pynvml and the fake library's GPM calls."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.agent import Agent
from exporter.collector import ExporterCollector, new_registry, render_text
from exporter.podresources.client import PodResourcesClient
from exporter.sources.base import SourceError
from exporter.sources.nvml import NvmlSource
from exporter.sources.nvml_gpm import GPM_FIELDS
from tests.exporter.expo import series
from tests.exporter.kubelet import FakeKubelet, KubeletServer, pod
from tests.nvml.fake_library import FakeNvml

GiB = 1 << 30
MiB = float(1 << 20)
ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
PROF = {f.dcgm_field for f in GPM_FIELDS}

# every GPM metric the source reads, on GPU 0, in GPM's units (percent, MiB/s)
ALL_METRICS = {
    1: 93.0, 2: 81.0, 3: 47.5, 4: 3.0, 5: 62.0, 6: 0.5, 7: 58.0, 9: 1.5, 10: 34.0,
    11: 0.25, 12: 12.0, 13: 4.0, 20: 1200.0, 21: 2400.0, 60: 51200.0, 61: 40960.0,
}
EXPECTED = {
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.93,
    "DCGM_FI_PROF_SM_ACTIVE": 0.81,
    "DCGM_FI_PROF_SM_OCCUPANCY": 0.475,
    "DCGM_FI_PROF_PIPE_INT_ACTIVE": 0.03,
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.62,
    "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE": 0.005,
    "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE": 0.58,
    "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE": 0.015,
    "DCGM_FI_PROF_DRAM_ACTIVE": 0.34,
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": 0.0025,
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": 0.12,
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": 0.04,
    "DCGM_FI_PROF_PCIE_TX_BYTES": 1200.0 * MiB,
    "DCGM_FI_PROF_PCIE_RX_BYTES": 2400.0 * MiB,
    "DCGM_FI_PROF_NVLINK_RX_BYTES": 51200.0 * MiB,
    "DCGM_FI_PROF_NVLINK_TX_BYTES": 40960.0 * MiB,
}


def control(metrics: dict[int, float], *, gpus: int = 2, extra: str = "") -> str:
    lines = [f"gpus {gpus}", "gpu 0 gpm 1"]
    lines += [f"gpm 0 -1 {m} {v}" for m, v in metrics.items()]
    return "\n".join(lines) + "\n" + extra


async def test_every_gpm_metric_in_dcgm_names_and_units(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(control(ALL_METRICS))  # GPU 1 has no GPM (pre-Hopper, or a vGPU guest)
    fake_nvml.load()
    source = make_source()
    await source.start()
    sample = await source.collect(1.0)
    g0, g1 = sample.gpus
    assert {k: v for k, v in g0.fields.items() if k in PROF} == pytest.approx(EXPECTED)
    assert PROF.isdisjoint(g1.fields) and g1.fields["DCGM_FI_DEV_FB_USED"] == 10240.0
    assert dict(sample.errors) == {"not_supported": 1}  # GPU 1, once

    # values outside GPM's range are clipped to a ratio; the next interval is its own
    fake_nvml.write(control({**ALL_METRICS, 1: 150.0, 2: -3.0}))
    second = await source.collect(2.0)
    assert second.gpus[0].fields[ENGINE] == 1.0 and second.gpus[0].fields["DCGM_FI_PROF_SM_ACTIVE"] == 0.0
    assert dict(second.errors) == {}


async def test_one_sample_per_device_per_collection_rates_between_collections(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(control({1: 50.0}, gpus=1))
    fake_nvml.load()
    source = make_source()
    await source.start()
    assert fake_nvml.calls("nvmlGpmSampleGet", 0) == 1  # primed at start: the first collection has values
    for n in range(1, 6):
        sample = await source.collect(float(n))
        assert sample.gpus[0].fields[ENGINE] == 0.5
        # the fake refuses metrics of two samples out of order or of different devices
        assert fake_nvml.calls("nvmlGpmSampleGet", 0) == 1 + n
        assert fake_nvml.calls("nvmlGpmMetricsGet@gpu", 0) == n
    assert fake_nvml.gpm_samples_live() == 2
    await source.close()
    assert fake_nvml.gpm_samples_live() == 0


async def test_gpm_unsupported_device_is_skipped_logged_and_counted_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource], caplog: pytest.LogCaptureFixture
) -> None:
    fake_nvml.write("gpus 2\n")  # no GPU says GPM
    fake_nvml.load()
    source = make_source()
    await source.start()
    samples = [await source.collect(float(t)) for t in range(3)]
    assert all(PROF.isdisjoint(g.fields) for s in samples for g in s.gpus)
    assert samples[0].errors["not_supported"] == 2 and all("not_supported" not in s.errors for s in samples[1:])
    assert fake_nvml.calls("nvmlGpmQueryDeviceSupport") == 2
    assert fake_nvml.calls("nvmlGpmSampleGet") == 0 and fake_nvml.gpm_samples_live() == 0
    assert sum("GPM not supported" in r.getMessage() for r in caplog.records) == 2


async def test_metrics_a_device_does_not_answer_are_skipped_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(control({1: 20.0, 2: 10.0}, gpus=1))
    fake_nvml.load()
    source = make_source()
    await source.start()
    samples = [await source.collect(float(t)) for t in range(3)]
    for s in samples:
        assert {k for k in s.gpus[0].fields if k in PROF} == {ENGINE, "DCGM_FI_PROF_SM_ACTIVE"}
    assert samples[0].errors["not_supported"] == 1
    assert all("not_supported" not in s.errors for s in samples[1:])
    # a metric that appears later (a driver that gained it) is not asked for again: skipped for good
    fake_nvml.write(control({1: 20.0, 2: 10.0, 5: 30.0}, gpus=1))
    assert "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE" not in (await source.collect(9.0)).gpus[0].fields


async def test_failing_gpm_calls_are_counted_and_recover(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    good = control({1: 40.0}, gpus=1)
    fake_nvml.write(good)
    fake_nvml.load()
    source = make_source()
    await source.start()
    assert (await source.collect(1.0)).gpus[0].fields[ENGINE] == 0.4

    fake_nvml.write(good + "gpu 0 gpm_sample_error 999\n")  # NVML_ERROR_UNKNOWN from nvmlGpmSampleGet
    for t in (2.0, 3.0):
        s = await source.collect(t)
        assert ENGINE not in s.gpus[0].fields and not s.gpus[0].lost
        assert s.gpus[0].fields["DCGM_FI_DEV_FB_USED"] == 10240.0
        assert s.errors["nvml_error"] == 1
    fake_nvml.write(good + "gpu 0 gpm_metrics_error 999\n")
    s = await source.collect(4.0)  # re-primed: no interval yet
    s = await source.collect(5.0)
    assert ENGINE not in s.gpus[0].fields and s.errors["nvml_error"] == 1
    fake_nvml.write(good)
    assert (await source.collect(6.0)).gpus[0].fields[ENGINE] == 0.4

    # a sample call that says NOT_SUPPORTED stops GPM on that device: counted once, never asked again
    fake_nvml.write(good + "gpu 0 gpm_sample_error 3\n")
    s = await source.collect(7.0)
    assert s.errors["not_supported"] == 1 and ENGINE not in s.gpus[0].fields
    before = fake_nvml.calls("nvmlGpmSampleGet", 0)
    s = await source.collect(8.0)
    assert "not_supported" not in s.errors and fake_nvml.calls("nvmlGpmSampleGet", 0) == before
    assert fake_nvml.gpm_samples_live() == 0


async def test_driver_without_gpm_counts_function_not_found_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    fake_nvml.write(control({1: 40.0}, gpus=1))
    fake_nvml.load("old-driver")
    source = make_source()
    await source.start()
    s = await source.collect(1.0)
    assert PROF.isdisjoint(s.gpus[0].fields)
    assert s.errors["function_not_found"] >= 2  # GPM, and the energy read the old driver lacks too


async def test_mig_instances_have_profiling_utilization_attributed_to_their_pods(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    mig_a, mig_b = "MIG-11111111-2222-3333-4444-555555555555", "MIG-66666666-7777-8888-9999-000000000000"
    fake_nvml.write(
        "gpus 1\ngpu 0 mig_mode 1\ngpu 0 gpm 1\n"
        f"mig 0 0 5 1g.10gb {mig_a} {10 * GiB} {3 * GiB}\n"
        f"mig 0 2 2 3g.40gb {mig_b} {40 * GiB} {GiB}\n"
        "gpm 0 5 1 88\ngpm 0 5 2 70\ngpm 0 5 5 52\n"  # GPU instance 5: busy with tensor work
        "gpm 0 2 1 4\ngpm 0 2 2 2\ngpm 0 2 5 0\n"  # GPU instance 2: nearly idle
        "gpm 0 -1 1 46\n"  # the whole GPU
    )
    fake_nvml.load()
    short = Path(tempfile.mkdtemp(prefix="qp-gpm-"))
    kubelet = KubeletServer(short / "kubelet.sock", FakeKubelet())
    await kubelet.start()
    try:
        kubelet.servicer.pods = [
            pod("llm-0", "team-a", "server", "nvidia.com/mig-1g.10gb", mig_a),
            pod("nb-0", "team-b", "lab", "nvidia.com/mig-3g.40gb", mig_b),
        ]
        source = make_source()
        await source.start()
        collector = ExporterCollector(clock=lambda: 100.0)
        registry = new_registry(collector)
        agent = Agent(source, collector, hostname="node-a", interval=10.0, clock=lambda: 100.0,
                      pod_resources=PodResourcesClient(str(kubelet.socket_path), timeout=2.0))
        state = await agent.collect_once()
        g0 = state.sample.gpus[0]
        assert g0.fields[ENGINE] == pytest.approx(0.46)
        by_gi = {m.gpu_instance_id: m for m in g0.mig}
        assert by_gi[5].fields[ENGINE] == pytest.approx(0.88)
        assert by_gi[5].fields["DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"] == pytest.approx(0.52)
        assert by_gi[2].fields["DCGM_FI_PROF_SM_ACTIVE"] == pytest.approx(0.02)

        text = render_text(registry).decode()
        mig_series = {lab["GPU_I_ID"]: (lab, v) for lab, v in series(text, ENGINE) if "GPU_I_ID" in lab}
        lab5, v5 = mig_series["5"]
        assert v5 == pytest.approx(0.88)
        assert (lab5["GPU_I_PROFILE"], lab5["namespace"], lab5["pod"], lab5["container"]) == (
            "1g.10gb", "team-a", "llm-0", "server")
        assert list(lab5)[5:7] == ["GPU_I_PROFILE", "GPU_I_ID"]  # dcgm-exporter's label order
        lab2, _ = mig_series["2"]
        assert (lab2["GPU_I_PROFILE"], lab2["pod"]) == ("3g.40gb", "nb-0")
        await agent.pod_resources.close()
    finally:
        await kubelet.stop()
        shutil.rmtree(short, ignore_errors=True)


def test_every_gpm_field_is_a_cataloged_dcgm_profiling_family() -> None:
    from exporter.metrics import DCGM_PROF_FAMILIES

    assert PROF == {m.name for m in DCGM_PROF_FAMILIES}
    assert len({f.metric_id for f in GPM_FIELDS}) == len(GPM_FIELDS)


async def test_a_driver_reload_frees_and_renews_the_gpm_samples(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    good = "gpus 2\ngpu 0 gpm 1\ngpu 1 gpm 1\ngpm 0 -1 1 30\ngpm 1 -1 1 60\n"
    fake_nvml.write(good)
    fake_nvml.load()
    source = make_source()
    await source.start()
    assert [g.fields[ENGINE] for g in (await source.collect(100.0)).gpus] == [0.3, 0.6]
    assert fake_nvml.gpm_samples_live() == 4

    fake_nvml.write(good + "driver_not_loaded 1\n")
    for now in (101.0, 102.0):
        with pytest.raises(SourceError):  # driver_not_loaded: the collection is aborted
            await source.collect(now)
    fake_nvml.write(good)
    back = await source.collect(104.0)  # re-initialised: new streams, primed, so values at once
    assert [g.fields[ENGINE] for g in back.gpus] == [0.3, 0.6]
    assert fake_nvml.gpm_samples_live() == 4  # the old session's samples were given back
    await source.close()
    assert fake_nvml.gpm_samples_live() == 0


async def test_gpm_refused_for_permission_is_skipped_and_counted_once(
    fake_nvml: FakeNvml, make_source: Callable[..., NvmlSource]
) -> None:
    # a driver that restricts profiling counters to admin users answers NO_PERMISSION (4)
    fake_nvml.write(control({1: 40.0}, gpus=1, extra="gpu 0 gpm_sample_error 4\n"))
    fake_nvml.load()
    source = make_source()
    await source.start()
    samples = [await source.collect(float(t)) for t in range(3)]
    assert all(ENGINE not in s.gpus[0].fields for s in samples)
    assert samples[0].errors["no_permission"] == 1 and all("no_permission" not in s.errors for s in samples[1:])
    assert fake_nvml.gpm_samples_live() == 0
