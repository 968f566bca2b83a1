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
