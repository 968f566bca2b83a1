"""The command line of every queuepilot command: argparse, with each usage error one line on stderr
(``<prog>: <message> (see --help)``, exit status 2, no usage block before it) and the help in plain text
with each flag's default (:class:`servicekit.envflags.HelpFormatter`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any, NoReturn

from servicekit.envflags import HelpFormatter

USAGE_ERROR = 2


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` whose errors are one line; ``formatter_class`` defaults to HelpFormatter."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE_ERROR, f"{self.prog}: {message} (see --help)\n")


def fail(prog: str, message: str, status: int = USAGE_ERROR) -> int:
    """Print ``<prog>: <message>`` on stderr (one line) and return ``status``, for ``return fail(...)``."""
    print(f"{prog}: {message}", file=sys.stderr)
    return status
