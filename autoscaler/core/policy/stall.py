"""Stalled workloads: admitted Kueue workloads whose GPUs all sit idle.

``decide_stalls(snapshot, config, history, now)`` is pure.  A workload is *stalled* when it is
admitted, active, not finished, requests GPUs, the GPU signal is fresh, at least one GPU is
attributed to it, and **every** GPU attributed to it has a known utilization under
``config.gpu_utilization`` — continuously for ``config.window_seconds``.  A hung job, a notebook
left open, an actor holding GPUs: quota held, nothing computed.

GPUs are attributed to a workload through the pods the GPU signal names (``GpuState.pod``, the
exporter's pod labels):

- the workers of a RayCluster belong to the Workload the RayCluster owns (owner kind RayCluster),
  or, for a RayCluster a RayJob created (label ``ray.io/originated-from-cr-name``), to the RayJob's;
- any other pod belongs to the admitted Workload of its namespace whose job name its name starts
  with (``<job>-...``; the longest job name wins).

Per stall the result says once that it is new (the caller posts a Warning ``StalledWorkload``
Event); a stall ends when any of its GPUs goes over the threshold, its utilization becomes unknown,
the GPU signal goes stale, or the workload is admitted again (the timer starts over, and a later
stall is reported again).  In ClusterQueues listed in ``deactivate_cluster_queues`` or namespaces in
``deactivate_namespaces`` (both empty by default) a stalled workload is also to be deactivated
(``spec.active: false``: Kueue then evicts it and releases its quota), once per stall -- but only once
the stall has lasted ``config.deactivate_after_seconds`` (default 2 h, at least the window): report
early, act late.  Deactivating kills the job's pods, which cannot be undone, and real jobs have long
idle stretches inside their run (evaluation, checkpointing, input stalls); a stall that ends before
the delay is never deactivated.  Until then the result names when the deactivation is due
(``StalledWorkload.deactivate_at``).

What Ray says decides whether a due deactivation goes ahead (``ray_evidence``): a workload that Ray
shows at work (tasks running or waiting on its cluster: a checkpoint, an evaluation, data, a
dependency) is paused, not stalled; one whose Ray job ended, or on whose cluster nothing has run or
waited for ``ray_quiet_seconds``, goes; a serving workload (RayService) never goes unless
``deactivate_serving``; a Ray workload whose Ray signal is missing or stale is held
(``without_ray_signal: hold``) or judged by its GPUs alone (``deactivate``); a workload that runs on no
RayCluster is judged by its GPUs alone.  A workload its owner reactivated after a deactivation
(``WorkloadState.deactivations``, from Kueue's ``status.schedulingStats``) is not deactivated again on
GPU idleness or a quiet cluster, only once its Ray job ended (``reactivated: hold``, the default; a pause
Ray cannot see would otherwise kill it each time it comes back); ``reactivated: deactivate`` judges it as
any other.  A job its owner deleted and created again under the same name has a new Workload with no such
history: the caller keeps the owners (namespace, kind, name) of the workloads it deactivated, with when,
for ``remember_owners`` (``remember_owner``; in memory, so a restart forgets them), and a workload whose
owner is among them is held the same way.  A held deactivation is reported once per reason
(``StalledWorkload.held``); every report names the evidence that decided.

``ray_clusters_to_watch(snapshot, config)`` names the RayClusters whose Ray view such a deactivation
could weigh (the controller polls their heads, ``autoscaler.controller.loop.Controller.ray_targets``):
those of workloads opted in to deactivation whose every GPU is idle, unless what decides does not
depend on Ray's view (a serving workload, a RayJob whose Ray job ended).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import brief_repr, parse_bool, parse_duration, parse_ratio
from autoscaler.core.policy.ray_evidence import (
    RAY_ORIGIN_KIND_LABEL,
    RAY_ORIGIN_NAME_LABEL,
    SERVING_KIND,
    Evidence,
    clusters_by_workload,
    evidence_of,
)
from autoscaler.core.snapshot import ClusterSnapshot, GpuState, NodeState, WorkloadState, frozen_map

__all__ = [
    "RAY_ORIGIN_KIND_LABEL",
    "RAY_ORIGIN_NAME_LABEL",
    "StallConfig",
    "StallResult",
    "StallTrack",
    "StalledWorkload",
    "decide_stalls",
    "merge_owners",
    "owner_key",
    "ray_clusters_to_watch",
    "remember_owner",
    "stall_config",
    "workload_gpus",
]

MAX_LISTED = 1000  # entries in a deactivate_* list
MIN_WINDOW_SECONDS = 60.0  # a shorter stall window would call a data-loading pause a stall
MAX_SECONDS = 30 * 86400.0  # the longest window / deactivation delay
MAX_OWNERS = 10_000  # deactivated owners remembered at most (the oldest go first)
DEFAULT_DEACTIVATE_AFTER_SECONDS = 7200.0


def format_duration(seconds: float) -> str:
    """``7200`` -> ``2h``, ``5400`` -> ``1h30m``, ``1800`` -> ``30m``, ``90`` -> ``1m30s`` (whole seconds)."""
    total = max(0, round(seconds))
    h, rest = divmod(total, 3600)
    m, s = divmod(rest, 60)
    text = (f"{h}h" if h else "") + (f"{m}m" if m else "") + (f"{s}s" if s else "")
    return text or "0s"


@dataclass(frozen=True, slots=True)
class StallConfig:
    """Knobs of the stall detector (config section ``stall:``)."""

    enabled: bool = True
    gpu_utilization: float = 0.05  # a GPU under this is idle
    window_seconds: float = 1800.0  # every GPU of the workload idle this long: stalled (reported)
    # opted in: deactivated once every GPU stayed idle this long (>= window_seconds)
    deactivate_after_seconds: float = DEFAULT_DEACTIVATE_AFTER_SECONDS
    deactivate_cluster_queues: tuple[str, ...] = ()  # opt-in: deactivate stalled workloads of these
    deactivate_namespaces: tuple[str, ...] = ()  # opt-in: and of these namespaces
    # Ray's evidence: nothing running or waiting on the workload's RayCluster this long before it goes
    ray_quiet_seconds: float = 1800.0
    deactivate_serving: bool = False  # RayService workloads are never deactivated unless this is set
    without_ray_signal: str = "hold"  # a Ray workload without a fresh Ray signal: hold | deactivate
    # a workload its owner reactivated after a deactivation (Kueue's schedulingStats): hold (only an ended
    # Ray job deactivates it again) | deactivate (judged as any other)
    reactivated: str = "hold"
    # with ``reactivated: hold``: a job created again under the name of one deactivated less than this ago is
    # held as a reactivated one (0: not remembered)
    remember_owners_seconds: float = 7 * 86400.0

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"stall.enabled must be true or false, not {brief_repr(self.enabled)}")
        u = self.gpu_utilization
        if isinstance(u, bool) or not isinstance(u, int | float) or not 0 < u <= 1:
            raise ValueError(f"stall.gpu_utilization must be in (0, 1], got {brief_repr(u)}")
        w = self.window_seconds
        if isinstance(w, bool) or not isinstance(w, int | float) or not MIN_WINDOW_SECONDS <= w <= MAX_SECONDS:
            raise ValueError(f"stall.window must be a duration in [{MIN_WINDOW_SECONDS:g}s, 30 days], got {brief_repr(w)}")
        d = self.deactivate_after_seconds
        if isinstance(d, bool) or not isinstance(d, int | float) or not d <= MAX_SECONDS:  # not: NaN too
            raise ValueError(f"stall.deactivate_after must be a duration in [stall.window, 30 days], got {brief_repr(d)}")
        if d < w:
            raise ValueError(f"stall.deactivate_after ({format_duration(d)}) must be at least stall.window "
                             f"({format_duration(w)}): a workload is reported stalled before it is deactivated")
        q = self.ray_quiet_seconds
        if isinstance(q, bool) or not isinstance(q, int | float) or not 0 <= q <= MAX_SECONDS:
            raise ValueError(f"stall.ray_quiet must be a duration of at most 30 days, got {brief_repr(q)}")
        if not isinstance(self.deactivate_serving, bool):
            raise ValueError(f"stall.deactivate_serving must be true or false, not {brief_repr(self.deactivate_serving)}")
        if self.without_ray_signal not in ("hold", "deactivate"):
            raise ValueError(f"stall.without_ray_signal must be hold or deactivate, not {brief_repr(self.without_ray_signal)}")
        if self.reactivated not in ("hold", "deactivate"):
            raise ValueError(f"stall.reactivated must be hold or deactivate, not {brief_repr(self.reactivated)}")
        r = self.remember_owners_seconds
        if isinstance(r, bool) or not isinstance(r, int | float) or not 0 <= r <= MAX_SECONDS:
            raise ValueError(f"stall.remember_owners must be a duration of at most 30 days, got {brief_repr(r)}")
        for name in ("deactivate_cluster_queues", "deactivate_namespaces"):
            items = getattr(self, name)
            if not isinstance(items, tuple) or len(items) > MAX_LISTED or not all(
                    isinstance(x, str) and x and len(x) <= 253 for x in items):
                raise ValueError(f"stall.{name} must be a list of at most {MAX_LISTED} names, "
                                 f"got {brief_repr(items)}")

    def deactivates(self, wl: WorkloadState) -> bool:
        """Whether stalled workloads like ``wl`` are to be deactivated (opted in by ClusterQueue or namespace)."""
        return (wl.cluster_queue or "") in self.deactivate_cluster_queues or wl.namespace in self.deactivate_namespaces


def _names(value: object, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise ValueError(f"{key} must be a list of names, not {brief_repr(value)}")
    out = []
    for v in value:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{key}: every entry must be a non-empty name, not {brief_repr(v)}")
        out.append(v.strip())
    return tuple(out)


def stall_config(settings: Mapping[str, object] | None) -> StallConfig:
    """``StallConfig`` from the parsed configuration (its ``stall:`` section); ValueError naming the
    key for an unknown key or a malformed value."""
    section = (settings or {}).get("stall")
    if not section:
        return StallConfig()
    if not isinstance(section, Mapping):
        raise ValueError("config section 'stall' must be a mapping")
    names = {f.name for f in fields(StallConfig)}
    known = sorted(names - {"window_seconds", "deactivate_after_seconds", "ray_quiet_seconds", "remember_owners_seconds"}
                   | {"window", "deactivate_after", "ray_quiet", "remember_owners"})
    changes: dict[str, Any] = {}
    for key, raw in section.items():
        k = str(key).replace("-", "_")
        try:
            if k in ("enabled", "deactivate_serving"):
                changes[k] = parse_bool(raw)
            elif k in ("ray_quiet", "ray_quiet_seconds"):
                changes["ray_quiet_seconds"] = parse_duration(raw)
            elif k in ("remember_owners", "remember_owners_seconds"):
                changes["remember_owners_seconds"] = parse_duration(raw)
            elif k in ("without_ray_signal", "reactivated"):
                changes[k] = str(raw).strip().lower()
            elif k == "gpu_utilization":
                changes[k] = parse_ratio(raw)
            elif k in ("window", "window_seconds"):
                changes["window_seconds"] = parse_duration(raw)
            elif k in ("deactivate_after", "deactivate_after_seconds"):
                changes["deactivate_after_seconds"] = parse_duration(raw)
            elif k in ("deactivate_cluster_queues", "deactivate_namespaces"):
                changes[k] = _names(raw, k)
            else:
                raise ValueError(f"unknown key {brief_repr(key)} (known: {known})")
        except (ValueError, TypeError, ArithmeticError) as e:
            raise ValueError(f"config stall.{str(key)[:64]}: {e}") from None
    if "deactivate_after_seconds" not in changes and changes.get("window_seconds", 0) > DEFAULT_DEACTIVATE_AFTER_SECONDS:
        # a window set longer than the default delay (valid before the delay existed): deactivate at the window
        changes["deactivate_after_seconds"] = changes["window_seconds"]
    try:
        return replace(StallConfig(), **changes)
    except (ValueError, TypeError) as e:
        raise ValueError(f"config stall: {e}") from None


@dataclass(frozen=True, slots=True)
class StallTrack:
    """One workload's stall timer (kept by the caller between passes)."""

    since: float  # first seen with every GPU under the threshold
    admitted_at: float | None  # the admission this timer belongs to
    reported: bool = False  # the StalledWorkload Event for this stall is due/done
    deactivated: bool = False  # the deactivation for this stall was decided
    quiet_since: float | None = None  # first seen with Ray reporting nothing running or waiting
    held: str = ""  # the evidence kind a due deactivation was last held for ("" when not held)

    def rollback_deactivation(self) -> StallTrack:
        """The deactivation was not written: decide it again next pass (the writer backs off)."""
        return replace(self, deactivated=False)


