"""``queuepilot dashboards --out DIR``: write every dashboard as Grafana JSON (one file per uid)."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path

from grafanalib.core import Dashboard

from dashboards import economics, fleet, gpu_fleet, queuepilot_self, queues, ray_clusters
from dashboards.common import render

# file name -> builder; the file names are what the Helm chart's ConfigMap globs
DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "gpu-fleet.json": gpu_fleet.build,
    "queues.json": queues.build,
    "ray-clusters.json": ray_clusters.build,
    "queuepilot.json": queuepilot_self.build,
    "economics.json": economics.build,
    "fleet.json": fleet.build,
}


def render_all() -> dict[str, str]:
    """File name -> JSON text of every dashboard."""
    return {name: render(build()) for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="queuepilot dashboards", description=__doc__)
    parser.add_argument(
        "--out", default=os.environ.get("QUEUEPILOT_OUT", "dashboards/generated"),
        help="directory to write the dashboards into (env QUEUEPILOT_OUT)",
    )
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (out / name).write_text(text)
        print(f"wrote {out / name}")
    return 0
