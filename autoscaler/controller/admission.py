"""The AdmissionCheck reconciler: Active condition, ledger, pure admission policy, status writes.

Per pass (the controller runs one soon after any watch event, so a check that turns Pending is
decided within the next pass, plus a periodic resync):

1. ``Active=True`` on every AdmissionCheck of our controllerName that is not active;
2. the reservation ledger is released against the snapshot (``policy.ledger.release``); on the
   first pass, and after a gap longer than ``leader_gap_seconds`` without passes (we were not the
   leader), it is rebuilt from the workloads whose check of ours is Ready
   (``policy.admission.rebuild_ledger``) — the previous leader's promises are not lost;
3. ``decide_admissions`` (pure), then one guarded server-side apply per decision
   (``act.workload_status``), at most ``write_concurrency`` at a time;
4. for each decision written: ``admission_decisions_total{cluster_queue,state,reason}``,
   ``admission_decision_seconds`` (now - QuotaReserved), an Event on the Workload (Warning for
   Retry/Rejected/hold, Normal for Ready), a line in ``published.last_decisions``; the ledger is
   published as ``reserved_gpus`` per flavor.  A decision that could not be written (guards failed
   on the fresh read, conflict, error) gives back its reservation / retry count.

Dry-run (shadow mode, ``writer.dry_run``): Kueue must admit exactly as it would without us, so the
check is kept ``Active`` and every decision is written as ``Ready`` with a message that says what
the live decision would have been (``dry-run: would Retry: needs 2 pods x 8 GPUs ...``); the Event
(always Normal) and the decision line say the same, and ``admission_decisions_total`` counts the
would-be state with ``mode="dry_run"``.  The ledger is the live controller's would-be ledger: a
would-be ``Ready`` reserves its GPUs exactly as in live mode (its pods come in both worlds), a
forced ``Ready`` (would-be Retry / Rejected / hold) reserves nothing, and when the ledger is rebuilt
(first pass, leader change) workloads whose check says ``dry-run: would`` anything but ``Ready`` are
left out of it, so forced admissions never count as promises in later would-be decisions.  Their
pods do run, though, and take real GPUs: later would-be decisions see that cluster, not the one a
live controller would have left (a shadow run can only ever estimate).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import replace

from autoscaler.act.events import ObjectRef
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.writer import EventType, Writer
from autoscaler.controller.context import (
    ControllerContext,
    WritingReconciler,
    offload,
    snapshot_size,
    writer_for,
)
from autoscaler.core.policy.admission import (
    AdmissionDecision,
    AdmissionResult,
    decide_admissions,
    rebuild_ledger,
)
from autoscaler.core.policy.config import admission_config
from autoscaler.core.policy.ledger import Ledger, release
from autoscaler.core.snapshot import CHECK_PENDING, CHECK_READY, CHECK_RETRY, ClusterSnapshot

log = logging.getLogger(__name__)

MAX_MESSAGE = 1024  # Kueue's limit on an admission-check message
DRY_RUN_PREFIX = "dry-run: would "
YIELD_EVERY = 500  # decisions accounted between two yields to the event loop


def would(d: AdmissionDecision) -> str:
    """What a live controller would have done, in words: ``Retry``, ``Ready``, ``leave Pending``."""
    return d.state or "leave Pending"


def shadow_message(d: AdmissionDecision) -> str:
    """The check message written in dry-run: the live decision, in the words it would have had."""
    return f"{DRY_RUN_PREFIX}{would(d)}: {d.message}"[:MAX_MESSAGE]


def shadow(d: AdmissionDecision) -> AdmissionDecision:
    """``d`` as the dry-run writes it: ``Ready`` at once, the live decision in the message."""
    return replace(d, state=CHECK_READY, message=shadow_message(d), requeue_after_seconds=None)


def _already_written(snapshot: ClusterSnapshot, d: AdmissionDecision) -> bool:
    """True when ``d`` leaves the entry Pending and the snapshot's entry is Pending with its message."""
    if d.state is not None:
        return False
    wl = snapshot.workloads.get(d.workload)
    entry = next((c for c in wl.checks if c.name == d.check), None) if wl is not None else None
    return entry is not None and entry.state == CHECK_PENDING and entry.message == d.message


def forced_ready(snapshot: ClusterSnapshot, controller_name: str) -> set[str]:
    """Workloads whose check of ours a dry-run set ``Ready`` although the live decision was not Ready."""
    out = set()
    for wl in snapshot.workloads.values():
        for c in wl.checks:
            ac = snapshot.admission_checks.get(c.name)
            if (ac is not None and ac.controller_name == controller_name and c.state == CHECK_READY
                    and c.message.startswith(DRY_RUN_PREFIX)
                    and not c.message.startswith(f"{DRY_RUN_PREFIX}{CHECK_READY}:")):
                out.add(wl.key)
    return out


