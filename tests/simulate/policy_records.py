"""Hand-built records and sources of benchmarks/policy.py's JSON (a run's record, a run of the script
with its meta, the yardsticks' summaries and a queuepilot summary at every target's limit), for the
tests of its targets, merge, page and sensitivity sweep."""

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


def _waits(rt: tuple[float, float], sp: tuple[float, float], gang: tuple[float, float]) -> dict[str, Any]:
    return {"wait_p95_s_by_class": {"ray_task": rt[0], "single_pod": sp[0], "gang": gang[0]},
            "wait_p99_s_by_class": {"ray_task": rt[1], "single_pod": sp[1], "gang": gang[1]}}


IDLE_BY_CLASS = {"empty": 100.0, "starting": 50.0, "idle_actor": 100.0, "stalled": 50.0, "in_job": 1100.0}
RAY = {"idle_gpu_hours_controllable": 1000.0, "idle_gpu_hours": 2000.0, "killed_gpu_hours": 0.0,
       "delivered_gpu_hours": 32000.0, "unplaceable_admissions": 0, "scale_downs_after_up_300s": 40,
       "lower_bound_idle_gpu_hours": 200.0, "completed_jobs": 900, **_waits((100, 500), (200, 1000), (4000, 8000))}
QUOTA = {**RAY, "unplaceable_admissions": 7, "unplaceable_gpu_hours": 120.0, "unplaceable_hours": 9.0,
         "pods_ready_evictions": 5, "scale_downs_after_up_300s": 0,
         **_waits((100, 500), (200, 1000), (5000, 10000))}
# the reaper: reclaims 666.67 idle GPU-h against ray-idle, kills 1,000 GPU-h of work
REAPER = {**RAY, "idle_gpu_hours": 2000.0 - 2000.0 / 3, "killed_gpu_hours": 1000.0, "delivered_gpu_hours": 33000.0,
          "deactivated_workloads": 40, "resubmitted_workloads": 12}


def qp_meeting_all() -> dict[str, Any]:
    """A queuepilot summary exactly at every limit against its yardsticks above."""
    return {
        "idle_gpu_hours_controllable": 300.0,  # 1.5x the bound (200) and 30 % of ray-idle's (<= 40 %)
        "idle_gpu_hours": 1400.0,  # 70 % of ray-idle's; 600 reclaimed = 0.9x the reaper's 666.67
        "killed_gpu_hours": 330.0,  # 1 % of delivered, 0.33x the reaper's
        "delivered_gpu_hours": 33000.0,  # the reaper's
        "unplaceable_admissions": 0, "scale_downs_after_up_300s": 0, "lower_bound_idle_gpu_hours": 200.0,
        "idle_gpu_hours_by_class": IDLE_BY_CLASS, "completed_jobs": 950, "deactivated_workloads": 30,
        "resubmitted_workloads": 3,
        # ray_task, single_pod: 1.02x kueue-quota's and ray-idle's; gang 0.8x kueue-quota's, ray-idle's own
        **_waits((102, 510), (204, 1020), (4000, 8000)),
    }
