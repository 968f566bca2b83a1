"""The policy benchmark's runs: what one run is (``Task``), the axes of the two matrices the Makefile runs and
the list of runs they expand to.  Pure: no simulation, no files (``benchmarks/policy.py`` runs them).

A run is one policy over one trace window (its start and length) under one utilization model, seed and GPU
failure rate, at one per-team worker cap and one stall structure (the resume share; the stall share and what
Ray shows of a stall, at the simulator's defaults except in ``benchmarks/sensitivity.py``'s sweeps), with or
without stall handling (``+stall``).  Which runs a matrix holds follows from what its page says: the targets
name the configurations and yardsticks they compare (``policy_targets.needed_labels``), the decomposition the
chain from ``ray-idle`` to queuepilot with every opt-in, and the other baselines are reported beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simulator.engine import POLICIES, SimConfig
from simulator.utilization import DEFAULT_RESUME_SHARE

MODELS = ("grounded", "scattered", "serving")
BASELINE = "ray-idle"  # Ray's own autoscaler: the yardstick of the scaler's targets
QUOTA = "kueue-quota"  # Kueue's quota alone, queuepilot's scaler: the yardstick of the admission targets
REAPER = "reaper"  # ray-idle and the GPU-idle rule users run today: the yardstick of the stall targets
DEFAULT_CAP = SimConfig().ray_max_quota_factor
DEFAULT_RESUME = DEFAULT_RESUME_SHARE
DEFAULT_PAUSE_INVISIBLE = SimConfig().pause_invisible_share
DEFAULT_HANG = SimConfig().hang_share
DEFAULT_REACTIVATE = SimConfig().reactivate_share
RATE = 0.01  # the one GPU failure rate by default (a pod on a failed GPU keeps running: the rate moves little)
START = "2017-10-03"  # the page's window starts where the utilization models were calibrated
# the window benchmarks/utilization_fit.py calibrated the models on (start, hours): held-out weeks lie outside it
CALIBRATION = (START, 720.0)
# four weeks of the Philly trace outside the calibration window: the four 168-h windows, apart from it, that
# hold the most GPU-hours of work inside the window (the trace runs 2017-09-04 to 2017-12-22; before 09-19
# and after 12-14 it holds almost nothing): 09-26 (58,000 GPU-h, the week before the calibration), 11-02
# (48,000, the week after it), 11-09 (48,000, the most jobs), 11-30 (52,000, the most gangs: 49)
HELD_OUT = ("2017-09-26", "2017-11-02", "2017-11-09", "2017-11-30")
WEEK_H = 168.0
STALL_MODELS = ("grounded", "serving")  # the models with long idle runs of workloads (scattered has none)
# the resume shares the stall targets are judged at (issue #42): the default and 0.5
STALL_RESUMES = (DEFAULT_RESUME, 0.5)
# the policies the targets and the decomposition need, and those reported beside them
TARGET_POLICIES = ("queuepilot", "queuepilot-reclaim", BASELINE, QUOTA, REAPER)
SIDE_POLICIES = tuple(p for p in POLICIES if p not in TARGET_POLICIES)
CAP_POLICIES = ("queuepilot", BASELINE)


@dataclass(frozen=True, slots=True)
class Task:
    """One simulation run.  ``start``/``hours`` name its trace window; the rest are ``SimConfig`` and the
    utilization model's stall structure (``stall_share`` None: the model's own)."""

    model: str
    seed: int
    rate: float
    policy: str
    stall_reclaim: bool = False
    cap: float = DEFAULT_CAP
    resume: float = DEFAULT_RESUME
    start: str = START
    hours: float = 720.0
    stall_share: float | None = None
    pause_invisible: float = DEFAULT_PAUSE_INVISIBLE
    hang: float = DEFAULT_HANG
    reactivate: float = DEFAULT_REACTIVATE

    @property
    def label(self) -> str:
        return run_label(self.policy, self.stall_reclaim)


def run_label(policy: str, stall_reclaim: bool) -> str:
    return policy + ("+stall" if stall_reclaim else "")


def split_label(label: str) -> tuple[str, bool]:
    """``queuepilot-reclaim+stall`` -> (``queuepilot-reclaim``, True)."""
    return label.removesuffix("+stall"), label.endswith("+stall")


def is_queuepilot(policy: str) -> bool:
    return policy.startswith("queuepilot")


def sim_config(task: Task) -> SimConfig:
    """The run's configuration: the simulator's defaults with the task's seed, failure rate, worker cap, stall
    handling and Ray's view of a stall (what ``queuepilot simulate`` runs with the same flags)."""
    return SimConfig(seed=task.seed, gpu_failure_rate=task.rate, ray_max_quota_factor=task.cap,
                     stall_reclaim=task.stall_reclaim, pause_invisible_share=task.pause_invisible,
                     hang_share=task.hang, reactivate_share=task.reactivate)


