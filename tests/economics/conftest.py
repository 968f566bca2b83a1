"""A real Prometheus over two weeks of backfilled GPU history (tests/economics/world.py) plus the economics
recording rules backfilled over it, layer by layer (``promtool tsdb create-blocks-from rules``: a rule
cannot read another rule's output in the same backfill, so each layer is evaluated against a Prometheus
that already holds the previous one)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from alerts import economics
from tests.economics import world
from tests.economics.world import CONFIG
from tests.support.prometheus import Prometheus, promtool, run_prometheus


@dataclass
class Backfilled:
    prom: Prometheus
    end: int
    rule_file: Path


def _backfill_rules(prom: Prometheus, groups: list[dict], start: int, end: int, work: Path, data: Path) -> None:
    rules = work / f"layer-{groups[0]['name']}.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False, width=4096))
    out = work / f"blocks-{groups[0]['name']}"
    result = promtool(
        "tsdb", "create-blocks-from", "rules", "--max-block-duration=168h", f"--start={start}", f"--end={end}", f"--url={prom.url}",
        f"--output-dir={out}", "--quiet", str(rules),
    )
    assert result.returncode == 0, result.stderr + result.stdout
    for block in out.iterdir():
        shutil.move(str(block), str(data / block.name))


@dataclass
class RawHistory:
    prom: Prometheus
    end: int


RAW_DAYS = 8


@pytest.fixture(scope="session")
def raw_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RawHistory]:
    """Eight days of the raw series only (promtool create-blocks-from openmetrics) and no recording rules:
    a cluster that kept dcgm-exporter's history and has just installed queuepilot."""
    work = tmp_path_factory.mktemp("raw-economics")
    end = (int(time.time()) - 600) // world.STEP * world.STEP
    om = work / "history.om"
    with om.open("w") as f:
        for line in world.openmetrics(end, days=RAW_DAYS):
            f.write(line + "\n")
    data = work / "data"
    result = promtool("tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=168h", "--quiet",
                      str(om), str(data))
    assert result.returncode == 0, result.stderr
    with run_prometheus(work / "prom", data_dir=data) as prom:
        yield RawHistory(prom, end)


@pytest.fixture(scope="session")
def backfilled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backfilled]:
    work = tmp_path_factory.mktemp("economics")
    end = (int(time.time()) - 600) // world.STEP * world.STEP
    start = end - world.DAYS * 86400
    om = work / "history.om"
    with om.open("w") as f:
        for line in world.openmetrics(end):
            f.write(line + "\n")
    data = work / "data"
    result = promtool("tsdb", "create-blocks-from", "openmetrics", "--max-block-duration=168h", "--quiet",
                      str(om), str(data))
    assert result.returncode == 0, result.stderr
    groups = economics.rule_file(CONFIG)["groups"]
    # layer 1 (per GPU, prices) from the raw series, layer 2 from layer 1 (each against a fresh Prometheus
    # over the data so far); the alert group is not backfilled
    assert [g["name"] for g in groups] == list(economics.GROUPS)
    for layer in (groups[:2], groups[2:3]):
        with run_prometheus(work / f"prom-{layer[0]['name']}", data_dir=data) as prom:
            _backfill_rules(prom, layer, start, end + 1, work, data)
    rule_file = work / economics.RULE_FILE_NAME
    rule_file.write_text(economics.render(CONFIG))
    with run_prometheus(work / "prom", data_dir=data, rule_files=[rule_file]) as prom:
        yield Backfilled(prom, end, rule_file)
