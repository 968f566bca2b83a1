"""Where the shared data lives: $QUEUEPILOT_SHARED, default ../shared beside the checkout."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def shared_dir() -> Path:
    return Path(os.environ.get("QUEUEPILOT_SHARED", str(REPO.parent / "shared"))).resolve()


def crds_dir() -> Path:
    return shared_dir() / "crds"


def fixtures_dir() -> Path:
    return shared_dir() / "fixtures"


def traces_dir() -> Path:
    return shared_dir() / "traces"
