"""Fixtures for the exporter tests: a real gRPC kubelet PodResources server on a unix socket
(tests/exporter/kubelet.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.exporter.kubelet import FakeKubelet, KubeletServer


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    d = Path(tempfile.mkdtemp(prefix="qp-ex-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kubelet_socket(short_tmp: Path) -> Path:
    return short_tmp / "kubelet.sock"


@pytest.fixture
async def kubelet(kubelet_socket: Path) -> AsyncIterator[KubeletServer]:
    """A running fake kubelet (tests may stop and restart it)."""
    server = KubeletServer(kubelet_socket, FakeKubelet())
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