@dataclass(frozen=True, slots=True)
class StalledWorkload:
    """A workload stalled for at least the window."""

    namespace: str
    name: str
    uid: str
    resource_version: str
    cluster_queue: str
    owner_kind: str
    owner_name: str
    gpus: int  # GPUs attributed to it
    stalled_for: float  # seconds every GPU has been idle
    new: bool  # first pass of this stall past the window: report it
    deactivate: bool  # opted in, idle for deactivate_after, not yet deactivated in this stall: deactivate it now
    reason: str
    message: str  # the report (and, when ``deactivate``, the deactivation): how long idle, what happens next
    # opted in: when the deactivation is (was) due, epoch seconds (the stall's start + deactivate_after);
    # None: not opted in, reported only
    deactivate_at: float | None = None
    evidence: str = ""  # what Ray said (``ray_evidence``), named in every report
    evidence_kind: str = "none"
    # a due deactivation held back by what Ray says ("" when not held); ``held_new``: first pass held so
    held: str = ""
    held_new: bool = False

    def deactivate_in(self, now: float) -> float | None:
        """Seconds until the deactivation is due (0 when due or past), None when not opted in."""
        return None if self.deactivate_at is None else max(0.0, self.deactivate_at - now)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class StallResult:
    stalled: tuple[StalledWorkload, ...]
    history: Mapping[str, StallTrack] = field(default_factory=frozen_map)  # workload key -> track
    held: str = ""  # why no workload could be judged this pass ("" when it could)