def simulate_command(task: Task) -> str:
    """The ``queuepilot simulate`` command that gives the run's numbers."""
    parts = [f"queuepilot simulate --util-model {task.model} --seed {task.seed} --gpu-failure-rate {task.rate:g} "
             f"--hours {task.hours:g} --start {task.start} --policies {task.policy}"]
    if task.stall_reclaim:
        parts.append("--stall-reclaim")
    if task.cap != DEFAULT_CAP:
        parts.append(f"--worker-cap-factor {task.cap:g}")
    if task.resume != DEFAULT_RESUME:
        parts.append(f"--stall-resume-share {task.resume:g}")
    if task.stall_share is not None:
        parts.append(f"--stall-share {task.stall_share:g}")
    if task.pause_invisible != DEFAULT_PAUSE_INVISIBLE:
        parts.append(f"--pause-invisible-share {task.pause_invisible:g}")
    if task.hang != DEFAULT_HANG:
        parts.append(f"--hang-share {task.hang:g}")
    if task.reactivate != DEFAULT_REACTIVATE:
        parts.append(f"--reactivate-share {task.reactivate:g}")
    return " ".join(parts)


# ------------------------------------------------------------------------------------------- axes
# axis -> how a page names it
AXES = {"hours": "window", "models": "models", "seeds": "seeds", "rates": "failure rates",
        "policies": "policies at every seed", "side_policies": "baselines at the first seed only",
        "stall_models": "`+stall` runs under", "stall_policies": "`+stall` policies",
        "resumes": "other resume shares", "resume_labels": "runs at the other resume shares",
        "caps": "worker-cap factors", "cap_policies": "cap-sweep policies", "held_out": "held-out weeks",
        "held_out_hours": "held-out window"}


