"""Fixtures for the dashboards / alert-rules tests: generated files and a Prometheus with history."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
import yaml

from tests.observability import history
from tests.observability.files import DASHBOARD_DIR, RULE_FILE
from tests.support.prometheus import Prometheus, promtool, run_prometheus


@pytest.fixture(scope="session")
def dashboards() -> dict[str, dict]:
    files = sorted(DASHBOARD_DIR.glob("*.json"))
    assert files, f"no dashboards in {DASHBOARD_DIR}: run make generate"
    return {f.name: json.loads(f.read_text()) for f in files}


@pytest.fixture(scope="session")
def rule_groups() -> list[dict]:
    return yaml.safe_load(RULE_FILE.read_text())["groups"]


@pytest.fixture(scope="session")
def alert_rules(rule_groups: list[dict]) -> list[dict]:
    return [r for g in rule_groups for r in g["rules"] if "alert" in r]


@pytest.fixture(scope="session")
def history_end() -> float:
    return float(int(time.time()) - 60)


@pytest.fixture(scope="session")
def backfilled(tmp_path_factory: pytest.TempPathFactory, history_end: float) -> Iterator[Prometheus]:
    """A real Prometheus over three hours of backfilled DCGM, queuepilot, Kueue and Ray series."""
    work = tmp_path_factory.mktemp("backfill")
    om = work / "history.om"
    om.write_text(history.build(history_end))
    data = work / "data"
    result = promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(data))
    assert result.returncode == 0, result.stderr
    with run_prometheus(work, data_dir=data) as prom:
        yield prom
