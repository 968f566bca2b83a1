"""Multi-cluster (MultiKueue) simulation: one manager, N worker clusters, three dispatchers.

One trace's jobs arrive at the **manager**; its Kueue (``SimKueue``: a ClusterQueue per team in one
cohort, quotas summing to the whole fleet's GPUs) reserves quota; then the **dispatcher** decides
which worker clusters get a remote copy (``status.nominatedClusterNames``):

- ``all-at-once`` (Kueue's default built-in): every worker at once;
- ``incremental`` (Kueue's built-in): up to 3 more workers, in name order, every 5 minutes
  (``IncrementalDispatcherReconciler``: a new round when more than 5 minutes passed since the last;
  nominations accumulate);
- ``capacity`` (queuepilot): the controller's real ``DispatchReconciler``
  (``autoscaler/controller/dispatch.py``) over a :class:`SimFleet` (what it calls on its
  ``FleetSource``: ``fleet.synced``, ``targets``, ``views``, ``settled``) built from the simulated
  workers, writing through :class:`FleetWriter` (the ``Writer`` protocol's ``nominate_clusters`` and
  ``post_event`` on the simulated manager).

MultiKueue then creates a copy in every nominated worker that has none and deletes copies in workers
no longer nominated.  Each worker is an ordinary Kueue (its own ``SimKueue``, quotas summing to its
GPUs): it **admits by quota, not placeability**.  The first worker that reserves quota for a copy wins
(Kueue sets ``status.clusterName``, clears the nominations, deletes the other copies); when several
reserve in the same instant the built-ins are given the benefit of the doubt: a worker whose pods can
start now wins (then a seeded draw).  The winner's pods are placed on its healthy free GPUs
(``SimCluster.place``: best fit, a gang all or nothing) or stay pending — an **unplaceable dispatch**:
the workload holds manager and worker quota while no pod runs, until GPUs free up in *that* worker.

Per dispatcher the run reports (``FleetMetrics.summary``): queue wait (submission -> pods bound) per
job class, unplaceable dispatches and the GPU-hours of quota they held, remote copies created and
deleted (API churn), jobs completed, GPU utilisation of allocated GPUs, the fleet's allocated share,
and, while jobs wait for quota in the manager, the GPU-hours no pod holds (healthy and failed).
Deterministic by seed: two ``random.Random`` streams per run (GPU failures, so every dispatcher
sees the same failures; ties), no wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.writer import EventTarget, EventType
from autoscaler.controller.context import ControllerContext
from autoscaler.controller.counters import ControllerCounters
from autoscaler.controller.dispatch import DispatchReconciler
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.dispatch import DispatchConfig, DispatchDecision, DispatchTarget, WorkerView
from autoscaler.core.policy.scaling import GroupDecision
from autoscaler.core.policy.stall import StalledWorkload
from autoscaler.core.snapshot import (
    GPU_RESOURCE,
    ClusterSnapshot,
    FlavorState,
    GpuState,
    NodeState,
    PodKey,
    PodSetSpec,
    SignalStatus,
    WorkloadState,
    frozen_map,
)
from simulator.cluster import SimCluster, SimNode
from simulator.kueue import (
    ADMITTED,
    FINISHED,
    INACTIVE,
    PENDING,
    RUNNING,
    SimClusterQueue,
    SimKueue,
    SimWorkload,
)
from simulator.timed_event import TimedEvent
from simulator.workload import TEAMS, Job, team_gpu_shares

ALL_AT_ONCE = "all-at-once"
INCREMENTAL = "incremental"
CAPACITY = "capacity"
DISPATCHERS: tuple[str, ...] = (ALL_AT_ONCE, INCREMENTAL, CAPACITY)

FLAVOR = "a100"
FLAVOR_LABEL = "queuepilot.io/sim-flavor"
COHORT = "research"
POD_SET = "workers"
INCREMENTAL_ROUND_S = 300.0  # Kueue's incrementalDispatcherRoundTimeout
INCREMENTAL_BATCH = 3  # workers added per round

# job classes (docs/multicluster.md, "Simulation")
ONE_GPU = "1-gpu"  # one pod, one GPU
MULTI_GPU = "multi-gpu"  # one pod, 2-8 GPUs (needs that many free GPUs on one node)
MULTI_POD = "multi-pod"  # more than 8 GPUs: a gang of 8-GPU pods, all placed or none
CLASSES: tuple[str, ...] = (ONE_GPU, MULTI_GPU, MULTI_POD)


def job_class(job: Job) -> str:
    if job.pods > 1:
        return MULTI_POD
    return ONE_GPU if job.gpus == 1 else MULTI_GPU


def split_nodes(nodes: int, clusters: int) -> list[int]:
    """``nodes`` spread evenly over ``clusters`` workers (the first ones get the remainder)."""
    if clusters < 1 or nodes < clusters:
        raise ValueError(f"cannot split {nodes} nodes over {clusters} clusters (need at least one node each)")
    base, extra = divmod(nodes, clusters)
    return [base + (1 if i < extra else 0) for i in range(clusters)]


def apportion(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """Largest-remainder split of ``total`` GPUs of nominal quota by share (sums to ``total``)."""
    raw = {t: total * s for t, s in shares.items()}
    out = {t: int(v) for t, v in raw.items()}
    for t in sorted(raw, key=lambda t: (-(raw[t] - out[t]), t))[: total - sum(out.values())]:
        out[t] += 1
    return out


@dataclass(frozen=True, slots=True)
class FleetConfig:
    nodes: int = 112  # 8-GPU nodes in the whole fleet, split evenly over the workers
    clusters: int = 3
    gpus_per_node: int = 8
    gpu_failure_rate: float = 0.0  # failures per GPU per day (XID 79), as the single-cluster simulator
    repair_mean_s: float = 6 * 3600.0
    seed: int = 0
    pass_delay_s: float = 1.0  # Kueue / MultiKueue react within a second of a change
    resync_s: float = 30.0  # a pass at least this often (the controller's resync)
    teams: tuple[str, ...] = TEAMS
    dispatch: DispatchConfig = field(default_factory=DispatchConfig)

    def __post_init__(self) -> None:
        if self.clusters < 2:
            raise ValueError(f"a fleet needs at least 2 worker clusters, got {self.clusters}")
        split_nodes(self.nodes, self.clusters)
        if self.gpu_failure_rate < 0 or not math.isfinite(self.gpu_failure_rate):
            raise ValueError(f"gpu failure rate must be a finite number >= 0, got {self.gpu_failure_rate}")

    @property
    def cluster_names(self) -> tuple[str, ...]:
        return tuple(f"worker-{i + 1}" for i in range(self.clusters))


# ------------------------------------------------------------------------------------- state
@dataclass(slots=True)
class Dispatch:
    """A manager Workload's MultiKueue state."""

    w: SimWorkload  # the manager's Workload (quota in the manager's ClusterQueue)
    nominated: tuple[str, ...] = ()  # status.nominatedClusterNames
    cluster: str | None = None  # status.clusterName (the worker that won)
    copies: dict[str, SimWorkload] = field(default_factory=dict)  # worker -> its remote copy
    round_at: float | None = None  # incremental: when the current round started
    started_at: float | None = None
    unplaceable_since: float | None = None
    version: int = 0
    state_cache: tuple[int, WorkloadState] | None = None

    @property
    def key(self) -> str:
        return f"{self.w.namespace}/{self.w.name}"

    def pods(self) -> list[tuple[str, int]]:
        j = self.w.job
        return [(f"{j.team}/{self.w.name}-{i}", j.gpus_per_pod) for i in range(j.pods)]


