"""What a simulation runs on, shared by the two ``queuepilot simulate`` front ends (``simulator/cli.py``,
``simulator/fleet_cli.py``) and the benchmarks: the default trace, a trace window loaded with its
utilization model, the window start, the command-line number types they both take, and the probe that
an output path can be written before a run starts.

The dependency runs one way: the CLIs and the benchmarks import this module; it imports neither.
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from servicekit.outpaths import check_writable as check_writable  # the CLIs' probe, named here for them
from simulator.utilization import DEFAULT_MODEL, DEFAULT_RESUME_SHARE, MODELS, PhasedModel, UtilModel
from simulator.workload import TraceWindow, load_philly, parse_start, synthetic

DEFAULT_START = "2017-10-03"
REPO = Path(__file__).resolve().parents[1]


def default_trace() -> Path:
    """``$QUEUEPILOT_SHARED/traces/philly-pollux/philly.csv`` (``QUEUEPILOT_SHARED`` defaulting to the
    ``shared`` folder beside the checkout)."""
    shared = Path(os.environ.get("QUEUEPILOT_SHARED", str(REPO.parent / "shared")))
    return shared / "traces" / "philly-pollux" / "philly.csv"


def _number(text: str, *, allow_zero: bool) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise argparse.ArgumentTypeError(f"must be a finite number {'>=' if allow_zero else '>'} 0, got {text}")
    return value


def non_negative_rate(text: str) -> float:
    """An argparse type: a finite number >= 0 (``--gpu-failure-rate``)."""
    return _number(text, allow_zero=True)


def positive_hours(text: str) -> float:
    """An argparse type: a finite number > 0 (``--hours``)."""
    return _number(text, allow_zero=False)


def positive_factor(text: str) -> float:
    """An argparse type: a finite number > 0 (``--worker-cap-factor``)."""
    return _number(text, allow_zero=False)


def share(text: str) -> float:
    """An argparse type: a number in [0, 1] (``--stall-resume-share``, ``--hang-share``, ...)."""
    value = _number(text, allow_zero=True)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be a share in [0, 1], got {text}")
    return value


def duration(text: str) -> float:
    """An argparse type: a duration (``90``, ``90s``, ``30m``, ``2h``, ``1h30m``) of at most 30 days."""
    from autoscaler.core.policy.config import parse_duration

    try:
        value = parse_duration(text)
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if not 0 <= value <= 30 * 86400:
        raise argparse.ArgumentTypeError(f"must be a duration of at most 30 days, got {text!r}")
    return value


def util_model_for(util_model: str, resume_share: float = DEFAULT_RESUME_SHARE,
                   stall_share: float | None = None) -> UtilModel:
    """The model called ``util_model`` with its stall structure: ``resume_share`` of its long idle runs
    pauses, ``stall_share`` of its jobs with one (None: the model's own).  ValueError for an unknown
    model, or a stall share for a model without that structure (``scattered``) or one it cannot fit."""
    if util_model not in MODELS:
        raise ValueError(f"unknown utilization model {util_model!r} (known: {', '.join(sorted(MODELS))})")
    model = MODELS[util_model]
    if not isinstance(model, PhasedModel):
        if stall_share is not None:
            raise ValueError(f"--stall-share applies to the phased models (grounded, serving): {util_model} has "
                             "no stall share of its own")
        return model
    model = model.with_resume_share(resume_share)
    return model if stall_share is None else model.with_stall_share(stall_share)


def stall_share_of(util_model: str, stall_share: float | None = None) -> float | None:
    """The share of jobs with a long idle run a run used: ``stall_share`` where given, else the model's own
    (None for a model without that structure, ``scattered``)."""
    if stall_share is not None:
        return stall_share
    model = MODELS.get(util_model)
    return model.stall_p if isinstance(model, PhasedModel) else None


def load_window(trace: str, start: str, hours: float, seed: int, max_gpus: int,
                util_model: str = DEFAULT_MODEL, resume_share: float = DEFAULT_RESUME_SHARE,
                stall_share: float | None = None) -> TraceWindow:
    """The jobs of ``hours`` from ``start`` of ``trace`` (a Philly-format CSV, or ``synthetic``), each
    with its utilization drawn under ``util_model`` from ``seed`` (``resume_share`` of its long idle runs
    pauses that resume, where the model has long idle runs; ``stall_share`` of its jobs with one, the
    model refitted, where given: ``PhasedModel.with_stall_share``); jobs larger than ``max_gpus`` dropped
    and counted.  A bad model, a stall share the model cannot take, a missing trace or a start outside it
    is a ValueError or FileNotFoundError whose message a CLI prints as is."""
    model = util_model_for(util_model, resume_share, stall_share)
    if trace == "synthetic":
        return synthetic(hours, seed, max_gpus, util_model=model)
    path = Path(trace)
    if not path.is_file():
        raise FileNotFoundError(f"trace not found: {path} (set QUEUEPILOT_SHARED or pass --trace)")
    try:
        begin = parse_start(start)
    except ValueError:
        raise ValueError(f"--start {start!r} is not an ISO date/time (e.g. 2017-10-03 or 2017-10-03T08:00)") from None
    window = load_philly(path, begin, hours, seed, max_gpus, util_model=model)
    first, last = window.trace_range
    if first is not None and last is not None:
        span = f"the trace runs from {first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M}"
        if not first <= begin <= last:
            raise ValueError(f"--start {start} is outside the trace: {span}")
        left = (last - begin).total_seconds() / 3600
        if hours > left:
            raise ValueError(f"--start {start} --hours {hours:g} runs {hours - left:.1f} h past the end of the trace: "
                             f"{span}, so at most --hours {max(left, 0.0):.1f} from that start")
    return window
