"""Hand-built records and sources of benchmarks/policy.py's JSON (a run's record, a run of the script
with its meta), for the tests of its targets, merge and page."""

from __future__ import annotations

from typing import Any

from benchmarks import policy_matrix as pm


def record(model: str, seed: int, rate: float, pol: str, *, stall: bool = False, cap: float = pm.DEFAULT_CAP,
           idle: float = 100.0, resume: float = pm.DEFAULT_RESUME, start: str = pm.START, hours: float = 720.0,
           summary: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """One run's record as ``policy.run_task`` writes it; ``summary`` replaces the default one (controllable
    idle ``idle`` and ``extra``)."""
    return {"model": model, "seed": seed, "rate": rate, "policy": pol, "stall_reclaim": stall, "cap": cap,
            "resume": resume, "start": start, "hours": hours, "stall_share": None,
            "pause_invisible": pm.DEFAULT_PAUSE_INVISIBLE, "hang": pm.DEFAULT_HANG,
            "label": pm.run_label(pol, stall), "secs": 10.0, "cpu_s": 9.0, "load_s": 1.0, "total_gpus": 896,
            "summary": summary if summary is not None else {"idle_gpu_hours_controllable": idle, **extra}}


def source(commit: str, runs: list[dict[str, Any]], *, hours: float = 720.0, start: str = "2017-10-03",
           wall_s: float = 60.0) -> dict[str, Any]:
    return {"meta": {"commit": commit, "date": f"date of {commit}", "command": f"policy.py at {commit}",
                     "trace": "/x/traces/philly-pollux/philly.csv", "start": start, "hours": hours,
                     "machine": "m", "cores": 2, "processes": 2, "wall_s": wall_s, "dirty": False,
                     "ref": ["grounded", 1, 0.01], "run_s_sum": 0.0, "load_s_sum": 0.0,
                     # the axes as a run of the script writes them (a merge works out its own)
                     "models": sorted({r["model"] for r in runs}), "seeds": sorted({r["seed"] for r in runs}),
                     "rates": sorted({r["rate"] for r in runs}), "policies": sorted({r["policy"] for r in runs}),
                     "side_policies": [], "stall_models": [], "stall_policies": [], "resumes": [],
                     "resume_labels": [], "caps": [], "cap_policies": [], "held_out": [], "held_out_hours": 168.0},
            "runs": runs}
