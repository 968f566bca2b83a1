"""Trace-driven discrete-event simulation of a Kueue + KubeRay GPU cluster under a policy.

One ``Engine`` runs one policy over one workload: a heap of timed events (arrivals, task phases,
worker start-ups, RayJob ends, GPU failures and repairs, Kueue scheduling passes, control ticks),
a seeded ``random.Random`` for everything random, and no wall clock.

queuepilot's parts are the controller's own reconcilers (``build_reconcilers``), with a
``SimWriter`` underneath that applies their writes to the simulated Kueue / KubeRay state: ledger,
reservation timeout, history rollback, counters, Events and explanations are the deployed
controller's.  They run as the controller runs them: a full pass (admission, then scaling) at
every control tick (the controller's resync), and an admission pass right after each Kueue pass
that left a workload with its check Pending (the controller's event-driven pass).  The engine
drives them from one asyncio event loop per run.

A *policy* is an admission mode and a worker-group scaler (docs/simulation.md, "Policies"):

==================  ==========================================  =====================================
policy              admission                                   RayCluster worker groups
==================  ==========================================  =====================================
queuepilot          AdmissionCheck -> ``AdmissionReconciler``   ``ScalingReconciler`` (the controller's)
queuepilot-reclaim  AdmissionCheck -> ``AdmissionReconciler``   ``ScalingReconciler``, idle-actor reclaim
kueue-quota         Kueue quota alone, no admission check       ``ScalingReconciler``
static              AdmissionCheck -> ``AdmissionReconciler``   fixed replicas
hpa                 AdmissionCheck -> ``AdmissionReconciler``   HPA on GPU utilization
ray-idle            AdmissionCheck -> ``AdmissionReconciler``   Ray autoscaler, 60 s idle timeout
keda                AdmissionCheck -> ``AdmissionReconciler``   KEDA on queue length
==================  ==========================================  =====================================

Each baseline swaps exactly one part of queuepilot, so a difference in the table is that part's.
A baseline scaler is handed one ``GroupView`` per team (built here), never the engine.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.context import ControllerContext
from autoscaler.controller.counters import ControllerCounters
from autoscaler.controller.recommend import RecommendationReconciler
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.controller.stall import StallReconciler
from autoscaler.core.policy.stall import StallConfig
from autoscaler.core.snapshot import (
    CHECK_PENDING,
    CHECK_READY,
    ClusterSnapshot,
)
from simulator.baselines import (
    GroupView,
    HpaScaler,
    KedaScaler,
    RayIdleScaler,
    ScaleAction,
    Scaler,
    StaticScaler,
    WorkerView,
)
from simulator.cluster import SimCluster
from simulator.kueue import (
    ADMITTED,
    FINISHED,
    INACTIVE,
    PENDING,
    RESERVED,
    RUNNING,
    SimClusterQueue,
    SimKueue,
    SimWorkload,
)
from simulator.metrics import IDLE_CLASSES, IDLE_UTIL, RunMetrics, lower_bound_idle_s
from simulator.ray import SimRayCluster, SimWorker, WorkerViews
from simulator.snapshot import CHECK_NAME, POD_SET, SimSnapshotBuilder
from simulator.timed_event import TimedEvent
from simulator.workload import TASK, Job, team_gpu_shares
from simulator.writer import SimWriter

POLICIES: tuple[str, ...] = ("queuepilot", "queuepilot-reclaim", "static", "hpa", "ray-idle", "keda", "kueue-quota",
                             "reaper")
COHORT = "research"


@dataclass(frozen=True, slots=True)
class SimConfig:
    nodes: int = 112
    gpus_per_node: int = 8
    flavor: str = "a100"
    control_interval_s: float = 30.0
    pass_delay_s: float = 1.0  # Kueue reacts to a change within a second
    worker_startup_s: float = 90.0  # RayCluster worker: pod start + raylet join
    rayjob_startup_s: float = 60.0  # RayJob: ephemeral cluster start before the entrypoint runs
    gpu_failure_rate: float = 0.01  # failures per GPU per day (docs/simulation.md, "Failures")
    repair_mean_s: float = 6 * 3600.0
    seed: int = 0
    timeline_interval_s: float = 300.0
    check_invariants: bool = False
    ray_max_quota_factor: float = 2.0  # a team RayCluster's maxReplicas = its nominal GPU quota x this (--worker-cap-factor)
    stall_reclaim: bool = False  # queuepilot policies: every ClusterQueue opted in to stall deactivation
    # with stall_reclaim: the controller's stall.deactivate_after (None: its default, 2 h); a value
    # under the default 30-min stall window shortens the window with it
    stall_deactivate_after_s: float | None = None
    # queuepilot-reclaim: the controller's scaling.reclaim_budget_per_hour (the most workers reclaimed per
    # RayCluster in any hour; None: its default, 4), as a team that opts in would set it with the
    # queuepilot.io/reclaim-budget annotation (--reclaim-budget; benchmarks/reclaim_budget.py sweeps it)
    reclaim_budget_per_hour: int | None = None
    # queuepilot-reclaim: the controller's scaling.reclaim_replace (idle workers replaced while the team's
    # Ray demand queues; off by default), as the queuepilot.io/reclaim-replace annotation sets it
    reclaim_replace: bool = False
    # policies with the admission check: the controller's admission.capacity_wait (how long a workload
    # whose GPUs are not free waits Pending with its quota before Retry; None: its default, 30 min;
    # --capacity-wait)
    capacity_wait_s: float | None = None
    teams: tuple[str, ...] = ("team-a", "team-b", "team-c", "team-d", "team-e")
    # queuepilot policies: the controller's scaling.cluster_queue_schedules as (ClusterQueue, schedule)
    # pairs, the schedules on the simulated clock (``simulator.schedule_clock``; --schedule)
    cluster_queue_schedules: tuple[tuple[str, str], ...] = ()
    # the scheduler's node choice for pods without a planned placement (simulator/cluster.py): ``spread``,
    # kube-scheduler's default (NodeResourcesFit LeastAllocated), or ``pack`` (MostAllocated)
    placement: str = "spread"
    # Kueue's waitForPodsReady, as a user configures it to cope with admitted workloads whose pods
    # cannot be placed: evicted after ``pods_ready_timeout_s`` (Kueue's default 5 min) and queued again
    # after a backoff of ``requeue_base_s * 2^(n-1)`` up to ``requeue_max_s`` (Kueue's defaults 60 s,
    # 3600 s; requeuingStrategy timestamp Eviction); None: not configured
    pods_ready_timeout_s: float | None = 300.0
    requeue_base_s: float = 60.0
    requeue_max_s: float = 3600.0
    # a running workload deactivated with work left is submitted again by its owner this long after,
    # to run from scratch (``--resubmit-after``)
    resubmit_after_s: float = 1800.0
    # the share of owners who bring a deactivated workload back by reactivating its Workload (spec.active
    # true, as the deactivation Event tells them: Kueue's schedulingStats then count the deactivation), not
    # by creating the job anew (a Workload with no history); ``--reactivate-share``
    reactivate_share: float = 0.5
    # the reaper baseline's rule (what users run today: every GPU of a workload under 5 % for 2 h)
    reaper_idle_s: float = 7200.0
    # what Ray shows of a RayJob in a long idle run (docs/simulation.md, "Ray's view of a stall"): the
    # share of pauses (idle runs that resume) during which nothing runs or waits on its cluster (waiting
    # on something outside Ray), and the share of final stalls during which a task still runs (hung)
    pause_invisible_share: float = 0.2
    hang_share: float = 0.1


# ------------------------------------------------------------------------------------- policies
@dataclass
class PerGroupScaling:
    """A baseline ``Scaler`` per team RayCluster, each handed that team's ``GroupView``."""

    scalers: dict[str, Scaler]

    def decide(self, views: Mapping[str, GroupView]) -> dict[str, ScaleAction]:
        return {team: s.decide(views[team]) for team, s in self.scalers.items()}