class FleetWorker:
    """One worker cluster: its nodes (``SimCluster``), its Kueue (``SimKueue``) and the admitted
    workloads whose pods wait for GPUs there."""

    def __init__(self, name: str, nodes: int, gpus_per_node: int, nominal: Mapping[str, int]) -> None:
        self.name = name
        self.cluster = SimCluster({FLAVOR: nodes}, gpus_per_node)
        self.kueue = SimKueue([SimClusterQueue(f"cq-{t}", COHORT, {FLAVOR: float(g)}, namespace=t)
                               for t, g in nominal.items()])
        self.waiting: list[Dispatch] = []  # admitted here, pods not bound yet (oldest first)
        self._nodes: dict[str, tuple[int, NodeState]] = {}
        self._node_map: tuple[int, Mapping[str, NodeState]] | None = None
        self._flavors = frozen_map({FLAVOR: FlavorState(FLAVOR, frozen_map({FLAVOR_LABEL: FLAVOR}),
                                                        tuple(n.name for n in self.cluster.nodes))})
        self.placed_version = -1  # cluster.version when the waiting pods were last tried

    def node_state(self, n: SimNode) -> NodeState:
        cached = self._nodes.get(n.name)
        if cached is not None and cached[0] == n.version:
            return cached[1]
        gpus = tuple(GpuState(uuid=f"GPU-{self.name}-{n.name}-{i}", node=n.name, index=i, healthy=n.healthy[i],
                              health_reason="" if n.healthy[i] else "XidFatal",
                              pod=PodKey(*o.split("/", 1)) if o else None)
                     for i, o in enumerate(n.owner))
        state = NodeState(name=n.name, labels=frozen_map({FLAVOR_LABEL: n.flavor}), gpu_allocatable=n.gpus,
                          gpu_requested=n.allocated, gpus=gpus)
        self._nodes[n.name] = (n.version, state)
        return state

    def node_map(self) -> Mapping[str, NodeState]:
        if self._node_map is None or self._node_map[0] != self.cluster.version:
            self._node_map = (self.cluster.version,
                              frozen_map({n.name: self.node_state(n) for n in self.cluster.nodes}))
        return self._node_map[1]

    def view(self, workloads: Mapping[str, WorkloadState], now: float) -> WorkerView:
        """What ``FleetSource.views`` gives the dispatcher: this worker's nodes (GPU health included,
        always fresh), the manager's flavor resolved on them, the dispatched manager Workloads."""
        snap = ClusterSnapshot(taken_at=now, nodes=self.node_map(), flavors=self._flavors,
                               workloads=frozen_map(workloads),
                               signals=frozen_map({"gpu": SignalStatus("gpu", now, 120.0)}))
        return WorkerView(self.name, active=True, reachable=True, observed_at=now, snapshot=snap)


