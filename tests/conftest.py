"""Shared fixtures. Per-area fixtures live in each tests/<area>/conftest.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import paths

pytest_plugins = ["tests.fakeapi.plugin"]


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    d = paths.shared_dir()
    if not d.is_dir():
        raise RuntimeError(f"shared data not found at {d}: set QUEUEPILOT_SHARED or run 'make fetch-shared'")
    return d


@pytest.fixture(scope="session")
def crds_dir(shared_dir: Path) -> Path:
    return shared_dir / "crds"


@pytest.fixture(scope="session")
def fixtures_dir(shared_dir: Path) -> Path:
    return shared_dir / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return paths.REPO