@dataclass
class Policy:
    """Which parts run: the admission check (``with_check``; decided by the controller's
    ``AdmissionReconciler``) and either the controller's ``ScalingReconciler`` (``scaling``) or a
    baseline (``baseline``)."""

    name: str
    with_check: bool
    settings: dict[str, Any] = field(default_factory=dict)
    baseline: PerGroupScaling | None = None
    reaper: bool = False  # deactivate every workload whose GPUs all stayed idle ``reaper_idle_s`` (GPU rule)

    @property
    def queuepilot_scaling(self) -> bool:
        return self.baseline is None

    @property
    def reclaims_idle_actors(self) -> bool:
        """The controller's idle-actor reclaim runs (``scaling.reclaim_idle_actors``)."""
        return bool(self.settings.get("scaling", {}).get("reclaim_idle_actors"))


def make_policy(name: str, teams: Sequence[str], static_replicas: Callable[[str], int]) -> Policy:
    """The named policy (``POLICIES``) for ``teams``; ``static_replicas(team)`` sizes ``static``."""
    if name == "queuepilot":
        return Policy(name, True)
    if name == "queuepilot-reclaim":  # the config's scaling.reclaim_idle_actors: true
        return Policy(name, True, {"scaling": {"reclaim_idle_actors": True}})
    if name == "kueue-quota":
        return Policy(name, False)
    if name == "reaper":  # Ray's autoscaler and the GPU rule users run today
        return Policy(name, True, baseline=PerGroupScaling({t: RayIdleScaler() for t in teams}), reaper=True)
    factories: dict[str, Callable[[str], Scaler]] = {
        "static": lambda t: StaticScaler(static_replicas(t)),
        "hpa": lambda t: HpaScaler(),
        "ray-idle": lambda t: RayIdleScaler(),
        "keda": lambda t: KedaScaler(),
    }
    if name not in factories:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})")
    return Policy(name, True, baseline=PerGroupScaling({t: factories[name](t) for t in teams}))


