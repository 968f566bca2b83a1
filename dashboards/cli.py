"""queuepilot dashboards --out DIR: write every dashboard as Grafana JSON (one file per uid)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from grafanalib.core import Dashboard

from dashboards import economics, fleet, gpu_fleet, queuepilot_self, queues, ray_clusters
from dashboards.common import render
from servicekit.cli import Parser, fail
from servicekit.envflags import EnvError, apply_env
from servicekit.outpaths import check_writable

PROG = "queuepilot dashboards"

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


def build_parser() -> Parser:
    p = Parser(prog=PROG, description="Write every queuepilot Grafana dashboard as JSON, one file per dashboard "
               f"({', '.join(DASHBOARDS)}), into a folder.")
    p.add_argument("--out", default="dashboards/generated", metavar="DIR",
                   help="folder to write the dashboards into (created if missing)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        apply_env(parser)
    except EnvError as e:
        return fail(PROG, str(e))
    args = parser.parse_args(argv)
    out = Path(args.out)
    try:
        check_writable(out, directory=True)
        for name, text in render_all().items():
            (out / name).write_text(text)
            print(f"wrote {out / name}")
    except (ValueError, OSError) as e:
        return fail(PROG, f"--out: {e}" if isinstance(e, ValueError) else f"--out: cannot write {out}: {e}")
    return 0