def _by_job_name(names: Mapping[tuple[str, str], WorkloadState], namespace: str, pod: str) -> WorkloadState | None:
    """The workload whose job name the pod name starts with (``<job>-...``), the longest first: one
    lookup per ``-`` in the pod name, not one per workload."""
    i = len(pod)
    while (i := pod.rfind("-", 0, i)) > 0:
        found = names.get((namespace, pod[:i]))
        if found is not None:
            return found
    return None


_Owners = tuple[dict[tuple[str, str, str], WorkloadState], dict[tuple[str, str], WorkloadState]]
_RayPods = dict[str, list[tuple[frozenset[str], str | None]]]  # namespace -> (worker pods, owner key)
_Found = tuple[tuple[str, tuple[GpuState, ...]], ...]  # a node's pods' GPUs by workload key


def workload_gpus(snapshot: ClusterSnapshot, candidates: Sequence[WorkloadState]) -> dict[str, list[GpuState]]:
    """Workload key -> the GPUs the GPU signal attributes to its pods (only ``candidates``), in node
    and GPU order."""
    by_owner, by_name = _owners(candidates)
    ray_pods = _ray_pods(snapshot, by_owner)
    out: dict[str, list[GpuState]] = {}
    nodes = snapshot.nodes
    for name in sorted(nodes):
        for key, gpus in _attributed(nodes[name], by_name, ray_pods):
            out.setdefault(key, []).extend(gpus)
    return out


