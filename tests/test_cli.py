"""The one console script dispatches to every subcommand, each owning its flags."""

from __future__ import annotations

import subprocess
import sys

import pytest

from queuepilot.cli import SUBCOMMANDS


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queuepilot", *args], capture_output=True, text=True, timeout=60)


def test_top_level_help_lists_every_subcommand() -> None:
    result = run("--help")
    assert result.returncode == 0
    for name in SUBCOMMANDS:
        assert name in result.stdout


def test_unknown_subcommand_is_a_usage_error() -> None:
    result = run("frobnicate")
    assert result.returncode == 2
    assert result.stderr == ("queuepilot: unknown subcommand 'frobnicate'; subcommands: " + ", ".join(SUBCOMMANDS)
                             + " (see --help)\n")


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_has_its_own_help(name: str) -> None:
    result = run(name, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout
    assert "--" in result.stdout  # it documents flags


def test_bare_queuepilot_prints_help_and_is_a_usage_error() -> None:
    result = run()
    assert result.returncode == 2
    assert result.stderr.startswith("usage: queuepilot")
    for name in SUBCOMMANDS:
        assert name in result.stderr
    assert result.stdout == ""


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("queuepilot ")


@pytest.mark.parametrize(("name", "defaults"), [
    ("exporter", ["(default: nvml)", "(default: 0.0.0.0:9400)", "(default: 10.0)", "(default: 128)"]),
    ("controller", ["(default: 0.0.0.0:8080)", "(default: prometheus)", "(default: 30.0)", "(default: False)",
                    "[env QUEUEPILOT_LEASE_NAME]"]),
    ("dashboards", ["(default: dashboards/generated)", "[env QUEUEPILOT_OUT]"]),
    ("alerts", ["(default: alerts/generated)", "(default: https://github.com/queuepilot/", "pending_slo_seconds",
                "for.<AlertName>=5m"]),
    ("simulate", ["(default: 24.0)", "(default: 2017-10-03)", "--quiet"]),
    ("demo", ["(default: 60.0)", "(default: 127.0.0.1:9400)"]),
    ("report", ["(default: 7d)", "(default: 1d)", "(default: 60.0)"]),
])
def test_help_shows_defaults(name: str, defaults: list[str]) -> None:
    result = run(name, "--help")
    out = " ".join(result.stdout.split()).replace(" .com", ".com")  # argparse wraps the URL
    assert result.returncode == 0
    for text in defaults:
        assert text in out, text
    # plain text: no reST markup, no "(default: None)" / "(default: [])" noise
    assert "`" not in result.stdout and "DESIGN" not in result.stdout
    assert "(default: None)" not in out and "(default: [])" not in out


BAD_INPUT = [
    (("dashboards", "--out", "/proc/x"), "queuepilot dashboards: --out: cannot write folder /proc/x"),
    (("alerts", "--out", "/proc/x"), "queuepilot alerts: --out: cannot write folder /proc/x"),
    (("alerts", "--out", "{tmp}/rules", "--set", "for.NotAnAlert=5m"),
     "queuepilot alerts: --set for.NotAnAlert: no alert is named 'NotAnAlert'; known: GPUAllocatedIdle"),
    (("alerts", "--out", "{tmp}/rules", "--set", "nope=1"), "queuepilot alerts: unknown setting 'nope'"),
    (("simulate", "--trace", "synthetic", "--json", "/dev/null/x.json"),
     "queuepilot simulate: cannot write file /dev/null/x.json: /dev/null is not a folder"),
    (("simulate", "--hours", "-1"), "queuepilot simulate: argument --hours: must be a finite number > 0, got -1"),
    (("simulate", "--start", "2017-12-22", "--hours", "48"),
     "queuepilot simulate: --start 2017-12-22 --hours 48 runs 40.0 h past the end of the trace: the trace runs from "
     "2017-09-04 10:30 to 2017-12-22 08:02, so at most --hours 8.0 from that start"),
    (("simulate", "--clusters", "1"), "queuepilot simulate: argument --clusters: must be >= 2, got 1"),
    (("demo", "--nodes", "0"), "queuepilot demo: argument --nodes: must be between 1 and 64, got 0"),
    (("exporter", "--interval", "0"), "queuepilot exporter: argument --interval: must be > 0 seconds, got 0"),
    (("exporter", "--bogus"), "queuepilot exporter: unrecognized arguments: --bogus"),
    (("controller", "--bogus"), "queuepilot controller: unrecognized arguments: --bogus"),
    (("report",), "queuepilot report: the following arguments are required: --prometheus-url"),
    (("report", "--prometheus-url", "http://127.0.0.1:9", "--json", "/dev/null/r.json"),
     "queuepilot report: cannot write file /dev/null/r.json: /dev/null is not a folder"),
    (("report", "--prometheus-url", "x"), "queuepilot report: --prometheus-url must be an http:// or https:// URL"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_a_non_zero_exit(args: tuple[str, ...], expected: str, tmp_path) -> None:
    result = run(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(expected), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr  # no usage block, no traceback
    assert result.stdout == ""


def test_alerts_for_override_of_the_economics_alert_is_applied(tmp_path) -> None:
    result = run("alerts", "--out", str(tmp_path), "--set", "for.QueuePilotTeamGpuWasteHigh=3h")
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "queuepilot-economics.yaml").read_text()
    assert "alert: QueuePilotTeamGpuWasteHigh" in text and "for: 3h" in text
