"""The worker-group scaling reconciler: pure policy per opted-in RayCluster, then one patch per group.

Per pass, for every RayCluster with ``queuepilot.io/autoscale: "true"``:
``decide_scaling`` (pure) -> for each group decision with a write, one JSON patch guarded by the
snapshot's resourceVersion (``act.raycluster_patch``); a 409 means somebody (the Ray autoscaler, a
user) wrote in between: nothing is retried, the next pass decides from what they wrote, and the
group's history is rolled back so the unwritten change does not count against the step limits.

Explained: ``scale_decisions_total{namespace,raycluster,group,direction,reason}`` counts each
decision that is written or differs from the group's previous one (an unchanged hold is not
counted every pass); ``reclaimed_workers_total{...,reason}`` counts each worker deleted by name,
``reason="idle_actor"`` when Ray actors/tasks on it were killed (killed work), else ``"empty"``; an Event on the RayCluster for every write and every new hold reason
(Warning for stale signals, infeasible demand and ``NotScalableUnderKueue``, Normal otherwise);
malformed annotations give a Warning ``MalformedAnnotation`` Event once per distinct text.
Published: ``desired_replicas`` and ``idle_gpus`` per group, decision lines for the TUI.

Dry-run (``writer.dry_run``): nothing is written (``patch_group`` is not called).  Each would-be
write is reported once per change of the decision (not every pass, although the cluster never
catches up): ``scale_decisions_total{mode="dry_run"}``, a Normal Event "would scale down 3->1
(dry-run): ..." and a ``(dry-run)`` decision line.  The group's history keeps the observations but
not the unwritten change, as after a refused write, so the would-be decisions follow the cluster as
it is rather than one the live controller would have made.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
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
from autoscaler.core import reasons as R
from autoscaler.core.policy.config import scaling_defaults
from autoscaler.core.policy.scaling import (
    GroupDecision,
    GroupHistory,
    ScalingContext,
    ScalingResult,
    decide_scaling,
)
from autoscaler.core.snapshot import ClusterSnapshot, RayClusterState

log = logging.getLogger(__name__)

_WARNING_REASONS = frozenset({R.RAY_SIGNAL_STALE, R.GPU_SIGNAL_STALE, R.NOT_SCALABLE_UNDER_KUEUE,
                              R.AT_MAX_REPLICAS, R.QUOTA_HEADROOM_LIMIT, R.INFEASIBLE_DEMAND})
_QUIET_REASONS = frozenset({R.WITHIN_TARGET})
YIELD_EVERY = 200  # clusters decided between two yields to the event loop
_UNCHANGED = WriteOutcome("unchanged")  # a decision that writes nothing (immutable: one serves all)


class ScalingReconciler(WritingReconciler):
    name = "scaling"

    def __init__(self, ctx: ControllerContext, writer: Writer | None = None) -> None:
        self.ctx = ctx
        self.defaults = scaling_defaults(ctx.settings)
        self.writer = writer or writer_for(ctx)
        self.dry_run = self.writer.dry_run
        self.history: dict[str, Mapping[str, GroupHistory]] = {}
        self._last: dict[tuple[str, str, str], tuple[str, str, int, tuple[str, ...]]] = {}
        self._warned: dict[str, tuple[str, ...]] = {}
        self.outcomes: list[tuple[GroupDecision, WriteOutcome]] = []  # last pass's, for tests/bench

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        self.outcomes = []
        keys = [key for key in sorted(snapshot.ray_clusters) if snapshot.ray_clusters[key].opted_in]
        previous = {key: self.history.get(key, {}) for key in keys}
        # pure: in a worker thread for a large snapshot (nothing else touches this reconciler meanwhile)
        decided = await offload(snapshot_size(snapshot), self._decide_all, snapshot, keys, previous, now)
        for i, (key, result) in enumerate(decided):
            if i and i % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # let watches, /metrics and the Lease renewal run during a long pass
            try:
                if isinstance(result, Exception):
                    raise result
                await self._act(snapshot.ray_clusters[key], result, previous[key], now)
            except Exception:  # one bad cluster must not stop the others
                log.exception("scaling %s failed", key)
                self.ctx.counters.source_errors.labels(source="reconciler/scaling", kind="exception").inc()
        seen = set(keys)
        for key in list(self.history):
            if key not in seen:
                del self.history[key]
                self._warned.pop(key, None)
        for gk in [gk for gk in self.ctx.published.desired_replicas if f"{gk[0]}/{gk[1]}" not in seen]:
            self.ctx.published.desired_replicas.pop(gk, None)
            self.ctx.published.idle_gpus.pop(gk, None)
            self._last.pop(gk, None)

    def _decide_all(
        self, snapshot: ClusterSnapshot, keys: Sequence[str], previous: Mapping[str, Mapping[str, GroupHistory]],
        now: float,
    ) -> list[tuple[str, ScalingResult | Exception]]:
        """``decide_scaling`` for each opted-in cluster ``keys`` (pure); a cluster that raised gets its exception."""
        if not keys:
            return []
        # once per pass, for every cluster: who waits; the workloads each cluster owns and the cohorts'
        # quota totals when a cluster's quota headroom first asks (elastic Kueue clusters)
        context = ScalingContext.build(snapshot, now)
        out: list[tuple[str, ScalingResult | Exception]] = []
        for key in keys:
            try:
                result: ScalingResult | Exception = decide_scaling(
                    snapshot, snapshot.ray_clusters[key], self.defaults, previous[key], now, context=context)
            except Exception as e:  # reported (logged, counted) on the loop with the other failures
                result = e
            out.append((key, result))
        return out

    async def _act(self, rc: RayClusterState, result: ScalingResult, previous: Mapping[str, GroupHistory],
                   now: float) -> None:
        """One cluster's decisions: Events for malformed annotations, published values, the writes."""
        history: Mapping[str, GroupHistory] = result.history  # (copied where a write's change is rolled back)
        if result.warnings != self._warned.get(rc.key, ()):
            self._warned[rc.key] = result.warnings
            for w in result.warnings:
                self.writer.post_event(_ref(rc), "Warning", R.MALFORMED_ANNOTATION, w, now)
                self.ctx.published.remember(f"{rc.key}: {R.MALFORMED_ANNOTATION}: {w}")
        published = self.ctx.published
        for d in result.decisions:
            gk = d.key
            published.desired_replicas[gk] = d.desired
            published.idle_gpus[gk] = d.idle_gpus
            outcome = _UNCHANGED
            if d.write != "none":
                if self.dry_run:
                    outcome = WriteOutcome("dry_run")
                else:
                    outcome = await self.writer.patch_group(d, now)
                if outcome.result != "written":
                    # not written: keep the new observations, forget the change that did not happen
                    history = {**history, d.group: history[d.group].rollback(previous.get(d.group, GroupHistory()))}
            self.outcomes.append((d, outcome))
            self._explain(d, outcome, rc, now)
        self.history[rc.key] = history

    def _explain(self, d: GroupDecision, outcome: WriteOutcome, rc: RayClusterState, now: float) -> None:
        sig = (d.direction, d.reason, d.desired, d.infeasible)
        wrote = outcome.result == "written"
        would = outcome.result == "dry_run"
        key = d.key
        changed = self._last.get(key) != sig
        if changed:
            self._last[key] = sig
        # a dry-run never writes, so its would-be write comes back every pass: report it on change only
        # not written (refused, or held back after refusals: the writer's WritesFailing Event says so)
        if not (wrote or changed) or outcome.result in ("conflict", "error") or outcome.detail == "backoff":
            return
        mode = "dry_run" if self.dry_run else "live"
        self.ctx.counters.scale_decisions.labels(namespace=d.namespace, raycluster=d.cluster, group=d.group,
                                                 direction=d.direction, reason=d.reason, mode=mode).inc()
        if wrote or would:
            for pod in d.workers_to_delete:  # killed work: the pods that held Ray actors/tasks
                kind = "idle_actor" if pod in d.reclaimed else "empty"
                self.ctx.counters.reclaimed_workers.labels(namespace=d.namespace, raycluster=d.cluster, group=d.group,
                                                           reason=kind, mode=mode).inc()
        if not (wrote or would) and d.reason in _QUIET_REASONS and not d.infeasible:
            return
        message = d.message + (f"; infeasible: {'; '.join(d.infeasible)}" if d.infeasible else "")
        ref = _ref(rc)
        if d.write != "none":  # a write is about the version it was pinned to (Events are named after both)
            ref = replace(ref, resource_version=d.resource_version)
        if would:
            what = (f"would scale {d.direction} {d.current}->{d.desired}" if d.direction != "hold"
                    else f"would patch {d.write.replace('_', '/')}")
            self.writer.post_event(ref, "Normal", d.reason, f"group {d.group}: {what} (dry-run): {message}", now)
            line = f"(dry-run) {d.namespace}/{d.cluster}/{d.group} {what} {d.reason}: {message}"
        else:
            etype: EventType = "Warning" if (d.reason in _WARNING_REASONS or (d.infeasible and not wrote)) else "Normal"
            prefix = "(dry-run) " if self.dry_run else ""
            self.writer.post_event(ref, etype, d.reason, f"group {d.group}: {prefix}{message}", now)
            line = f"{prefix}{d.namespace}/{d.cluster}/{d.group} {d.direction} {d.current}->{d.desired} " \
                   f"{d.reason}: {message}"
        self.ctx.published.remember(line)
        log.info("scaling %s", line)


def _ref(rc: RayClusterState) -> ObjectRef:
    """The RayCluster as an Event's ``involvedObject``."""
    return ObjectRef("ray.io/v1", "RayCluster", rc.namespace, rc.name, rc.uid)