def _owners(candidates: Sequence[WorkloadState]) -> _Owners:
    """The candidates by (namespace, owner kind, owner name) and by (namespace, job name)."""
    by_owner = {(w.namespace, w.owner_kind, w.owner_name): w for w in candidates if w.owner_name}
    by_name: dict[tuple[str, str], WorkloadState] = {}
    for w in candidates:  # one job name, several kinds: the first by key
        if w.owner_name:
            seen = by_name.get((w.namespace, w.owner_name))
            if seen is None or w.key < seen.key:
                by_name[(w.namespace, w.owner_name)] = w
    return by_owner, by_name


def _ray_pods(snapshot: ClusterSnapshot, by_owner: Mapping[tuple[str, str, str], WorkloadState]) -> _RayPods:
    """A Ray worker's pod belongs to the Workload of its RayCluster, or to none (a RayCluster no
    candidate owns: its pods are not looked up by job name)."""
    ray_pods: _RayPods = {}
    for rc in snapshot.ray_clusters.values():
        wl = by_owner.get((rc.namespace, "RayCluster", rc.name))
        origin = rc.labels.get(RAY_ORIGIN_NAME_LABEL)
        if wl is None and origin:
            wl = by_owner.get((rc.namespace, rc.labels.get(RAY_ORIGIN_KIND_LABEL, "RayJob"), origin))
        for g in rc.groups:
            if g.worker_pods:
                ray_pods.setdefault(rc.namespace, []).append((g.worker_pods, wl.key if wl is not None else None))
    return ray_pods


