"""Right-sizing recommendations from GPU activity history, in the spirit of the Kubernetes VPA recommender.

Pure: no I/O, no clock. Observations carry their own timestamps; the caller passes ``now``.

The model, per RayCluster worker group:

- Every observation is one instant of the group: for each worker, the GPUs it holds and how many of
  them were *active* (engine activity or framebuffer use above the policy's thresholds).
- Two decaying histograms collect them (weights halve every ``half_life_s`` back from the newest
  observation, as the VPA's do): the active GPUs of each worker, and the number of *busy* workers
  (workers with at least one active GPU) at each instant.
- Recommended GPUs per worker: the ``gpus_percentile`` of the per-worker active count (default the
  maximum ever seen: GPUs beyond it never saw activity or framebuffer use), rounded up to an allowed
  size and never above what workers have now.
- Recommended min replicas: the ``min_replicas_percentile`` of busy workers (rounded down);
  recommended max replicas: the ``max_replicas_percentile`` of busy workers times
  ``1 + safety_margin`` (rounded up), at least the min and at least 1.
- GPU-hours saved: over the observed history, what the group held minus what a group that tracked
  its busy workers within the recommended [min, max] with the recommended GPUs per worker would have
  held, counted only where it was idle (never more than the idle GPUs at that instant).
- Withheld, with a reason, when the history is shorter than ``min_history_s`` or has too few
  observations, when the group holds no GPUs, or when the recommendation equals what is there.

Per namespace and job kind (Kueue workloads): the GPUs each pod requested against the
``job_percentile`` of the GPUs it kept active, the same way.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.core.snapshot import ClusterSnapshot

MIB = 1024 * 1024

# reasons: bounded CamelCase constants (the ``reason`` label of queuepilot_recommendation_withheld)
RECOMMENDED = "Recommended"
ALREADY_RIGHT_SIZED = "AlreadyRightSized"
INSUFFICIENT_HISTORY = "InsufficientHistory"
NO_DATA = "NoData"
NO_GPUS = "NoGpus"
WITHHELD_REASONS = (INSUFFICIENT_HISTORY, NO_DATA, NO_GPUS)
REASONS = (RECOMMENDED, ALREADY_RIGHT_SIZED, *WITHHELD_REASONS)

MEANING: Mapping[str, str] = {
    RECOMMENDED: "The history supports a different size; the numbers are the recommendation.",
    ALREADY_RIGHT_SIZED: "The history supports the current size; nothing to change.",
    INSUFFICIENT_HISTORY: "Not enough history yet (too short a span or too few observations).",
    NO_DATA: "No observation of this group or job kind in the window.",
    NO_GPUS: "The workers hold no GPUs, so there is nothing to right-size.",
}


@dataclass(frozen=True, slots=True)
class RightsizingPolicy:
    half_life_s: float = 24 * 3600.0  # the VPA's default half-life of histogram weights
    min_history_s: float = 24 * 3600.0  # span between first and last observation before recommending
    min_observations: int = 12
    gpus_percentile: float = 1.0  # of the per-worker active GPU count; 1.0 = the largest ever seen
    min_replicas_percentile: float = 0.05
    max_replicas_percentile: float = 0.95
    safety_margin: float = 0.15  # the VPA's default margin, added to the max replicas
    allowed_gpus_per_worker: tuple[int, ...] = (1, 2, 4, 8)
    job_percentile: float = 0.95
    # what makes a GPU "active" at an instant
    active_utilization: float = 0.01  # engine activity, 0-1
    active_memory_bytes: float = 128 * MIB  # framebuffer in use

    def __post_init__(self) -> None:
        for name in ("gpus_percentile", "min_replicas_percentile", "max_replicas_percentile", "job_percentile"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be within 0..1, got {p}")
        if self.half_life_s <= 0:
            raise ValueError(f"half_life_s must be positive, got {self.half_life_s}")
        if self.safety_margin < 0:
            raise ValueError(f"safety_margin must not be negative, got {self.safety_margin}")


# ------------------------------------------------------------------------------------- histogram
class DecayingHistogram:
    """Weights of small non-negative integer values; a sample at time ``t`` weighs
    ``2 ** ((t - reference) / half_life)``, so older samples count exponentially less (the VPA grows new
    weights rather than shrinking old ones; the ratios, and so the percentiles, are the same)."""

    __slots__ = ("_reference", "_weights", "half_life_s")

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self._weights: dict[int, float] = {}
        self._reference: float | None = None

    def add(self, value: int, t: float, weight: float = 1.0) -> None:
        if value < 0:
            raise ValueError(f"histogram values are counts, got {value}")
        if self._reference is None:
            self._reference = t
        exponent = (t - self._reference) / self.half_life_s
        if exponent > 60:  # rebase before the weights overflow
            shift = 2.0 ** -exponent
            self._weights = {k: w * shift for k, w in self._weights.items()}
            self._reference, exponent = t, 0.0
        self._weights[value] = self._weights.get(value, 0.0) + weight * 2.0**exponent

    @property
    def total(self) -> float:
        return sum(self._weights.values())

    def empty(self) -> bool:
        return not self._weights

    def percentile(self, p: float) -> int:
        """The smallest value whose cumulative weight reaches ``p`` of the total (p=1: the largest value)."""
        if not self._weights:
            raise ValueError("percentile of an empty histogram")
        values = sorted(self._weights)
        if p >= 1.0:
            return values[-1]
        target = p * self.total
        acc = 0.0
        for v in values:
            acc += self._weights[v]
            if acc >= target - 1e-12 * self.total:
                return v
        return values[-1]


# --------------------------------------------------------------------------------- observations
@dataclass(frozen=True, slots=True)
class WorkerObservation:
    pod: str
    gpus: int  # GPUs the worker holds
    active_gpus: int  # of which active at this instant


@dataclass(frozen=True, slots=True)
class GroupObservation:
    """One instant of a worker group; ``duration_s`` is how long it stands for (the sampling step)."""

    t: float
    duration_s: float
    workers: tuple[WorkerObservation, ...]

    @property
    def held_gpus(self) -> int:
        return sum(w.gpus for w in self.workers)

    @property
    def active_gpus(self) -> int:
        return sum(min(w.active_gpus, w.gpus) for w in self.workers)

    @property
    def busy_workers(self) -> int:
        return sum(1 for w in self.workers if w.active_gpus > 0)


@dataclass(frozen=True, slots=True)
class GroupKey:
    namespace: str
    raycluster: str
    group: str


@dataclass(frozen=True, slots=True)
class GroupRecommendation:
    key: GroupKey
    gpus_per_worker: int  # what the workers hold now (the most any worker held in the history)
    recommended_gpus_per_worker: int | None  # None when withheld
    recommended_min_replicas: int | None
    recommended_max_replicas: int | None
    saved_gpu_hours: float  # idle GPU-hours the recommendation would have saved over the history
    observed_idle_gpu_hours: float  # GPU-hours held but not active over the history
    history_s: float
    observations: int
    reason: str
    message: str

    @property
    def withheld(self) -> bool:
        return self.reason in WITHHELD_REASONS


def _round_up_allowed(k: int, allowed: Sequence[int], ceiling: int) -> int:
    for size in sorted(allowed):
        if size >= k:
            return min(size, ceiling)
    return ceiling


def _hours(seconds: float) -> float:
    return seconds / 3600.0


DAY_S = 86400.0


class GroupAccumulator:
    """What the recommender keeps of a group's history, in bounded memory (as the VPA keeps histograms,
    not samples): the two decaying histograms, and, per day, the seconds spent in each
    (GPUs held, GPUs active, busy workers) state with the most GPUs any worker held, from which the
    idle and saved GPU-hours are computed exactly. ``prune`` drops whole days older than a cutoff."""

    __slots__ = ("busy", "first_t", "last_t", "max_gpus", "observations", "per_worker", "usage")

    def __init__(self, half_life_s: float) -> None:
        self.per_worker = DecayingHistogram(half_life_s)
        self.busy = DecayingHistogram(half_life_s)
        self.usage: dict[tuple[int, int, int, int], float] = {}  # (day, held, active, busy) -> seconds
        self.max_gpus: dict[int, int] = {}  # day -> most GPUs a worker held
        self.first_t: float | None = None
        self.last_t: float | None = None
        self.observations = 0

    def add(self, o: GroupObservation) -> None:
        if not o.workers:
            return
        self.first_t = o.t if self.first_t is None else min(self.first_t, o.t)
        self.last_t = o.t if self.last_t is None else max(self.last_t, o.t)
        self.observations += 1
        self.busy.add(o.busy_workers, o.t, o.duration_s)
        for w in o.workers:
            if w.gpus > 0:
                self.per_worker.add(min(w.active_gpus, w.gpus), o.t, o.duration_s)
        day = int(o.t // DAY_S)
        key = (day, o.held_gpus, o.active_gpus, o.busy_workers)
        self.usage[key] = self.usage.get(key, 0.0) + o.duration_s
        self.max_gpus[day] = max(self.max_gpus.get(day, 0), max(w.gpus for w in o.workers))

    def prune(self, cutoff: float) -> None:
        """Forget the days that end before ``cutoff`` (the histograms keep them, decayed)."""
        first_day = int(cutoff // DAY_S)
        self.usage = {k: v for k, v in self.usage.items() if k[0] >= first_day}
        self.max_gpus = {d: g for d, g in self.max_gpus.items() if d >= first_day}
        if self.first_t is not None and self.first_t < first_day * DAY_S:
            self.first_t = first_day * DAY_S if self.usage else None
            if self.first_t is None:
                self.last_t, self.observations = None, 0

    @property
    def span_s(self) -> float:
        return 0.0 if self.first_t is None or self.last_t is None else self.last_t - self.first_t

    @property
    def gpus_per_worker(self) -> int:
        return max(self.max_gpus.values(), default=0)

    @property
    def idle_s(self) -> float:
        return sum((held - active) * secs for (_, held, active, _), secs in self.usage.items())


def recommend_group(
    key: GroupKey,
    observations: Iterable[GroupObservation] | GroupAccumulator,
    policy: RightsizingPolicy,
    current_min_replicas: int | None = None,
    current_max_replicas: int | None = None,
) -> GroupRecommendation:
    """Recommend GPUs per worker and min/max replicas for one worker group from its history (the
    observations, or an accumulator that has seen them).

    ``current_min_replicas`` / ``current_max_replicas`` (when known) decide whether anything would
    change; without them only a change of GPUs per worker counts as one.
    """
    if isinstance(observations, GroupAccumulator):
        acc = observations
    else:
        acc = GroupAccumulator(policy.half_life_s)
        for o in sorted(observations, key=lambda o: o.t):
            acc.add(o)
    gpus_now = acc.gpus_per_worker
    idle_s = acc.idle_s
    span = acc.span_s
    n = acc.observations

    def withheld(reason: str, message: str) -> GroupRecommendation:
        return GroupRecommendation(key, gpus_now, None, None, None, 0.0, _hours(idle_s), span, n, reason, message)

    if n == 0:
        return withheld(NO_DATA, "no worker of this group was observed in the window")
    if gpus_now == 0:
        return withheld(NO_GPUS, "the workers of this group hold no GPUs")
    if span < policy.min_history_s or n < policy.min_observations:
        return withheld(
            INSUFFICIENT_HISTORY,
            f"{_hours(span):.1f} h of history in {n} observations; a recommendation needs "
            f"{_hours(policy.min_history_s):.1f} h and {policy.min_observations} observations",
        )

    k = max(1, acc.per_worker.percentile(policy.gpus_percentile))
    rec_gpus = _round_up_allowed(k, policy.allowed_gpus_per_worker, gpus_now)
    rec_min = acc.busy.percentile(policy.min_replicas_percentile)
    busy_high = acc.busy.percentile(policy.max_replicas_percentile)
    rec_max = max(1, rec_min, math.ceil(busy_high * (1 + policy.safety_margin)))

    saved_s = 0.0
    for (_, held, active, busy_workers), secs in acc.usage.items():
        would_hold = rec_gpus * max(rec_min, min(rec_max, busy_workers))
        saved_s += max(0.0, min(float(held - active), float(held - would_hold))) * secs

    changed = rec_gpus != gpus_now
    if current_min_replicas is not None and rec_min != current_min_replicas:
        changed = True
    if current_max_replicas is not None and rec_max != current_max_replicas:
        changed = True
    reason = RECOMMENDED if changed else ALREADY_RIGHT_SIZED
    message = (
        f"workers kept at most {k} of {gpus_now} GPUs active; busy workers p{policy.min_replicas_percentile * 100:g} "
        f"{rec_min}, p{policy.max_replicas_percentile * 100:g} {busy_high} "
        f"(+{policy.safety_margin * 100:g}% margin) over {_hours(span):.1f} h"
    )
    return GroupRecommendation(
        key, gpus_now, rec_gpus, rec_min, rec_max, _hours(saved_s), _hours(idle_s), span, n, reason, message,
    )


# ------------------------------------------------------------------------------- Kueue job kinds
@dataclass(frozen=True, slots=True)
class PodObservation:
    """One instant of one pod of a Kueue workload."""

    t: float
    duration_s: float
    pod: str
    requested_gpus: int
    active_gpus: int


@dataclass(frozen=True, slots=True)
class JobKindRecommendation:
    namespace: str
    job_kind: str
    requested_gpus_per_pod: int | None  # the most any pod requested
    active_gpus_per_pod: int | None  # the job_percentile of active GPUs per pod
    recommended_gpus_per_pod: int | None
    history_s: float
    observations: int
    reason: str
    message: str


def recommend_job_kind(
    namespace: str, job_kind: str, observations: Iterable[PodObservation], policy: RightsizingPolicy,
) -> JobKindRecommendation:
    """GPUs requested per pod against GPUs active per pod at the policy's percentile, for one
    namespace and job kind (RayJob, PyTorchJob, TrainJob, Job, ...)."""
    obs = sorted(observations, key=lambda o: o.t)
    span = (obs[-1].t - obs[0].t) if obs else 0.0
    if not obs:
        return JobKindRecommendation(namespace, job_kind, None, None, None, 0.0, 0, NO_DATA,
                                     "no pod of this job kind was observed in the window")
    requested = max(o.requested_gpus for o in obs)
    if requested == 0:
        return JobKindRecommendation(namespace, job_kind, 0, None, None, span, len(obs), NO_GPUS,
                                     "the pods request no GPUs")
    hist = DecayingHistogram(policy.half_life_s)
    for o in obs:
        hist.add(min(o.active_gpus, o.requested_gpus), o.t, o.duration_s)
    active = hist.percentile(policy.job_percentile)
    instants = len({o.t for o in obs})
    if span < policy.min_history_s or instants < policy.min_observations:
        return JobKindRecommendation(
            namespace, job_kind, requested, active, None, span, len(obs), INSUFFICIENT_HISTORY,
            f"{_hours(span):.1f} h of history in {instants} observations; a recommendation needs "
            f"{_hours(policy.min_history_s):.1f} h and {policy.min_observations} observations",
        )
    rec = _round_up_allowed(max(1, active), policy.allowed_gpus_per_worker, requested)
    reason = RECOMMENDED if rec != requested else ALREADY_RIGHT_SIZED
    return JobKindRecommendation(
        namespace, job_kind, requested, active, rec, span, len(obs), reason,
        f"pods requested {requested} GPUs and kept {active} active at "
        f"p{policy.job_percentile * 100:g} over {_hours(span):.1f} h",
    )


# ----------------------------------------------------------------------- from a live snapshot
def gpu_active(utilization: float | None, memory_used_bytes: float | None, policy: RightsizingPolicy) -> bool:
    """A GPU is active at an instant when its engine is busy or its framebuffer is in use."""
    if utilization is not None and utilization >= policy.active_utilization:
        return True
    return memory_used_bytes is not None and memory_used_bytes >= policy.active_memory_bytes


def observe_snapshot(
    snapshot: ClusterSnapshot, policy: RightsizingPolicy, duration_s: float,
) -> dict[GroupKey, GroupObservation]:
    """One observation per worker group from a snapshot: each worker's GPUs (the group's spec) and how
    many of the GPUs the exporter attributes to its pod are active. Groups without a GPU signal for
    any worker are left out (no data is not idleness)."""
    active_by_pod: dict[tuple[str, str], int] = {}
    seen_by_pod: set[tuple[str, str]] = set()
    for node in snapshot.nodes.values():
        for g in node.gpus:
            if g.pod is None:
                continue
            pk = (g.pod.namespace, g.pod.name)
            seen_by_pod.add(pk)
            if gpu_active(g.utilization, g.memory_used_bytes, policy):
                active_by_pod[pk] = active_by_pod.get(pk, 0) + 1
    out: dict[GroupKey, GroupObservation] = {}
    for key in sorted(snapshot.ray_clusters):
        rc = snapshot.ray_clusters[key]
        for grp in rc.groups:
            workers = []
            for w in grp.workers:
                if w.deleting or w.phase != "Running":
                    continue
                pk = (rc.namespace, w.pod)
                if pk not in seen_by_pod:
                    continue
                gpus = w.gpus or grp.gpus_per_worker
                workers.append(WorkerObservation(w.pod, gpus, min(gpus, active_by_pod.get(pk, 0))))
            if workers:
                out[GroupKey(rc.namespace, rc.name, grp.name)] = GroupObservation(
                    snapshot.taken_at, duration_s, tuple(workers),
                )
    return out


@dataclass
class RightsizingHistory:
    """A ``GroupAccumulator`` per group, fed one snapshot observation per controller pass; days older
    than ``keep_s`` are pruned (bounded memory whatever the pass rate)."""

    half_life_s: float = 24 * 3600.0
    keep_s: float = 8 * 24 * 3600.0
    groups: dict[GroupKey, GroupAccumulator] = field(default_factory=dict)

    def add(self, observations: Mapping[GroupKey, GroupObservation]) -> None:
        for key, o in observations.items():
            acc = self.groups.get(key)
            if acc is None:
                acc = self.groups[key] = GroupAccumulator(self.half_life_s)
            acc.add(o)

    def prune(self, now: float) -> None:
        for key in list(self.groups):
            acc = self.groups[key]
            acc.prune(now - self.keep_s)
            if acc.observations == 0:
                del self.groups[key]

    def recommend(self, policy: RightsizingPolicy, snapshot: ClusterSnapshot | None = None) -> list[GroupRecommendation]:
        """A recommendation per group with history; current min/max come from ``snapshot`` when given."""
        limits: dict[GroupKey, tuple[int, int]] = {}
        if snapshot is not None:
            for rc in snapshot.ray_clusters.values():
                for g in rc.groups:
                    limits[GroupKey(rc.namespace, rc.name, g.name)] = (g.min_replicas, g.max_replicas)
        out = []
        for key in sorted(self.groups, key=lambda k: (k.namespace, k.raycluster, k.group)):
            lo, hi = limits.get(key, (None, None))
            out.append(recommend_group(key, self.groups[key], policy, lo, hi))
        return out


# ------------------------------------------------------------------------------------ the gauges
# family suffix -> value; the controller renders them as queuepilot_recommendation_<suffix>
GROUP_GAUGES = ("gpus_per_worker", "min_replicas", "max_replicas", "saved_gpu_seconds")


def recommendation_series(recs: Iterable[GroupRecommendation]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The ``queuepilot_recommendation_*`` gauge samples: family name -> [(labels, value)].

    A withheld recommendation has no number series, only ``queuepilot_recommendation_withheld`` = 1
    with its reason (so "no recommendation" is visible and says why)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {
        f"queuepilot_recommendation_{s}": [] for s in GROUP_GAUGES
    }
    out["queuepilot_recommendation_withheld"] = []
    for r in recs:
        labels = {"namespace": r.key.namespace, "raycluster": r.key.raycluster, "group": r.key.group}
        if r.withheld:
            out["queuepilot_recommendation_withheld"].append(({**labels, "reason": r.reason}, 1.0))
            continue
        assert r.recommended_gpus_per_worker is not None
        assert r.recommended_min_replicas is not None and r.recommended_max_replicas is not None
        out["queuepilot_recommendation_gpus_per_worker"].append((labels, float(r.recommended_gpus_per_worker)))
        out["queuepilot_recommendation_min_replicas"].append((labels, float(r.recommended_min_replicas)))
        out["queuepilot_recommendation_max_replicas"].append((labels, float(r.recommended_max_replicas)))
        out["queuepilot_recommendation_saved_gpu_seconds"].append((labels, r.saved_gpu_hours * 3600.0))
    return out


# ---------------------------------------------------- the annotation and what changes "materially"
MAX_ANNOTATION_CHARS = 64 * 1024  # a value read back beyond this is not ours (tenants can edit it)
MATERIAL_IDLE_RATIO = 0.25  # saved idle GPU-hours must move by more than this share ...
MATERIAL_IDLE_FLOOR_H = 1.0  # ... and by more than this many GPU-hours, to count as a change
_INT_FIELDS = ("gpus_per_worker", "recommended_gpus_per_worker", "recommended_min_replicas",
               "recommended_max_replicas")
_MAX_COUNT = 1_000_000


@dataclass(frozen=True, slots=True)
class RecommendationEntry:
    """One worker group's recommendation as the ``queuepilot.io/recommendation`` annotation carries it."""

    group: str
    gpus_per_worker: int
    recommended_gpus_per_worker: int | None  # None while withheld
    recommended_min_replicas: int | None
    recommended_max_replicas: int | None
    idle_gpu_hours: float  # idle GPU-hours the recommendation would have saved over its history
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"group": self.group, "gpus_per_worker": self.gpus_per_worker,
                "recommended_gpus_per_worker": self.recommended_gpus_per_worker,
                "recommended_min_replicas": self.recommended_min_replicas,
                "recommended_max_replicas": self.recommended_max_replicas,
                "idle_gpu_hours": self.idle_gpu_hours, "reason": self.reason}


