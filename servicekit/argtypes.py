"""argparse ``type=`` converters for durations and counts: a bad value is a usage error that names
the rule (``must be a finite number > 0, got -1``), never a traceback."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def seconds(minimum: float = 0.0, *, allow_zero: bool = False) -> Callable[[str], float]:
    """A finite number of seconds, > ``minimum`` (>= with ``allow_zero`` for a minimum of 0)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number of seconds, got {text!r}")
        if value < minimum or (value == minimum and not allow_zero):
            rule = f">= {minimum:g}" if allow_zero else f"> {minimum:g}"
            raise argparse.ArgumentTypeError(f"must be {rule} seconds, got {text}")
        return value

    parse.__name__ = "seconds"  # argparse names the type in its messages
    return parse


positive_seconds = seconds()
non_negative_seconds = seconds(allow_zero=True)


def count(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in [minimum, maximum]."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {value}")
        return value

    parse.__name__ = "count"
    return parse


port = count(1, 65535)