def _attributed(node: NodeState, by_name: Mapping[tuple[str, str], WorkloadState], ray_pods: _RayPods) -> _Found:
    """The node's pods' GPUs (a pod's GPUs in GPU order) by the key of the workload each pod belongs to."""
    out = []
    for pod, gpus in node.gpus_by_pod:
        key: str | None = None
        for pods, ray_owner in ray_pods.get(pod.namespace, ()):
            if pod.name in pods:
                key = ray_owner
                break
        else:  # not a Ray worker: by job name
            owner = _by_job_name(by_name, pod.namespace, pod.name)
            key = owner.key if owner is not None else None
        if key is not None:
            out.append((key, gpus))
    return tuple(out)


def _count_busy(gpus: Sequence[GpuState], limit: float) -> int:
    """The GPUs not known to be under ``limit``."""
    return sum(1 for g in gpus if g.utilization is None or not g.utilization < limit)


def _candidate(wl: WorkloadState) -> bool:
    return wl.admitted and wl.active and not wl.finished and not wl.evicted and wl.gpu_demand > 0


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _sources(gpus: Sequence[GpuState]) -> str:
    return "/".join(sorted({g.utilization_source for g in gpus if g.utilization_source}))


def owner_key(namespace: str, kind: str, name: str) -> str | None:
    """``namespace/kind/name`` of a workload's owning job (None when its owner is not known): what a job
    created again under the same name shares with the one before it."""
    return f"{namespace}/{kind}/{name}" if kind and name else None


def remember_owner(owners: Mapping[str, float], key: str | None, config: StallConfig, now: float) -> dict[str, float]:
    """``owners`` (owner key -> when a workload of it was last deactivated) with ``key`` deactivated at
    ``now``; entries older than ``config.remember_owners_seconds`` dropped, and at most ``MAX_OWNERS`` kept
    (the most recent)."""
    keep = {k: t for k, t in owners.items() if now - t < config.remember_owners_seconds}
    if key is not None and config.remember_owners_seconds > 0:
        keep.pop(key, None)
        keep[key] = now
    if len(keep) > MAX_OWNERS:
        keep = dict(sorted(keep.items(), key=lambda kv: (kv[1], kv[0]))[-MAX_OWNERS:])
    return keep


def merge_owners(a: Mapping[str, float], b: Mapping[str, float]) -> dict[str, float]:
    """Two owner memories as one: every owner of either, at the later of its times."""
    out = dict(a)
    for key, t in b.items():
        out[key] = max(t, out.get(key, t))
    return out


