"""The nvml source in a fresh interpreter: how the dynamic loader finds (or does not find) NVML."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporter.sources.nvml import LIBRARY_MISSING
from tests.nvml.fake_library import FakeLibs

START_AND_COLLECT = """
import asyncio, json, sys
from exporter.sources.base import SourceUnavailable
from exporter.sources.nvml import NvmlSource

async def main() -> int:
    source = NvmlSource("node-a", xid_wait_ms=50)
    try:
        await source.start()
    except SourceUnavailable as e:
        print(e)
        return 3
    try:
        sample = await source.collect(1.0)
    finally:
        await source.close()
    print(json.dumps([[g.uuid, g.fields["DCGM_FI_DEV_POWER_USAGE"]] for g in sample.gpus]))
    return 0

sys.exit(asyncio.run(main()))
"""


def run_python(code: str, repo_root: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo_root,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_library_gives_one_clear_line(repo_root: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip(
            "a real libnvidia-ml is installed here; its absence cannot be simulated without a mount namespace"
        )
    r = run_python(START_AND_COLLECT, repo_root, LD_LIBRARY_PATH="")
    assert r.returncode == 3, r.stderr
    assert r.stdout.splitlines() == [LIBRARY_MISSING]
    assert "libnvidia-ml.so.1 not found" in LIBRARY_MISSING and "\n" not in LIBRARY_MISSING


def test_loader_finds_the_library_by_soname_on_ld_library_path(
    fake_libs: FakeLibs, repo_root: Path, tmp_path: Path
) -> None:
    # no injection here: pynvml's own CDLL("libnvidia-ml.so.1"), resolved by the dynamic loader
    control = tmp_path / "nvml-control"
    control.write_text("gpus 2\ngpu 1 uuid GPU-beef\ngpu 1 power_mw 123400\n")
    r = run_python(
        START_AND_COLLECT,
        repo_root,
        LD_LIBRARY_PATH=str(fake_libs.ld_path.parent),
        FAKE_NVML_CONTROL=str(control),
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [["GPU-00000000-fake-4000-8000-000000000000", 250.0], ["GPU-beef", 123.4]]


def test_importing_the_source_does_not_load_the_bindings(repo_root: Path) -> None:
    r = run_python(
        "import sys, exporter.sources.nvml; print('pynvml' in sys.modules)",
        repo_root,
        LD_LIBRARY_PATH="",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "False"
