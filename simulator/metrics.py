"""What a simulation run measures, and the JSON it reports per policy (the ``simulate --json`` contract).

- queue wait: submission -> start (a Ray task on a worker; a RayJob's pods bound), per start, in
  seconds, including admission-check holds, Retry and eviction backoffs (what the user waits); a Ray
  task killed mid-work waits again from the kill, a resubmitted workload from its resubmission; by
  class (``WAIT_CLASSES``): ``ray_task`` (a 1-GPU task on a team's RayCluster), ``single_pod`` (a
  workload of one pod, any GPUs), ``gang`` (a workload of several pods), ``workload`` (both);
- ``gpu_util_allocated``: used GPU-seconds / allocated GPU-seconds (0-1);
- ``idle_gpu_hours``: GPU-hours allocated to a pod while the GPU ran under 5 % (the idle threshold of the
  Philly utilization studies, docs/simulation.md);
- ``unplaceable_admissions`` / ``unplaceable_hours`` / ``unplaceable_gpu_hours``: workloads admitted by
  Kueue whose pods could not be bound at admission, the workload-hours they spent so and the GPU-hours
  of quota they held meanwhile; ``pods_ready_evictions``: those Kueue evicted after
  ``waitForPodsReady.timeout`` (and queued again after its backoff); ``waiting_gpu_hours``: the GPU-hours
  of quota reserved by workloads not admitted yet (waiting for the admission check's decision, or in
  its capacity wait); 0 without a check, where quota reservation is admission;
- ``completed_jobs``: jobs whose work finished (a Ray task's, a workload's; a workload deactivated in
  its final stall had finished its work); ``deactivated_workloads``: running workloads deactivated (stall
  handling, the reaper); ``resubmitted_workloads``: those of them with work left, which their owner
  submitted again (``resubmit_after`` later) to run from scratch;
- ``scale_events``: changes of a worker group's ``replicas``; ``reversals_10m``: a change in the
  opposite direction of the group's previous change within 600 s;
- ``idle_gpu_hours_by_class``: the idle GPU-hours split by why the GPU sat idle (``IDLE_CLASSES``:
  ``empty`` a ready worker with nothing on it, ``starting`` a worker or RayJob starting up,
  ``idle_actor`` a Ray actor holding its worker after its work, ``stalled`` a job stalled at 0 %,
  ``in_job`` a short idle stretch inside running work); they sum to ``idle_gpu_hours``;
  ``idle_gpu_hours_controllable``: all but ``in_job`` (what a scaler or the stall reclaim can act on);
- ``killed_gpu_hours``: work lost to a removal (a busy worker deleted: its task's elapsed work, which
  restarts; a running workload deactivated before its stall: the work it had left);
- ``lower_bound_idle_gpu_hours``: ``lower_bound_idle_s`` (+ the idle no scaler avoids): no scaler can have less controllable idle
  with the task timings of this run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

IDLE_UTIL = 0.05
WAIT_CLASSES = ("ray_task", "single_pod", "gang")
IDLE_CLASSES = ("empty", "starting", "idle_actor", "stalled", "in_job")
CONTROLLABLE_CLASSES = ("empty", "starting", "idle_actor", "stalled")
REVERSAL_WINDOW_S = 600.0
STABILIZATION_WINDOW_S = 300.0  # the HPA-style scale-down stabilization window


@dataclass
class RunMetrics:
    waits: list[float] = field(default_factory=list)
    waits_by_class: dict[str, list[float]] = field(default_factory=lambda: {k: [] for k in WAIT_CLASSES})
    allocated_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    idle_gpu_s: float = 0.0
    idle_class_gpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(IDLE_CLASSES, 0.0))
    unavoidable_gpu_s: float = 0.0  # idle no scaler avoids: RayJob start-up, a job's own starting phase
    killed_gpu_s: float = 0.0
    lower_bound_idle_gpu_s: float = 0.0  # set by the engine at the end of the run
    unplaceable_admissions: int = 0
    unplaceable_s: float = 0.0
    unplaceable_gpu_s: float = 0.0
    waiting_gpu_s: float = 0.0  # quota reserved, not admitted (the check deciding or waiting for GPUs)
    pods_ready_evictions: int = 0
    resubmitted: int = 0
    scale_events: int = 0
    reversals_10m: int = 0
    reversals_5m: int = 0
    down_after_up_5m: int = 0  # a scale-down inside the stabilization window after a scale-up
    jobs_completed: int = 0
    jobs_submitted: int = 0
    tasks_killed: int = 0
    actors_killed: int = 0  # workers deleted in their idle tail: the idle actor on it went (no work lost)
    actors_killed_by_hour: dict[tuple[str, int], int] = field(default_factory=dict)  # (RayCluster, clock hour) -> n
    retries: int = 0
    rejected: int = 0
    deactivated: int = 0  # running workloads deactivated (the stall reclaim)
    gpu_failures: int = 0
    last_change: dict[str, tuple[float, int]] = field(default_factory=dict)  # group -> (t, +1/-1)
    timeline: list[tuple[float, int, int, float, int]] = field(default_factory=list)

    def record_wait(self, klass: str, seconds: float) -> None:
        """One start's wait, of class ``klass`` (``WAIT_CLASSES``)."""
        self.waits.append(seconds)
        self.waits_by_class[klass].append(seconds)

    def record_unplaced(self, seconds: float, gpus: int) -> None:
        """A workload admitted without its pods bound for ``seconds``, holding ``gpus`` of quota."""
        self.unplaceable_s += seconds
        self.unplaceable_gpu_s += seconds * gpus

    def record_waiting(self, seconds: float, gpus: int) -> None:
        """A workload held ``gpus`` of quota for ``seconds`` before it was admitted, retried or rejected."""
        self.waiting_gpu_s += seconds * gpus

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

    def account(self, dt: float, allocated: int, used: float, idle: int,
                classes: dict[str, int] | None = None, unavoidable: int = 0) -> None:
        """One sample held for ``dt``: GPUs allocated, GPU-equivalents used, GPUs idle (and, when given,
        the idle GPUs by class, summing to ``idle``, and how many of them no scaler could avoid)."""
        self.allocated_gpu_s += allocated * dt
        self.used_gpu_s += used * dt
        self.idle_gpu_s += idle * dt
        if classes is not None:
            for k, n in classes.items():
                if n:
                    self.idle_class_gpu_s[k] += n * dt
        self.unavoidable_gpu_s += unavoidable * dt

    def record_actor_killed(self, cluster: str, now: float) -> None:
        self.actors_killed += 1
        key = (cluster, int(now // 3600))
        self.actors_killed_by_hour[key] = self.actors_killed_by_hour.get(key, 0) + 1

    def record_killed(self, gpu_seconds: float) -> None:
        self.killed_gpu_s += max(0.0, gpu_seconds)

    def summary(self) -> dict[str, Any]:
        w = np.asarray(self.waits, dtype=float)
        by_class = {k: np.asarray(v, dtype=float) for k, v in self.waits_by_class.items()}
        by_class["workload"] = np.asarray(self.waits_by_class["single_pod"] + self.waits_by_class["gang"], dtype=float)

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
            "task_wait_p95_s": pct(95, by_class["ray_task"]),
            "rayjob_wait_p95_s": pct(95, by_class["workload"]),
            "reversals_5m": self.reversals_5m,
            "down_after_up_5m": self.down_after_up_5m,
            "tasks_killed": self.tasks_killed,
            "actors_killed": self.actors_killed,
            # the most actors killed in one RayCluster in one clock hour of the run (a budget per hour bounds it)
            "actors_killed_peak_hour": max(self.actors_killed_by_hour.values(), default=0),
            "admission_retries": self.retries,
            "admission_rejected": self.rejected,
            "gpu_failures": self.gpu_failures,
            # honest accounting (docs/simulation.md, "Accounting")
            "idle_gpu_hours_controllable": round(
                sum(self.idle_class_gpu_s[k] for k in CONTROLLABLE_CLASSES) / 3600, 1),
            "idle_gpu_hours_by_class": {k: round(self.idle_class_gpu_s[k] / 3600, 1) for k in IDLE_CLASSES},
            "killed_gpu_hours": round(self.killed_gpu_s / 3600, 1),
            # GPU-hours of work the jobs kept: allocated, less idle, less the work killed
            "delivered_gpu_hours": round(max(0.0, self.allocated_gpu_s - self.idle_gpu_s - self.killed_gpu_s) / 3600, 1),
            "lower_bound_idle_gpu_hours": round(self.lower_bound_idle_gpu_s / 3600, 1),
            "wait_p50_s_by_class": {k: pct(50, a) for k, a in by_class.items()},
            "wait_p95_s_by_class": {k: pct(95, a) for k, a in by_class.items()},
            "wait_p99_s_by_class": {k: pct(99, a) for k, a in by_class.items()},
            "scale_downs_after_up_300s": self.down_after_up_5m,
            "stall_deactivations": self.deactivated,
            "completed_jobs": self.jobs_completed,
            "deactivated_workloads": self.deactivated,
            "resubmitted_workloads": self.resubmitted,
            "unplaceable_gpu_hours": round(self.unplaceable_gpu_s / 3600, 1),
            "waiting_gpu_hours": round(self.waiting_gpu_s / 3600, 1),
            "pods_ready_evictions": self.pods_ready_evictions,
        }


def lower_bound_idle_s(busy: list[tuple[float, float]], startup_s: float) -> float:
    """The least idle worker-seconds any scaler needs to serve ``busy`` (a team's work intervals, one
    worker each, as the run realised them) with workers that take ``startup_s`` to start.

    ``D(t)``, the number of intervals open at ``t``, is split into levels (level ``k`` is on while
    ``D >= k``).  A worker ready at ``t0`` was created by ``t0 - startup_s`` and lived since, so any
    schedule has at least ``k`` workers allocated over ``[t0 - startup_s, t0]`` whenever level ``k``
    turns on at ``t0``: the first time it costs ``startup_s``, after a gap at that level
    ``min(gap, startup_s)`` (kept over the gap, or removed and started again), and nothing after its
    last period.  Summing over levels is exact: one worker per level that is kept over every gap
    shorter than ``startup_s`` and relaunched ``startup_s`` ahead otherwise meets it (tested by brute
    force).  Ends sort before starts at the same time (a worker handed straight on is no gap)."""
    events: list[tuple[float, int]] = []
    for a, b in busy:
        if b > a:
            events.append((a, 1))
            events.append((b, -1))
    events.sort()
    level_end: list[float | None] = []  # level k (index k-1) -> when it last turned off
    d = 0
    cost = 0.0
    for t, step in events:
        if step < 0:
            level_end[d - 1] = t
            d -= 1
            continue
        d += 1
        if d > len(level_end):
            level_end.append(None)
            cost += startup_s
        else:
            last = level_end[d - 1]
            cost += startup_s if last is None else min(t - last, startup_s)
    return cost


CONTRACT_KEYS = (
    "wait_p50_s", "wait_p95_s", "wait_p99_s", "gpu_util_allocated", "idle_gpu_hours", "unplaceable_admissions",
    "unplaceable_hours", "scale_events", "reversals_10m", "jobs_completed",
)
