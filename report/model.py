"""What the report computes from the series it read: pure functions, no I/O.

GPU-hours are Riemann sums of range-query points: each point stands for one ``step`` of the window
(``start = end - window + step``, so the window's ``window / step`` points cover it exactly once).

Each number is read from the economics recording rules where they ran, and where they did not (not
loaded, or loaded after the history began) from the same expressions evaluated over the raw series
(``servicekit.gpu_economics``: dcgm-exporter's or queuepilot's exporter's GPU series joined to
``queuepilot_pod_info``); ``merge`` takes the rules' points and fills the moments they lack from the raw
evaluation, and the report says how much came from where.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.core.policy import rightsizing as rs
from report.prom import Series
from servicekit import gpu_economics as ge
from servicekit.prices import DEFAULT_PRICE_KEY as DEFAULT_PRICE_KEY  # the key the rules use, too
from servicekit.prices import Prices

# The recording rules the report reads (alerts/economics.py writes them; a test keeps the names equal).
GPU_BUSY = "pod_gpu:queuepilot_gpu_busy:ratio"
POD_ALLOCATED = "namespace_pod:queuepilot_gpus_allocated:count"
POD_ACTIVE = "namespace_pod:queuepilot_gpus_active:sum"
RAY_WORKERS = "queuepilot_raycluster_workers"

TEAM_KEYS = ("namespace", "local_queue", "cluster_queue")
PRICE_KEYS = ("flavor", "modelName")
POD_KEYS = ("namespace", "pod", "raycluster", "group", "job_kind")  # the per-pod rules' labels


def selector(namespace: str | None, *matchers: str) -> str:
    parts = [f'namespace="{namespace}"'] if namespace else []
    parts += [m for m in matchers if m]
    return "{" + ",".join(parts) + "}" if parts else ""


def team_queries(namespace: str | None) -> tuple[str, str]:
    sel = selector(namespace)
    by = ", ".join((*TEAM_KEYS, *PRICE_KEYS))
    return f"count by ({by}) ({GPU_BUSY}{sel})", f"sum by ({by}) ({GPU_BUSY}{sel})"


def pod_queries(namespace: str | None) -> tuple[str, str]:
    sel = selector(namespace)
    return f"{POD_ALLOCATED}{sel}", f"{POD_ACTIVE}{sel}"


def _info_selector(namespace: str | None) -> str:
    return f'{{namespace="{namespace}"}}' if namespace else ""


def raw_team_queries(namespace: str | None) -> tuple[str, str]:
    """``team_queries`` with the recording rule replaced by its expression over the raw series."""
    busy = ge.attributed(ge.busy_per_gpu(), _info_selector(namespace))
    by = ", ".join((*TEAM_KEYS, *PRICE_KEYS))
    return f"count by ({by}) ({busy})", f"sum by ({by}) ({busy})"


def raw_pod_queries(namespace: str | None) -> tuple[str, str]:
    """``pod_queries`` over the raw series: the per-pod rules' expressions with their inputs expanded."""
    sel = _info_selector(namespace)
    by = ", ".join(POD_KEYS)
    busy = ge.attributed(ge.busy_per_gpu(), sel)
    active = ge.attributed(ge.active_per_gpu(), sel)
    return f"count by ({by}) ({busy})", f"sum by ({by}) ({active})"


@dataclass(frozen=True)
class Merged:
    """Series of one quantity from the rules where they have points, else from the raw evaluation."""

    series: list[Series]
    raw_times: frozenset[float]  # the moments taken from the raw evaluation
    times: frozenset[float]  # every moment with data


def merge(recorded: Sequence[Series], raw: Sequence[Series]) -> Merged:
    """``recorded``'s points, and ``raw``'s at every moment where ``recorded`` has none (a moment the rules
    were evaluated keeps their answer whole, so two sources are never mixed within one moment)."""
    covered = frozenset(t for s in recorded for t, _ in s.points)
    by_labels: dict[tuple[tuple[str, str], ...], list[tuple[float, float]]] = {}
    for s in recorded:
        by_labels.setdefault(tuple(sorted(s.labels.items())), []).extend(s.points)
    raw_times: set[float] = set()
    for s in raw:
        points = [(t, v) for t, v in s.points if t not in covered]
        if points:
            by_labels.setdefault(tuple(sorted(s.labels.items())), []).extend(points)
            raw_times.update(t for t, _ in points)
    series = [Series(dict(k), sorted(p)) for k, p in by_labels.items()]
    return Merged(series, frozenset(raw_times), covered | raw_times)


def source_text(raw_times: frozenset[float], times: frozenset[float], step: float) -> str:
    """Where the numbers came from, for the table and the JSON."""
    if not times:
        return "no data"
    if not raw_times:
        return "the economics recording rules"
    raw = ("the raw series (the exporter's DCGM_FI_* GPU series joined to queuepilot_pod_info), with the same "
           "expressions the recording rules use")
    if raw_times == times:
        return f"the recording rules did not run over this window: {raw}"
    return (f"the recording rules, and where they did not run ({len(raw_times) / len(times):.0%} of the moments "
            f"with data, {utc_minute(min(raw_times) - step)} to {utc_minute(max(raw_times))}) {raw}")


