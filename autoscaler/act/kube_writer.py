"""``KubeWriter``: the ``Writer`` over the Kubernetes API (kubernetes-asyncio).

Each call is one of the guarded writes in this package: ``workload_status.write_check_state``
(server-side apply of our admission-check entry after a fresh read and the guards),
``raycluster_patch.patch_group`` (one JSON patch pinned to the snapshot's resourceVersion),
``workload_deactivate.deactivate_workload`` (one merge patch ``spec.active: false`` pinned likewise),
``workload_nominate.write_nominations`` (server-side apply of ``status.nominatedClusterNames`` only),
``raycluster_annotate.annotate_raycluster`` (one merge patch of one annotation, pinned likewise),
``admissioncheck_status.ensure_active``, ``stall_owners`` (the owner memory's ConfigMap: read, and
server-side apply; none without ``stall_owners``); Events go through one background ``EventSink``.  All of
them share one ``WriteGuard`` (``act.guard``): per-object backoff after a failed write, counted in
``queuepilot_write_errors_total`` and ``queuepilot_objects_in_write_backoff``, and a Warning
``WritesFailing`` Event on an object whose writes keep failing (once per failure streak).

In dry-run (shadow mode) the check's ``Active`` condition, ``Ready`` check states and Events are
written; any other check state, every RayCluster patch or annotation, every nomination and every
deactivation answer ``dry_run`` without a request.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.admissioncheck_status import ensure_active
from autoscaler.act.events import EventSink, ObjectRef
from autoscaler.act.guard import WRITES_FAILING, BackoffPolicy, WriteCounters, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.raycluster_annotate import annotate_raycluster
from autoscaler.act.raycluster_patch import patch_group
from autoscaler.act.stall_owners import load_owners, save_owners
from autoscaler.act.workload_deactivate import deactivate_workload
from autoscaler.act.workload_nominate import write_nominations
from autoscaler.act.workload_status import write_check_state
from autoscaler.act.writer import EventTarget, EventType
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.dispatch import DispatchDecision
from autoscaler.core.policy.scaling import GroupDecision
from autoscaler.core.policy.stall import StalledWorkload
from autoscaler.core.snapshot import CHECK_READY

log = logging.getLogger(__name__)


class KubeWriter:
    def __init__(
        self,
        api_client: ApiClient | None,
        counters: WriteCounters | None,
        *,
        controller_name: str,
        field_manager: str,
        dry_run: bool = False,
        events: EventSink | None = None,
        backoff: BackoffPolicy | None = None,
        rng: random.Random | None = None,
        stall_owners: tuple[str, str] | None = None,
    ) -> None:
        self.api_client = api_client
        self.counters = counters
        self.controller_name = controller_name
        self.field_manager = field_manager
        self.dry_run = dry_run
        self.stall_owners = stall_owners  # (namespace, name) of the owner memory's ConfigMap; None: not kept
        rng = rng or random.Random()
        policy = backoff or BackoffPolicy()
        self.events = events or EventSink(api_client, counters, write_guard=WriteGuard(counters, policy, rng))
        self.guard = WriteGuard(counters, policy, rng, on_failing=self._writes_failing)

    def _writes_failing(self, key: WriteKey, message: str, now: float) -> None:
        ref = ObjectRef(key.api_version, key.kind, key.namespace, key.name, key.uid)
        self.events.post(ref, "Warning", WRITES_FAILING, message, now)

    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        if self.api_client is None:
            return WriteOutcome("dry_run", "no_client")
        return await ensure_active(self.api_client, name, field_manager=self.controller_name, now=now,
                                   write_guard=self.guard)

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        if self.dry_run and decision.state != CHECK_READY:
            log.info("dry-run: not writing %s on %s", decision.state or "Pending", decision.workload)
            return WriteOutcome("dry_run", "not_ready")
        return await write_check_state(self.api_client, decision, field_manager=self.controller_name, now=now,
                                       write_guard=self.guard)

    async def patch_group(self, decision: GroupDecision, now: float) -> WriteOutcome:
        return await patch_group(self.api_client, decision, field_manager=self.field_manager, now=now,
                                 write_guard=self.guard, dry_run=self.dry_run)

    async def deactivate_workload(self, stalled: StalledWorkload, now: float) -> WriteOutcome:
        return await deactivate_workload(self.api_client, stalled, field_manager=self.field_manager, now=now,
                                         write_guard=self.guard, dry_run=self.dry_run)

    async def nominate_clusters(self, decision: DispatchDecision, now: float) -> WriteOutcome:
        return await write_nominations(self.api_client, decision, field_manager=self.field_manager, now=now,
                                       write_guard=self.guard, dry_run=self.dry_run)

    async def annotate_raycluster(self, namespace: str, name: str, key: str, value: str, now: float, *,
                                  resource_version: str = "") -> WriteOutcome:
        return await annotate_raycluster(self.api_client, namespace, name, key, value,
                                         field_manager=self.field_manager, now=now, write_guard=self.guard,
                                         dry_run=self.dry_run, resource_version=resource_version)

    async def load_stall_owners(self, now: float) -> tuple[dict[str, float], int] | None:
        if self.stall_owners is None or self.api_client is None:
            return {}, 0
        return await load_owners(self.api_client, *self.stall_owners, now=now, write_guard=self.guard)

    async def save_stall_owners(self, owners: Mapping[str, float], forget_before: float, now: float) -> WriteOutcome:
        if self.dry_run:
            return WriteOutcome("dry_run")
        if self.stall_owners is None or self.api_client is None:
            return WriteOutcome("skipped", "not_kept")
        return await save_owners(self.api_client, *self.stall_owners, owners, forget_before=forget_before,
                                 field_manager=self.field_manager, now=now, write_guard=self.guard)

    def post_event(self, ref: EventTarget, type_: EventType, reason: str, message: str, now: float) -> None:
        target = ref if isinstance(ref, ObjectRef) else ObjectRef(ref.api_version, ref.kind, ref.namespace,
                                                                  ref.name, ref.uid)
        self.events.post(target, type_, reason, message, now)

    async def close(self) -> None:
        await self.events.close()