def decide_stalls(
    snapshot: ClusterSnapshot, config: StallConfig, history: Mapping[str, StallTrack], now: float,
    owners: Mapping[str, float] | None = None,
) -> StallResult:
    """The stalled workloads of ``snapshot`` and the timers for the next pass (see the module doc).
    ``owners``: the owners of workloads deactivated before (``remember_owner``), with when."""
    if not config.enabled:
        return StallResult((), frozen_map(), "the stall detector is off (stall.enabled: false)")
    if snapshot.gpu_signal_stale():
        # no verdict on incomplete data; the timers start over when the signal is back
        return StallResult((), frozen_map(), "GPU signal stale")
    candidates = [w for w in snapshot.workloads.values() if _candidate(w)]
    by_key = {w.key: w for w in candidates}
    limit = config.gpu_utilization
    # a candidate no GPU is attributed to is not stalled; one busy or unknown GPU: not stalled (timer reset)
    gpus_of = workload_gpus(snapshot, candidates)
    idle = [(key, gpus_of[key]) for key in sorted(gpus_of) if _count_busy(gpus_of[key], limit) == 0]
    evidence = evidence_of(snapshot, candidates, (key for key, _ in idle), now)
    tracks: dict[str, StallTrack] = {}
    stalled: list[StalledWorkload] = []
    for key, gpus in idle:
        wl = by_key[key]
        ev = evidence[key]
        old = history.get(wl.key)
        track = old if old is not None and old.admitted_at == wl.admitted_at else StallTrack(now, wl.admitted_at)
        quiet_since = (track.quiet_since if track.quiet_since is not None else now) if ev.kind == "quiet" else None
        track = replace(track, quiet_since=quiet_since)
        stalled_for = now - track.since
        if stalled_for < config.window_seconds:
            tracks[wl.key] = track
            continue
        new = not track.reported
        opted_in = config.deactivates(wl)
        deactivate_at = track.since + config.deactivate_after_seconds if opted_in else None
        # report at the window, act at the delay (a stall that ends before it is never deactivated), and
        # only where what Ray says lets it go
        due = opted_in and not track.deactivated and stalled_for >= config.deactivate_after_seconds
        gone_at = _owner_deactivated_at(wl, owners, config, now) if due else None
        why_not, held_kind = _held_by(wl, ev, quiet_since, config, now, gone_at) if due else ("", "")
        deactivate = due and not why_not
        tracks[wl.key] = track = replace(track, reported=True, deactivated=track.deactivated or deactivate,
                                          held=held_kind)
        source = _sources(gpus)
        use = f"GPU {source}" if source else "GPU utilization"
        top = max(g.utilization or 0.0 for g in gpus)
        owner = f" ({wl.owner_kind} {wl.owner_name})" if wl.owner_kind and wl.owner_name else ""
        msg = (f"workload {wl.key}{owner} in ClusterQueue {wl.cluster_queue or '?'}: all {len(gpus)} GPU(s) under "
               f"{config.gpu_utilization:.0%} {use} (highest {top:.0%}) for {format_duration(stalled_for)}, "
               f"since {_utc(track.since)} (stall window {format_duration(config.window_seconds)}); {ev.text}")
        if deactivate:
            msg += (f"; every GPU idle for {format_duration(stalled_for)} (stall.deactivate_after "
                    f"{format_duration(config.deactivate_after_seconds)}): deactivating it (spec.active: false) so "
                    "that Kueue releases its quota; set spec.active: true to queue it again")
        elif why_not:
            msg += f"; deactivation held: {why_not}"
        elif opted_in and track.deactivated:
            msg += "; deactivation already requested"
        elif deactivate_at is not None:
            msg += (f"; will be deactivated (spec.active: false) at {format_duration(config.deactivate_after_seconds)} "
                    f"idle, at {_utc(deactivate_at)} (in {format_duration(deactivate_at - now)}), unless a GPU "
                    "gets busy or Ray shows work")
        reason = (R.STALLED_WORKLOAD_DEACTIVATED if deactivate else R.STALL_DEACTIVATION_HELD if why_not
                  else R.STALLED_WORKLOAD)
        stalled.append(StalledWorkload(
            namespace=wl.namespace, name=wl.name, uid=wl.uid, resource_version=wl.resource_version,
            cluster_queue=wl.cluster_queue or "", owner_kind=wl.owner_kind, owner_name=wl.owner_name,
            gpus=len(gpus), stalled_for=stalled_for, new=new, deactivate=deactivate, reason=reason,
            message=msg[:1024], deactivate_at=deactivate_at, evidence=ev.text, evidence_kind=ev.kind,
            held=why_not, held_new=bool(why_not) and (old is None or old.held != held_kind)))
    return StallResult(tuple(stalled), frozen_map(tracks))


