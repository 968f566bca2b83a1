"""The ``fleet3`` fixture: a MultiKueue manager and two workers (tests/multicluster/fleet.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from tests.fakeapi.server import FakeApiServer
from tests.multicluster.fleet import FROZEN, WORKERS, Fleet3
from tests.support import paths


@pytest_asyncio.fixture
async def fleet3(tmp_path: Path) -> AsyncIterator[Fleet3]:
    crds = paths.crds_dir()
    servers: dict[str, FakeApiServer] = {}
    try:
        for name in ("manager", *WORKERS):
            (tmp_path / name).mkdir()
            servers[name] = await FakeApiServer(crds, workdir=tmp_path / name).start()
        FROZEN.clear()
        f = Fleet3(servers["manager"], {w: servers[w] for w in WORKERS})
        f.setup_manager()
        yield f
    finally:
        for s in servers.values():
            with contextlib.suppress(Exception):
                await s.stop()
