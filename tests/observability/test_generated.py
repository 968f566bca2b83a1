"""Regenerating the dashboards and the rule file reproduces the committed files byte for byte."""

from __future__ import annotations

import filecmp
import subprocess
import sys

from tests.observability.files import DASHBOARD_DIR, RULE_FILE
from tests.support.paths import REPO


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_dashboards_regenerate_identically(tmp_path):
    result = _run("-m", "queuepilot", "dashboards", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    committed = sorted(p.name for p in DASHBOARD_DIR.glob("*.json"))
    assert sorted(p.name for p in tmp_path.glob("*.json")) == committed
    for name in committed:
        assert (tmp_path / name).read_bytes() == (DASHBOARD_DIR / name).read_bytes(), (
            f"dashboards/generated/{name} is stale: run make generate"
        )


def test_rules_regenerate_identically(tmp_path):
    result = _run("-m", "alerts", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert filecmp.cmp(tmp_path / RULE_FILE.name, RULE_FILE, shallow=False), (
        "alerts/generated/queuepilot-rules.yaml is stale: run make generate"
    )
    chart_copy = RULE_FILE.parent / "chart" / RULE_FILE.name
    assert filecmp.cmp(tmp_path / "chart" / RULE_FILE.name, chart_copy, shallow=False), (
        "alerts/generated/chart/queuepilot-rules.yaml is stale: run make generate"
    )
