"""The controller's GPU signal reads the exporter's profiling fields, per GPU, with GPU_UTIL as fallback.

The exporter (sim source) is served by the real app and scraped over HTTP; its text goes through the
controller's own scrape parser and ``fold_series``.
"""

from __future__ import annotations

import aiohttp
import pytest

from autoscaler.signals.gpu import fold_series
from autoscaler.signals.gpu_scrape import parse_exposition
from exporter.server import ExporterApp
from exporter.sources.sim import SimSource


async def scrape(source: SimSource) -> str:
    async with ExporterApp(source, listen="127.0.0.1:0", interval=60.0, pod_resources_socket=None) as app:
        async with aiohttp.ClientSession() as http, http.get(app.metrics_url) as r:
            return await r.text()


async def test_profiling_activity_is_preferred_and_named() -> None:
    source = SimSource("node-a", gpus=3, pods=0, fault_script=())
    for i, load in enumerate((0.9, 0.3, 0.0)):
        source.set_load(i, load)
    series = parse_exposition(await scrape(source))
    engine = {lab["gpu"]: v for fam, lab, v in series if fam == "DCGM_FI_PROF_GR_ENGINE_ACTIVE"}
    sm = {lab["gpu"]: v for fam, lab, v in series if fam == "DCGM_FI_PROF_SM_ACTIVE"}

    gpus = fold_series(series)
    assert [g.utilization_source for g in gpus] == ["gr_engine_active"] * 3
    assert [g.utilization for g in gpus] == [engine["0"], engine["1"], engine["2"]]
    assert gpus[0].utilization == pytest.approx(0.9)

    stricter = fold_series(series, utilization="sm_active")
    assert [g.utilization_source for g in stricter] == ["sm_active"] * 3
    assert [g.utilization for g in stricter] == [sm["0"], sm["1"], sm["2"]]
    assert stricter[0].utilization < gpus[0].utilization  # SMs are busy less than the engine is

    coarse = fold_series(series, utilization="gpu_util")
    assert [(g.utilization, g.utilization_source) for g in coarse] == [(0.9, "gpu_util"), (0.3, "gpu_util"), (0.0, "gpu_util")]


async def test_gpus_without_profiling_fall_back_to_gpu_util_one_by_one() -> None:
    source = SimSource("node-a", gpus=2, pods=0, fault_script=())
    source.set_load(0, 0.5)
    source.set_load(1, 0.7)
    # GPU 1's exporter has no profiling (a pre-Hopper GPU with the nvml source, dcgm-exporter without DCP)
    series = [(f, lab, v) for f, lab, v in parse_exposition(await scrape(source))
              if not (f.startswith("DCGM_FI_PROF_") and lab["gpu"] == "1")]
    g0, g1 = fold_series(series)
    assert (g0.utilization_source, g0.utilization) == ("gr_engine_active", pytest.approx(0.5))
    assert (g1.utilization_source, g1.utilization) == ("gpu_util", 0.7)


async def test_mig_instance_series_do_not_stand_for_the_gpu() -> None:
    source = SimSource("node-a", gpus=2, pods=0, fault_script=(), mig_gpus=1)
    source.set_load(0, 0.25)
    text = await scrape(source)
    series = parse_exposition(text)
    assert any("GPU_I_ID" in lab for _, lab, _ in series)
    g0, g1 = fold_series(series)
    parent = {f: v for f, lab, v in series if lab["gpu"] == "1" and "GPU_I_ID" not in lab}
    # the MIG parent has no GPU_UTIL; its engine activity (over all instances) is the GPU's
    assert "DCGM_FI_DEV_GPU_UTIL" not in parent
    assert (g1.utilization_source, g1.utilization) == ("gr_engine_active", parent["DCGM_FI_PROF_GR_ENGINE_ACTIVE"])
    assert g1.memory_used_bytes == parent["DCGM_FI_DEV_FB_USED"] * 1024 * 1024
    assert g0.utilization == pytest.approx(0.25)


def test_a_bad_preference_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="gr_engine_active, sm_active, gpu_util"):
        fold_series([], utilization="tensor")
