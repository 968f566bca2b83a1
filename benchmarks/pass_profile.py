"""Where a simulated month's time goes, and how much of it an exact skip of unchanged work could save.

Runs the simulator (the controller's own reconcilers) over a Philly window for a few policies and times,
with ``time.perf_counter`` around each part of the engine, what one control pass costs: the snapshot
build, each reconciler, the accounting, the KubeRay operator's reconcile, the Kueue passes between
ticks and the other events.  Beside it, how often a pass's inputs are unchanged from the previous
pass's (the snapshot builder hands out the same immutable objects while nothing in them moved, so
"unchanged" is identity): the whole snapshot, its Workloads, its nodes, its ClusterQueues, and each
RayCluster's worker group with Ray's demand.  Those shares bound what skipping unchanged work exactly
could save (a skipped pass must also not depend on the time, which only lowers the bound).

Writes ``results/pass_profile.md`` and ``pass_profile.json``.  The timers add about a microsecond per
timed call; the run's numbers are the same as without them (tested).

    python benchmarks/pass_profile.py                    # the Philly week, 3 policies (make bench-full)
    python benchmarks/pass_profile.py --hours 24 --policies static
    python benchmarks/pass_profile.py --render-only
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from autoscaler.core.snapshot import ClusterSnapshot  # noqa: E402
from benchmarks.sim_runs import page_data, provenance, run_pool, window_parser  # noqa: E402
from simulator.engine import POLICIES, Engine, SimConfig  # noqa: E402
from simulator.inputs import load_window  # noqa: E402
from simulator.snapshot import RayClusterMap  # noqa: E402

# (policy, stall reclaim): queuepilot as deployed to cut waste, Ray's own autoscaler, and the floor (static)
DEFAULT_RUNS = ("queuepilot-reclaim+stall", "ray-idle", "static")
# the parts of a pass, in the order the page lists them (each a timer key)
PARTS = ("snapshot build", "reconciler: AdmissionReconciler", "reconciler: ScalingReconciler",
         "reconciler: StallReconciler", "reconciler: RecommendationReconciler", "baseline scaler",
         "accounting", "KubeRay operator (workers, task assignment)")


class PassProfile:
    """Timers and input-reuse counts for one engine; ``attach`` wraps the engine's parts in place."""

    def __init__(self) -> None:
        self.seconds: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.reuse: Counter[str] = Counter()
        self._last: ClusterSnapshot | None = None
        self._before: ClusterSnapshot | None = None

    def _timed(self, key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        return wrapper

    def _timed_async(self, key: str, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await fn(*a, **kw)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        return wrapper

    def attach(self, eng: Engine) -> None:
        builder = eng.snapshots
        build = builder.build

        def build_and_compare(*a: Any, **kw: Any) -> ClusterSnapshot:
            snap = build(*a, **kw)
            self._compare(snap)
            return snap

        builder.build = self._timed("snapshot build", build_and_compare)  # type: ignore[method-assign]
        for r in eng.reconcilers:
            r.reconcile = self._timed_async(f"reconciler: {type(r).__name__}", r.reconcile)
        eng._on_tick = self._timed_async("tick", eng._on_tick)  # type: ignore[method-assign]
        eng._on_pass = self._timed_async("Kueue pass", eng._on_pass)  # type: ignore[method-assign]
        eng._account = self._timed("accounting", eng._account)  # type: ignore[method-assign]
        eng._reconcile_workers = self._timed("KubeRay operator (workers, task assignment)",  # type: ignore[method-assign]
                                             eng._reconcile_workers)
        eng._assign = self._timed("KubeRay operator (workers, task assignment)", eng._assign)  # type: ignore[method-assign]
        if eng.policy.baseline is not None:
            eng.policy.baseline.decide = self._timed("baseline scaler", eng.policy.baseline.decide)  # type: ignore[method-assign]

    def _compare(self, snap: ClusterSnapshot) -> None:
        """Count which parts of the previous snapshot are the very objects of the one before it: a pass
        later, so that the previous pass's reconcilers have read (and so built) its RayClusters if they
        read them at all (``RayClusterMap``; a pass that read none is counted apart)."""
        prev, older = self._last, self._before
        if prev is not None and older is not None:
            self._pair(older, prev)
        self._before, self._last = prev, snap

    def finish(self) -> None:
        """Compare the run's last snapshot with the one before it (after the run)."""
        if self._last is not None and self._before is not None:
            self._pair(self._before, self._last)
        self._before = self._last = None

    def _pair(self, last: ClusterSnapshot, snap: ClusterSnapshot) -> None:
        r = self.reuse
        r["snapshots"] += 1
        nodes = snap.nodes is last.nodes
        wls = len(snap.workloads) == len(last.workloads) and all(
            last.workloads.get(k) is v for k, v in snap.workloads.items())
        cqs = snap.cluster_queues is last.cluster_queues
        read = _read(snap.ray_clusters)
        r["ray clusters read"] += read
        groups_same = 0
        if read and _read(last.ray_clusters):
            for k, rc in snap.ray_clusters.items():
                old = last.ray_clusters.get(k)
                same = old is not None and len(old.groups) == len(rc.groups) and old.demand is rc.demand and all(
                    a is b for a, b in zip(old.groups, rc.groups, strict=True))
                r["groups"] += 1
                groups_same += same
        r["groups unchanged"] += groups_same
        r["nodes unchanged"] += nodes
        r["workloads unchanged"] += wls
        r["cluster queues unchanged"] += cqs
        # a pass that read no RayCluster did not depend on them
        r["all unchanged"] += nodes and wls and cqs and (not read or groups_same == len(snap.ray_clusters))


def _read(rays: Mapping[str, Any]) -> bool:
    """Whether a snapshot's RayClusters were built: always for an eager map; for a pass's
    ``RayClusterMap``, when a reconciler read them."""
    return not isinstance(rays, RayClusterMap) or rays.built


def run_one(args: tuple[str, str, str, float, str, int, float]) -> dict[str, Any]:
    """One profiled run in a pool worker: ``label`` is a policy, ``+stall`` for stall reclaim on."""
    label, trace, start, hours, model, seed, rate = args
    policy, stall = label.removesuffix("+stall"), label.endswith("+stall")
    cfg = SimConfig(seed=seed, gpu_failure_rate=rate, stall_reclaim=stall)  # as the policy benchmarks run
    window = load_window(trace, start, hours, seed, cfg.nodes * cfg.gpus_per_node, util_model=model)
    eng = Engine(window.jobs, hours * 3600.0, policy, cfg)
    prof = PassProfile()
    prof.attach(eng)
    t0, c0 = time.perf_counter(), time.process_time()
    eng.run()
    wall = time.perf_counter() - t0
    prof.finish()
    return {"label": label, "wall_s": round(wall, 2), "cpu_s": round(time.process_time() - c0, 2),
            "seconds": {k: round(v, 3) for k, v in prof.seconds.items()}, "calls": dict(prof.calls),
            "reuse": dict(prof.reuse), "summary": eng.metrics.summary()}


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole > 0 else "-"


def cost_rows(run: Mapping[str, Any]) -> list[tuple[str, float, int]]:
    """(part, seconds, calls) for the page's table, each inclusive: the parts of a pass, then the ticks
    and the Kueue passes whole, then what runs outside both (the other events, the event loop). The
    snapshot build and the admission reconciler run at ticks and in Kueue passes; their rows hold both,
    and the KubeRay operator's also the reconciles that events outside a tick trigger."""
    s, c = run["seconds"], run["calls"]
    rows = [(p, float(s[p]), int(c.get(p, 0))) for p in PARTS if p in s]
    tick, kueue = float(s.get("tick", 0.0)), float(s.get("Kueue pass", 0.0))
    rows.append(("ticks, all of each", tick, int(c.get("tick", 0))))
    rows.append(("Kueue passes, all of each", kueue, int(c.get("Kueue pass", 0))))
    rows.append(("outside ticks and Kueue passes (the other events, the event loop)",
                 max(0.0, float(run["wall_s"]) - tick - kueue), 0))
    return rows


def bounds(run: Mapping[str, Any]) -> dict[str, float]:
    """What skipping unchanged work exactly could save at most, as a share of the run's wall time."""
    r, s = run["reuse"], run["seconds"]
    total = float(run["wall_s"])
    snaps = max(1, r.get("snapshots", 0))
    groups = max(1, r.get("groups", 0))
    tick = float(s.get("tick", 0.0))
    scaling = float(s.get("reconciler: ScalingReconciler", 0.0))
    return {"skip_passes_saves": (r.get("all unchanged", 0) / snaps) * tick / total if total else 0.0,
            "skip_groups_saves": (r.get("groups unchanged", 0) / groups) * scaling / total if total else 0.0}


def render(data: Mapping[str, Any]) -> str:
    meta = data["meta"]
    lines = [
        "# Where a simulated run's time goes",
        "",
        f"Generated {meta['generated']} by `{meta['command']}`, git {meta['git']}. Machine: {meta['machine']}.",
        "",
        f"Philly trace, {meta['hours']:g} h from {meta['start']}; utilization model `{meta['model']}`, seed "
        f"{meta['seed']}, GPU failure rate {meta['rate']:g} per GPU per day; one process per run. "
        "Each part is timed with `time.perf_counter` around it (inclusive: the snapshot build and the "
        "admission reconciler are timed where they run, at ticks and in Kueue passes; RayClusters that a "
        "pass's snapshot builds at their first read, `RayClusterMap`, in the part that reads them). The control "
        f"interval is the controller's resync, 30 s: {meta['hours'] * 120:,.0f} ticks over the window. "
        "Each run is configured as the policy benchmarks run it (`SimConfig` defaults, the seed, failure rate "
        "and stall reclaim set).",
        "",
    ]
    for run in data["runs"]:
        total = float(run["wall_s"])
        ticks = int(run["calls"].get("tick", 0))
        lines += [f"## `{run['label']}`", "",
                  f"{total:,.1f} s wall ({run['cpu_s']:,.1f} CPU s) for {ticks:,} ticks: "
                  f"{1e3 * total / max(1, ticks):.2f} ms of run per tick, events included.", "",
                  "| part | seconds | share of the run | calls | us per call |", "|---|---:|---:|---:|---:|"]
        for part, secs, calls in cost_rows(run):
            calls_col = f"{calls:,} | {1e6 * secs / calls:,.0f}" if calls else " | "
            lines.append(f"| {part} | {secs:,.1f} | {_share(secs, total)} | {calls_col} |")
        r = run["reuse"]
        snaps = max(1, r.get("snapshots", 0))
        b = bounds(run)
        lines += ["", "Inputs unchanged from the previous snapshot (the same objects):", "",
                  "| part | unchanged |", "|---|---:|",
                  f"| the whole snapshot | {_share(r.get('all unchanged', 0), snaps)} |",
                  f"| its Workloads | {_share(r.get('workloads unchanged', 0), snaps)} |",
                  f"| its nodes (GPU health and utilization) | {_share(r.get('nodes unchanged', 0), snaps)} |",
                  f"| its ClusterQueues (usage) | {_share(r.get('cluster queues unchanged', 0), snaps)} |",
                  f"| a RayCluster's worker group and Ray's demand (per RayCluster, where two passes in a row "
                  f"read them) | {_share(r.get('groups unchanged', 0), r.get('groups', 0))} |",
                  "",
                  f"The RayClusters were read (and so built) in {_share(r.get('ray clusters read', 0), snaps)} of "
                  "the passes; a pass that reads none builds none (`RayClusterMap`).",
                  "",
                  f"At most, skipping every tick whose snapshot is unchanged would save "
                  f"{100 * b['skip_passes_saves']:.1f} % of this run, and skipping every scaling decision whose "
                  f"group and demand are unchanged {100 * b['skip_groups_saves']:.1f} % (less where the "
                  "decision moves with the time alone: idle windows, stabilization, the reclaim budget's hour).",
                  ""]
    lines += ["## Reading", "", *reading(data["runs"]), ""]
    return "\n".join(lines)


def reading(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """What the tables say, from their numbers: each run's largest part, and the most an exact skip of
    unchanged work could save in any of the runs."""
    out = []
    for run in runs:
        total = float(run["wall_s"])
        parts = [(p, sec) for p, sec, _ in cost_rows(run) if p in PARTS]
        if not parts or total <= 0:
            continue
        part, sec = max(parts, key=lambda x: x[1])
        tick = float(run["seconds"].get("tick", 0.0))
        out.append(f"- `{run['label']}`: the largest part is the {part} ({_share(sec, total)} of the run); the ticks "
                   f"are {_share(tick, total)} of it.")
    bs = [bounds(r) for r in runs if float(r["wall_s"]) > 0]
    if bs:
        out.append(f"- Skipping every tick whose snapshot is unchanged would save at most "
                   f"{100 * max(b['skip_passes_saves'] for b in bs):.1f} % of a run here; skipping every unchanged "
                   f"scaling decision at most {100 * max(b['skip_groups_saves'] for b in bs):.1f} %.")
    return out


def _labels(text: str) -> list[str]:
    out = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in out if s.removesuffix("+stall") not in POLICIES]
    if not out or bad:
        raise argparse.ArgumentTypeError(f"expected policies (a '+stall' suffix for stall reclaim), got {text!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    p = window_parser(__doc__, "pass_profile")
    p.set_defaults(hours=168.0)
    p.add_argument("--model", default="grounded")
    p.add_argument("--policies", type=_labels, default=list(DEFAULT_RUNS),
                   help="comma-separated policies, '+stall' for stall reclaim on")
    args = p.parse_args(argv)

    def run() -> dict[str, Any]:
        meta = provenance("pass_profile.py", argv)
        packed = [(label, args.trace, args.start, args.hours, args.model, args.seed, args.rate)
                  for label in args.policies]
        runs = run_pool(run_one, packed, "profiled runs", args.jobs)
        return {"meta": {**meta, "hours": args.hours, "start": args.start, "model": args.model, "seed": args.seed,
                         "rate": args.rate}, "runs": runs}

    out, data = page_data(args, run)
    (out / f"{args.name}.md").write_text(render(data))
    print(f"wrote {out / (args.name + '.md')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
