"""The ``Writer``: the only way a reconciler changes the world.

A reconciler decides (pure policy) and then acts through exactly these calls; what a call does is
the implementation's business:

- ``KubeWriter`` (``autoscaler.act.kube_writer``) talks to the Kubernetes API: server-side apply
  of our admission-check entry, one guarded JSON patch per worker group, a guarded merge patch
  deactivating a stalled Workload, a merge patch of one RayCluster annotation (the right-sizing
  recommendation), the ConfigMap of the stall reconciler's owner memory, Events;
- the simulator's writer applies the same calls to its simulated Kueue / KubeRay state.

So the controller, the simulator and the demo run one decide -> act -> explain path: the same
reconcilers, ledger, rollbacks, counters and explanations, with a different ``Writer`` underneath.
Every call returns a ``WriteOutcome`` (never raises for a refused write) and ``post_event`` never
blocks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, Protocol

from autoscaler.act.outcome import WriteOutcome
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.dispatch import DispatchDecision
from autoscaler.core.policy.scaling import GroupDecision
from autoscaler.core.policy.stall import StalledWorkload

EventType = Literal["Normal", "Warning"]


class EventTarget(Protocol):
    """The object an Event is about (``autoscaler.act.events.ObjectRef`` is the one in use); read-only,
    so frozen dataclasses fit."""

    @property
    def api_version(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...


class Writer(Protocol):
    """``dry_run`` marks shadow mode.  The reconcilers then send only what keeps Kueue admitting as it
    would without queuepilot: ``activate_check``, and ``set_check_state`` with state ``Ready`` and a
    message that says what the live decision would have been; they never call ``patch_group`` or
    ``deactivate_workload`` (an implementation answers ``dry_run`` without writing if it is called
    anyway) and keep posting Events."""

    dry_run: bool

    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        """Keep ``Active=True`` on AdmissionCheck ``name`` (the caller saw it is ours and not active)."""
        ...

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        """Write our entry of the Workload's ``status.admissionChecks`` as ``decision`` says."""
        ...

    async def patch_group(self, decision: GroupDecision, now: float) -> WriteOutcome:
        """Write a worker group's replicas / workersToDelete / min / max as ``decision`` says."""
        ...

    async def deactivate_workload(self, stalled: StalledWorkload, now: float) -> WriteOutcome:
        """Set ``spec.active: false`` on the stalled Workload, pinned to the resourceVersion it was
        decided on (Kueue then evicts it and releases its quota).  Never called in dry-run (an
        implementation answers ``dry_run`` without writing if it is called anyway)."""
        ...

    async def nominate_clusters(self, decision: DispatchDecision, now: float) -> WriteOutcome:
        """Write the Workload's ``status.nominatedClusterNames`` as ``decision.nominate`` says (MultiKueue's
        external dispatcher); only that field, only while it holds quota, is not evicted or finished and
        no worker has admitted it.  In dry-run an implementation answers ``dry_run`` without writing."""
        ...

    async def annotate_raycluster(self, namespace: str, name: str, key: str, value: str, now: float, *,
                                  resource_version: str = "") -> WriteOutcome:
        """Set annotation ``key`` of RayCluster ``namespace/name`` to ``value`` (only that key; the caller
        decided it differs from what is there), pinned to ``resource_version`` when given: a RayCluster
        that changed since answers ``conflict``.  In dry-run an implementation answers ``dry_run``
        without writing."""
        ...

    async def load_stall_owners(self, now: float) -> tuple[dict[str, float], int] | None:
        """What ``save_stall_owners`` last kept (the stall reconciler's owner memory, which a restart or a new
        leader reads back) and how many of its entries were malformed: none where nothing is kept; None
        when it cannot be read now.  ValueError for a malformed document."""
        ...

    async def save_stall_owners(self, owners: Mapping[str, float], forget_before: float, now: float) -> WriteOutcome:
        """Keep ``owners`` (owner key -> when a workload of it was deactivated) where ``load_stall_owners``
        finds them, merged with what is kept there (the later time per owner; what is older than
        ``forget_before`` dropped).  In dry-run an implementation answers ``dry_run`` without writing."""
        ...

    def post_event(self, ref: EventTarget, type_: EventType, reason: str, message: str, now: float) -> None:
        """Queue an Event on ``ref``; never blocks, never raises."""
        ...

    async def close(self) -> None: ...