class SimFleet:
    """What ``DispatchReconciler`` calls on its ``FleetSource``, answered from the simulated fleet."""

    def __init__(self, sim: FleetSim) -> None:
        self.sim = sim
        self.fleet = self  # the reconciler reads ``fleet.fleet.synced``
        self.synced = True

    def settled(self, now: float) -> bool:
        return True

    def targets(self, manager: ClusterSnapshot) -> list[DispatchTarget]:
        out = []
        for key, wl in manager.workloads.items():
            d = self.sim.by_key[key]
            out.append(DispatchTarget(wl, self.sim.cfg.cluster_names, d.nominated, d.cluster))
        return out

    def views(self, manager: ClusterSnapshot, now: float,
              workloads: Mapping[str, WorkloadState] | None = None) -> dict[str, WorkerView]:
        wls = manager.workloads if workloads is None else workloads
        return {w.name: w.view(wls, now) for w in self.sim.workers}


class FleetWriter:
    """The ``Writer`` on the simulated manager: ``nominate_clusters`` sets ``nominatedClusterNames``
    with ``workload_nominate.guard``'s checks (same uid, quota held, not placed); events are counted."""

    dry_run = False

    def __init__(self, sim: FleetSim) -> None:
        self.sim = sim
        self.event_counts: Counter[tuple[str, str]] = Counter()
        self.writes = 0

    async def nominate_clusters(self, decision: DispatchDecision, now: float) -> WriteOutcome:
        d = self.sim.by_key.get(decision.workload)
        if d is None or d.w.uid != decision.uid:
            return WriteOutcome("skipped", "recreated")
        if not d.w.holds_quota:
            return WriteOutcome("skipped", "no_quota")
        if d.cluster is not None:
            return WriteOutcome("skipped", "placed")
        if decision.nominate is None or tuple(decision.nominate) == d.nominated:
            return WriteOutcome("unchanged", "")
        d.nominated = tuple(decision.nominate)
        d.version += 1
        self.writes += 1
        return WriteOutcome("written", "")

    def post_event(self, ref: EventTarget, type_: EventType, reason: str, message: str, now: float) -> None:
        self.event_counts[(type_, reason)] += 1

    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def patch_group(self, decision: GroupDecision, group_index: int, now: float) -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def deactivate_workload(self, stalled: StalledWorkload, now: float) -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def annotate_raycluster(self, namespace: str, name: str, key: str, value: str, now: float, *,
                                  resource_version: str = "") -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def load_stall_owners(self, now: float) -> tuple[dict[str, float], int] | None:
        return {}, 0

    async def save_stall_owners(self, owners: Mapping[str, float], forget_before: float, now: float) -> WriteOutcome:
        return WriteOutcome("skipped", "not_in_fleet_sim")

    async def close(self) -> None:
        return None


