"""``queuepilot exporter`` / ``python -m exporter``: the node agent's command line (a contract).

Every flag can also be set by environment variable (the flag wins):

=========================== ================================== ===========================================
flag                        environment                        default
=========================== ================================== ===========================================
``--source``                ``QUEUEPILOT_SOURCE``              ``nvml`` (``nvml``, ``dcgm``, ``sim``)
``--listen``                ``QUEUEPILOT_LISTEN``              ``0.0.0.0:9400``
``--interval``              ``QUEUEPILOT_INTERVAL``            ``10`` seconds
``--node-name``             ``NODE_NAME``, ``QUEUEPILOT_NODE_NAME`` the host name (the ``Hostname`` label)
``--dcgm-url``              ``QUEUEPILOT_DCGM_URL``            ``http://127.0.0.1:9400/metrics``
``--dcgm-timeout``          ``QUEUEPILOT_DCGM_TIMEOUT``        ``5`` seconds
``--pod-resources-socket``  ``QUEUEPILOT_POD_RESOURCES_SOCKET`` ``/var/lib/kubelet/pod-resources/kubelet.sock``
                                                               (``""`` turns attribution off)
``--drain-xids``            ``QUEUEPILOT_DRAIN_XIDS``          NVIDIA's drain-worthy XIDs (comma list)
``--fatal-xid-window``      ``QUEUEPILOT_FATAL_XID_WINDOW``    ``600`` seconds
``--thermal-window``        ``QUEUEPILOT_THERMAL_WINDOW``      ``60`` seconds
``--sim-gpus``              ``QUEUEPILOT_SIM_GPUS``            ``8``
``--sim-model``             ``QUEUEPILOT_SIM_MODEL``           ``NVIDIA H100 80GB HBM3``
``--sim-seed``              ``QUEUEPILOT_SIM_SEED``            ``0``
``--log-level``             ``QUEUEPILOT_LOG_LEVEL``           ``INFO``
=========================== ================================== ===========================================

Exit status: 0 after a clean SIGTERM/SIGINT shutdown, 1 when the source cannot start (one line
on stderr, e.g. no NVML library), 2 for bad flags.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import sys

from exporter.health import DEFAULT_DRAIN_XIDS, HealthConfig
from exporter.podresources.client import DEFAULT_SOCKET
from exporter.server import DEFAULT_LISTEN, ExporterApp, parse_listen, serve
from exporter.sources.base import GpuSource, SourceUnavailable
from exporter.sources.dcgm import DEFAULT_URL as DEFAULT_DCGM_URL

log = logging.getLogger("exporter")


def _env(*names: str, default: str) -> str:
    for name in names:
        value = os.environ.get(name)
        if value is not None:
            return value
    return default


def _xid_list(text: str) -> frozenset[int]:
    try:
        return frozenset(int(x) for x in text.replace(" ", "").split(",") if x)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected comma-separated XID numbers, got {text!r}") from e


def _listen(text: str) -> str:
    try:
        parse_listen(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="queuepilot exporter",
        description="Node GPU exporter: dcgm-exporter-compatible GPU metrics attributed to pods, with GPU health.",
        epilog="Every flag can also be set by the environment variable in brackets.",
    )
    p.add_argument("--source", choices=("nvml", "dcgm", "sim"), default=_env("QUEUEPILOT_SOURCE", default="nvml"),
                   help="where GPU facts come from [QUEUEPILOT_SOURCE] (default: %(default)s)")
    p.add_argument("--listen", type=_listen, metavar="HOST:PORT", default=_env("QUEUEPILOT_LISTEN", default=DEFAULT_LISTEN),
                   help="HOST:PORT to serve /metrics and /healthz on; port 0 picks a free port [QUEUEPILOT_LISTEN] (default: %(default)s)")
    p.add_argument("--interval", type=_positive, metavar="SECONDS", default=_env("QUEUEPILOT_INTERVAL", default="10"),
                   help="seconds between collections [QUEUEPILOT_INTERVAL] (default: %(default)s)")
    p.add_argument("--node-name", metavar="NAME", default=_env("NODE_NAME", "QUEUEPILOT_NODE_NAME", default=socket.gethostname()),
                   help="the Hostname label [NODE_NAME, QUEUEPILOT_NODE_NAME] (default: %(default)s)")
    p.add_argument("--dcgm-url", metavar="URL", default=_env("QUEUEPILOT_DCGM_URL", default=DEFAULT_DCGM_URL),
                   help="dcgm-exporter /metrics URL for --source dcgm [QUEUEPILOT_DCGM_URL] (default: %(default)s)")
    p.add_argument("--dcgm-timeout", type=_positive, metavar="SECONDS", default=_env("QUEUEPILOT_DCGM_TIMEOUT", default="5"),
                   help="seconds to wait for dcgm-exporter [QUEUEPILOT_DCGM_TIMEOUT] (default: %(default)s)")
    p.add_argument("--pod-resources-socket", metavar="PATH", default=_env("QUEUEPILOT_POD_RESOURCES_SOCKET", default=DEFAULT_SOCKET),
                   help="kubelet PodResources socket; empty turns pod attribution off [QUEUEPILOT_POD_RESOURCES_SOCKET] (default: %(default)s)")
    p.add_argument("--drain-xids", type=_xid_list, metavar="XID,XID,...",
                   default=_env("QUEUEPILOT_DRAIN_XIDS", default=",".join(map(str, sorted(DEFAULT_DRAIN_XIDS)))),
                   help="XIDs that make a GPU unhealthy [QUEUEPILOT_DRAIN_XIDS] (default: NVIDIA's drain-worthy XIDs)")
    p.add_argument("--fatal-xid-window", type=_positive, metavar="SECONDS", default=_env("QUEUEPILOT_FATAL_XID_WINDOW", default="600"),
                   help="seconds a drain-worthy XID keeps the GPU unhealthy [QUEUEPILOT_FATAL_XID_WINDOW] (default: %(default)s)")
    p.add_argument("--thermal-window", type=_positive, metavar="SECONDS", default=_env("QUEUEPILOT_THERMAL_WINDOW", default="60"),
                   help="seconds of continuous thermal slowdown before a GPU is unhealthy [QUEUEPILOT_THERMAL_WINDOW] (default: %(default)s)")
    p.add_argument("--sim-gpus", type=int, metavar="N", default=_env("QUEUEPILOT_SIM_GPUS", default="8"),
                   help="GPUs in the simulated fleet [QUEUEPILOT_SIM_GPUS] (default: %(default)s)")
    p.add_argument("--sim-model", metavar="NAME", default=_env("QUEUEPILOT_SIM_MODEL", default="NVIDIA H100 80GB HBM3"),
                   help="simulated GPU model [QUEUEPILOT_SIM_MODEL] (default: %(default)s)")
    p.add_argument("--sim-seed", type=int, metavar="N", default=_env("QUEUEPILOT_SIM_SEED", default="0"),
                   help="seed of the simulated fleet [QUEUEPILOT_SIM_SEED] (default: %(default)s)")
    p.add_argument("--log-level", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   default=_env("QUEUEPILOT_LOG_LEVEL", default="INFO").upper(),
                   help="[QUEUEPILOT_LOG_LEVEL] (default: %(default)s)")
    return p


def make_source(args: argparse.Namespace) -> GpuSource:
    if args.source == "sim":
        from exporter.sources.sim import SimSource

        return SimSource(args.node_name, gpus=args.sim_gpus, model=args.sim_model, seed=args.sim_seed)
    if args.source == "dcgm":
        from exporter.sources.dcgm import DcgmSource

        return DcgmSource(args.node_name, args.dcgm_url, timeout=args.dcgm_timeout)
    try:
        from exporter.sources.nvml import NvmlSource  # imports pynvml: only when asked for
    except ImportError as e:
        raise SourceUnavailable(f"the nvml source cannot be loaded: {e}") from e
    return NvmlSource(args.node_name)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.source not in ("nvml", "dcgm", "sim"):  # argparse does not check defaults (from the environment)
        parser.error(f"QUEUEPILOT_SOURCE must be one of nvml, dcgm, sim, not {args.source!r}")
    if args.log_level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        parser.error(f"QUEUEPILOT_LOG_LEVEL must be DEBUG, INFO, WARNING or ERROR, not {args.log_level!r}")
    if args.sim_gpus < 0:
        parser.error("--sim-gpus must be >= 0")
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
            listen=args.listen,
            hostname=args.node_name,
            interval=args.interval,
            pod_resources_socket=args.pod_resources_socket or None,
            health=health,
        )
        asyncio.run(serve(app))
    except SourceUnavailable as e:
        print(f"queuepilot exporter: --source {args.source}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # e.g. the listen address is taken
        print(f"queuepilot exporter: {e} (listen {args.listen})", file=sys.stderr)
        return 1
    return 0
