"""The chart's copies of the generated dashboards and rules are identical to the generated files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAIRS = (
    (REPO / "dashboards" / "generated", REPO / "charts" / "queuepilot" / "files" / "dashboards", "*.json"),
    (REPO / "alerts" / "generated" / "chart", REPO / "charts" / "queuepilot" / "files" / "rules", "*.yaml"),
)
SCRIPT = REPO / "tools" / "sync-chart-files.sh"


@pytest.mark.parametrize(("src", "dst", "pattern"), PAIRS, ids=["dashboards", "rules"])
def test_chart_copies_equal_generated(src: Path, dst: Path, pattern: str) -> None:
    generated = {p.name: p.read_bytes() for p in sorted(src.glob(pattern))}
    copies = {p.name: p.read_bytes() for p in sorted(dst.glob(pattern))}
    assert sorted(copies) == sorted(generated), "run tools/sync-chart-files.sh"
    differ = [name for name in generated if generated[name] != copies[name]]
    assert not differ, f"{differ} differ from {src}: run tools/sync-chart-files.sh"


def test_sync_script_check_and_copy(tmp_path: Path) -> None:
    # a scratch tree with the script's layout: --check reports, a plain run repairs, then --check is clean
    root = tmp_path / "repo"
    (root / "tools").mkdir(parents=True)
    shutil.copy(SCRIPT, root / "tools" / SCRIPT.name)
    (root / "dashboards/generated").mkdir(parents=True)
    (root / "alerts/generated/chart").mkdir(parents=True)
    (root / "charts/queuepilot/files/dashboards").mkdir(parents=True)
    (root / "dashboards/generated/a.json").write_text('{"uid": "a"}\n')
    (root / "alerts/generated/r.yaml").write_text("groups: [plain]\n")  # not the chart's copy
    (root / "alerts/generated/chart/r.yaml").write_text("groups: []\n")
    (root / "charts/queuepilot/files/dashboards/old.json").write_text("{}\n")
    script = root / "tools" / SCRIPT.name

    check = subprocess.run(["bash", str(script), "--check"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 1
    assert "old.json" in check.stdout and "a.json" in check.stdout and "r.yaml" in check.stdout
    assert not (root / "charts/queuepilot/files/dashboards/a.json").exists()  # --check changes nothing

    sync = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30)
    assert sync.returncode == 0, sync.stderr
    assert (root / "charts/queuepilot/files/dashboards/a.json").read_text() == '{"uid": "a"}\n'
    assert (root / "charts/queuepilot/files/rules/r.yaml").read_text() == "groups: []\n"
    assert not (root / "charts/queuepilot/files/dashboards/old.json").exists()
    assert subprocess.run(["bash", str(script), "--check"], capture_output=True, timeout=30).returncode == 0