def entry_of(rec: GroupRecommendation) -> RecommendationEntry:
    return RecommendationEntry(rec.key.group, rec.gpus_per_worker, rec.recommended_gpus_per_worker,
                               rec.recommended_min_replicas, rec.recommended_max_replicas,
                               round(rec.saved_gpu_hours, 1), rec.reason)


def annotation_json(entries: Iterable[RecommendationEntry], computed_at: str) -> str:
    """The annotation's value: ``{"computed_at": ..., "groups": [...]}``, groups by name, keys sorted,
    no spaces (small and the same text for the same content)."""

    groups = [e.as_json() for e in sorted(entries, key=lambda e: e.group)]
    return json.dumps({"computed_at": computed_at, "groups": groups}, sort_keys=True, separators=(",", ":"))


def _count(v: object) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_COUNT:
        raise ValueError("not a count")
    return v


def parse_annotation(raw: object) -> dict[str, RecommendationEntry] | None:
    """The entries of an annotation value read back from a RayCluster, by group; None for anything that
    is not exactly what ``annotation_json`` writes (absent, too long, not JSON, wrong shape or types,
    an unknown reason, a duplicate group).  Never raises: the value is untrusted."""

    if not isinstance(raw, str) or len(raw) > MAX_ANNOTATION_CHARS:
        return None
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or not isinstance(data.get("groups"), list) \
                or not isinstance(data.get("computed_at"), str):
            return None
        out: dict[str, RecommendationEntry] = {}
        for g in data["groups"]:
            if not isinstance(g, dict) or set(g) != {"group", "idle_gpu_hours", "reason", *_INT_FIELDS}:
                return None
            name, reason, idle = g["group"], g["reason"], g["idle_gpu_hours"]
            if not isinstance(name, str) or name in out or reason not in REASONS:
                return None
            if isinstance(idle, bool) or not isinstance(idle, int | float) or not math.isfinite(idle) or idle < 0:
                return None
            gpus = _count(g["gpus_per_worker"])
            if gpus is None:
                return None
            out[name] = RecommendationEntry(name, gpus, _count(g["recommended_gpus_per_worker"]),
                                            _count(g["recommended_min_replicas"]),
                                            _count(g["recommended_max_replicas"]), float(idle), reason)
        return out
    except (ValueError, TypeError, RecursionError):
        return None


