"""KubeRay + Ray, simulated: a team's long-lived RayCluster with one 1-GPU worker group.

Ray tasks (the trace's 1-GPU jobs) queue in the cluster; a ready worker with nothing on it takes
the oldest.  A task is *busy* for its duration (GPU at its utilization level), then its actor
lingers for an idle tail (GPU at 0 %, yet Ray counts the worker as busy), then the worker is idle.
A worker starts ``startup_s`` after its pod is created (image pull, raylet start).

Deleting a worker (a scale-down) ends what it holds: an idle tail ends early (its work is done);
a busy task is killed and goes back to the head of the queue, to restart from scratch.
"""

from __future__ import annotations

import bisect
import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from simulator.workload import Job


@dataclass(slots=True)
class SimWorker:
    name: str
    created: float
    ready_at: float
    task: Job | None = None
    busy_until: float = 0.0
    tail_until: float = 0.0
    idle_since: float = 0.0
    generation: int = 0  # bumped when the task or its utilization changes (stale events are ignored)
    # the task's end event: the seq of the one on the heap (``end_carrier``) and the seq it is due at
    # (``end_seq``: a step of the task's level moves it on in the order, as pushing it again would)
    end_carrier: int = 0
    end_seq: int = 0
    pod: str = ""  # "<namespace>/<name>", the key of its ledger entry and GPU signal (set by the engine)

    def ready(self, now: float) -> bool:
        return now >= self.ready_at

    def busy(self, now: float) -> bool:
        """Running a task's work (not its idle tail)."""
        return self.task is not None and now < self.busy_until

    def ray_busy(self) -> bool:
        """Ray's view: a task or actor holds the worker's resources (includes the idle tail)."""
        return self.task is not None

    def running_tasks(self, now: float) -> int:
        """Ray's view of what executes on the worker: 1 while its task runs (idle stretches inside the
        task included), 0 in the idle tail (only the actor holds it) and when nothing is on it."""
        return 1 if self.busy(now) else 0

    def util(self, now: float) -> float:
        if self.task is not None and now < self.busy_until:
            return self.task.util_at(now - (self.busy_until - self.task.duration))  # started at busy_until - duration
        return 0.0

    def started(self) -> float:
        """When the current task was bound to this worker (its run's time 0)."""
        return self.busy_until - self.task.duration if self.task is not None else self.busy_until


@dataclass(slots=True)
class SimRayCluster:
    team: str
    cq: str
    flavor: str
    min_replicas: int
    max_replicas: int
    replicas: int  # spec.workerGroupSpecs[0].replicas
    startup_s: float
    workers: dict[str, SimWorker] = field(default_factory=dict)
    queue: deque[tuple[Job, float]] = field(default_factory=deque)  # (task, enqueued at)
    workers_to_delete: list[str] = field(default_factory=list)
    next_id: int = 0
    version: int = 0
    killed_tasks: int = 0
    # each WorkerViews' set of workers touched since it last built its views (it empties its own; a
    # plain list: ``touch`` runs at every worker event, and a watcher lives as long as this world)
    watchers: list[set[str]] = field(default_factory=list, repr=False, compare=False)
    name: str = field(init=False)  # "<team>-ray" (the team does not change: worked out once)

    def __post_init__(self) -> None:
        self.name = f"{self.team}-ray"

    @property
    def namespace(self) -> str:
        return self.team

    group = "gpu-workers"

    def touch(self, worker: str) -> None:
        """``worker`` came, went, or its task, generation, readiness or idle time moved: every watcher
        (``WorkerViews``) is told which worker (a flip of ready/busy with time alone is no touch: the
        watcher keeps those times)."""
        for changed in self.watchers:
            changed.add(worker)

    def new_worker_name(self) -> str:
        self.next_id += 1
        return f"{self.name}-{self.group}-{self.next_id:05d}"

    def free_ready_workers(self, now: float) -> list[SimWorker]:
        return [w for w in self.workers.values() if w.task is None and w.ready(now)]

    def launching(self, now: float) -> int:
        return sum(1 for w in self.workers.values() if not w.ready(now))

    def running_tasks(self, now: float) -> int:
        return sum(1 for w in self.workers.values() if w.task is not None)


V = TypeVar("V")


class WorkerViews(Generic[V]):
    """One RayCluster's workers seen through ``view`` (a worker and the time -> an immutable view), in
    pod-name order, kept by change: ``at(now)`` looks again only at the workers ``SimRayCluster.touch``
    named since the last call and at those whose ready or busy state flipped with time by now (a heap
    of the next ready and busy-until times of each worker looked at); every other worker keeps its
    view, and the tuple is the previous one while none changed.  ``view`` may return the view it
    built before (its own cache); it must depend on nothing that moves without a touch or a flip."""

    __slots__ = ("_changed", "_flips", "_names", "_rc", "_tuple", "_view", "_views")

    def __init__(self, rc: SimRayCluster, view: Callable[[SimWorker, float], V]) -> None:
        self._rc = rc
        self._view = view
        self._changed: set[str] = set(rc.workers)  # the first call looks at every worker
        rc.watchers.append(self._changed)
        self._flips: list[tuple[float, str]] = []
        self._names: list[str] = []  # the workers' pod names, in order
        self._views: dict[str, V] = {}
        self._tuple: tuple[V, ...] = ()

    def at(self, now: float) -> tuple[V, ...]:
        changed, flips = self._changed, self._flips
        while flips and flips[0][0] <= now:
            changed.add(heapq.heappop(flips)[1])
        if not changed:
            return self._tuple
        names, views, workers = self._names, self._views, self._rc.workers
        for name in changed:
            w = workers.get(name)
            if w is None:  # gone
                if views.pop(name, None) is not None:
                    del names[bisect.bisect_left(names, name)]
                continue
            if name not in views:
                bisect.insort(names, name)
            views[name] = self._view(w, now)
            if now < w.ready_at:
                heapq.heappush(flips, (w.ready_at, name))
            if w.task is not None and now < w.busy_until:
                heapq.heappush(flips, (w.busy_until, name))
        changed.clear()
        self._tuple = tuple(map(views.__getitem__, names))
        return self._tuple
