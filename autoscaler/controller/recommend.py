"""The right-sizing reconciler: the recommendation feed, its annotation (opt-in) and its Events.

Every ``RIGHTSIZING_STEP_S`` of the ``now`` it is given (whatever the pass rate), it takes one
observation of every worker group from the snapshot (``rightsizing.observe_snapshot``), prunes the
history, recommends (``RightsizingHistory.recommend``) and publishes the result in
``ctx.published.recommendations`` (the ``queuepilot_recommendation_*`` gauges).  For a large snapshot
(``context.OFFLOAD_MIN_OBJECTS``, through ``context.offload``) that work runs in a worker thread; the result is the same either way.

On the same step, per RayCluster:

- a Normal Event ``RecommendationChanged`` per worker group whose recommendation changed materially
  (``rightsizing.material_change``: another reason, GPUs per worker or min/max replicas, or saved idle
  GPU-hours that moved by more than 25 % and 1 GPU-hour) since the last one this process announced;
  nothing while withheld, nothing for a first recommendation that finds the group already right-sized;
- with the controller-wide switch on (``--recommendation-annotations``, which ``config.parse_config``
  hands in as the ``recommendations: {annotate: true}`` setting) and the RayCluster opted in (``queuepilot.io/annotate-recommendation: "true"``): the
  annotation ``queuepilot.io/recommendation`` (JSON, ``rightsizing.annotation_json``), written through
  ``Writer.annotate_raycluster`` only when what is on the object (untrusted: parsed defensively, and
  overwritten when it is not ours) differs materially from the recommendation, and only once at least
  one group has a recommendation (while all are withheld nothing is written, nor removed).  The write
  is pinned to the resourceVersion the decision was made on: a RayCluster that changed since answers
  409, and the decision is made again on the next pass's snapshot (not the next step's), with the
  same recommendation, until it is written or no longer wanted (repeated conflicts are paced by the
  write guard);
- a malformed opt-in value: off, and a Warning Event ``MalformedAnnotation`` once per distinct text.

Dry-run: no annotation is written (the would-be write is logged); Events are posted as in a live run.
State is in memory: after a restart the history starts again (recommendations are withheld until it
is long enough) and the first material change is announced again (content-named Events dedup).
Everything kept per RayCluster (warnings given, annotations to write again) is dropped when the
RayCluster goes.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from autoscaler.act.events import ObjectRef
from autoscaler.act.outcome import WriteOutcome, rfc3339
from autoscaler.act.writer import Writer
from autoscaler.controller.context import (
    ControllerContext,
    WritingReconciler,
    offload,
    snapshot_size,
    writer_for,
)
from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import RECOMMENDATION_ANNOTATION, annotate_recommendation
from autoscaler.core.policy.rightsizing import (
    ALREADY_RIGHT_SIZED,
    RECOMMENDED,
    GroupKey,
    GroupRecommendation,
    RecommendationEntry,
    RightsizingHistory,
    RightsizingPolicy,
    annotation_json,
    annotation_outdated,
    entry_of,
    material_change,
    observe_snapshot,
)
from autoscaler.core.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

RIGHTSIZING_STEP_S = 300.0  # one right-sizing observation per 5 minutes, whatever the pass rate
RIGHTSIZING_POLICY = RightsizingPolicy()
RAY_API = "ray.io/v1"
SECTION = "recommendations"
# a snapshot with at least this many Workloads + RayClusters + Nodes is observed in a worker thread


def annotate_setting(settings: Mapping[str, Any]) -> bool:
    """``recommendations.annotate`` of the configuration (default false); ValueError when not a bool."""
    section = settings.get(SECTION) or {}
    if not isinstance(section, Mapping):
        raise ValueError(f"{SECTION} must be a mapping, got {type(section).__name__}")
    unknown = sorted(set(section) - {"annotate"})
    if unknown:
        raise ValueError(f"{SECTION}: unknown key(s) {', '.join(map(repr, unknown))} (known: 'annotate')")
    value = section.get("annotate", False)
    if not isinstance(value, bool):
        raise ValueError(f"{SECTION}.annotate must be true or false, got {value!r}")
    return value


class RightsizingFeed:
    """The history and its step: ``step(snapshot, now)`` observes when ``RIGHTSIZING_STEP_S`` has passed
    since the last observation (or on the first call) and answers the recommendations, else None."""

    def __init__(self, policy: RightsizingPolicy = RIGHTSIZING_POLICY, step_s: float = RIGHTSIZING_STEP_S,
                 keep_s: float | None = None) -> None:
        self.policy = policy
        self.step_s = step_s
        self.history = RightsizingHistory(half_life_s=policy.half_life_s) if keep_s is None else \
            RightsizingHistory(half_life_s=policy.half_life_s, keep_s=keep_s)
        self.at: float | None = None

    def due(self, now: float) -> bool:
        return self.at is None or now - self.at >= self.step_s

    def step(self, snapshot: ClusterSnapshot, now: float) -> list[GroupRecommendation] | None:
        if not self.due(now):
            return None
        step = self.step_s if self.at is None else now - self.at
        self.history.add(observe_snapshot(snapshot, self.policy, duration_s=step))
        self.history.prune(now)
        self.at = now
        return self.history.recommend(self.policy, snapshot)


def change_message(e: RecommendationEntry) -> str:
    if e.reason == ALREADY_RIGHT_SIZED:
        return f"worker group {e.group}: already right-sized ({e.gpus_per_worker} GPUs per worker)"
    return (f"worker group {e.group}: recommended {e.recommended_gpus_per_worker} GPUs per worker "
            f"(now {e.gpus_per_worker}), {e.recommended_min_replicas}-{e.recommended_max_replicas} replicas; "
            f"would have saved {e.idle_gpu_hours:.1f} idle GPU-hours")


class RecommendationReconciler(WritingReconciler):
    name = "recommendation"

    def __init__(self, ctx: ControllerContext, writer: Writer | None = None, *,
                 policy: RightsizingPolicy = RIGHTSIZING_POLICY, step_s: float = RIGHTSIZING_STEP_S,
                 annotate: bool | None = None) -> None:
        self.ctx = ctx
        self.writer = writer or writer_for(ctx)
        self.feed = RightsizingFeed(policy, step_s)
        self.annotate = annotate_setting(ctx.settings) if annotate is None else annotate
        self.announced: dict[GroupKey, RecommendationEntry] = {}
        self.outcomes: list[tuple[str, WriteOutcome]] = []  # last pass's annotation writes, for tests
        self._warned: dict[str, str] = {}
        self._again: dict[str, list[GroupRecommendation]] = {}  # cluster -> recs whose annotation is still to write

    async def reconcile(self, snapshot: ClusterSnapshot, now: float) -> None:
        self._prune(snapshot)
        if not self.feed.due(now):
            self.outcomes = []
            if self._again:
                for key, recs in sorted(self._again.items()):
                    await self._annotate(snapshot, key, recs, now)
            return
        # nothing else touches the feed meanwhile: reconcilers run in turn
        recs = await offload(snapshot_size(snapshot), self.feed.step, snapshot, now)
        if recs is None:
            return
        self.ctx.published.recommendations = recs
        self.outcomes = []
        self._again = {}
        by_cluster: dict[str, list[GroupRecommendation]] = {}
        for r in recs:
            by_cluster.setdefault(f"{r.key.namespace}/{r.key.raycluster}", []).append(r)
        for key in sorted(snapshot.ray_clusters):
            try:
                await self._cluster(snapshot, key, by_cluster.get(key, []), now)
            except Exception:  # one bad cluster must not stop the others
                log.exception("recommendation handling of %s failed", key)
                self.ctx.counters.source_errors.labels(source="reconciler/recommendation", kind="exception").inc()
        live = {r.key for r in recs}
        for k in [k for k in self.announced if k not in live]:
            del self.announced[k]

    async def _cluster(self, snapshot: ClusterSnapshot, key: str, recs: Sequence[GroupRecommendation],
                       now: float) -> None:
        rc = snapshot.ray_clusters[key]
        ref = ObjectRef(RAY_API, "RayCluster", rc.namespace, rc.name, rc.uid)
        _, warning = annotate_recommendation(rc.annotations)
        if (warning or "") != self._warned.get(key, ""):
            self._warned[key] = warning or ""
            if warning:
                self.writer.post_event(ref, "Warning", R.MALFORMED_ANNOTATION, warning, now)
                self.ctx.published.remember(f"{key}: {R.MALFORMED_ANNOTATION}: {warning}")
        entries = {r.key.group: entry_of(r) for r in recs}
        for r in recs:
            self._announce(ref, r.key, entries[r.key.group], now)
        await self._annotate(snapshot, key, recs, now)

    async def _annotate(self, snapshot: ClusterSnapshot, key: str, recs: Sequence[GroupRecommendation],
                        now: float) -> None:
        """Write the annotation of ``key`` when it is wanted and outdated on ``snapshot``, pinned to the
        snapshot's resourceVersion; a conflict or a held-back write is tried again on the next pass."""
        self._again.pop(key, None)
        rc = snapshot.ray_clusters.get(key)
        if rc is None:
            return
        opted_in, _ = annotate_recommendation(rc.annotations)
        if not (self.annotate and opted_in) or all(r.withheld for r in recs):
            return  # (all withheld: nothing to say yet; an annotation written before stays as it is)
        entries = {r.key.group: entry_of(r) for r in recs}
        if not annotation_outdated(rc.annotations.get(RECOMMENDATION_ANNOTATION), entries):
            return
        value = annotation_json(entries.values(), rfc3339(now))
        if self.writer.dry_run:
            log.info("dry-run: would annotate %s with %s", key, value)
            outcome = WriteOutcome("dry_run")
        else:
            outcome = await self.writer.annotate_raycluster(rc.namespace, rc.name, RECOMMENDATION_ANNOTATION,
                                                            value, now, resource_version=rc.resource_version)
        self.outcomes.append((key, outcome))
        if outcome.result in ("conflict", "skipped") and outcome.detail in ("conflict", "backoff"):
            self._again[key] = list(recs)  # decided again on the next pass's snapshot
            log.debug("annotating %s: %s; deciding again on the next pass", key, outcome.detail)
        elif outcome.result not in ("written", "dry_run", "unchanged"):
            log.info("annotating %s: %s %s; trying again on the next step", key, outcome.result, outcome.detail)

    def _prune(self, snapshot: ClusterSnapshot) -> None:
        """Forget what is kept per RayCluster once the RayCluster is gone."""
        live = snapshot.ray_clusters
        if any(k not in live for k in self._warned):
            self._warned = {k: v for k, v in self._warned.items() if k in live}
        if any(k not in live for k in self._again):
            self._again = {k: v for k, v in self._again.items() if k in live}

    def _announce(self, ref: ObjectRef, key: GroupKey, entry: RecommendationEntry, now: float) -> None:
        if entry.reason not in (RECOMMENDED, ALREADY_RIGHT_SIZED):
            return  # withheld: nothing to say, and the last announcement stands
        old = self.announced.get(key)
        if old is None and entry.reason != RECOMMENDED:
            self.announced[key] = entry  # a first look that finds it right-sized is no news
            return
        if not material_change(old, entry):
            return
        self.announced[key] = entry
        message = change_message(entry)
        self.writer.post_event(ref, "Normal", R.RECOMMENDATION_CHANGED, message, now)
        self.ctx.published.remember(f"{ref.namespace}/{ref.name} {R.RECOMMENDATION_CHANGED}: {message}")
