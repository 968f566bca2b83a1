"""The metric catalogs are the contract: naming rules, units, uniqueness, and the generated docs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler import metrics as controller_metrics
from exporter import metrics as exporter_metrics
from exporter.metrics import MetricSpec
from tests.support.prometheus import promtool

ALL: tuple[MetricSpec, ...] = (*exporter_metrics.CATALOG, *controller_metrics.CATALOG)
OURS = tuple(m for m in ALL if m.name.startswith("queuepilot_"))
SNAKE = re.compile(r"^[a-z_][a-z0-9_]*$")
LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
UNIT_SUFFIX = {"seconds": "_seconds", "bytes": "_bytes", "ratio": "_ratio"}


def test_names_are_unique_across_catalogs() -> None:
    names = [m.name for m in ALL]
    assert len(names) == len(set(names)), sorted({n for n in names if names.count(n) > 1})


@pytest.mark.parametrize("spec", OURS, ids=lambda m: m.name)
def test_queuepilot_names_follow_prometheus_rules(spec: MetricSpec) -> None:
    assert SNAKE.match(spec.name), spec.name
    if spec.type == "counter":
        assert spec.name.endswith("_total"), f"{spec.name}: counters end in _total"
    else:
        assert not spec.name.endswith("_total"), f"{spec.name}: only counters end in _total"
    suffix = UNIT_SUFFIX.get(spec.unit)
    if suffix and spec.type != "counter":
        assert spec.name.endswith(suffix) or spec.name.endswith(f"{suffix}_total"), f"{spec.name}: unit {spec.unit}"
    assert spec.help and not spec.help[0].islower() and spec.help.endswith("."), f"{spec.name}: help text"
    for label in spec.labels:
        assert LABEL.match(label) and not label.startswith("__"), f"{spec.name}: label {label}"
    assert len(set(spec.labels)) == len(spec.labels)
    assert set(spec.optional_labels) <= set(spec.labels)


@pytest.mark.parametrize("spec", [m for m in ALL if m.name.startswith("DCGM_")], ids=lambda m: m.name)
def test_dcgm_families_keep_dcgm_exporter_labels(spec: MetricSpec) -> None:
    assert spec.labels[:6] == ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
    assert spec.stability == "STABLE"


def test_promtool_finds_nothing_in_an_exposition_of_every_queuepilot_family() -> None:
    """Render one sample of every queuepilot_* family the way prometheus_client does and lint it."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

    reg = CollectorRegistry()
    for m in OURS:
        values = ["x"] * len(m.labels)
        if m.type == "counter":
            c = Counter(m.name, m.help, m.labels, registry=reg)
            (c.labels(*values) if m.labels else c).inc()
        elif m.type == "histogram":
            h = Histogram(m.name, m.help, m.labels, registry=reg)
            (h.labels(*values) if m.labels else h).observe(1.0)
        else:
            g = Gauge(m.name, m.help, m.labels, registry=reg)
            (g.labels(*values) if m.labels else g).set(1)
    text = generate_latest(reg).decode()
    result = promtool("check", "metrics", stdin=text)
    assert result.returncode == 0, result.stdout + result.stderr


def test_docs_metrics_md_is_generated_from_the_catalogs(repo_root: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(repo_root / "tools" / "gen_metrics_doc.py")],
        capture_output=True, text=True, check=True, cwd=repo_root,
    ).stdout
    committed = (repo_root / "docs" / "metrics.md").read_text()
    assert committed == out, "docs/metrics.md is stale: run 'make generate'"
    for m in ALL:
        assert f"`{m.name}" in committed