# ----------------------------------------------------------------------------------- metrics
@dataclass
class FleetMetrics:
    waits: dict[str, list[float]] = field(default_factory=lambda: {c: [] for c in CLASSES})
    jobs_submitted: int = 0
    jobs_started: int = 0
    jobs_completed: int = 0
    unplaceable_dispatches: int = 0
    unplaceable_gpu_s: float = 0.0  # GPUs x seconds of quota held by admitted workloads whose pods wait
    remote_created: int = 0
    remote_deleted: int = 0  # copies deleted without running (lost the race, or nomination withdrawn)
    created_by_worker: Counter[str] = field(default_factory=Counter)
    allocated_gpu_s: float = 0.0
    used_gpu_s: float = 0.0
    capacity_gpu_s: float = 0.0  # fleet GPUs x window
    # while some job waits for quota in the manager (its queue is not empty): how long, and the GPUs x
    # seconds no pod held then, healthy (free) and failed (a failed GPU's pod ended, it awaits repair)
    quota_wait_s: float = 0.0
    free_gpu_s_quota_wait: float = 0.0
    failed_gpu_s_quota_wait: float = 0.0
    gpu_failures: int = 0
    passes: int = 0
    decisions: dict[str, int] = field(default_factory=dict)  # capacity: reason -> count

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        every = [w for c in CLASSES for w in self.waits[c]]
        for cls, ws in (("all", every), *((c, self.waits[c]) for c in CLASSES)):
            a = np.asarray(ws, dtype=float)
            out[f"jobs_{cls}"] = len(ws)
            for q in (50, 95, 99):
                out[f"wait_{cls}_p{q}_s"] = round(float(np.percentile(a, q)), 1) if len(a) else None
            out[f"wait_{cls}_mean_s"] = round(float(a.mean()), 1) if len(a) else None
        out.update({
            "jobs_submitted": self.jobs_submitted, "jobs_started": self.jobs_started,
            "jobs_completed": self.jobs_completed,
            "unplaceable_dispatches": self.unplaceable_dispatches,
            "unplaceable_gpu_hours": round(self.unplaceable_gpu_s / 3600.0, 2),
            "remote_created": self.remote_created, "remote_deleted": self.remote_deleted,
            "remote_per_started_job": round(self.remote_created / self.jobs_started, 3) if self.jobs_started else None,
            "gpu_util_allocated": round(self.used_gpu_s / self.allocated_gpu_s, 4) if self.allocated_gpu_s else None,
            "gpu_allocated_share": round(self.allocated_gpu_s / self.capacity_gpu_s, 4) if self.capacity_gpu_s else None,
            "quota_wait_hours": round(self.quota_wait_s / 3600.0, 2),
            "free_gpu_hours_quota_wait": round(self.free_gpu_s_quota_wait / 3600.0, 2),
            "failed_gpu_hours_quota_wait": round(self.failed_gpu_s_quota_wait / 3600.0, 2),
            "gpu_failures": self.gpu_failures, "passes": self.passes,
            "dispatch_decisions": dict(sorted(self.decisions.items())),
        })
        return out


