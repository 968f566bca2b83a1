"""Fixtures for the security tests: recording Ray heads and the test cluster DNS."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.security.heads import RecordingHead, ServiceResolver


@pytest.fixture
async def heads(fixtures_dir: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[RecordingHead] = []

    async def _start(**kwargs: Any) -> RecordingHead:
        head = await RecordingHead(fixtures_dir / "ray", **kwargs).start()
        started.append(head)
        return head

    yield _start
    for h in started:
        await h.close()


@pytest.fixture
def resolver() -> ServiceResolver:
    return ServiceResolver()


@pytest.fixture
async def session(resolver: ServiceResolver) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(resolver=resolver)) as s:
        yield s
