"""The per-dispatcher table of a multi-cluster run (``queuepilot simulate --clusters N``): queue wait per
job class and what dispatching cost, as rows of text; the CLI prints it, ``benchmarks/fleet.py`` writes it
as markdown."""

from __future__ import annotations

from typing import Any

from simulator.fleet import CLASSES


def duration_text(seconds: float | None) -> str:
    """``45s``, ``91m``, ``4.2h``; ``-`` for None."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def waits_text(summary: dict[str, Any], cls: str) -> str:
    """A class's wait p50/p95/p99 from a dispatcher's summary, e.g. ``1s/91m/4.2h``."""
    return "/".join(duration_text(summary[f"wait_{cls}_p{q}_s"]) for q in (50, 95, 99))


def table_rows(summaries: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The readable table (also used by benchmarks/fleet.py for its markdown)."""
    header = ["dispatcher"]
    for c in CLASSES:
        header.append(f"wait {c} p50/p95/p99")
    header += ["unplaceable (GPU-h)", "remote created/deleted", "completed", "util of alloc", "alloc share"]
    rows = []
    for name, s in summaries.items():
        row = [name]
        for c in CLASSES:
            n = s[f"jobs_{c}"]
            row.append(waits_text(s, c) + f" (n={n})")
        row += [f"{s['unplaceable_dispatches']} ({s['unplaceable_gpu_hours']:,.0f})",
                f"{s['remote_created']:,}/{s['remote_deleted']:,}", f"{s['jobs_completed']:,}",
                _pct(s["gpu_util_allocated"]), _pct(s["gpu_allocated_share"])]
        rows.append(row)
    return header, rows


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"
