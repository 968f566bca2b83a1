"""Write docs/metrics.md from the two metric catalogs (the docs are generated, never hand-edited)."""

from __future__ import annotations

import sys

from autoscaler import metrics as controller_metrics
from exporter import metrics as exporter_metrics
from exporter.metrics import MetricSpec

HEADER = """# Metrics reference

Generated from `exporter/metrics.py` and `autoscaler/metrics.py` by `make generate`
(`tools/gen_metrics_doc.py`); a test fails when this file and the catalogs disagree.

Stability: **STABLE** families keep their name and labels (labels may be added); **ALPHA**
families may change. GPU families keep dcgm-exporter's names, units and label order, so
dashboards and alerts written for dcgm-exporter work unchanged. dcgm-exporter's counters
(`DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, ...) keep their names without `_total`.
Labels in *italics* are present only on some series (pod labels only when the GPU is
allocated to a pod; MIG labels only on MIG instances).
"""


def _labels(m: MetricSpec) -> str:
    return ", ".join(f"*{lbl}*" if lbl in m.optional_labels else f"`{lbl}`" for lbl in m.labels) or "—"


def _table(title: str, specs: tuple[MetricSpec, ...]) -> str:
    rows = [f"## {title}", "", "| name | type | unit | labels | source | stability | help |", "|---|---|---|---|---|---|---|"]
    for m in specs:
        name = m.name if m.type != "counter" or m.name.endswith("_total") or m.name.startswith("DCGM_") else f"{m.name}_total"
        rows.append(f"| `{name}` | {m.type} | {m.unit} | {_labels(m)} | {m.source} | {m.stability} | {m.help} |")
    return "\n".join(rows) + "\n"


def render() -> str:
    parts = [
        HEADER,
        _table("Exporter: dcgm-exporter drop-in GPU families", exporter_metrics.DCGM_FAMILIES),
        _table("Exporter: DCGM profiling families (`--source dcgm` only)", exporter_metrics.DCGM_PROF_FAMILIES),
        _table("Exporter: queuepilot GPU families", exporter_metrics.QUEUEPILOT_GPU_FAMILIES),
        _table("Exporter: self-metrics", exporter_metrics.SELF_FAMILIES),
        _table("Controller: queues", controller_metrics.QUEUE_FAMILIES),
        _table("Controller: capacity", controller_metrics.CAPACITY_FAMILIES),
        _table("Controller: admission", controller_metrics.ADMISSION_FAMILIES),
        _table("Controller: Ray", controller_metrics.RAY_FAMILIES),
        _table("Controller: scaling", controller_metrics.SCALING_FAMILIES),
        _table("Controller: stalled workloads", controller_metrics.STALL_FAMILIES),
        _table("Controller: self-metrics", controller_metrics.SELF_FAMILIES),
        _table("Controller: GPU economics (docs/economics.md)", controller_metrics.ECONOMICS_FAMILIES),
        _table("Controller: MultiKueue dispatcher (docs/multicluster.md)", controller_metrics.FLEET_FAMILIES),
    ]
    return "\n".join(parts)


if __name__ == "__main__":
    sys.stdout.write(render())
