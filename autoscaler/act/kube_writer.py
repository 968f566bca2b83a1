"""``KubeWriter``: the ``Writer`` over the Kubernetes API (kubernetes-asyncio).

Each call is one of the guarded writes in this package: ``workload_status.write_check_state``
(server-side apply of our admission-check entry after a fresh read and the guards),
``raycluster_patch.patch_group`` (one JSON patch pinned to the snapshot's resourceVersion),
``admissioncheck_status.ensure_active``; Events go through one background ``EventSink``.

In dry-run (shadow mode) the check's ``Active`` condition, ``Ready`` check states and Events are
written; any other check state and every RayCluster patch answer ``dry_run`` without a request.
"""

from __future__ import annotations

import logging
from typing import Any

from autoscaler.act.admissioncheck_status import ensure_active
from autoscaler.act.events import EventSink, ObjectRef
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.raycluster_patch import patch_group
from autoscaler.act.workload_status import write_check_state
from autoscaler.act.writer import EventTarget, EventType
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.policy.scaling import GroupDecision
from autoscaler.core.snapshot import CHECK_READY

log = logging.getLogger(__name__)


class KubeWriter:
    def __init__(
        self,
        api_client: Any,
        counters: Any,
        *,
        controller_name: str,
        field_manager: str,
        dry_run: bool = False,
        events: EventSink | None = None,
    ) -> None:
        self.api_client = api_client
        self.counters = counters
        self.controller_name = controller_name
        self.field_manager = field_manager
        self.dry_run = dry_run
        self.events = events or EventSink(api_client, counters)

    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        if self.api_client is None:
            return WriteOutcome("dry_run", "no_client")
        return await ensure_active(self.api_client, name, field_manager=self.controller_name, now=now,
                                   counters=self.counters)

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        if self.dry_run and decision.state != CHECK_READY:
            log.info("dry-run: not writing %s on %s", decision.state or "Pending", decision.workload)
            return WriteOutcome("dry_run", "not_ready")
        return await write_check_state(self.api_client, decision, field_manager=self.controller_name, now=now,
                                       counters=self.counters)

    async def patch_group(self, decision: GroupDecision, group_index: int, now: float) -> WriteOutcome:
        return await patch_group(self.api_client, decision, group_index, field_manager=self.field_manager,
                                 counters=self.counters, dry_run=self.dry_run)

    def post_event(self, ref: EventTarget, type_: EventType, reason: str, message: str, now: float) -> None:
        target = ref if isinstance(ref, ObjectRef) else ObjectRef(ref.api_version, ref.kind, ref.namespace,
                                                                  ref.name, ref.uid)
        self.events.post(target, type_, reason, message, now)

    async def close(self) -> None:
        await self.events.close()
