"""``SimWriter``: the controller's ``Writer`` over the simulated Kueue / KubeRay state.

The simulator and the demo run the controller's own reconcilers (``build_reconcilers``) with this
writer underneath, so what they decide, count and explain is what the controller deployed on a
cluster decides, counts and explains.  Each call does what the API server and the operators would
do with the corresponding Kubernetes write, and answers the same ``WriteOutcome``:

- ``set_check_state``: the same guards as ``KubeWriter`` after its fresh read (the workload is gone
  or recreated, holds no quota, is inactive or finished, or our check entry is no longer
  ``Pending`` -> ``skipped`` with the same detail; same state and message -> ``unchanged``); then
  Kueue's reaction: ``Ready`` admits the workload (its pods are bound on the nodes the decision
  planned, else wherever the scheduler finds room), ``Retry`` evicts it, releases its quota and
  requeues it after ``requeueAfterSeconds``, ``Rejected`` deactivates it;
- ``patch_group``: the patch is pinned to the snapshot's resourceVersion, so a RayCluster that
  changed since answers ``conflict`` (counted in ``write_errors_total{kind="conflict"}``); a group
  name that is not at the index answers ``error``/``invalid`` (the patch's ``test`` op); else
  ``replicas`` + ``workersToDelete`` (or ``minReplicas`` / ``maxReplicas``) are set and KubeRay's
  operator reconciles the workers at once;
- ``annotate_raycluster``: the annotation is set on the simulated RayCluster (kept in
  ``annotations``, by namespace and name, since the simulated object has no metadata of its own) and
  its resourceVersion moves on, as the API server's does for any write; the same value again
  answers ``unchanged``; a RayCluster that is not there answers ``skipped``/``gone``;
- ``activate_check``: the AdmissionCheck becomes ``Active`` (Kueue reserves no quota for a queue
  whose check is inactive);
- ``save_stall_owners`` / ``load_stall_owners``: the stall reconciler's owner memory is kept as the
  ConfigMap keeps it (within its bounds, ``stall_owners``), so a reconciler built anew reads it back;
- ``post_event``: recorded (``events``, newest last, bounded) and counted (``event_counts``).

``dry_run`` (shadow mode) behaves as the Kubernetes writer's: the check's ``Active`` condition,
``Ready`` states and Events are applied; other check states, RayCluster patches and annotations answer
``dry_run`` and change nothing.

Writes are counted in ``queuepilot_writes_total`` with the Kubernetes writer's resource and verb
labels.  The world the writer acts on is any object with the ``SimWorld`` methods (the engine).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.stall_owners import decode_owners, encode_owners
from autoscaler.act.writer import EventTarget, EventType
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.dispatch import DispatchDecision
from autoscaler.core.policy.scaling import GroupDecision
from autoscaler.core.policy.stall import StalledWorkload, merge_owners
from autoscaler.core.snapshot import CHECK_PENDING, CHECK_READY, CHECK_REJECTED, CHECK_RETRY

WORKLOAD_STATUS = "workloads/status"
RAYCLUSTERS = "rayclusters"
ADMISSIONCHECK_STATUS = "admissionchecks/status"
EVENTS = "events"
WORKLOADS = "workloads"
STALL_OWNERS = "configmaps"  # the owner memory (autoscaler.act.stall_owners)
MAX_EVENTS = 10_000
MAX_MESSAGE = 1024  # as the Kubernetes writer cuts an Event's message


class SimWorkloadRef(Protocol):
    """What the writer reads of a simulated Workload (``simulator.kueue.SimWorkload``)."""

    uid: str
    check_state: str
    check_message: str

    @property
    def holds_quota(self) -> bool: ...

    @property
    def inactive(self) -> bool: ...


class SimWorld(Protocol):
    """The simulated Kueue / KubeRay the writer acts on (``simulator.engine.Engine``)."""

    def find_workload(self, namespace: str, name: str) -> Any: ...

    def find_ray_cluster(self, namespace: str, name: str) -> Any: ...

    def check_exists(self, name: str) -> bool: ...

    def kueue_activate_check(self, name: str) -> None: ...

    def kueue_check_message(self, w: Any, message: str) -> None: ...

    def kueue_check_ready(self, w: Any, message: str, placement: Mapping[str, Mapping[str, int]]) -> None: ...

    def kueue_check_retry(self, w: Any, message: str, requeue_after: float) -> None: ...

    def kueue_check_rejected(self, w: Any, message: str) -> None: ...

    def kuberay_patch(self, rc: Any, *, replicas: int | None, workers_to_delete: tuple[str, ...] | None,
                      min_replicas: int | None, max_replicas: int | None, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class SimEvent:
    """One Event the reconcilers posted (what ``KubeWriter`` sends as a core v1 Event)."""

    kind: str
    namespace: str
    name: str
    type: str
    reason: str
    message: str
    at: float


class SimWriter:
    """The ``Writer`` over a ``SimWorld``; ``counters``: the reconcilers' ``ControllerCounters`` (or None)."""

    def __init__(self, world: SimWorld, counters: Any = None, *, dry_run: bool = False) -> None:
        self.world = world
        self.counters = counters
        self.dry_run = dry_run
        self.events: deque[SimEvent] = deque(maxlen=MAX_EVENTS)
        self.event_counts: Counter[tuple[str, str, str]] = Counter()  # (kind, type, reason) -> Events
        self.annotations: dict[tuple[str, str], dict[str, str]] = {}  # (namespace, RayCluster) -> written
        self.stall_owners: dict[str, float] = {}  # the stall reconciler's owner memory, as last kept

    # ----------------------------------------------------------------------------------- counting
    def _wrote(self, resource: str, verb: str = "patch") -> None:
        if self.counters is not None:
            self.counters.writes.labels(resource=resource, verb=verb).inc()

    def _failed(self, resource: str, kind: str) -> None:
        if self.counters is not None:
            self.counters.write_errors.labels(resource=resource, kind=kind).inc()

    # ------------------------------------------------------------------------------------ writes
    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        if not self.world.check_exists(name):
            self._failed(ADMISSIONCHECK_STATUS, "not_found")
            return WriteOutcome("error", "not_found", 1)
        self.world.kueue_activate_check(name)  # written in shadow mode too: it keeps Kueue admitting
        self._wrote(ADMISSIONCHECK_STATUS)
        return WriteOutcome("written", "", 1)

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        if self.dry_run and decision.state != CHECK_READY:
            return WriteOutcome("dry_run", "not_ready")  # shadow mode writes only Ready (as KubeWriter)
        w = self.world.find_workload(decision.namespace, decision.name)
        if w is None:
            return WriteOutcome("skipped", "gone", 1)
        why = _guard(w, decision)
        if why:
            return WriteOutcome("skipped", why, 1)
        state = decision.state or CHECK_PENDING
        if state == CHECK_PENDING and decision.message == w.check_message:
            return WriteOutcome("unchanged", "", 1)  # the entry is Pending (guard): nothing would change
        if state == CHECK_READY:
            self.world.kueue_check_ready(w, decision.message, decision.placement)
        elif state == CHECK_RETRY:
            self.world.kueue_check_retry(w, decision.message, float(decision.requeue_after_seconds or 0))
        elif state == CHECK_REJECTED:
            self.world.kueue_check_rejected(w, decision.message)
        else:
            self.world.kueue_check_message(w, decision.message)
        self._wrote(WORKLOAD_STATUS)
        return WriteOutcome("written", "", 1)

    async def patch_group(self, decision: GroupDecision, now: float) -> WriteOutcome:
        if decision.write == "none":
            return WriteOutcome("unchanged")
        if self.dry_run:
            return WriteOutcome("dry_run")  # shadow mode: no RayCluster write, no request
        rc = self.world.find_ray_cluster(decision.namespace, decision.cluster)
        if rc is None:
            self._failed(RAYCLUSTERS, "not_found")
            return WriteOutcome("skipped", "gone", 1)
        if decision.group_index != 0 or decision.group != rc.group:
            self._failed(RAYCLUSTERS, "invalid")  # the patch's "test" op on groupName fails: 422
            return WriteOutcome("error", "invalid", 1)
        if str(rc.version) != decision.resource_version:
            self._failed(RAYCLUSTERS, "conflict")  # somebody wrote since the snapshot: 409, not retried
            return WriteOutcome("conflict", "conflict", 1)
        replicas = delete = new_min = new_max = None
        if decision.write == "replicas":
            if decision.desired != decision.current:
                replicas = int(decision.desired)
            if decision.workers_to_delete or decision.clear_workers_to_delete:
                delete = tuple(decision.workers_to_delete)
        elif decision.write == "min_max":
            new_min, new_max = decision.new_min, decision.new_max
        self.world.kuberay_patch(rc, replicas=replicas, workers_to_delete=delete, min_replicas=new_min,
                                 max_replicas=new_max, reason=decision.reason)
        self._wrote(RAYCLUSTERS)
        return WriteOutcome("written", "", 1)

    async def annotate_raycluster(self, namespace: str, name: str, key: str, value: str, now: float, *,
                                  resource_version: str = "") -> WriteOutcome:
        if self.dry_run:
            return WriteOutcome("dry_run")
        rc = self.world.find_ray_cluster(namespace, name)
        if rc is None:
            return WriteOutcome("skipped", "gone", 1)
        if resource_version and str(rc.version) != resource_version:
            return WriteOutcome("conflict", "conflict", 1)  # changed since the snapshot, as the API server answers
        current = self.annotations.setdefault((namespace, name), {})
        if current.get(key) == value:
            return WriteOutcome("unchanged", "", 1)
        current[key] = value
        rc.version += 1  # any write moves the object's resourceVersion on
        self._wrote(RAYCLUSTERS)
        return WriteOutcome("written", "", 1)

    async def deactivate_workload(self, stalled: StalledWorkload, now: float) -> WriteOutcome:
        """``spec.active: false`` on a stalled workload: Kueue evicts it, releases its quota and keeps it
        inactive, as it does with a Rejected check (the simulated Kueue has one path for both)."""
        if self.dry_run:
            return WriteOutcome("dry_run")
        w = self.world.find_workload(stalled.namespace, stalled.name)
        if w is None:
            return WriteOutcome("skipped", "gone", 1)
        if stalled.uid and w.uid != stalled.uid:
            return WriteOutcome("skipped", "recreated", 1)
        if w.inactive:
            return WriteOutcome("unchanged", "", 1)
        self.world.kueue_check_rejected(w, f"deactivated: stalled for {stalled.stalled_for:.0f}s")
        self._wrote(WORKLOADS)
        return WriteOutcome("written", "", 1)

    async def nominate_clusters(self, decision: DispatchDecision, now: float) -> WriteOutcome:
        """The simulated world is one cluster without MultiKueue: nothing to nominate."""
        return WriteOutcome("skipped", "no_multikueue")

    async def load_stall_owners(self, now: float) -> tuple[dict[str, float], int] | None:
        return dict(self.stall_owners), 0

    async def save_stall_owners(self, owners: Mapping[str, float], forget_before: float, now: float) -> WriteOutcome:
        """The simulated cluster keeps the owner memory as the ConfigMap would (merged, within its bounds)."""
        if self.dry_run:
            return WriteOutcome("dry_run")
        merged = merge_owners(owners, self.stall_owners)
        kept = decode_owners(encode_owners({k: t for k, t in merged.items() if t >= forget_before}))[0]
        if kept == self.stall_owners:
            return WriteOutcome("unchanged", "", 1)
        self.stall_owners = kept
        self._wrote(STALL_OWNERS, "apply")
        return WriteOutcome("written", "", 1)

    def post_event(self, ref: EventTarget, type_: EventType, reason: str, message: str, now: float) -> None:
        self.events.append(SimEvent(ref.kind, ref.namespace, ref.name, type_, reason, message[:MAX_MESSAGE], now))
        self.event_counts[(ref.kind, type_, reason)] += 1
        self._wrote(EVENTS, "create")

    async def close(self) -> None:
        return None


def _guard(w: SimWorkloadRef, decision: AdmissionDecision) -> str:
    """``act.workload_status.guard`` on the simulated Workload: '' when we may write, else why not."""
    if decision.uid and w.uid != decision.uid:
        return "recreated"
    if not w.holds_quota:
        return "no_quota"
    if w.inactive:
        return "inactive"
    if w.check_state != CHECK_PENDING:
        return "not_pending"
    return ""
