"""The one console script, ``queuepilot <subcommand> ...``.

This is the only module that imports every package.  Each subcommand owns its flags in its own
package; the dispatcher forwards the rest of the command line to that package's
``main(argv) -> int``.  Without a subcommand it prints the help to stderr and exits 2 (a usage
error), so a container started without arguments fails visibly.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "exporter": ("exporter.cli", "node GPU exporter (DaemonSet): NVML / dcgm-exporter / simulated source"),
    "controller": ("autoscaler.controller.cli", "the controller: AdmissionCheck, Ray worker-group scaler, webhook"),
    "dashboards": ("dashboards.cli", "write the Grafana dashboards (JSON)"),
    "alerts": ("alerts.cli", "write the Prometheus alert rules (YAML)"),
    "simulate": ("simulator.cli", "trace-driven simulation of policies and baselines"),
    "demo": ("simulator.demo.app", "the whole system, simulated, in one process"),
    "report": ("report.cli", "GPU economics per team and right-sizing per worker group, from Prometheus"),
}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="queuepilot",
        description="GPU-, queue- and Ray-aware admission and autoscaling for Kueue + KubeRay clusters.",
        epilog="Run 'queuepilot <subcommand> --help' for a subcommand's flags.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="<subcommand>")
    for name, (_, help_) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_, add_help=False)
    if not argv:
        parser.print_help(sys.stderr)
        return 2
    if argv[0] in ("-h", "--help", "--version"):
        parser.parse_args(argv[:1])  # prints and exits 0
    if argv[0] not in SUBCOMMANDS:
        what = "option" if argv[0].startswith("-") else "subcommand"
        print(f"queuepilot: unknown {what} {argv[0]!r}; subcommands: {', '.join(SUBCOMMANDS)} (see --help)",
              file=sys.stderr)
        return 2
    module = importlib.import_module(SUBCOMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


def _version() -> str:
    from queuepilot import __version__

    return __version__


if __name__ == "__main__":
    sys.exit(main())
