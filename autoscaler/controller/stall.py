"""The stalled-workload reconciler: report admitted workloads whose GPUs all sit idle, and (opt-in)
deactivate them so that Kueue releases their quota.

Per pass: ``decide_stalls`` (pure, ``autoscaler.core.policy.stall``) on the snapshot with the
timers of the previous pass, then:

- a new stall (past ``stall.window`` for the first time) -> a Warning Event ``StalledWorkload`` on
  the Workload, once per stall, and a decision line; for an opted-in workload (below) it says when
  the deactivation is due ("will be deactivated ... at 2h idle, at <time> (in 1h30m), unless a GPU
  gets busy");
- ``queuepilot_stalled_workloads{cluster_queue}`` / ``queuepilot_stalled_workload_gpus{cluster_queue}``
  set every pass (0 for the ClusterQueues with none, so a dashboard sees 0, not "no data");
- in a ClusterQueue listed in ``stall.deactivate_cluster_queues`` or a namespace in
  ``stall.deactivate_namespaces``, once the stall has lasted ``stall.deactivate_after`` (default 2 h,
  at least the window: report early, act late, since a deactivation kills the job's pods):
  ``Writer.deactivate_workload`` (``spec.active: false``, pinned to the snapshot's resourceVersion),
  then a Warning Event ``StalledWorkloadDeactivated`` saying how long every GPU was idle, and
  ``queuepilot_stall_deactivations_total{cluster_queue, mode="live"}``.  A write that did not happen
  (409 from a newer version, an error, held back by the backoff) is decided again next pass.  A stall
  that ends before the delay is never deactivated.

The owners of the workloads it deactivated (``stall.remember_owners``) are kept through
``Writer.save_stall_owners`` after each deactivation written (the controller's ConfigMap,
``act.stall_owners``) and read back on the first pass and after a gap longer than
``leader_gap_seconds`` (another replica led meanwhile), merged with what this process remembers.  Until
that read succeeds no deactivation is written (they are decided again next pass): a job its owner
created again must not be killed for want of the memory.  A malformed memory is counted
(``queuepilot_source_errors_total{source="stall_owners"}``), logged, and replaced at the next write.

Dry-run: nothing is written; the would-be deactivation is reported once per stall (a Normal Event
"(dry-run) would deactivate ...", ``mode="dry_run"``), and the StalledWorkload Events are posted as
in a live run.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from autoscaler.act.events import ObjectRef
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.writer import Writer
from autoscaler.controller.context import ControllerContext, offload, snapshot_size, writer_for
from autoscaler.core import reasons as R
from autoscaler.core.policy.stall import (
    StallConfig,
    StalledWorkload,
    StallResult,
    StallTrack,
    decide_stalls,
    merge_owners,
    owner_key,
    remember_owner,
    stall_config,
)
from autoscaler.core.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

WORKLOAD_API = "kueue.x-k8s.io/v1beta2"


class StallReconciler:
    name = "stall"

    def __init__(self, ctx: ControllerContext, writer: Writer | None = None, config: StallConfig | None = None,
                 leader_gap_seconds: float = 120.0) -> None:
        self.ctx = ctx
        self.config = config or stall_config(ctx.settings)
        self.writer = writer or writer_for(ctx)
        self.dry_run = self.writer.dry_run
        self.history: Mapping[str, StallTrack] = {}
        # owner (namespace/kind/name) -> when we last deactivated a workload of it: a job created again
        # under the same name is held as a reactivated one (stall.remember_owners), kept by the writer
        self.owners: Mapping[str, float] = {}
        self.leader_gap_seconds = leader_gap_seconds
        self._last_pass: float | None = None
        self._owners_read = False  # the kept memory read since this process leads
        self._owners_unsaved = False
        self._waiting_logged = False
        self.result: StallResult | None = None  # last pass's, for tests and the benchmark
        self.outcomes: list[tuple[StalledWorkload, WriteOutcome]] = []
        self._held = ""
        self._queues: set[str] = set()

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        gap = self._last_pass is None or now - self._last_pass > self.leader_gap_seconds
        self._last_pass = now
        if self.config.remember_owners_seconds > 0 and (gap or not self._owners_read):
            self._owners_read = await self._read_owners(now)
        # pure: in a worker thread for a large snapshot (nothing else touches this reconciler meanwhile)
        result = await offload(snapshot_size(snapshot), decide_stalls, snapshot, self.config, self.history, now,
                               self.owners)
        self.result = result
        self.outcomes = []
        if result.held != self._held:
            self._held = result.held
            if result.held:
                log.info("stall detector holds: %s", result.held)
        history = dict(result.history)
        for s in result.stalled:
            try:
                if not await self._act(s, now):
                    history[s.key] = history[s.key].rollback_deactivation()
            except Exception:  # one bad workload must not stop the others
                log.exception("stall handling of %s failed", s.key)
                self.ctx.counters.source_errors.labels(source="reconciler/stall", kind="exception").inc()
                history[s.key] = history[s.key].rollback_deactivation()
        self.history = history
        if self._owners_unsaved:
            outcome = await self.writer.save_stall_owners(self.owners, now - self.config.remember_owners_seconds, now)
            # kept, or nowhere to keep it; else (an error, a backoff) again next pass
            self._owners_unsaved = outcome.result not in ("written", "unchanged", "dry_run") and outcome.detail != "not_kept"
        self._publish(snapshot, result)

    async def _read_owners(self, now: float) -> bool:
        """Merge the kept owner memory into this process's (the later time of each owner); False when it
        cannot be read now (the writer's guard counted, logged and backs off the failure)."""
        try:
            got = await self.writer.load_stall_owners(now)
        except ValueError as e:  # ours, but not what we write: start from what this process remembers
            log.warning("the stall owner memory is malformed (%s): it is written anew at the next deactivation", e)
            self.ctx.counters.source_errors.labels(source="stall_owners", kind="malformed").inc()
            got = ({}, 0)
        if got is None:
            if not self._waiting_logged:
                self._waiting_logged = True
                log.warning("stall deactivations wait until the owner memory can be read (stall.remember_owners)")
            return False
        kept, bad = got
        if bad:
            log.warning("the stall owner memory had %d malformed entries: left out", bad)
            self.ctx.counters.source_errors.labels(source="stall_owners", kind="malformed").inc()
        self.owners = remember_owner(merge_owners(kept, self.owners), None, self.config, now)  # pruned, bounded
        self._owners_unsaved = self._owners_unsaved or self.owners != kept
        if self._waiting_logged:
            log.info("stall owner memory read: %d owners", len(self.owners))
        self._waiting_logged = False
        return True

    async def _act(self, s: StalledWorkload, now: float) -> bool:
        """Report and (opted in) deactivate; False when a decided deactivation did not happen."""
        ref = ObjectRef(WORKLOAD_API, "Workload", s.namespace, s.name, s.uid)
        if s.new:
            self.writer.post_event(ref, "Warning", R.STALLED_WORKLOAD, s.message, now)
            self.ctx.published.remember(f"{s.key} {R.STALLED_WORKLOAD}: {s.message}")
            log.info("stalled workload %s", s.message)
        if s.held_new:  # a due deactivation held back by what Ray says: once per reason
            self.writer.post_event(ref, "Normal", R.STALL_DEACTIVATION_HELD, s.message, now)
            self.ctx.published.remember(f"{s.key} {R.STALL_DEACTIVATION_HELD}: {s.message}")
        if not s.deactivate:  # reported only, or its deactivation is not due yet (s.deactivate_at)
            return True
        if self.config.remember_owners_seconds > 0 and not self._owners_read:
            return False  # without the memory a job created again could be killed: decided again next pass
        queue = s.cluster_queue
        if self.dry_run:
            outcome = WriteOutcome("dry_run")
            self.outcomes.append((s, outcome))
            self.ctx.counters.stall_deactivations.labels(cluster_queue=queue, mode="dry_run").inc()
            text = f"(dry-run) would deactivate (spec.active: false): {s.message}"
            self.writer.post_event(ref, "Normal", R.STALLED_WORKLOAD_DEACTIVATED, text, now)
            self.ctx.published.remember(f"(dry-run) {s.key} {R.STALLED_WORKLOAD_DEACTIVATED}: {s.message}")
            return True
        outcome = await self.writer.deactivate_workload(s, now)
        self.outcomes.append((s, outcome))
        if outcome.result != "written":
            log.info("deactivating %s: %s %s; deciding again next pass", s.key, outcome.result, outcome.detail)
            return outcome.result == "skipped" and outcome.detail == "gone"
        self.ctx.counters.stall_deactivations.labels(cluster_queue=queue, mode="live").inc()
        self.owners = remember_owner(self.owners, owner_key(s.namespace, s.owner_kind, s.owner_name), self.config, now)
        self._owners_unsaved = True
        # an Event about a write names the version it was pinned to (Events are named after both)
        self.writer.post_event(replace(ref, resource_version=s.resource_version), "Warning",
                               R.STALLED_WORKLOAD_DEACTIVATED, s.message, now)
        self.ctx.published.remember(f"{s.key} {R.STALLED_WORKLOAD_DEACTIVATED}: {s.message}")
        log.info("deactivated stalled workload %s", s.key)
        return True

    def _publish(self, snapshot: ClusterSnapshot, result: StallResult) -> None:
        count: dict[str, int] = {}
        gpus: dict[str, int] = {}
        for s in result.stalled:
            count[s.cluster_queue] = count.get(s.cluster_queue, 0) + 1
            gpus[s.cluster_queue] = gpus.get(s.cluster_queue, 0) + s.gpus
        queues = set(snapshot.cluster_queues) | set(count)
        c = self.ctx.counters
        for q in sorted(queues):
            c.stalled_workloads.labels(cluster_queue=q).set(count.get(q, 0))
            c.stalled_workload_gpus.labels(cluster_queue=q).set(gpus.get(q, 0))
        for q in self._queues - queues:  # a ClusterQueue that went away: its series go too
            c.stalled_workloads.remove(q)
            c.stalled_workload_gpus.remove(q)
        self._queues = queues

    async def close(self) -> None:
        await self.writer.close()
