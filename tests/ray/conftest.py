"""Fixtures for the Ray signal tests: the recorded dashboard answers in ``shared/fixtures/ray``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def ray_fixtures(fixtures_dir: Path) -> Path:
    d = fixtures_dir / "ray"
    if not d.is_dir():
        raise RuntimeError(f"Ray fixtures not found at {d}")
    return d


@pytest.fixture(scope="session")
def load(ray_fixtures: Path) -> Callable[[str], Any]:
    def _load(name: str) -> Any:
        return json.loads((ray_fixtures / name).read_text())

    return _load