def limits_query(namespace: str | None) -> str:
    sel = selector(namespace, 'kind=~"min|max"')
    return f"max by (namespace, raycluster, group, kind) ({RAY_WORKERS}{sel})"


@dataclass
class Team:
    namespace: str
    local_queue: str
    cluster_queue: str
    allocated_gpu_hours: float = 0.0
    used_gpu_hours: float = 0.0
    cost: float | None = None  # of the GPU-hours with a price; None when none had one
    effective_cost: float | None = None
    unpriced_gpu_hours: float = 0.0
    unpriced: set[tuple[str, str]] = field(default_factory=set)  # (flavor, GPU model) with no price
    # per point in time: (t, allocated GPUs, used GPUs, cost per hour, effective cost per hour)
    timeline: dict[float, list[float]] = field(default_factory=dict)

    @property
    def idle_gpu_hours(self) -> float:
        return max(0.0, self.allocated_gpu_hours - self.used_gpu_hours)

    @property
    def waste_ratio(self) -> float | None:
        return self.idle_gpu_hours / self.allocated_gpu_hours if self.allocated_gpu_hours > 0 else None

    def to_json(self) -> dict:
        return {
            "namespace": self.namespace,
            "local_queue": self.local_queue,
            "cluster_queue": self.cluster_queue,
            "allocated_gpu_hours": self.allocated_gpu_hours,
            "used_gpu_hours": self.used_gpu_hours,
            "idle_gpu_hours": self.idle_gpu_hours,
            "waste_ratio": self.waste_ratio,
            "cost": self.cost,
            "effective_cost": self.effective_cost,
            "unpriced_gpu_hours": self.unpriced_gpu_hours,
            "unpriced": [{"flavor": f, "modelName": m} for f, m in sorted(self.unpriced)],
        }


def teams(allocated: Sequence[Series], used: Sequence[Series], step: float, prices: Prices) -> list[Team]:
    """Per (namespace, LocalQueue, ClusterQueue): GPU-hours allocated / used, cost of both at ``prices``."""
    hours = step / 3600.0
    used_by: dict[tuple[str, ...], dict[float, float]] = {
        tuple(s.labels.get(k, "") for k in (*TEAM_KEYS, *PRICE_KEYS)): dict(s.points) for s in used
    }
    out: dict[tuple[str, str, str], Team] = {}
    for s in allocated:
        key = tuple(s.labels.get(k, "") for k in (*TEAM_KEYS, *PRICE_KEYS))
        team_key = (key[0], key[1], key[2])
        team = out.setdefault(team_key, Team(*team_key))
        price = prices.price(key[3], key[4]) if prices else None
        busy = used_by.get(key, {})
        for t, n in s.points:
            u = busy.get(t, 0.0)
            team.allocated_gpu_hours += n * hours
            team.used_gpu_hours += u * hours
            row = team.timeline.setdefault(t, [0.0, 0.0, 0.0, 0.0])
            row[0] += n
            row[1] += u
            if price is None:
                if prices:
                    team.unpriced_gpu_hours += n * hours
                    team.unpriced.add((key[3], key[4]))
            else:
                team.cost = (team.cost or 0.0) + n * price * hours
                team.effective_cost = (team.effective_cost or 0.0) + u * price * hours
                row[2] += n * price
                row[3] += u * price
    return sorted(out.values(), key=lambda t: (-t.idle_gpu_hours, t.namespace, t.local_queue))


def unpriced_warnings(teams: Sequence[Team]) -> list[str]:
    """One line per team with GPU-hours no --price covered: how many, for which flavor / GPU model; their
    cost is left out of the team's cost (never counted as 0 USD)."""
    out = []
    for t in teams:
        if t.unpriced_gpu_hours <= 0:
            continue
        what = ", ".join(f"flavor {f or '(none)'} / model {m or '(unknown)'}" for f, m in sorted(t.unpriced))
        left = "no cost shown" if t.cost is None else "left out of its cost"
        out.append(f"warning: {t.namespace}/{t.local_queue or '-'}: {t.unpriced_gpu_hours:,.1f} GPU-hours had no "
                   f"price ({what}; add --price for them), {left}")
    return out


@dataclass(frozen=True)
class PodHistory:
    groups: dict[rs.GroupKey, list[rs.GroupObservation]]
    job_kinds: dict[tuple[str, str], list[rs.PodObservation]]