# --------------------------------------------------------------------------------------- engine
class Engine:
    """The simulated cluster under one policy. ``run()`` returns the ``RunMetrics``.

    ``drive_reconcilers=False``: the queuepilot reconcilers are run by somebody else over
    ``writer`` (the demo's ``Controller``); the engine then only simulates Kueue, KubeRay, Ray
    and the GPUs.  ``context`` holds the reconcilers' counters and published values.
    """

    def __init__(self, jobs: Sequence[Job], window_s: float, policy: str, cfg: SimConfig | None = None,
                 progress: Callable[[float], None] | None = None, *, drive_reconcilers: bool = True) -> None:
        self.cfg = cfg or SimConfig()
        if self.cfg.control_interval_s <= 0:
            raise ValueError("control_interval_s must be > 0")
        self.jobs = jobs
        self.window_s = window_s
        self.progress = progress
        self.rng = random.Random(self.cfg.seed * 7919 + 17)
        self.cluster = SimCluster({self.cfg.flavor: self.cfg.nodes}, self.cfg.gpus_per_node, self.cfg.placement)
        total = self.cluster.total_gpus
        shares = team_gpu_shares(jobs, self.cfg.teams)
        self.nominal = _apportion(total, shares)
        self.kueue = SimKueue([
            SimClusterQueue(f"cq-{t}", COHORT, {self.cfg.flavor: float(self.nominal[t])},
                            {self.cfg.flavor: None}, {self.cfg.flavor: 0.0}, "default", t)
            for t in self.cfg.teams
        ])
        self.rays = {
            t: SimRayCluster(t, f"cq-{t}", self.cfg.flavor, 0, max(1, round(self.nominal[t] * self.cfg.ray_max_quota_factor)),
                             0, self.cfg.worker_startup_s)
            for t in self.cfg.teams
        }
        self.metrics = RunMetrics()
        self.heap: list[TimedEvent] = []
        self._seq = 0
        self.now = 0.0
        self.workloads: dict[str, SimWorkload] = {}  # not finished
        self.unplaced: list[SimWorkload] = []
        self.run_start: dict[str, float] = {}  # workload name -> when its pods were bound
        self._reaper_idle: dict[str, float] = {}  # reaper: workload -> since when every GPU is idle
        self._pass_at: float | None = None
        self._pass_queued: set[float] = set()  # times with a "pass" event on the heap
        self._operator_batched = False
        self.last_decisions: deque[str] = deque(maxlen=50)  # baseline scale changes (queuepilot's: published)
        self.policy_name = policy
        self.policy = make_policy(policy, self.cfg.teams, self.static_replicas)
        if self.cfg.stall_reclaim and self.policy.queuepilot_scaling:
            # the controller's opt-in (config ``stall.deactivate_cluster_queues``) for every team's queue
            stall: dict[str, Any] = {"deactivate_cluster_queues": [f"cq-{t}" for t in self.cfg.teams]}
            delay = self.cfg.stall_deactivate_after_s
            if delay is not None:
                stall["deactivate_after"] = delay  # seconds (a "{:g}s" text is refused from 1e6 s on)
                if delay < StallConfig().window_seconds:  # a delay under the window shortens both Ray's and it
                    stall["window"] = stall["ray_quiet"] = delay
            self.policy.settings = {**self.policy.settings, "stall": stall}
        if self.cfg.reclaim_budget_per_hour is not None and self.policy.reclaims_idle_actors:
            scaling = {**self.policy.settings["scaling"], "reclaim_budget_per_hour": self.cfg.reclaim_budget_per_hour}
            self.policy.settings = {**self.policy.settings, "scaling": scaling}
        if self.cfg.reclaim_replace and self.policy.reclaims_idle_actors:
            self.policy.settings = {**self.policy.settings,
                                    "scaling": {**self.policy.settings["scaling"], "reclaim_replace": True}}
        if self.cfg.capacity_wait_s is not None and self.policy.with_check:
            admission = {**self.policy.settings.get("admission", {}), "capacity_wait": self.cfg.capacity_wait_s}
            self.policy.settings = {**self.policy.settings, "admission": admission}
        if self.cfg.cluster_queue_schedules and self.policy.queuepilot_scaling:
            scaling = {**self.policy.settings.get("scaling", {}),
                       "cluster_queue_schedules": dict(self.cfg.cluster_queue_schedules)}
            self.policy.settings = {**self.policy.settings, "scaling": scaling}
        # the stall detector may deactivate (every team's ClusterQueue opted in) only under a queuepilot policy
        self.stall_acts = self.cfg.stall_reclaim and self.policy.queuepilot_scaling
        self.checks_active: dict[str, bool] = {CHECK_NAME: False} if self.policy.with_check else {}
        # the GPU signal the reconcilers see: each bound pod's GPU utilization, kept up to date
        # incrementally from the ledger (``_w_set``, ``_j_set``); the snapshot builder puts it on the GPUs
        self._pod_util: dict[str, float] = {}
        self._group_views: dict[str, WorkerViews[WorkerView]] = {}  # team -> a baseline's worker views, by change
        self.snapshots = SimSnapshotBuilder(self, self.cluster, self.kueue, self.policy.with_check, self._pod_util)
        # the controller's reconcilers, acting on this world through a SimWriter
        registry = CollectorRegistry()
        counters = ControllerCounters(registry)
        self.writer = SimWriter(self, counters)
        self.context = ControllerContext(api_client=None, registry=registry, counters=counters,
                                         settings=dict(self.policy.settings), writer=self.writer)
        self.admission: AdmissionReconciler | None = None
        self.scaling: ScalingReconciler | None = None
        self.stall: StallReconciler | None = None
        self.recommend: RecommendationReconciler | None = None
        self.drive_reconcilers = drive_reconcilers
        # every reconciler build_reconcilers returns runs each control pass, in its order (one
        # decide -> act -> explain path), except the part a policy swaps: no admission check
        # (kueue-quota) or a baseline's scaler in place of the ScalingReconciler
        self.reconcilers: list[Any] = []
        for r in build_reconcilers(self.context):
            if isinstance(r, AdmissionReconciler):
                if not self.policy.with_check:
                    continue
                self.admission = r
            elif isinstance(r, ScalingReconciler):
                if not self.policy.queuepilot_scaling:
                    continue
                self.scaling = r
            elif isinstance(r, StallReconciler):
                self.stall = r
            elif isinstance(r, RecommendationReconciler):
                self.recommend = r
            self.reconcilers.append(r)
        # accounting (docs/simulation.md, "Accounting"): RayJobs' idle class kept per workload and
        # summed incrementally (recomputed at its profile's next change point), busy intervals per team
        # ledger: what each GPU holder (a Ray worker pod, a running RayJob) contributes to a sample now:
        # key -> (valid until, used GPU-equivalents, idle class or None, unavoidable, GPUs); summed
        # incrementally, each entry recomputed at an event that changes it or at its next change point
        self._ledger: dict[str, tuple[float, float, str | None, bool, int]] = {}
        self._ledger_ref: dict[str, tuple[str, ...]] = {}  # key -> ("w", team, worker) | ("j", workload)
        self._ledger_heap: list[tuple[float, int, str]] = []
        self._l_used = 0.0
        self._l_classes: dict[str, int] = dict.fromkeys(IDLE_CLASSES, 0)
        self._l_unavoidable = 0
        self._busy: dict[str, list[list[float]]] = {t: [] for t in self.cfg.teams}  # team -> [start, end]
        self._open_busy: dict[str, list[float]] = {}  # worker name -> its task's busy interval
        if self.policy.baseline is not None:
            for t, sc in self.policy.baseline.scalers.items():
                if isinstance(sc, StaticScaler):
                    self.rays[t].replicas = min(sc.replicas, self.rays[t].max_replicas)

    # -------------------------------------------------------------------------------- helpers
    def push(self, t: float, kind: str, data: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, TimedEvent(t, self._seq, kind, data))

    def request_pass(self, at: float | None = None) -> None:
        t = self.now + self.cfg.pass_delay_s if at is None else at
        if self._pass_at is not None and self._pass_at <= t:
            return
        self._pass_at = t
        if t not in self._pass_queued:  # a second event at the same time would only repeat the pass
            self._pass_queued.add(t)
            self.push(t, "pass")

    def static_replicas(self, team: str) -> int:
        """The mean number of GPUs the team's Ray tasks hold (work + idle tail) over the window."""
        busy = sum(j.duration + j.idle_tail for j in self.jobs if j.kind == TASK and j.team == team)
        return max(1, math.ceil(busy / max(1.0, self.window_s)))

    def group_view(self, team: str, now: float) -> GroupView:
        """What a baseline scaler sees of ``team``'s worker group (each worker's view made again when
        the worker changed: ``WorkerViews``)."""
        rc = self.rays[team]
        views = self._group_views.get(team)
        if views is None:
            views = self._group_views[team] = WorkerViews(rc, self._worker_view)
        workers = views.at(now)
        return GroupView(now, rc.replicas, rc.min_replicas, rc.max_replicas, workers, len(rc.queue), rc.startup_s)

    def _worker_view(self, w: SimWorker, now: float) -> WorkerView:
        """A baseline's view of one worker now."""
        ray_busy = w.task is not None
        return WorkerView(w.name, now >= w.ready_at, ray_busy, ray_busy and now < w.busy_until, w.util(now),
                          None if ray_busy else w.idle_since)

    def snapshot(self, now: float) -> ClusterSnapshot:
        """The cluster as the controller sees it at ``now``, the GPU signal and Ray's status included
        (``SimSnapshotBuilder``)."""
        self._ledger_refresh(now)  # workers whose task's utilization moved are observed anew
        return self.snapshots.build(now)

    # ------------------------------------------------------- the SimWorld the SimWriter acts on
    def find_workload(self, namespace: str, name: str) -> SimWorkload | None:
        w = self.workloads.get(name)
        return w if w is not None and w.namespace == namespace else None

    def find_ray_cluster(self, namespace: str, name: str) -> SimRayCluster | None:
        rc = self.rays.get(namespace)
        return rc if rc is not None and rc.name == name else None

    def check_exists(self, name: str) -> bool:
        return name in self.checks_active

    def kueue_activate_check(self, name: str) -> None:
        """Kueue: a ClusterQueue whose AdmissionCheck is not Active reserves no quota."""
        if not self.checks_active.get(name):
            self.checks_active[name] = True
            self.request_pass()

    def kueue_check_message(self, w: SimWorkload, message: str) -> None:
        w.check_message = message
        self.kueue.moved(w)

    def kueue_check_ready(self, w: SimWorkload, message: str, placement: Mapping[str, Mapping[str, int]]) -> None:
        """Kueue: every check Ready -> Admitted; the pods are created and bound (where planned)."""
        w.check_state = CHECK_READY
        w.check_message = message
        w.check_changed_at = self.now
        self._admit(w, {ps: dict(nodes) for ps, nodes in placement.items()})

    def kueue_check_retry(self, w: SimWorkload, message: str, requeue_after: float) -> None:
        """Kueue: Retry -> evicted, quota released, requeued after ``requeueAfterSeconds``."""
        self.metrics.retries += 1
        self._end_reserved(w)
        w.check_message = message
        self.kueue.requeue(w, self.now, requeue_after)
        self.request_pass(w.backoff_until)

    def kueue_check_rejected(self, w: SimWorkload, message: str) -> None:
        """Kueue: Rejected -> deactivated (``spec.active: false``), quota released.  A running workload
        (stall handling's deactivation) is evicted: its pods go; work it had left is lost, and its owner
        submits it again ``resubmit_after_s`` later (``_deactivate_running``)."""
        if w.state == RUNNING:
            self._deactivate_running(w)
        else:
            self.metrics.rejected += 1
            self._end_reserved(w)
            self._end_unplaced(w)
            if w in self.unplaced:
                self.unplaced.remove(w)
        self.kueue.release(w.cq, w.flavor or self.cfg.flavor, w.gpus)
        w.check_message = message
        w.state = INACTIVE
        self.kueue.moved(w)
        self.workloads.pop(w.name, None)
        self.snapshots.forget(w)
        self.request_pass()

    def kuberay_patch(self, rc: SimRayCluster, *, replicas: int | None, workers_to_delete: tuple[str, ...] | None,
                      min_replicas: int | None, max_replicas: int | None, reason: str) -> None:
        """The RayCluster spec as patched, then KubeRay's operator reconciles the workers at once."""
        before = (rc.min_replicas, rc.max_replicas, rc.replicas, rc.workers_to_delete)
        if min_replicas is not None:
            rc.min_replicas = min_replicas
        if max_replicas is not None:
            rc.max_replicas = max_replicas
        if replicas is not None:
            self.metrics.record_scale(rc.team, self.now, rc.replicas, replicas)
            rc.replicas = replicas
        if workers_to_delete is not None:
            rc.workers_to_delete = list(workers_to_delete)
        if (rc.min_replicas, rc.max_replicas, rc.replicas, rc.workers_to_delete) != before:
            rc.version += 1  # a patch that changes nothing leaves the resourceVersion as it was
        if not self._operator_batched:  # else the control tick's operator resync reconciles it, in team order
            self._reconcile_workers(rc)
            self._assign(rc)

    # ---------------------------------------------------------------------------------- run
    def start(self) -> None:
        """Queue the arrivals, the first failure and the first control tick (``run`` calls it)."""
        for j in self.jobs:
            if j.submit < self.window_s:
                self.push(j.submit, "arrive", j)
        if self.cfg.gpu_failure_rate > 0:
            self._schedule_failure(0.0)
        self.push(0.0, "tick")

    async def _dispatch(self, ev: TimedEvent) -> None:
        self.now = ev.t
        if ev.kind == "tick":
            await self._on_tick()
        elif ev.kind == "pass":
            await self._on_pass()
        elif ev.kind == "busy_end":
            self._on_busy_end(ev.data, ev.seq)
        else:
            getattr(self, "_on_" + ev.kind)(ev.data)

    async def advance(self, until: float) -> None:
        """Process every event up to ``until`` (simulated seconds); the demo steps the world with it."""
        while self.heap and self.heap[0].t <= until:
            await self._dispatch(heapq.heappop(self.heap))
        self.now = max(self.now, until)

    def run(self) -> RunMetrics:
        """The whole window on one event loop (``asyncio.run``): the reconcilers are coroutines."""
        return asyncio.run(self.arun())

    async def arun(self) -> RunMetrics:
        self.start()
        next_progress = 0.0
        while self.heap:
            if self.heap[0].t > self.window_s:
                break
            await self._dispatch(heapq.heappop(self.heap))
            if self.progress is not None and self.now >= next_progress:
                self.progress(self.now)
                next_progress = self.now + 3600.0
        self.now = self.window_s
        self._finish()
        self.metrics.lower_bound_idle_gpu_s = self.lower_bound_idle_s()
        await self.writer.close()
        if self.progress is not None:
            self.progress(self.window_s)
        return self.metrics

    def _finish(self) -> None:
        """Censor what is still waiting at the end: it counts with its wait so far."""
        end = self.window_s
        for rc in self.rays.values():
            for _job, since in rc.queue:
                self.metrics.record_wait("ray_task", end - since)
        for w in self.workloads.values():
            if w.state != RUNNING and w.state != INACTIVE:
                self.metrics.record_wait(wait_class(w.job), end - w.created)
            self._end_reserved(w)
            self._end_unplaced(w)

    # ------------------------------------------------------------------------------- arrivals
    def _on_arrive(self, job: Job) -> None:
        self.metrics.jobs_submitted += 1
        if job.kind == TASK:
            rc = self.rays[job.team]
            rc.queue.append((job, self.now))
            self._assign(rc)
            return
        w = SimWorkload(job, f"cq-{job.team}", created=self.now, queue_ts=self.now)
        self.workloads[w.name] = w
        self.kueue.submit(w)
        self.request_pass()

    # ---------------------------------------------------------------------------- Ray tasks
    def _assign(self, rc: SimRayCluster) -> None:
        if not rc.queue:
            return
        for wk in sorted(rc.free_ready_workers(self.now), key=lambda x: x.name):
            if not rc.queue:
                break
            job, since = rc.queue.popleft()  # (queued since its submission, or since it was killed)
            wk.task = job
            wk.generation += 1
            wk.busy_until = self.now + job.duration
            rc.touch(wk.name)
            wk.tail_until = wk.busy_until + job.idle_tail
            iv = [self.now, self.now + _work_s(job)]
            self._busy[rc.team].append(iv)
            self._open_busy[wk.name] = iv
            self._w_set(rc, wk)
            self.push(wk.busy_until, "busy_end", (rc.team, wk.name, wk.generation))
            wk.end_carrier = wk.end_seq = self._seq
            self.metrics.record_wait("ray_task", self.now - since)

    def _on_busy_end(self, data: tuple[str, str, int], seq: int) -> None:
        team, name, gen = data
        rc = self.rays[team]
        wk = rc.workers.get(name)
        if wk is not None and seq == wk.end_carrier and wk.end_seq != seq:
            # the task's level stepped since its end was pushed (``_ledger_refresh``): its end is due later
            # in this instant's order, where a fresh push at the step would have put it; carry it there
            wk.end_carrier = wk.end_seq
            heapq.heappush(self.heap, TimedEvent(self.now, wk.end_seq, "busy_end", (team, name, wk.generation)))
            return
        if wk is None or wk.generation != gen or wk.task is None:
            return
        self.metrics.jobs_completed += 1
        if wk.tail_until > self.now:
            self.push(wk.tail_until, "tail_end", data)
            self._w_set(rc, wk)
        else:
            self._free_worker(rc, wk)

    def _on_tail_end(self, data: tuple[str, str, int]) -> None:
        team, name, gen = data
        rc = self.rays[team]
        wk = rc.workers.get(name)
        if wk is None or wk.generation != gen:
            return
        self._free_worker(rc, wk)

    def _free_worker(self, rc: SimRayCluster, wk: SimWorker) -> None:
        wk.task = None
        wk.generation += 1
        rc.touch(wk.name)
        wk.idle_since = self.now
        self._w_set(rc, wk)
        self._assign(rc)

    def _on_worker_ready(self, data: tuple[str, str]) -> None:
        team, name = data
        rc = self.rays[team]
        wk = rc.workers.get(name)
        if wk is not None:
            wk.idle_since = self.now
            rc.touch(name)
            self._w_set(rc, wk)
            self._assign(rc)

    # ------------------------------------------------------------------------ KubeRay operator
    def _reconcile_workers(self, rc: SimRayCluster) -> None:
        """KubeRay (``reconcilePods``): delete every pod named in workersToDelete, whatever replicas
        says (a name with no pod is ignored; the list stays for its writer to clear), then arbitrary
        pods down to replicas (autoscaling off); create up to replicas."""
        for name in list(rc.workers_to_delete):
            if name in rc.workers:
                self._delete_worker(rc, name)
        rc.workers_to_delete = [n for n in rc.workers_to_delete if n in rc.workers]
        if len(rc.workers) > rc.replicas:
            names = sorted(rc.workers)
            for name in self.rng.sample(names, len(rc.workers) - rc.replicas):
                self._delete_worker(rc, name)
        while len(rc.workers) < rc.replicas:
            name = rc.new_worker_name()
            pod = f"{rc.namespace}/{name}"
            if not self.kueue.fits(rc.cq, rc.flavor, 1) or not self.cluster.place(rc.flavor, [(pod, 1)]):
                rc.next_id -= 1
                break  # the scale-up waits for quota or a free healthy GPU
            self.kueue.reserve(rc.cq, rc.flavor, 1)
            rc.workers[name] = SimWorker(name, self.now, self.now + rc.startup_s, idle_since=self.now, pod=pod)
            self._w_set(rc, rc.workers[name])
            rc.version += 1
            rc.touch(name)
            self.push(self.now + rc.startup_s, "worker_ready", (rc.team, name))

    def _delete_worker(self, rc: SimRayCluster, name: str) -> None:
        wk = rc.workers.pop(name)
        rc.touch(name)
        iv = self._open_busy.pop(name, None)
        if wk.task is not None and self.now < wk.busy_until:
            rc.queue.appendleft((wk.task, self.now))  # killed mid-work: restarts from scratch
            self.metrics.tasks_killed += 1
            rc.killed_tasks += 1
            # the work done so far is lost (the task restarts): its work time so far x its GPU
            self.metrics.record_killed(work_done(wk.task, self.now - wk.started()))
            if iv is not None and iv[1] > self.now:
                iv[1] = self.now
        elif wk.task is not None:  # in its idle tail: the actor that held it goes (its warm state, no work)
            self.metrics.record_actor_killed(rc.name, self.now)
        self._l_drop(f"{rc.namespace}/{name}")
        self._pod_util.pop(f"{rc.namespace}/{name}", None)
        self.cluster.release(f"{rc.namespace}/{name}")
        self.kueue.release(rc.cq, rc.flavor, 1)
        rc.version += 1
        self.request_pass()

    # ---------------------------------------------------------------------------- Kueue pass
    async def _on_pass(self) -> None:
        self._pass_at = None
        self._pass_queued.discard(self.now)
        now = self.now
        if not self.policy.with_check or all(self.checks_active.values()):
            for w in self.kueue.schedule(now, (self.cfg.flavor,)):
                if self.policy.with_check:
                    w.check_state = CHECK_PENDING
                    w.check_changed_at = now
                else:
                    self._admit(w)
        if self.admission is not None and self.drive_reconcilers and self.kueue.any_reserved():
            await self.admission.reconcile(self.snapshot(now), now)
        if self.unplaced:
            still = []
            for w in self.unplaced:
                if not self._place(w, None):
                    still.append(w)
            self.unplaced = still
        if self.kueue.pending:
            nxt = min((w.backoff_until for w in self.kueue.pending if w.backoff_until > now), default=None)
            if nxt is not None:
                self.request_pass(nxt)

    def _admit(self, w: SimWorkload, placement: dict[str, dict[str, int]] | None = None) -> None:
        self._end_reserved(w)
        w.state = ADMITTED
        w.admitted_at = self.now
        self.kueue.moved(w)
        if not self._place(w, placement):
            w.unplaceable_since = self.now
            self.metrics.unplaceable_admissions += 1
            self.unplaced.append(w)
            if self.cfg.pods_ready_timeout_s is not None:  # Kueue's waitForPodsReady
                self.push(self.now + self.cfg.pods_ready_timeout_s, "pods_ready_timeout", (w, self.now))

    def _end_reserved(self, w: SimWorkload) -> None:
        """``w``'s time with quota reserved and not admitted ends now (counted with its GPUs)."""
        if w.state == RESERVED and w.reserved_at is not None:
            self.metrics.record_waiting(self.now - w.reserved_at, w.gpus)

    def _end_unplaced(self, w: SimWorkload) -> None:
        """``w``'s time admitted without its pods bound ends now (counted with the GPUs it held)."""
        if w.unplaceable_since is not None:
            self.metrics.record_unplaced(self.now - w.unplaceable_since, w.gpus)
            w.unplaceable_since = None

    def _on_pods_ready_timeout(self, data: tuple[SimWorkload, float]) -> None:
        """Kueue's waitForPodsReady: a workload admitted at ``since`` whose pods are still not running is
        evicted (quota released) and queued again after its backoff (``base * 2^(n-1)``, capped), its
        queue-order timestamp the eviction (requeuingStrategy timestamp Eviction)."""
        w, since = data
        if w.state != ADMITTED or w.admitted_at != since or w.unplaceable_since is None:
            return
        self._end_unplaced(w)
        self.unplaced.remove(w)
        self.metrics.pods_ready_evictions += 1
        w.pods_ready_requeues += 1
        w.admission_lost_at = self.now
        backoff = min(self.cfg.requeue_max_s, self.cfg.requeue_base_s * 2 ** (w.pods_ready_requeues - 1))
        self.kueue.requeue(w, self.now, backoff)
        self.request_pass(w.backoff_until)

    def _deactivate_running(self, w: SimWorkload) -> None:
        """A running workload is deactivated (stall handling, the reaper): its pods go.  Work it had
        done that its result needs is lost, and its owner submits it again ``resubmit_after_s`` later to
        run from scratch; one deactivated in its final stall had finished its work (it completed)."""
        start = self.run_start.get(w.name)
        t = max(0.0, self.rayjob_running_s(start)) if start is not None else 0.0
        self.metrics.deactivated += 1
        total = work_total(w.job)
        if work_done(w.job, t) >= total:
            self.metrics.jobs_completed += 1
        else:
            self.metrics.resubmitted += 1
            self.push(self.now + self.cfg.resubmit_after_s, "resubmit", (w.job, w.attempt + 1, w.deactivations))
        self._stop_rayjob(w, killed=True)

    def _on_resubmit(self, data: tuple[Job, int, int]) -> None:
        job, attempt, before = data
        # reactivated (the Workload keeps its history) or created anew, per job, apart from the run's stream
        reactivated = self._job_draw(job, 3) < self.cfg.reactivate_share
        w = SimWorkload(job, f"cq-{job.team}", created=self.now, queue_ts=self.now, attempt=attempt,
                        deactivations=before + 1 if reactivated else 0)
        self.workloads[w.name] = w
        self.kueue.submit(w)
        self.request_pass()

    def _place(self, w: SimWorkload, placement: dict[str, dict[str, int]] | None) -> bool:
        job = w.job
        flavor = w.flavor or self.cfg.flavor
        pods = [(f"{w.namespace}/{w.name}-{i}", job.gpus_per_pod) for i in range(job.pods)]
        ok = False
        if placement and POD_SET in placement:
            ok = self.cluster.place_on(pods, placement[POD_SET])
        if not ok:
            ok = self.cluster.place(flavor, pods)
        if not ok:
            return False
        w.state = RUNNING
        self.kueue.moved(w)
        self.run_start[w.name] = self.now
        self._end_unplaced(w)  # (the pass that placed it drops it from ``unplaced``)
        self.metrics.record_wait(wait_class(job), self.now - w.created)
        self.push(self.now + self.cfg.rayjob_startup_s + job.duration, "rayjob_end", w)
        self._j_set(w)
        return True

    def _on_rayjob_end(self, w: SimWorkload) -> None:
        if w.state != RUNNING:  # deactivated (stall reclaim) before its end
            return
        self._stop_rayjob(w, killed=False)
        self.kueue.release(w.cq, w.flavor or self.cfg.flavor, w.gpus)
        w.state = FINISHED
        self.kueue.moved(w)
        self.metrics.jobs_completed += 1
        self.workloads.pop(w.name, None)
        self.snapshots.forget(w)
        self.request_pass()

    def rayjob_running_s(self, start: float) -> float:
        """Seconds a RayJob that started at ``start`` has run its entrypoint (negative while its
        ephemeral cluster starts)."""
        return self.now - start - self.cfg.rayjob_startup_s

    def rayjob_util(self, w: SimWorkload, start: float) -> float:
        """The GPU utilization of a running RayJob's pods now (0 while its cluster starts)."""
        t = self.rayjob_running_s(start)
        return w.job.util_at(t) if t >= 0 else 0.0

    def _stop_rayjob(self, w: SimWorkload, *, killed: bool) -> None:
        """A running RayJob's pods go (it ended, or was evicted: then the work it had done is lost, as
        for a Ray task killed mid-work; evicted in its stall, its work was done: nothing is lost)."""
        start = self.run_start.pop(w.name, None)
        if killed and start is not None:
            done = work_done(w.job, max(0.0, self.rayjob_running_s(start)))
            if done < work_total(w.job):  # (a job killed in its final stall had finished its work)
                self.metrics.record_killed(done * w.gpus)
        for i in range(w.job.pods):
            pod = f"{w.namespace}/{w.name}-{i}"
            self.cluster.release(pod)
            self._pod_util.pop(pod, None)
        self._l_drop(w.name)

    # ------------------------------------------------------------------------------ failures
    def _schedule_failure(self, now: float) -> None:
        rate = self.cfg.gpu_failure_rate * self.cluster.total_gpus / 86400.0
        self.push(now + self.rng.expovariate(rate), "gpu_fail")

    def _on_gpu_fail(self, _: Any) -> None:
        node = self.rng.choice(self.cluster.nodes)
        idx = self.rng.randrange(node.gpus)
        if self.cluster.fail(node, idx):
            self.metrics.gpu_failures += 1
            self.push(self.now + self.rng.expovariate(1.0 / self.cfg.repair_mean_s), "gpu_repair", (node.name, idx))
        self._schedule_failure(self.now)

    def _on_gpu_repair(self, data: tuple[str, int]) -> None:
        name, idx = data
        self.cluster.repair(self.cluster.by_name[name], idx)
        self.request_pass()

    # --------------------------------------------------------------------------------- tick
    async def _on_tick(self) -> None:
        now = self.now
        dt = self.cfg.control_interval_s
        self._account(dt)
        if now % self.cfg.timeline_interval_s < dt:
            self._sample_timeline()
        # the spec writes of this tick are applied at once; the KubeRay operator then reconciles every
        # RayCluster in team order (so which team's new worker gets a free GPU first does not depend on
        # who wrote), which also retries the workers that quota or GPUs held back before
        self._operator_batched = True
        try:
            if self.drive_reconcilers and self.reconcilers:
                # the controller's resync pass: one snapshot (with the GPU signal), every reconciler in turn
                snap = self.snapshot(now)
                for r in self.reconcilers:
                    await r.reconcile(snap, now)
            if self.policy.baseline is not None:
                views = {t: self.group_view(t, now) for t in self.policy.baseline.scalers}
                for team, action in self.policy.baseline.decide(views).items():
                    self._apply_baseline(self.rays[team], action)
            if self.policy.reaper:
                self._reap(now)
        finally:
            self._operator_batched = False
        for rc in self.rays.values():
            self._reconcile_workers(rc)
            self._assign(rc)
        if self.unplaced or self.kueue.any_reserved():
            self.request_pass()
        if self.cfg.check_invariants:
            self.check_invariants()
        self.push(now + dt, "tick")

    def _reap(self, now: float) -> None:
        """The reaper baseline, the rule users run today (a Prometheus rule on ``DCGM_FI_DEV_GPU_UTIL``
        and a script, or a GPU-idle culler): every running workload whose GPUs all stayed under 5 % for
        ``reaper_idle_s`` is deactivated, whatever it is doing."""
        for name, start in list(self.run_start.items()):
            w = self.workloads.get(name)
            if w is None or w.state != RUNNING:
                continue
            if self.rayjob_util(w, start) >= IDLE_UTIL:
                self._reaper_idle.pop(name, None)
                continue
            since = self._reaper_idle.setdefault(name, now)
            if now - since >= self.cfg.reaper_idle_s:
                del self._reaper_idle[name]
                self.kueue_check_rejected(w, f"reaper: every GPU under {IDLE_UTIL:.0%} for "
                                             f"{self.cfg.reaper_idle_s / 3600:g}h")

    def rayjob_ray_work(self, w: SimWorkload, start: float) -> tuple[int, int] | None:
        """What Ray shows of a running RayJob now: (tasks running, tasks waiting) on its cluster, or None
        while the cluster starts (no Ray signal yet).  Working (its short idle segments included) it runs
        a task; starting up its first tasks wait; in a pause it runs one (a checkpoint, an evaluation on
        the CPU) unless the pause is one Ray does not see (``pause_invisible_share`` of them: waiting on
        something outside Ray); in a final stall nothing runs unless it hangs in a task
        (``hang_share``: a hung collective)."""
        t = self.rayjob_running_s(start)
        if t < 0:
            return None
        job = w.job
        stall = job.stall_start
        if stall is None or t < stall or t >= job.duration:
            return (0, 1) if job.phase_at(t) == "starting" else (1, 0)
        resume = job.stall_end
        if resume is not None:
            if t >= resume:
                return (1, 0)
            return (0, 0) if self._job_draw(job, 1) < self.cfg.pause_invisible_share else (1, 0)
        return (1, 0) if self._job_draw(job, 2) < self.cfg.hang_share else (0, 0)

    def _job_draw(self, job: Job, salt: int) -> float:
        """A uniform in [0, 1) fixed per (seed, job, salt), drawn apart from the run's random stream."""
        return random.Random(self.cfg.seed * 1_000_003 + job.id * 8 + salt).random()

    def _apply_baseline(self, rc: SimRayCluster, action: ScaleAction) -> None:
        """A baseline's action is a spec write too: replicas (within min/max) and workersToDelete."""
        new = max(rc.min_replicas, min(rc.max_replicas, int(action.replicas)))
        if new != rc.replicas:
            d = "up" if new > rc.replicas else "down"
            self.last_decisions.append(f"{rc.namespace}/{rc.name}: {d} {rc.replicas}->{new} {action.reason}")
        self.kuberay_patch(rc, replicas=new, workers_to_delete=tuple(action.delete) if action.delete else None,
                           min_replicas=None, max_replicas=None, reason=action.reason)

    def usage_now(self) -> tuple[int, float, int]:
        """(allocated GPUs, used GPU-equivalents, allocated GPUs under the idle threshold) now."""
        allocated, used, classes, _ = self.usage_classes()
        return allocated, used, sum(classes.values())

    def usage_classes(self) -> tuple[int, float, dict[str, int], int]:
        """(allocated GPUs, used GPU-equivalents, idle GPUs by class, idle GPUs no scaler can avoid) now.

        From the ledger: each Ray worker and running RayJob is looked at when an event changes it or
        its utilization may change (its profile's next change point), and the sums are kept
        incrementally: O(changes), not O(GPUs), per sample."""
        self._ledger_refresh(self.now)
        return self.cluster.allocated_gpus(), self._l_used, dict(self._l_classes), self._l_unavoidable

    def _l_put(self, key: str, e: tuple[float, float, str | None, bool, int], ref: tuple[str, ...]) -> None:
        """``key``'s entry is now ``e`` (``ref``: what it is the entry of, kept from its first entry)."""
        ledger = self._ledger
        old = ledger.get(key)
        if old is None:
            self._ledger_ref[key] = ref
        else:  # as ``_l_drop`` takes it out
            self._l_used -= old[1]
            if old[2] is not None:
                self._l_classes[old[2]] -= old[4]
            if old[3]:
                self._l_unavoidable -= old[4]
            if len(ledger) == 1:
                self._l_used = 0.0  # (the ledger empty but for this entry: no float drift carried)
        ledger[key] = e
        self._l_used += e[1]
        if e[2] is not None:
            self._l_classes[e[2]] += e[4]
        if e[3]:
            self._l_unavoidable += e[4]
        if e[0] != math.inf:
            self._seq += 1
            heapq.heappush(self._ledger_heap, (e[0], self._seq, key))

    def _l_drop(self, key: str) -> None:
        e = self._ledger.pop(key, None)
        if e is None:
            return
        self._ledger_ref.pop(key, None)
        self._l_used -= e[1]
        if e[2] is not None:
            self._l_classes[e[2]] -= e[4]
        if e[3]:
            self._l_unavoidable -= e[4]
        if not self._ledger:
            self._l_used = 0.0  # no float drift carried over an empty cluster

    def _ledger_refresh(self, now: float) -> None:
        heap = self._ledger_heap
        while heap and heap[0][0] <= now:
            until, _, key = heapq.heappop(heap)
            e = self._ledger.get(key)
            if e is None or e[0] != until:
                continue  # stale: the entry changed since
            ref = self._ledger_ref[key]
            if ref[0] == "j":
                w = self.workloads.get(ref[1])
                if w is not None and w.name in self.run_start:
                    self._j_set(w)
                continue
            rc = self.rays[ref[1]]
            wk = rc.workers.get(ref[2])
            if wk is None:
                continue
            if self._w_set(rc, wk) != e[1] and wk.task is not None and now < wk.busy_until:
                # the task's utilization moved (a phase or segment change): the worker is observed anew
                # (a new generation: the views made of it are made again)
                wk.generation += 1
                rc.touch(wk.name)
                # its end event is due after every event pushed until now (as pushing it again would make
                # it; the one on the heap carries it there when it comes: ``_on_busy_end``)
                self._seq += 1
                wk.end_seq = self._seq

    def _w_set(self, rc: SimRayCluster, wk: SimWorker) -> float:
        """A Ray worker's ledger entry now: not ready -> starting; nothing on it -> empty; its actor's
        idle tail -> idle_actor; busy under the threshold -> its task's phase (starting, stalled, in_job).
        Its utilization now."""
        now = self.now
        key = wk.pod or f"{rc.namespace}/{wk.name}"
        u = 0.0
        if now < wk.ready_at:
            e: tuple[float, float, str | None, bool, int] = (wk.ready_at, 0.0, "starting", False, 1)
        elif wk.task is None:
            e = (math.inf, 0.0, "empty", False, 1)
        elif now >= wk.busy_until:
            e = (math.inf, 0.0, "idle_actor", False, 1)  # the tail_end event frees it
        else:
            start = wk.busy_until - wk.task.duration
            t = now - start
            phase, u, nxt = wk.task.at(t)
            until = min(wk.busy_until, _after(now, start + nxt))
            cls: str | None = None
            if u < IDLE_UTIL:
                cls = "stalled" if phase == "stalled" else "starting" if phase == "starting" else "in_job"
            e = (until, u, cls, cls == "starting", 1)  # a task's own start-up: no scaler avoids it
        self._l_put(key, e, ("w", rc.team, wk.name))
        if self._pod_util.get(key) != u:  # the GPU signal
            self._pod_util[key] = u
            self._mark_dirty(key)
        return u

    def _j_set(self, w: SimWorkload) -> None:
        """A running RayJob's ledger entry now: its cluster starting (t < 0) -> starting, unavoidable;
        under the threshold -> its phase (starting: unavoidable; stalled; in_job)."""
        start = self.run_start[w.name]
        t = self.rayjob_running_s(start)
        gpus = w.gpus
        u = 0.0
        if t < 0:
            e: tuple[float, float, str | None, bool, int] = (start + self.cfg.rayjob_startup_s, 0.0, "starting",
                                                             True, gpus)
        else:
            job = w.job
            phase, u, nxt = job.at(t)
            until = _after(self.now, start + self.cfg.rayjob_startup_s + nxt)
            cls: str | None = None
            if u < IDLE_UTIL:
                cls = "stalled" if phase == "stalled" else "starting" if phase == "starting" else "in_job"
            e = (until, u * gpus, cls, cls == "starting", gpus)
        self._l_put(w.name, e, ("j", w.name))
        for i in range(w.job.pods):  # the GPU signal
            pod = f"{w.namespace}/{w.name}-{i}"
            if self._pod_util.get(pod) != u:
                self._pod_util[pod] = u
                self._mark_dirty(pod)

    def _mark_dirty(self, pod: str) -> None:
        for node, _ in self.cluster.pod_gpus.get(pod, ()):
            self.snapshots.utilization_changed(node.name)

    def _account(self, dt: float) -> None:
        allocated, used, classes, unavoidable = self.usage_classes()
        self.metrics.account(dt, allocated, used, sum(classes.values()), classes, unavoidable)

    def lower_bound_idle_s(self) -> float:
        """``metrics.lower_bound_idle_s`` over this run's busy intervals, plus the idle no scaler avoids."""
        end = min(self.now, self.window_s)
        lb = 0.0
        for ivs in self._busy.values():
            lb += lower_bound_idle_s([(a, min(b, end)) for a, b in ivs if a < end], self.cfg.worker_startup_s)
        return lb + self.metrics.unavoidable_gpu_s

    def queue_length(self) -> int:
        return sum(len(rc.queue) for rc in self.rays.values()) + sum(
            1 for w in self.workloads.values() if w.state in (PENDING, RESERVED, ADMITTED))

    def _sample_timeline(self) -> None:
        allocated, used, _ = self.usage_now()
        pending_gpus = sum(len(rc.queue) for rc in self.rays.values()) + sum(
            w.gpus for w in self.workloads.values() if w.state in (PENDING, RESERVED, ADMITTED))
        self.metrics.timeline.append((self.now, self.queue_length(), allocated, round(used, 2), pending_gpus))

    # --------------------------------------------------------------------------- invariants
    def check_invariants(self) -> None:
        """GPUs conserved; nothing runs unadmitted; quota within nominal + borrowing."""
        self.cluster.check()
        self.kueue.check()
        pods_expected = 0
        for w in self.workloads.values():
            if w.state == RUNNING:
                assert w.check_state == CHECK_READY or not self.policy.with_check, f"{w.name} runs unadmitted"
                assert w.flavor is not None, f"{w.name} runs without quota"
                pods_expected += w.job.pods
            else:
                for i in range(w.job.pods):
                    assert f"{w.namespace}/{w.name}-{i}" not in self.cluster.pod_gpus, f"{w.name} has pods bound unadmitted"
        workers = sum(len(rc.workers) for rc in self.rays.values())
        assert len(self.cluster.pod_gpus) == pods_expected + workers, "bound pods != running pods + workers"
        alloc = self.cluster.allocated_gpus()
        expect = sum(w.gpus for w in self.workloads.values() if w.state == RUNNING) + workers
        assert alloc == expect, f"allocated {alloc} != {expect}"
        free = sum(self.cluster.free_gpus(f) for f in self.cluster.flavors)
        unhealthy_free = sum(1 for n in self.cluster.nodes for h, o in zip(n.healthy, n.owner, strict=True)
                             if not h and o is None)
        assert alloc + free + unhealthy_free == self.cluster.total_gpus, "GPUs not conserved"
        for t, rc in self.rays.items():
            q = self.kueue.cqs[rc.cq]
            reserved = sum(w.gpus for w in self.workloads.values() if w.cq == rc.cq and w.state in (RESERVED, ADMITTED, RUNNING))
            assert abs(q.usage.get(rc.flavor, 0.0) - reserved - len(rc.workers)) < 1e-6, f"{t}: quota usage drifted"