class AdmissionReconciler(WritingReconciler):
    name = "admission"

    def __init__(
        self,
        ctx: ControllerContext,
        writer: Writer | None = None,
        *,
        write_concurrency: int = 8,
        leader_gap_seconds: float = 120.0,
    ) -> None:
        self.ctx = ctx
        self.config = replace(admission_config(ctx.settings), controller_name=ctx.controller_name)
        self.writer = writer or writer_for(ctx)
        self.dry_run = self.writer.dry_run
        self.ledger: Ledger | None = None
        self.history: dict[str, int] = {}
        self.leader_gap_seconds = leader_gap_seconds
        self._last_pass: float | None = None
        self._sem = asyncio.Semaphore(write_concurrency)
        self._activated: dict[str, float] = {}
        self.outcomes: list[tuple[AdmissionDecision, WriteOutcome]] = []  # last pass's, for tests/bench

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        await self._keep_active(snapshot, now)
        gap = self._last_pass is None or now - self._last_pass > self.leader_gap_seconds
        self._last_pass = now
        rebuild = self.ledger is None or gap
        # pure: in a worker thread for a large snapshot (nothing else touches this reconciler meanwhile)
        result = await offload(snapshot_size(snapshot), self._decide, snapshot, None if rebuild else self.ledger,
                               self.history, now)
        self.ledger, self.history = result.ledger, dict(result.history)
        # a workload left Pending with the message its entry already shows needs no request, no Event
        todo = [d for d in result.decisions if not _already_written(snapshot, d)]
        outcomes = await asyncio.gather(*(self._write(d, now) for d in todo))
        self.outcomes = list(zip(todo, outcomes, strict=True))
        for i, (d, outcome) in enumerate(self.outcomes):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # a pass with many decisions must not hold the event loop
            self._account(d, outcome, now)
        self.ctx.published.reserved_gpus = self.ledger.promised_by_flavor()

    def _decide(self, snapshot: ClusterSnapshot, ledger: Ledger | None, history: Mapping[str, int],
                now: float) -> AdmissionResult:
        """The pure part of a pass: the ledger (rebuilt when ``ledger`` is None), released, then decided."""
        if ledger is None:
            ledger = rebuild_ledger(snapshot, self.config, now)
            if self.dry_run:  # forced Readies were never promises of the live controller
                for key in forced_ready(snapshot, self.config.controller_name):
                    ledger = ledger.without(key)
        ledger = release(ledger, snapshot, now, self.config.reservation_timeout_seconds)
        return decide_admissions(snapshot, ledger, history, self.config, now)

    async def _keep_active(self, snapshot: ClusterSnapshot, now: float) -> None:
        for name, ac in sorted(snapshot.admission_checks.items()):
            if ac.controller_name != self.config.controller_name or ac.active:
                continue
            if now - self._activated.get(name, float("-inf")) < 5.0:
                continue  # our write is on its way through the watch; don't repeat it every pass
            self._activated[name] = now
            outcome = await self.writer.activate_check(name, now)
            if outcome.result in ("written", "dry_run"):
                why = " (dry-run keeps it active: Kueue admits as without queuepilot)" if self.dry_run else ""
                self.ctx.published.remember(f"AdmissionCheck {name}: set Active=True{why}")

    async def _write(self, d: AdmissionDecision, now: float) -> WriteOutcome:
        async with self._sem:
            try:
                return await self.writer.set_check_state(shadow(d) if self.dry_run else d, now)
            except Exception as exc:  # never let one workload break the pass
                log.exception("writing %s for %s failed", d.state, d.workload)
                return WriteOutcome("error", type(exc).__name__)

    def _account(self, d: AdmissionDecision, outcome: WriteOutcome, now: float) -> None:
        if outcome.result not in ("written", "dry_run"):
            if outcome.result != "unchanged" and self.ledger is not None and d.state == CHECK_READY \
                    and outcome.detail != "not_pending":
                self.ledger = self.ledger.without(d.workload)
            if d.state == CHECK_RETRY and outcome.result != "unchanged" and self.history.get(d.workload):
                self.history[d.workload] -= 1
            return
        mode = "dry_run" if self.dry_run else "live"
        # a workload left Pending with a new message (waiting for GPUs, a stale signal) counts as Pending
        self.ctx.counters.admission_decisions.labels(
            cluster_queue=d.cluster_queue or "", state=d.state or CHECK_PENDING, reason=d.reason, mode=mode).inc()
        if d.state is not None and d.quota_reserved_at is not None:
            self.ctx.counters.admission_decision_seconds.observe(max(0.0, now - d.quota_reserved_at))
        ref = ObjectRef("kueue.x-k8s.io/v1beta2", "Workload", d.namespace, d.name, d.uid, d.resource_version)
        if self.dry_run:
            self.writer.post_event(ref, "Normal", d.reason, f"{d.check}: {shadow_message(d)}", now)
            line = f"(dry-run) {d.workload} [{d.cluster_queue}] would {would(d)} {d.reason}: {d.message}"
        else:
            etype: EventType = "Normal" if d.state == CHECK_READY else "Warning"
            self.writer.post_event(ref, etype, d.reason, f"{d.check}: {d.state or 'Pending'}: {d.message}", now)
            line = f"{d.workload} [{d.cluster_queue}] {d.state or 'Pending'} {d.reason}: {d.message}"
            if outcome.result == "dry_run":  # no API client: decided, nothing written
                line = "(dry-run) " + line
        self.ctx.published.remember(line)
        log.info("admission %s", line)
