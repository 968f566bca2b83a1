"""Fixtures for the nvml source's tests: the fake NVML library (tests/nvml/fake_library.py), compiled once
per session, injected per test, and pynvml put back as imported around every test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from exporter.sources.nvml import NvmlSource
from tests.nvml.fake_library import SONAME, FakeLibs, FakeNvml, compile_fake, reset_pynvml


@pytest.fixture(scope="session")
def fake_libs(tmp_path_factory: pytest.TempPathFactory) -> FakeLibs:
    d = tmp_path_factory.mktemp("fake-nvml")
    return FakeLibs(
        current=compile_fake(d / "current" / SONAME),
        old_driver=compile_fake(d / "old-driver" / SONAME, "-DOLD_DRIVER"),
        ld_path=compile_fake(d / "ld-path" / SONAME, soname=SONAME),
    )


@pytest.fixture(autouse=True)
def _pynvml_isolated() -> Iterator[None]:
    """Every test here starts and ends with pynvml as imported: no fake library leaks out."""
    reset_pynvml()
    yield
    reset_pynvml()


@pytest.fixture
def fake_nvml(fake_libs: FakeLibs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeNvml]:
    fake = FakeNvml(fake_libs, tmp_path / "nvml-control")
    fake.write("gpus 2\n")
    monkeypatch.setenv("FAKE_NVML_CONTROL", str(fake.control))
    yield fake
    reset_pynvml()


@pytest.fixture
async def make_source(fake_nvml: FakeNvml) -> AsyncIterator[Callable[..., NvmlSource]]:
    """Build NvmlSources that are always closed (XID thread stopped, nvmlShutdown) before the fake unloads."""
    made: list[NvmlSource] = []

    def make(**kwargs: object) -> NvmlSource:
        kwargs.setdefault("xid_wait_ms", 50)
        source = NvmlSource("node-a", **kwargs)  # type: ignore[arg-type]
        made.append(source)
        return source

    yield make
    for source in made:
        await source.close()