def pod_history(allocated: Sequence[Series], active: Sequence[Series], step: float) -> PodHistory:
    """Worker-group observations (pods of a RayCluster) and job-kind observations (the other pods)."""
    def key(s: Series) -> tuple[str, str]:
        return s.labels.get("namespace", ""), s.labels.get("pod", "")

    active_by = {key(s): dict(s.points) for s in active}
    per_group: dict[rs.GroupKey, dict[float, list[rs.WorkerObservation]]] = defaultdict(lambda: defaultdict(list))
    jobs: dict[tuple[str, str], list[rs.PodObservation]] = defaultdict(list)
    for s in allocated:
        ns, pod = key(s)
        acts = active_by.get((ns, pod), {})
        rc, group = s.labels.get("raycluster", ""), s.labels.get("group", "")
        for t, n in s.points:
            a = round(acts.get(t, 0.0))
            if rc:
                per_group[rs.GroupKey(ns, rc, group)][t].append(rs.WorkerObservation(pod, round(n), a))
            else:
                jobs[(ns, s.labels.get("job_kind", "") or "unknown")].append(
                    rs.PodObservation(t, step, pod, round(n), a))
    groups = {
        k: [rs.GroupObservation(t, step, tuple(sorted(ws, key=lambda w: w.pod))) for t, ws in sorted(by_t.items())]
        for k, by_t in per_group.items()
    }
    return PodHistory(groups, dict(jobs))


def limits(series: Sequence[Series]) -> dict[rs.GroupKey, dict[str, int]]:
    out: dict[rs.GroupKey, dict[str, int]] = defaultdict(dict)
    for s in series:
        k = rs.GroupKey(s.labels.get("namespace", ""), s.labels.get("raycluster", ""), s.labels.get("group", ""))
        out[k][s.labels.get("kind", "")] = int(s.points[-1][1])
    return dict(out)


def recommendations(
    history: PodHistory, current: Mapping[rs.GroupKey, Mapping[str, int]], policy: rs.RightsizingPolicy,
) -> list[rs.GroupRecommendation]:
    out = []
    for k in sorted(history.groups, key=lambda k: (k.namespace, k.raycluster, k.group)):
        lim = current.get(k, {})
        out.append(rs.recommend_group(k, history.groups[k], policy, lim.get("min"), lim.get("max")))
    return sorted(out, key=lambda r: (-r.saved_gpu_hours, -r.observed_idle_gpu_hours, r.key.namespace))


def job_kind_recommendations(history: PodHistory, policy: rs.RightsizingPolicy) -> list[rs.JobKindRecommendation]:
    return [rs.recommend_job_kind(ns, kind, obs, policy) for (ns, kind), obs in sorted(history.job_kinds.items())]


def recommendation_json(r: rs.GroupRecommendation) -> dict:
    return {
        "namespace": r.key.namespace,
        "raycluster": r.key.raycluster,
        "group": r.key.group,
        "gpus_per_worker": r.gpus_per_worker,
        "recommended_gpus_per_worker": r.recommended_gpus_per_worker,
        "recommended_min_replicas": r.recommended_min_replicas,
        "recommended_max_replicas": r.recommended_max_replicas,
        "idle_gpu_hours": r.saved_gpu_hours,
        "observed_idle_gpu_hours": r.observed_idle_gpu_hours,
        "reason": r.reason,
        "message": r.message,
    }


def job_kind_json(r: rs.JobKindRecommendation) -> dict:
    return {
        "namespace": r.namespace,
        "job_kind": r.job_kind,
        "requested_gpus_per_pod": r.requested_gpus_per_pod,
        "active_gpus_per_pod": r.active_gpus_per_pod,
        "recommended_gpus_per_pod": r.recommended_gpus_per_pod,
        "reason": r.reason,
        "message": r.message,
    }


@dataclass
class Report:
    window_s: float
    end: float
    step_s: float
    namespace: str | None
    prices: Prices
    teams: list[Team]
    recommendations: list[rs.GroupRecommendation]
    job_kinds: list[rs.JobKindRecommendation]
    empty_reason: str | None = None
    # where the team numbers came from: the moments read from the raw series, and all moments with data
    raw_times: frozenset[float] = frozenset()
    times: frozenset[float] = frozenset()

    @property
    def source(self) -> str:
        return source_text(self.raw_times, self.times, self.step_s)

    @property
    def raw_series_share(self) -> float | None:
        """Share of the moments with data whose numbers were evaluated over the raw series (0-1)."""
        return len(self.raw_times) / len(self.times) if self.times else None

    @property
    def warnings(self) -> list[str]:
        return unpriced_warnings(self.teams)

    def to_json(self) -> dict[str, Any]:
        return {
            "window_s": self.window_s,
            "end": self.end,
            "step_s": self.step_s,
            "namespace": self.namespace,
            "prices": dict(self.prices.by_key),
            "empty_reason": self.empty_reason,
            "source": self.source,
            "raw_series_share": self.raw_series_share,
            "warnings": self.warnings,
            "teams": [t.to_json() for t in self.teams],
            "recommendations": [recommendation_json(r) for r in self.recommendations],
            "job_kinds": [job_kind_json(r) for r in self.job_kinds],
        }


def utc_minute(t: float) -> str:
    """A point in time as the report prints it (``2026-01-31 14:05 UTC``)."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(t))


def dash(v: float | None, fmt: str = "{:,.1f}") -> str:
    """``v`` formatted with ``fmt``; ``-`` where there is no value."""
    return "-" if v is None else fmt.format(v)
