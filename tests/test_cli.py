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
    assert "invalid choice" in result.stderr


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
])
def test_help_shows_defaults(name: str, defaults: list[str]) -> None:
    result = run(name, "--help")
    out = " ".join(result.stdout.split())
    assert result.returncode == 0
    for text in defaults:
        assert text in out, text
    assert "`" not in result.stdout and "DESIGN" not in result.stdout
