"""What a simulation run measures, and the JSON it reports per policy (the ``simulate --json`` contract).

- queue wait: submission -> start (a Ray task on a worker; a RayJob's pods bound), per job, in
  seconds, including admission-check holds and Retry backoffs (what the user waits);
- ``gpu_util_allocated``: used GPU-seconds / allocated GPU-seconds (0-1);
- ``idle_gpu_hours``: GPU-hours allocated to a pod while the GPU ran under 5 % (the idle threshold of the
  Philly utilization studies, docs/simulation.md);
- ``unplaceable_admissions`` / ``unplaceable_hours``: workloads admitted by Kueue whose pods could
  not be bound at admission, and the workload-hours they spent so;
- ``scale_events``: changes of a worker group's ``replicas``; ``reversals_10m``: a change in the
  opposite direction of the group's previous change within 600 s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

IDLE_UTIL = 0.05
REVERSAL_WINDOW_S = 600.0
STABILIZATION_WINDOW_S = 300.0  # the HPA-style scale-down stabilization window


@dataclass
class RunMetrics:
    waits: list[float] = field(default_factory=list)
    waits_task: list[float] = field(default_factory=list)
    waits_rayjob: list[float] = field(default_factory=list)
    allocated_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    unplaceable_admissions: int = 0
    unplaceable_s: float = 0.0
    scale_events: int = 0
    reversals_10m: int = 0
    reversals_5m: int = 0
    down_after_up_5m: int = 0  # a scale-down inside the stabilization window after a scale-up
    jobs_completed: int = 0
    jobs_submitted: int = 0
    tasks_killed: int = 0
    retries: int = 0
    rejected: int = 0
    gpu_failures: int = 0
    last_change: dict[str, tuple[float, int]] = field(default_factory=dict)  # group -> (t, +1/-1)
    timeline: list[tuple[float, int, int, float, int]] = field(default_factory=list)

    def record_wait(self, kind: str, seconds: float) -> None:
        self.waits.append(seconds)
        (self.waits_task if kind == "task" else self.waits_rayjob).append(seconds)

    def record_scale(self, group: str, now: float, old: int, new: int) -> None:
        if new == old:
            return
        direction = 1 if new > old else -1
        self.scale_events += 1
        prev = self.last_change.get(group)
        if prev is not None and prev[1] != direction and now - prev[0] < REVERSAL_WINDOW_S:
            self.reversals_10m += 1
            if now - prev[0] < STABILIZATION_WINDOW_S:
                self.reversals_5m += 1
                if direction < 0:
                    self.down_after_up_5m += 1
        self.last_change[group] = (now, direction)

    def account(self, dt: float, allocated: int, used: float, idle: int) -> None:
        self.allocated_gpu_s += allocated * dt
        self.used_gpu_s += used * dt
        self.idle_gpu_s += idle * dt

    def summary(self) -> dict[str, Any]:
        w = np.asarray(self.waits, dtype=float)

        def pct(q: float, a: np.ndarray = w) -> float:
            return round(float(np.percentile(a, q)), 1) if a.size else 0.0

        return {
            "wait_p50_s": pct(50),
            "wait_p95_s": pct(95),
            "wait_p99_s": pct(99),
            "gpu_util_allocated": round(self.used_gpu_s / self.allocated_gpu_s, 4) if self.allocated_gpu_s else 0.0,
            "idle_gpu_hours": round(self.idle_gpu_s / 3600, 1),
            "unplaceable_admissions": self.unplaceable_admissions,
            "unplaceable_hours": round(self.unplaceable_s / 3600, 2),
            "scale_events": self.scale_events,
            "reversals_10m": self.reversals_10m,
            "jobs_completed": self.jobs_completed,
            # extras (not part of the contract, useful to read the table)
            "wait_mean_s": round(float(w.mean()), 1) if w.size else 0.0,
            "jobs_submitted": self.jobs_submitted,
            "allocated_gpu_hours": round(self.allocated_gpu_s / 3600, 1),
            "task_wait_p95_s": pct(95, np.asarray(self.waits_task, dtype=float)),
            "rayjob_wait_p95_s": pct(95, np.asarray(self.waits_rayjob, dtype=float)),
            "reversals_5m": self.reversals_5m,
            "down_after_up_5m": self.down_after_up_5m,
            "tasks_killed": self.tasks_killed,
            "admission_retries": self.retries,
            "admission_rejected": self.rejected,
            "gpu_failures": self.gpu_failures,
        }


CONTRACT_KEYS = (
    "wait_p50_s", "wait_p95_s", "wait_p99_s", "gpu_util_allocated", "idle_gpu_hours", "unplaceable_admissions",
    "unplaceable_hours", "scale_events", "reversals_10m", "jobs_completed",
)