# ------------------------------------------------------------------------------------ engine
class FleetSim:
    """One dispatcher over one trace window on an N-worker fleet: ``FleetSim(...).run()``."""

    def __init__(self, jobs: Sequence[Job], window_s: float, dispatcher: str, cfg: FleetConfig | None = None,
                 progress: Callable[[float], None] | None = None) -> None:
        if dispatcher not in DISPATCHERS:
            raise ValueError(f"unknown dispatcher {dispatcher!r} (known: {', '.join(DISPATCHERS)})")
        self.cfg = cfg or FleetConfig()
        self.dispatcher = dispatcher
        self.window_s = window_s
        self.progress = progress
        # failures have their own stream, so every dispatcher sees the same GPUs fail at the same times
        self.fail_rng = random.Random(f"queuepilot-fleet-failures/{self.cfg.seed}")
        self.rng = random.Random(f"queuepilot-fleet-ties/{self.cfg.seed}")
        fleet_gpus_max = max(split_nodes(self.cfg.nodes, self.cfg.clusters)) * self.cfg.gpus_per_node
        self.jobs = [j for j in jobs if j.submit < window_s]
        self.dropped_too_large = sum(1 for j in self.jobs if j.pods * j.gpus_per_pod > fleet_gpus_max)
        self.jobs = [j for j in self.jobs if j.pods * j.gpus_per_pod <= fleet_gpus_max]
        shares = team_gpu_shares(self.jobs, self.cfg.teams)
        sizes = split_nodes(self.cfg.nodes, self.cfg.clusters)
        self.workers = [FleetWorker(name, n, self.cfg.gpus_per_node,
                                    apportion(n * self.cfg.gpus_per_node, shares))
                        for name, n in zip(self.cfg.cluster_names, sizes, strict=True)]
        self.by_name = {w.name: w for w in self.workers}
        self.all_nodes = [(w, n) for w in self.workers for n in w.cluster.nodes]
        total = sum(w.cluster.total_gpus for w in self.workers)
        self.manager = SimKueue([SimClusterQueue(f"cq-{t}", COHORT, {FLAVOR: float(g)}, namespace=t)
                                 for t, g in apportion(total, shares).items()])
        self.total_gpus = total
        self.metrics = FleetMetrics()
        self.metrics.capacity_gpu_s = total * window_s
        self.by_key: dict[str, Dispatch] = {}
        self.dispatching: dict[str, Dispatch] = {}  # quota reserved in the manager, no worker won yet
        self.running: dict[str, Dispatch] = {}
        self.heap: list[TimedEvent] = []
        self._seq = 0
        self.now = 0.0
        self._pass_at: float | None = None
        # (since, jobs wait for manager quota, free healthy GPUs, failed GPUs no pod holds) after the last pass
        self._unheld: tuple[float, bool, int, int] = (0.0, False, 0, 0)
        self.writer = FleetWriter(self)
        self.reconciler: DispatchReconciler | None = None
        if dispatcher == CAPACITY:
            registry = CollectorRegistry()
            counters = ControllerCounters(registry)
            ctx = ControllerContext(api_client=None, registry=registry, counters=counters, writer=self.writer)
            self.sim_fleet = SimFleet(self)
            self.reconciler = DispatchReconciler(ctx, self.sim_fleet, self.writer, self.cfg.dispatch)  # type: ignore[arg-type]

    # ------------------------------------------------------------------------------- events
    def push(self, t: float, kind: str, data: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self.heap, TimedEvent(t, self._seq, kind, data))

    def request_pass(self, at: float | None = None) -> None:
        """A pass within ``pass_delay_s`` (coalesced), or one at ``at`` (a timer: never coalesced)."""
        if at is not None:
            self.push(at, "pass")
            return
        t = self.now + self.cfg.pass_delay_s
        if self._pass_at is not None and self.now <= self._pass_at <= t:
            return
        self._pass_at = t
        self.push(t, "pass")

    def run(self) -> FleetMetrics:
        return asyncio.run(self.arun())

    async def arun(self) -> FleetMetrics:
        for j in self.jobs:
            self.push(j.submit, "arrive", j)
        self.push(0.0, "tick")
        if self.cfg.gpu_failure_rate > 0:
            self._schedule_failure()
        while self.heap and self.heap[0].t <= self.window_s:
            ev = heapq.heappop(self.heap)
            self.now = ev.t
            if ev.kind == "arrive":
                self._on_arrive(ev.data)
            elif ev.kind == "end":
                self._on_end(ev.data)
            elif ev.kind == "pass":
                if self._pass_at == ev.t:
                    self._pass_at = None
                await self._pass()
            elif ev.kind == "tick":
                await self._pass()
                self.push(self.now + self.cfg.resync_s, "tick")
                if self.progress is not None:
                    self.progress(self.now)
            elif ev.kind == "fail":
                self._on_fail()
            elif ev.kind == "repair":
                self._on_repair(ev.data)
        self.now = self.window_s
        self._finish()
        if self.progress is not None:
            self.progress(self.window_s)
        return self.metrics

    def _on_arrive(self, job: Job) -> None:
        w = SimWorkload(job, f"cq-{job.team}", job.submit, job.submit)
        d = Dispatch(w)
        self.by_key[d.key] = d
        self.manager.submit(w)
        self.metrics.jobs_submitted += 1
        self.request_pass()

    def _schedule_failure(self) -> None:
        rate = self.cfg.gpu_failure_rate * self.total_gpus / 86400.0
        self.push(self.now + self.fail_rng.expovariate(rate), "fail")

    def _on_fail(self) -> None:
        worker, node = self.fail_rng.choice(self.all_nodes)
        idx = self.fail_rng.randrange(node.gpus)
        if worker.cluster.fail(node, idx):
            self.metrics.gpu_failures += 1
            self.push(self.now + self.fail_rng.expovariate(1.0 / self.cfg.repair_mean_s), "repair", (worker, node, idx))
            self.request_pass()
        self._schedule_failure()

    def _on_repair(self, data: tuple[FleetWorker, SimNode, int]) -> None:
        worker, node, idx = data
        worker.cluster.repair(node, idx)
        self.request_pass()

    # ------------------------------------------------------------------------------- a pass
    async def _pass(self) -> None:
        """Manager Kueue, the dispatcher, MultiKueue's copy sync, the workers' Kueue, winners, pods."""
        now = self.now
        self.metrics.passes += 1
        for w in self.manager.schedule(now, (FLAVOR,)):
            d = self.by_key[f"{w.namespace}/{w.name}"]
            d.version += 1
            self.dispatching[d.key] = d
        if self.dispatching:
            await self._dispatch(now)
            self._sync_copies(now)
        won: dict[str, list[FleetWorker]] = {}
        for worker in self.workers:
            for copy in worker.kueue.schedule(now, (FLAVOR,)):
                won.setdefault(f"{copy.namespace}/{copy.name}", []).append(worker)
        for key in sorted(won, key=lambda k: (self.by_key[k].w.reserved_at or 0.0, self.by_key[k].w.job.id)):
            self._admit(self.by_key[key], won[key], now)
        for worker in self.workers:
            if worker.waiting and worker.placed_version != worker.cluster.version:
                self._place_waiting(worker, now)
        self._observe_unheld(now)

    def _account_unheld(self, until: float) -> None:
        since, queued, free, failed = self._unheld
        if queued and until > since:
            dt = until - since
            self.metrics.quota_wait_s += dt
            self.metrics.free_gpu_s_quota_wait += free * dt
            self.metrics.failed_gpu_s_quota_wait += failed * dt

    def _observe_unheld(self, now: float) -> None:
        """GPUs no pod holds while jobs wait for manager quota, as this pass leaves the fleet (every
        change is followed by a pass within ``pass_delay_s``)."""
        self._account_unheld(now)
        queued = any(w.state == PENDING for w in self.manager.pending)
        free = failed = 0
        if queued:
            free = sum(w.cluster.free_gpus(FLAVOR) for w in self.workers)
            failed = self.total_gpus - sum(w.cluster.allocated_gpus() for w in self.workers) - free
        self._unheld = (now, queued, free, failed)

    async def _dispatch(self, now: float) -> None:
        names = self.cfg.cluster_names
        if self.dispatcher == ALL_AT_ONCE:
            for d in self.dispatching.values():
                if d.nominated != names:
                    d.nominated = names
                    d.version += 1
        elif self.dispatcher == INCREMENTAL:
            for d in self.dispatching.values():
                if d.round_at is not None and now - d.round_at <= INCREMENTAL_ROUND_S:
                    continue
                rest = sorted(c for c in names if c not in d.nominated)[:INCREMENTAL_BATCH]
                if not rest:
                    continue  # ErrNoMoreWorkers: the nominations stand
                d.nominated = d.nominated + tuple(rest)
                d.version += 1
                d.round_at = now
                if len(d.nominated) < len(names):  # another round may come: wake up when it is due
                    self.request_pass(now + INCREMENTAL_ROUND_S + self.cfg.pass_delay_s)
        else:
            assert self.reconciler is not None
            await self.reconciler.reconcile(self._manager_snapshot(now), now)

    def _manager_snapshot(self, now: float) -> ClusterSnapshot:
        """The manager's Workloads the dispatcher works on: quota reserved, pods not running yet."""
        wls: dict[str, WorkloadState] = {}
        for d in (*self.dispatching.values(), *(d for w in self.workers for d in w.waiting)):
            wls[d.key] = self._workload_state(d)
        return ClusterSnapshot(taken_at=now, workloads=frozen_map(wls))

    def _workload_state(self, d: Dispatch) -> WorkloadState:
        version = d.version * 1_000_003 + d.w.version
        if d.state_cache is not None and d.state_cache[0] == version:
            return d.state_cache[1]
        w, j = d.w, d.w.job
        reserved = w.holds_quota
        state = WorkloadState(
            namespace=w.namespace, name=w.name, uid=w.uid, resource_version=str(version), local_queue="default",
            cluster_queue=w.cq, created_at=w.created,
            pod_sets=(PodSetSpec(POD_SET, j.pods, frozen_map({GPU_RESOURCE: j.gpus_per_pod})),),
            quota_reserved=reserved, quota_reserved_at=w.reserved_at if reserved else None,
            admitted=w.state in (ADMITTED, RUNNING), flavors=frozen_map({POD_SET: frozen_map({GPU_RESOURCE: FLAVOR})}),
            admitted_counts=frozen_map({POD_SET: j.pods}), owner_kind="Job", owner_name=f"job-{j.id}",
        )
        d.state_cache = (version, state)
        return state

    def _sync_copies(self, now: float) -> None:
        """MultiKueue: a copy in every nominated worker, none in the others."""
        for d in self.dispatching.values():
            for name in d.nominated:
                if name not in d.copies:
                    j = d.w.job
                    copy = SimWorkload(j, d.w.cq, now, now)
                    d.copies[name] = copy
                    self.by_name[name].kueue.submit(copy)
                    self.metrics.remote_created += 1
                    self.metrics.created_by_worker[name] += 1
            for name in [n for n in d.copies if n not in d.nominated]:
                self._delete_copy(d, name)

    def _delete_copy(self, d: Dispatch, name: str) -> None:
        copy = d.copies.pop(name)
        kueue = self.by_name[name].kueue
        if copy.holds_quota and copy.flavor is not None:
            kueue.release(copy.cq, copy.flavor, copy.gpus)
        copy.state = INACTIVE  # deleted: Kueue's next pass drops it from the queue
        copy.version += 1
        self.metrics.remote_deleted += 1

    def _admit(self, d: Dispatch, reserved_in: list[FleetWorker], now: float) -> None:
        """Copies of ``d`` reserved quota in ``reserved_in`` in this instant: the first wins (ties: a
        worker whose pods can start, then a seeded draw); the other copies are deleted."""
        pods = d.pods()
        if len(reserved_in) > 1:
            fits = [w for w in reserved_in if w.cluster.fits(FLAVOR, [g for _, g in pods])]
            pool = fits or reserved_in
            winner = pool[0] if len(pool) == 1 else self.rng.choice(pool)
        else:
            winner = reserved_in[0]
        d.cluster = winner.name
        d.nominated = ()
        d.version += 1
        self.dispatching.pop(d.key, None)
        for name in [n for n in d.copies if n != winner.name]:
            self._delete_copy(d, name)
        copy = d.copies[winner.name]
        copy.state = ADMITTED
        copy.admitted_at = now
        d.w.state = ADMITTED
        d.w.admitted_at = now
        d.w.version += 1
        if winner.cluster.place(FLAVOR, pods):
            self._start(d, now)
        else:
            self.metrics.unplaceable_dispatches += 1
            d.unplaceable_since = now
            winner.waiting.append(d)

    def _place_waiting(self, worker: FleetWorker, now: float) -> None:
        """The worker's scheduler retries pending pods (oldest admission first) after a change."""
        still: list[Dispatch] = []
        for d in worker.waiting:
            if worker.cluster.place(FLAVOR, d.pods()):
                assert d.unplaceable_since is not None
                self.metrics.unplaceable_gpu_s += d.w.gpus * (now - d.unplaceable_since)
                d.unplaceable_since = None
                self._start(d, now)
            else:
                still.append(d)
        worker.waiting = still
        worker.placed_version = worker.cluster.version

    def _start(self, d: Dispatch, now: float) -> None:
        d.started_at = now
        d.w.state = RUNNING
        d.w.version += 1
        d.copies[d.cluster or ""].state = RUNNING
        self.running[d.key] = d
        self.metrics.jobs_started += 1
        self.metrics.waits[job_class(d.w.job)].append(now - d.w.job.submit)
        self.push(now + d.w.job.allocation, "end", d)

    def _on_end(self, d: Dispatch) -> None:
        now = self.now
        worker = self.by_name[d.cluster or ""]
        for pod_id, _ in d.pods():
            worker.cluster.release(pod_id)
        copy = d.copies.pop(worker.name)
        worker.kueue.release(copy.cq, FLAVOR, copy.gpus)
        copy.state = FINISHED
        self.manager.release(d.w.cq, FLAVOR, d.w.gpus)
        d.w.state = FINISHED
        d.w.version += 1
        self.running.pop(d.key, None)
        self.by_key.pop(d.key, None)
        self._account_run(d, now)
        self.metrics.jobs_completed += 1
        self.request_pass()

    def _account_run(self, d: Dispatch, until: float) -> None:
        assert d.started_at is not None
        j = d.w.job
        ran = max(0.0, until - d.started_at)
        self.metrics.allocated_gpu_s += d.w.gpus * ran
        self.metrics.used_gpu_s += j.gpus * j.util * min(ran, j.duration)

    def _finish(self) -> None:
        """At the window's end: jobs not started count with their wait so far (censored); running jobs'
        GPU time and pending pods' held quota count up to the end."""
        now = self.window_s
        self._account_unheld(now)
        for d in self.by_key.values():
            if d.started_at is None:
                self.metrics.waits[job_class(d.w.job)].append(now - d.w.job.submit)
            if d.unplaceable_since is not None:
                self.metrics.unplaceable_gpu_s += d.w.gpus * (now - d.unplaceable_since)
        for d in self.running.values():
            self._account_run(d, now)
        if self.reconciler is not None:
            self.metrics.decisions = {reason: n for (reason, _mode), n in self.reconciler.published.decisions.items()}

    def check(self) -> None:
        """Invariants (tests): every worker's GPUs owned at most once, quota within limits, one winner per
        workload, and a workload's quota in its worker only while it holds a copy there."""
        for w in self.workers:
            w.cluster.check()
            w.kueue.check()
        self.manager.check()
        for d in self.by_key.values():
            if d.cluster is not None:
                assert set(d.copies) == {d.cluster}, f"{d.key}: copies {sorted(d.copies)} after {d.cluster} won"
                assert not d.nominated


def run_dispatchers(jobs: Sequence[Job], window_s: float, dispatchers: Sequence[str], cfg: FleetConfig,
                    progress: Callable[[str], Callable[[float], None] | None] | None = None) -> dict[str, FleetSim]:
    """Each dispatcher over the same jobs and the same seed (one after the other)."""
    out = {}
    for name in dispatchers:
        sim = FleetSim(jobs, window_s, name, cfg, progress(name) if progress else None)
        sim.run()
        out[name] = sim
    return out


__all__ = [
    "ALL_AT_ONCE", "CAPACITY", "CLASSES", "DISPATCHERS", "INCREMENTAL", "Dispatch", "FleetConfig", "FleetMetrics",
    "FleetSim", "FleetWorker", "FleetWriter", "SimFleet", "job_class", "run_dispatchers", "split_nodes",
]