def default_axes(quick: bool) -> dict[str, Any]:
    """The axes of the quick (``make bench``) or the whole (``make bench-full``) matrix, as a run's meta
    records them.

    The whole matrix: the Philly month under every model, seed 1 (the four held-out weeks, not more seeds of
    the same month, are the replication: ``--seeds 1,2,3`` doubles the month's cost and more), every
    policy; both queuepilot policies with stall handling under the stall models; at resume share 0.5 what
    the stall targets compare (ray-idle, the reaper, both ``+stall`` configurations); and every held-out week
    (the runs the targets need there).  ``side_policies`` (static, hpa, keda: no target needs them) stay at
    the first seed when more seeds are asked for.  The per-team worker cap is swept over the held-out weeks
    in ``sensitivity.md``, not here.

    The quick matrix: the Philly week under ``grounded`` only, seed 1, the runs the targets need there
    (queuepilot, queuepilot-reclaim+stall, ray-idle, kueue-quota, the reaper; ray-idle, the reaper and
    queuepilot-reclaim+stall again at resume share 0.5): a check, sized so that ``make bench`` ends within
    15 minutes on two cores (a simulated week is a couple of CPU minutes a run), so its decomposition takes
    idle-actor reclaim and stall handling as one step (no queuepilot-reclaim run)."""
    if quick:
        return {"hours": WEEK_H, "models": ["grounded"], "seeds": [1], "rates": [RATE],
                "policies": [p for p in TARGET_POLICIES if p != "queuepilot-reclaim"], "side_policies": [],
                "stall_models": ["grounded"],
                "stall_policies": ["queuepilot-reclaim"], "resumes": [0.5],
                "resume_labels": [BASELINE, REAPER, "queuepilot-reclaim+stall"], "caps": [],
                "cap_policies": list(CAP_POLICIES), "held_out": [], "held_out_hours": WEEK_H}
    return {"hours": 720.0, "models": list(MODELS), "seeds": [1], "rates": [RATE],
            "policies": list(TARGET_POLICIES), "side_policies": list(SIDE_POLICIES),
            "stall_models": list(STALL_MODELS), "stall_policies": ["queuepilot", "queuepilot-reclaim"],
            "resumes": [r for r in STALL_RESUMES if r != DEFAULT_RESUME],
            "resume_labels": [BASELINE, REAPER, "queuepilot+stall", "queuepilot-reclaim+stall"], "caps": [],
            "cap_policies": list(CAP_POLICIES), "held_out": list(HELD_OUT), "held_out_hours": WEEK_H}


def build_matrix(ax: Mapping[str, Any], start: str = START,
                 held_out_labels: Mapping[tuple[str, float], Sequence[str]] | None = None) -> list[Task]:
    """Every run of a matrix with axes ``ax`` over the window ``ax['hours']`` from ``start``:

    - every (model, seed, rate, policy) of ``policies``; ``side_policies`` at the first seed and rate;
    - ``stall_policies`` with stall handling under ``stall_models`` (every seed and rate);
    - under ``stall_models``, ``resume_labels`` at each of ``resumes`` (every seed and rate);
    - the cap sweep: ``caps`` other than the default for ``cap_policies``, first model, seed and rate;
    - each ``held_out`` week (``held_out_hours``, 168 by default), first seed and rate: per (model, resume share), the labels
      ``held_out_labels`` gives (what the targets need there, ``policy_targets.needed_labels``)."""
    models, seeds, rates = ax["models"], ax["seeds"], ax["rates"]
    hours = float(ax["hours"])
    win = {"start": start, "hours": hours}
    tasks = [Task(m, s, r, p, **win) for m in models for s in seeds for r in rates for p in ax["policies"]]
    if seeds and rates:
        tasks += [Task(m, seeds[0], rates[0], p, **win) for m in models for p in ax["side_policies"]
                  if p not in ax["policies"]]
    stall_models = [m for m in models if m in ax["stall_models"]]
    tasks += [Task(m, s, r, p, True, **win) for m in stall_models for s in seeds for r in rates
              for p in ax["stall_policies"]]
    for resume in ax["resumes"]:
        for label in ax["resume_labels"]:
            pol, stall = split_label(label)
            tasks += [Task(m, s, r, pol, stall, resume=resume, **win) for m in stall_models for s in seeds
                      for r in rates]
    if models and seeds and rates:
        ref = (models[0], seeds[0], rates[0])
        tasks += [Task(*ref, p, cap=c, **win) for c in ax["caps"] if c != DEFAULT_CAP for p in ax["cap_policies"]]
    if ax.get("held_out") and seeds and rates and held_out_labels:
        for week in ax["held_out"]:
            for (model, resume), labels in held_out_labels.items():
                for label in labels:
                    pol, stall = split_label(label)
                    tasks.append(Task(model, seeds[0], rates[0], pol, stall, resume=resume, start=week,
                                      hours=float(ax.get("held_out_hours", WEEK_H))))
    return list(dict.fromkeys(tasks))  # (a run two axes name runs once)
