"""The ``queuepilot`` policy in the simulator: the controller's own pure decision functions.

``QueuepilotAdmission`` is the AdmissionCheck controller's decide step (``ledger.release`` then
``decide_admissions``) and ``QueuepilotScaling`` the worker-group scaler's (``decide_scaling`` per
RayCluster), both fed ``ClusterSnapshot``s built from the simulated state.  No logic is copied:
what the simulator does with a decision is what Kueue and KubeRay would do with the write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from autoscaler.core.policy.admission import AdmissionDecision, decide_admissions
from autoscaler.core.policy.config import AdmissionConfig, ScalingDefaults
from autoscaler.core.policy.ledger import Ledger, release
from autoscaler.core.policy.scaling import GroupDecision, GroupHistory, decide_scaling
from autoscaler.core.snapshot import ClusterSnapshot
from simulator.baselines import ScaleAction

if TYPE_CHECKING:
    from simulator.engine import Engine


@dataclass
class QueuepilotAdmission:
    config: AdmissionConfig = field(default_factory=AdmissionConfig)
    ledger: Ledger = field(default_factory=Ledger)
    history: Mapping[str, int] = field(default_factory=dict)
    with_check: bool = True
    last: list[AdmissionDecision] = field(default_factory=list)
    last_snapshot: ClusterSnapshot | None = None
    sink: Callable[[list[AdmissionDecision], ClusterSnapshot, float], None] | None = None  # the demo's counters

    def decide(self, engine: Engine, now: float) -> list:
        snap = engine.snapshot(now)
        self.last_snapshot = snap
        ledger = release(self.ledger, snap, now, self.config.reservation_timeout_seconds)
        result = decide_admissions(snap, ledger, self.history, self.config, now)
        self.ledger, self.history = result.ledger, result.history
        self.last = list(result.decisions)
        if self.sink is not None:
            self.sink(self.last, snap, now)
        out = []
        for d in result.decisions:
            w = engine.workloads.get(d.name)
            if w is None or w.namespace != d.namespace:
                continue
            placement = {ps: dict(nodes) for ps, nodes in d.placement.items()}
            out.append((w, d.state, d.reason, d.message, d.requeue_after_seconds, placement))
        return out


def reclaiming_defaults() -> ScalingDefaults:
    """The scaler's defaults with ``scaling.reclaim_idle_actors: true`` (policy ``queuepilot-reclaim``)."""
    return replace(ScalingDefaults(), reclaim_idle_actors=True)


@dataclass
class QueuepilotScaling:
    defaults: ScalingDefaults = field(default_factory=ScalingDefaults)
    history: dict[str, Mapping[str, GroupHistory]] = field(default_factory=dict)  # "ns/name" -> group -> history
    last: list[GroupDecision] = field(default_factory=list)
    last_snapshot: ClusterSnapshot | None = None
    sink: Callable[[list[GroupDecision], ClusterSnapshot, float], None] | None = None

    def decide(self, engine: Engine, now: float) -> dict[str, ScaleAction]:
        snap = engine.snapshot(now)
        self.last_snapshot = snap
        actions: dict[str, ScaleAction] = {}
        self.last = []
        for team, rc in engine.rays.items():
            state = snap.ray_clusters.get(f"{rc.namespace}/{rc.name}")
            if state is None:
                continue
            result = decide_scaling(snap, state, self.defaults, self.history.get(state.key, {}), now)
            self.history[state.key] = result.history
            for d in result.decisions:
                self.last.append(d)
                if d.group != rc.group:
                    continue
                replicas = d.desired if d.write == "replicas" else rc.replicas
                actions[team] = ScaleAction(replicas, tuple(d.workers_to_delete), d.reason)
        if self.sink is not None:
            self.sink(self.last, snap, now)
        return actions