def _apportion(total: int, shares: dict[str, float]) -> dict[str, int]:
    """Largest-remainder split of ``total`` GPUs of nominal quota by share (sums to ``total``)."""
    raw = {t: total * s for t, s in shares.items()}
    out = {t: int(v) for t, v in raw.items()}
    for t in sorted(raw, key=lambda t: (-(raw[t] - out[t]), t))[: total - sum(out.values())]:
        out[t] += 1
    return out


# ---------------------------------------------------------------------------------- front door
def run_policies(jobs: Sequence[Job], window_s: float, policies: Sequence[str], cfg: SimConfig,
                 progress_factory: Callable[[str], Callable[[float], None] | None] | None = None,
                 ) -> dict[str, Engine]:
    """Run each policy over the same jobs; returns the finished engines (``engine.metrics``)."""
    out: dict[str, Engine] = {}
    for name in policies:
        prog = progress_factory(name) if progress_factory else None
        eng = Engine(jobs, window_s, name, cfg, prog)
        eng.run()
        out[name] = eng
    return out


def work_done(job: Job, t: float) -> float:
    """Seconds of work ``job`` has done ``t`` seconds into its run: not its stall (a final stall from
    ``stall_start`` on, or a pause ``[stall_start, stall_end)`` it resumes from), nor past its end."""
    t = min(t, job.duration)
    stall = job.stall_start
    if stall is None or t <= stall:
        return max(0.0, t)
    resume = job.stall_end
    return stall + (max(0.0, t - resume) if resume is not None else 0.0)


def work_total(job: Job) -> float:
    """Seconds of a job's run that are work (its whole duration less its stall or pause)."""
    return work_done(job, job.duration)


def _work_s(job: Job) -> float:
    """Seconds from a job's start until its work ends: its stall (a final stall) or its end."""
    stall = job.stall_start
    if stall is None or stall >= job.duration or job.stall_end is not None:
        return job.duration
    return max(0.0, stall)


def wait_class(job: Job) -> str:
    """The wait class of a job (``simulator.metrics.WAIT_CLASSES``): a Ray task, a workload of one pod,
    or a gang of several."""
    if job.kind == TASK:
        return "ray_task"
    return "single_pod" if job.pods == 1 else "gang"


def _after(now: float, t: float) -> float:
    """``t``, or the next float after ``now`` when rounding (``start + (now - start)``) put it at or
    before ``now``: a ledger entry is always valid for some time, so a refresh never loops."""
    return t if t > now else math.nextafter(now, math.inf)