def material_change(old: RecommendationEntry | None, new: RecommendationEntry) -> bool:
    """Whether ``new`` differs materially from ``old``: a different reason, GPUs per worker or
    recommended GPUs per worker / min / max replicas, or saved idle GPU-hours that moved by more than
    25 % and more than 1 GPU-hour (so the hours growing pass by pass are not news)."""
    if old is None:
        return True
    if (old.reason, old.gpus_per_worker, old.recommended_gpus_per_worker, old.recommended_min_replicas,
            old.recommended_max_replicas) != (new.reason, new.gpus_per_worker, new.recommended_gpus_per_worker,
                                              new.recommended_min_replicas, new.recommended_max_replicas):
        return True
    moved = abs(new.idle_gpu_hours - old.idle_gpu_hours)
    return moved > MATERIAL_IDLE_FLOOR_H and moved > MATERIAL_IDLE_RATIO * old.idle_gpu_hours


def annotation_outdated(raw: object, entries: Mapping[str, RecommendationEntry]) -> bool:
    """Whether the annotation value on the object (untrusted) must be rewritten for ``entries``:
    unparseable, other groups, or any group changed materially."""
    old = parse_annotation(raw)
    if old is None or set(old) != set(entries):
        return True
    return any(material_change(old[g], e) for g, e in entries.items())
