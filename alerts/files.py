"""Writing a generated rule file: the plain one into ``--out`` and the chart's copy into ``--out/chart``."""

from __future__ import annotations

from pathlib import Path

# the Helm chart's copy, with tokens the PrometheusRule template fills from chart values
CHART_DIR_NAME = "chart"


def write_rule_files(out: Path, name: str, rules: str, chart_rules: str) -> None:
    """``out/name`` (``rules``) and ``out/chart/name`` (``chart_rules``), creating the folders; says what it wrote."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(rules)
    print(f"wrote {path}")
    chart = out / CHART_DIR_NAME / name
    chart.parent.mkdir(exist_ok=True)
    chart.write_text(chart_rules)
    print(f"wrote {chart}")
