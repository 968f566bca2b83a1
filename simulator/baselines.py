"""The worker-group scalers queuepilot is compared with, as their own code and docs define them
(docs/simulation.md, "Policies", names the upstream sources).

Each scaler sees a ``GroupView`` of one RayCluster worker group (1 GPU per worker) once per control
interval and answers a ``ScaleAction``: the new ``replicas`` and, when it picks them, the workers to
delete by name (else KubeRay's operator deletes arbitrary pods).  The formulas are small pure
functions so the tests can check them against hand-computed numbers:

- ``static``: a fixed replica count.
- ``hpa``: Kubernetes HPA on GPU utilization (4a): ``ceil(ready x util/target)``, no change within
  tolerance 0.1, unready pods 0 % on a scale-up and 100 % of target on a scale-down, ``spec.behavior``
  defaults (up: max(+4 pods, +100 %) per 15 s; down: 300 s stabilization = max recommendation).
- ``keda``: a ScaledObject on queue length (4b): metric = tasks queued + running, ``AverageValue``
  target 1 task per worker, activation at > 0; 0 -> 1 by KEDA, 1..N by the HPA's legacy path (nil
  behavior: max recommendation over 5 min, scale-up capped at max(2 x current, 4)); to 0 after the
  300 s cooldown since the metric was last active.
- ``ray-idle``: Ray's autoscaler (4c): launch workers for pending GPU bundles not covered by free or
  launching workers, at most ``max(5, upscaling_speed x max(running, 1))`` launching (upscaling_speed
  1000, KubeRay's default); delete by name every worker idle (no task, actor or object) for 60 s.

(The clairvoyant ``oracle`` scaler that was here is gone: queuepilot with the stall reclaim left less
controllable idle than it on the same run, so it was no bound; ``simulator.metrics.lower_bound_idle_s``
is the offline lower bound, docs/simulation.md "Accounting".)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

HPA_TOLERANCE = 0.1
HPA_DOWNSCALE_WINDOW_S = 300.0
HPA_UP_PODS, HPA_UP_PERCENT = 4, 100
LEGACY_SCALE_UP_FACTOR, LEGACY_SCALE_UP_MIN = 2.0, 4.0
KEDA_COOLDOWN_S = 300.0
RAY_IDLE_TIMEOUT_S = 60.0
RAY_UPSCALING_SPEED = 1000.0
RAY_UPSCALING_INITIAL = 5


@dataclass(frozen=True, slots=True)
class WorkerView:
    name: str
    ready: bool
    ray_busy: bool  # a task or actor holds it (Ray's notion)
    busy: bool  # doing work now (the oracle's knowledge)
    util: float  # GPU utilization 0-1 now
    idle_since: float | None  # when it last had nothing on it (None while ray_busy)


@dataclass(frozen=True, slots=True)
class GroupView:
    now: float
    replicas: int
    min_replicas: int
    max_replicas: int
    workers: tuple[WorkerView, ...]
    pending_tasks: int
    startup_s: float = 90.0


@dataclass(frozen=True, slots=True)
class ScaleAction:
    replicas: int
    delete: tuple[str, ...] = ()
    reason: str = ""


class Scaler(Protocol):
    name: str

    def decide(self, view: GroupView) -> ScaleAction: ...


def clamp(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, n))


# ------------------------------------------------------------------------------------------- HPA
def hpa_recommendation(current: int, ready_utils: Sequence[float], unready: int, target: float,
                       tolerance: float = HPA_TOLERANCE) -> int:
    """``replica_calculator.go`` for a pod utilization metric (the HPA controller's replica calculator)."""
    if not ready_utils:
        return current
    n = len(ready_utils)
    ratio = (sum(ready_utils) / n) / target
    if abs(1.0 - ratio) <= tolerance:
        return current
    if unready == 0:
        return math.ceil(ratio * n)
    if ratio > 1.0:  # scale-up: recompute with unready pods at 0 %
        ratio2 = sum(ready_utils) / (target * (n + unready))
    else:  # scale-down: unready pods count as 100 % of target
        ratio2 = (sum(ready_utils) + target * unready) / (target * (n + unready))
    if abs(1.0 - ratio2) <= tolerance or (ratio > 1.0) != (ratio2 > 1.0):
        return current
    return math.ceil(ratio2 * (n + unready))


def hpa_behavior(current: int, recommendation: int, history: Sequence[tuple[float, int]], now: float,
                 lo: int, hi: int, down_window: float = HPA_DOWNSCALE_WINDOW_S) -> int:
    """``spec.behavior`` defaults: stabilize (down: max recommendation in the window), rate-limit up, clamp."""
    down_rec = max([r for t, r in history if now - t <= down_window] + [recommendation])
    if recommendation > current:
        up_limit = max(current + HPA_UP_PODS, math.ceil(current * (1 + HPA_UP_PERCENT / 100)))
        desired = min(recommendation, up_limit)
    elif current > down_rec:
        desired = down_rec
    else:
        desired = current
    return clamp(desired, lo, hi)


@dataclass
class HpaScaler:
    target: float = 0.5
    name: str = "hpa"
    history: list[tuple[float, int]] = field(default_factory=list)


    def decide(self, view: GroupView) -> ScaleAction:
        ready = [w.util for w in view.workers if w.ready]
        unready = sum(1 for w in view.workers if not w.ready)
        rec = hpa_recommendation(view.replicas, ready, unready, self.target)
        lo = max(1, view.min_replicas)
        desired = hpa_behavior(view.replicas, rec, self.history, view.now, lo, view.max_replicas)
        self.history.append((view.now, rec))
        self.history = [(t, r) for t, r in self.history if view.now - t <= HPA_DOWNSCALE_WINDOW_S]
        return ScaleAction(desired, reason="hpa")


# ------------------------------------------------------------------------------------------ KEDA
def keda_hpa_recommendation(current: int, metric: float, target: float, tolerance: float = HPA_TOLERANCE) -> int:
    """External metric, ``AverageValue`` target: tolerance on ``metric/(target x current)``, else ``ceil(metric/target)``."""
    if current == 0:
        return math.ceil(metric / target)
    if abs(1.0 - metric / (target * current)) <= tolerance:
        return current
    return math.ceil(metric / target)


def legacy_normalize(current: int, recommendation: int, history: Sequence[tuple[float, int]], now: float,
                     lo: int, hi: int, window: float = HPA_DOWNSCALE_WINDOW_S) -> int:
    """HPA with nil behavior: max recommendation over the window; scale-up capped at max(2 x current, 4)."""
    stabilized = max([r for t, r in history if now - t <= window] + [recommendation])
    limit = max(LEGACY_SCALE_UP_FACTOR * current, LEGACY_SCALE_UP_MIN)
    return clamp(min(stabilized, int(limit)), lo, hi)


@dataclass
class KedaScaler:
    target: float = 1.0  # tasks per worker
    name: str = "keda"
    last_active: float | None = None
    history: list[tuple[float, int]] = field(default_factory=list)


    def decide(self, view: GroupView) -> ScaleAction:
        metric = view.pending_tasks + sum(1 for w in view.workers if w.ray_busy)
        current = view.replicas
        if metric > 0:
            self.last_active = view.now
        if metric <= 0:
            idle_for = math.inf if self.last_active is None else view.now - self.last_active
            if current > 0 and idle_for >= KEDA_COOLDOWN_S:
                self.history.clear()
                return ScaleAction(view.min_replicas, reason="keda-cooldown")
            if current == 0:
                return ScaleAction(0, reason="keda-inactive")
        if current == 0:
            return ScaleAction(max(view.min_replicas, 1), reason="keda-activate")
        rec = keda_hpa_recommendation(current, metric, self.target)
        lo = max(1, view.min_replicas)
        desired = legacy_normalize(current, rec, self.history, view.now, lo, view.max_replicas)
        self.history.append((view.now, rec))
        self.history = [(t, r) for t, r in self.history if view.now - t <= HPA_DOWNSCALE_WINDOW_S]
        return ScaleAction(desired, reason="keda")


# ------------------------------------------------------------------------------------------- Ray
def ray_launch_count(pending: int, free_ready: int, launching: int, running: int, current: int,
                     max_workers: int, upscaling_speed: float = RAY_UPSCALING_SPEED) -> int:
    """Workers to launch for ``pending`` 1-GPU bundles (``resource_demand_scheduler`` + concurrency cap)."""
    need = max(0, pending - free_ready - launching)
    concurrency = max(RAY_UPSCALING_INITIAL, int(upscaling_speed * max(running, 1)))
    return max(0, min(need, concurrency - launching, max_workers - current))


def ray_idle_workers(workers: Sequence[WorkerView], now: float, timeout: float = RAY_IDLE_TIMEOUT_S) -> list[str]:
    """Workers with no task, actor or object for at least ``timeout`` seconds."""
    return [w.name for w in workers
            if w.ready and not w.ray_busy and w.idle_since is not None and now - w.idle_since >= timeout]


@dataclass
class RayIdleScaler:
    idle_timeout: float = RAY_IDLE_TIMEOUT_S
    name: str = "ray-idle"


    def decide(self, view: GroupView) -> ScaleAction:
        ready = [w for w in view.workers if w.ready]
        free_ready = sum(1 for w in ready if not w.ray_busy)
        launching = len(view.workers) - len(ready)
        launch = ray_launch_count(view.pending_tasks, free_ready, launching, len(ready), view.replicas,
                                  view.max_replicas)
        idle = ray_idle_workers(view.workers, view.now, self.idle_timeout) if not launch else []
        idle = idle[: max(0, view.replicas - view.min_replicas)]
        return ScaleAction(view.replicas + launch - len(idle), tuple(idle), reason="ray-autoscaler")


# ---------------------------------------------------------------------------------------- static
@dataclass
class StaticScaler:
    replicas: int
    name: str = "static"


    def decide(self, view: GroupView) -> ScaleAction:
        return ScaleAction(clamp(self.replicas, view.min_replicas, view.max_replicas), reason="static")


BASELINE_SCALERS: dict[str, Callable[..., Scaler]] = {
    "static": StaticScaler,
    "hpa": HpaScaler,
    "keda": KedaScaler,
    "ray-idle": RayIdleScaler,
}