def ray_clusters_to_watch(snapshot: ClusterSnapshot, config: StallConfig) -> frozenset[str]:
    """The RayClusters ("ns/name") whose Ray view a deactivation decided on ``snapshot`` could weigh:
    the cluster of each workload opted in to deactivation (``config.deactivates``) whose every GPU is
    idle (its stall timer runs), unless what Ray would say cannot change the decision (a serving
    workload; a RayJob whose Ray job ended).  Empty while the detector is off, nothing is opted in,
    or the GPU signal is stale (no stall is judged then)."""
    if not config.enabled or not (config.deactivate_cluster_queues or config.deactivate_namespaces):
        return frozenset()
    if snapshot.gpu_signal_stale():
        return frozenset()
    candidates = [w for w in snapshot.workloads.values() if _candidate(w)]
    clusters = clusters_by_workload(snapshot, (w for w in candidates if config.deactivates(w)))
    if not clusters:
        return frozenset()
    gpus_of = workload_gpus(snapshot, candidates)  # attributed as decide_stalls attributes them
    by_key = {w.key: w for w in candidates}
    out: set[str] = set()
    for key, rc in clusters.items():
        gpus = gpus_of.get(key)
        if not gpus or _count_busy(gpus, config.gpu_utilization):
            continue
        wl = by_key[key]
        if wl.owner_kind == SERVING_KIND or rc.labels.get(RAY_ORIGIN_KIND_LABEL) == SERVING_KIND:
            continue
        job = snapshot.ray_jobs.get(f"{wl.namespace}/{wl.owner_name}") if wl.owner_kind == "RayJob" else None
        if job is not None and job.finished:
            continue
        out.add(rc.key)
    return frozenset(out)


def _owner_deactivated_at(wl: WorkloadState, owners: Mapping[str, float] | None, config: StallConfig,
                          now: float) -> float | None:
    """When a workload of ``wl``'s owner was deactivated, if within ``remember_owners`` (else None)."""
    key = owner_key(wl.namespace, wl.owner_kind, wl.owner_name)
    t = owners.get(key) if owners and key is not None else None
    return t if t is not None and now - t < config.remember_owners_seconds else None


def _brought_back(wl: WorkloadState, owner_gone_at: float | None) -> str:
    """How its owner brought ``wl`` back after a deactivation ("" when it did not): reactivated (Kueue's
    history on the Workload) or its job created again under the same name (the owners remembered)."""
    if wl.deactivations:
        return f"reactivated after {wl.deactivations} deactivation(s) (Kueue's schedulingStats)"
    if owner_gone_at is not None:
        return (f"{wl.owner_kind} {wl.owner_name} created again after a deactivation at {_utc(owner_gone_at)} "
                "(stall.remember_owners)")
    return ""


def _held_by(wl: WorkloadState, ev: Evidence, quiet_since: float | None, config: StallConfig,
             now: float, owner_gone_at: float | None = None) -> tuple[str, str]:
    """Why the evidence holds a due deactivation back ("" when it lets it go), and the kind of hold (the
    evidence's kind, or ``reactivated``: a new kind is reported again)."""
    why, kind = "", str(ev.kind)
    if ev.kind == "serving":
        why = "" if config.deactivate_serving else "a serving workload is not deactivated (stall.deactivate_serving)"
    elif ev.kind == "active":
        why = "Ray shows the workload at work"
    elif ev.kind == "unknown":
        why = "" if config.without_ray_signal == "deactivate" else "no verdict without Ray's view (stall.without_ray_signal)"
    elif (back := _brought_back(wl, owner_gone_at)) and config.reactivated == "hold" and ev.kind in ("quiet", "none"):
        # its owner brought it back after a deactivation: the job is wanted, and a pause Ray does not see
        # looks the same as the last one; an ended Ray job (``finished``) still goes
        why, kind = f"{back}: only an ended Ray job deactivates it again (stall.reactivated)", "reactivated"
    elif ev.kind == "quiet" and quiet_since is not None and now - quiet_since < config.ray_quiet_seconds:
        why = (f"Ray quiet for {format_duration(now - quiet_since)} of the {format_duration(config.ray_quiet_seconds)} "
               "it must be (stall.ray_quiet)")
    return why, kind if why else ""
