"""``queuepilot exporter`` / ``python -m exporter``: the node agent's command line (a contract).

Every flag can also be set by its environment variable, ``QUEUEPILOT_<FLAG>`` (``--sim-gpus`` <-
``QUEUEPILOT_SIM_GPUS``; ``--node-name`` <- ``NODE_NAME`` or ``QUEUEPILOT_NODE_NAME``); the flag
wins.  ``queuepilot exporter --help`` lists each flag with its variable and default.

Exit status: 0 after a clean SIGTERM/SIGINT shutdown, 1 when the source cannot start (one line
on stderr, e.g. no NVML library) or the address cannot be bound, 2 for bad flags or environment
values.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import socket
import sys

from exporter.health import DEFAULT_DRAIN_XIDS, HealthConfig
from exporter.podresources.client import DEFAULT_SOCKET
from exporter.server import DEFAULT_LISTEN, LIMITS, ExporterApp, serve
from exporter.sources.base import GpuSource, SourceUnavailable
from exporter.sources.dcgm import DEFAULT_URL as DEFAULT_DCGM_URL
from servicekit.argtypes import count, positive_seconds
from servicekit.cli import Parser, fail
from servicekit.envflags import EnvError, apply_env
from servicekit.listen import listen_arg

log = logging.getLogger("exporter")

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
PROG = "queuepilot exporter"


def _xid_list(text: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated XID numbers, got {text!r}") from e


def build_parser(env: dict[str, str] | None = None) -> argparse.ArgumentParser:
    """The parser with its defaults taken from ``env`` (default: the process environment);
    EnvError for a bad environment value."""
    p = Parser(
        prog=PROG,
        description="Node GPU exporter: dcgm-exporter-compatible GPU metrics attributed to pods, with GPU health.",
        epilog="Every flag can also be set by the environment variable named in brackets; the flag wins.",
    )
    a = p.add_argument
    a("--source", choices=("nvml", "dcgm", "sim"), default="nvml", help="where GPU facts come from")
    a("--listen", type=listen_arg, metavar="HOST:PORT", default=DEFAULT_LISTEN,
      help="address to serve /metrics and /healthz on; port 0 picks a free port")
    a("--interval", type=positive_seconds, metavar="SECONDS", default=10.0, help="seconds between collections")
    a("--node-name", metavar="NAME", default=socket.gethostname(), help="the Hostname label")
    a("--dcgm-url", metavar="URL", default=DEFAULT_DCGM_URL, help="dcgm-exporter /metrics URL for --source dcgm")
    a("--dcgm-timeout", type=positive_seconds, metavar="SECONDS", default=5.0, help="seconds to wait for dcgm-exporter")
    a("--pod-resources-socket", metavar="PATH", default=DEFAULT_SOCKET,
      help="kubelet PodResources socket; empty turns pod attribution off")
    a("--drain-xids", type=_xid_list, metavar="XID,XID,...", default=",".join(map(str, sorted(DEFAULT_DRAIN_XIDS))),
      help="XIDs that make a GPU unhealthy (the default is NVIDIA's drain-worthy list)")
    a("--fatal-xid-window", type=positive_seconds, metavar="SECONDS", default=600.0,
      help="seconds a drain-worthy XID keeps the GPU unhealthy")
    a("--thermal-window", type=positive_seconds, metavar="SECONDS", default=60.0,
      help="seconds of continuous thermal slowdown before a GPU is unhealthy")
    a("--sim-gpus", type=count(0), metavar="N", default=8, help="GPUs in the simulated fleet")
    a("--sim-model", metavar="NAME", default="NVIDIA H100 80GB HBM3", help="simulated GPU model")
    a("--sim-seed", type=int, metavar="N", default=0, help="seed of the simulated fleet")
    a("--sim-mig-gpus", type=count(0), metavar="N", default=0,
      help="simulated GPUs partitioned into MIG instances (each instance a pod), at most --sim-gpus")
    a("--gpm", choices=("auto", "off"), default="auto",
      help="profiling metrics (DCGM_FI_PROF_*) through NVML GPM where the GPU supports it (Hopper and newer); "
           "where the driver restricts profiling to admin users it may need CAP_SYS_ADMIN, else they are left out "
           "(docs/security.md)")
    a("--max-connections", type=count(1), metavar="N", default=LIMITS.max_connections,
      help="open HTTP connections at most; beyond it new ones wait until one closes")
    a("--log-level", type=str.upper, choices=LOG_LEVELS, default="INFO", help="log verbosity")
    apply_env(p, env, aliases={"node_name": ("NODE_NAME", "QUEUEPILOT_NODE_NAME")})
    return p


def make_source(args: argparse.Namespace) -> GpuSource:
    if args.source == "sim":
        from exporter.sources.sim import SimSource

        if args.sim_mig_gpus > args.sim_gpus:
            raise SourceUnavailable(f"--sim-mig-gpus {args.sim_mig_gpus} is more than --sim-gpus {args.sim_gpus}")
        return SimSource(args.node_name, gpus=args.sim_gpus, model=args.sim_model, seed=args.sim_seed,
                         mig_gpus=args.sim_mig_gpus)
    if args.source == "dcgm":
        from exporter.sources.dcgm import DcgmSource

        return DcgmSource(args.node_name, args.dcgm_url, timeout=args.dcgm_timeout)
    try:
        from exporter.sources.nvml import NvmlSource  # imports pynvml: only when asked for
    except ImportError as e:
        raise SourceUnavailable(f"the nvml source cannot be loaded: {e}") from e
    return NvmlSource(args.node_name, gpm=args.gpm != "off")


def main(argv: list[str] | None = None) -> int:
    try:
        parser = build_parser()
    except EnvError as e:
        raise SystemExit(fail(PROG, str(e))) from None
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    health = HealthConfig(
        drain_xids=args.drain_xids,
        xid_window_seconds=args.fatal_xid_window,
        ecc_window_seconds=args.fatal_xid_window,
        thermal_sustain_seconds=args.thermal_window,
    )
    try:
        app = ExporterApp(
            make_source(args),
            listen=str(args.listen),
            hostname=args.node_name,
            interval=args.interval,
            pod_resources_socket=args.pod_resources_socket or None,
            health=health,
            limits=dataclasses.replace(LIMITS, max_connections=args.max_connections),
        )
        asyncio.run(serve(app))
    except SourceUnavailable as e:
        return fail(PROG, f"--source {args.source}: {e}", 1)
    except OSError as e:  # e.g. the listen address is taken
        return fail(PROG, f"{e} (listen {args.listen})", 1)
    return 0
