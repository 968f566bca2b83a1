"""Two weeks of synthetic GPU history whose economics are known by construction.

Every 5 minutes, on GPUs of model ``MODEL``:

- team-a (LocalQueue lq-a -> ClusterQueue cq-a, Kueue flavor h100): RayCluster ``rc-tune``, group
  ``gpu-workers``: 3 workers x 8 GPUs. Each worker keeps GPUs 0-3 busy (engine active 0.8 from the
  DCGM profiling field, while ``DCGM_FI_DEV_GPU_UTIL`` says 50 %) and never touches GPUs 4-7.
  Current min = max = 3 replicas.
- team-b (lq-b -> cq-b, flavor h100): a PyTorchJob, 2 pods x 4 GPUs at 90 % utilization, day and
  night (no profiling field). Scraped without honorLabels: its pod labels arrive as ``exported_*``.
- team-c (lq-c -> cq-c, no flavor: priced by GPU model): RayCluster ``rc-notebooks``, group ``workers``:
  4 workers x 2 GPUs, 80 % busy by day (08:00-20:00 UTC), idle at night (0 %, framebuffer released).
  Current min = max = 4 replicas.
- one GPU held by no pod, and the exporter pod of the exported_* node, which holds no GPU.

``queuepilot_pod_info`` for each GPU pod, exported by two controller replicas (the join must not
double count).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from alerts import economics

STEP = 300
DAYS = 14
MODEL = "NVIDIA H100 80GB HBM3"
PRICES = {"h100": 4.0, MODEL: 3.0}  # flavor h100 wins over the model price
# the economics rules as the history is evaluated with them (every 5 minutes, at PRICES)
CONFIG = economics.EconomicsConfig(interval="5m").with_prices(f"{k}={v}" for k, v in PRICES.items())


def is_day(t: float) -> bool:
    return 8 <= (t % 86400) / 3600 < 20


@dataclass(frozen=True)
class Gpu:
    node: str
    index: int
    namespace: str | None
    pod: str | None
    busy: Callable[[float], float]  # 0-1, the truth
    profiling: bool  # whether DCGM_FI_PROF_GR_ENGINE_ACTIVE exists for it
    util_percent: Callable[[float], float]  # what DCGM_FI_DEV_GPU_UTIL says
    fb_mib: Callable[[float], float]
    honor_labels: bool = True


@dataclass(frozen=True)
class Pod:
    namespace: str
    pod: str
    raycluster: str
    group: str
    local_queue: str
    cluster_queue: str
    flavor: str
    job_kind: str


def const(v: float) -> Callable[[float], float]:
    return lambda t: v


TEAM_C_BUSY = lambda t: 0.8 if is_day(t) else 0.0  # noqa: E731


def gpus() -> list[Gpu]:
    out: list[Gpu] = []
    for w in range(3):
        for i in range(8):
            active = i < 4
            out.append(Gpu(f"node-a{w}", i, "team-a", f"rc-tune-gpu-workers-{w}", const(0.8 if active else 0.0), True,
                           const(50.0 if active else 0.0), const(20000.0 if active else 0.0)))
    for p in range(2):
        for i in range(4):
            out.append(Gpu("node-b", p * 4 + i, "team-b", f"bert-worker-{p}", const(0.9), False, const(90.0),
                           const(30000.0), honor_labels=False))
    for w in range(4):
        for i in range(2):
            out.append(Gpu("node-c", w * 2 + i, "team-c", f"rc-notebooks-workers-{w}", TEAM_C_BUSY, False,
                           lambda t: 100 * TEAM_C_BUSY(t), lambda t: 10000.0 if is_day(t) else 0.0))
    out.append(Gpu("node-d", 0, None, None, const(0.0), False, const(0.0), const(0.0)))
    return out


def pods() -> list[Pod]:
    return [
        *(Pod("team-a", f"rc-tune-gpu-workers-{w}", "rc-tune", "gpu-workers", "lq-a", "cq-a", "h100", "RayCluster")
          for w in range(3)),
        *(Pod("team-b", f"bert-worker-{p}", "", "", "lq-b", "cq-b", "h100", "PyTorchJob") for p in range(2)),
        *(Pod("team-c", f"rc-notebooks-workers-{w}", "rc-notebooks", "workers", "lq-c", "cq-c", "", "")
          for w in range(4)),
    ]


WORKER_LIMITS = {("team-a", "rc-tune", "gpu-workers"): (3, 3), ("team-c", "rc-notebooks", "workers"): (4, 4)}


def _labels(d: dict[str, str]) -> str:
    return ",".join(f'{k}="{v}"' for k, v in d.items())


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def openmetrics(end: int, days: int = DAYS) -> Iterator[str]:
    """OpenMetrics text lines of ``days`` days ending at ``end`` (a multiple of STEP): the raw series only
    (the exporter's GPU series, the controller's queuepilot_pod_info and worker counts)."""
    start = end - days * 86400
    times = range(start + STEP, end + 1, STEP)
    families: dict[str, list[tuple[str, Callable[[float], float]]]] = {}

    def add(name: str, labels: dict[str, str], fn: Callable[[float], float]) -> None:
        families.setdefault(name, []).append((_labels(labels), fn))

    for g in gpus():
        base = {"gpu": str(g.index), "UUID": f"GPU-{g.node}-{g.index}", "modelName": MODEL, "Hostname": g.node,
                "job": "queuepilot-exporter", "instance": f"{g.node}:9400"}
        if not g.honor_labels:
            base |= {"namespace": "queuepilot", "pod": f"queuepilot-exporter-{g.node}"}
        if g.pod:
            prefix = "" if g.honor_labels else "exported_"
            base |= {f"{prefix}namespace": g.namespace or "", f"{prefix}pod": g.pod, f"{prefix}container": "main"}
        add("DCGM_FI_DEV_GPU_UTIL", base, g.util_percent)
        add("DCGM_FI_DEV_FB_USED", base, g.fb_mib)
        if g.profiling:
            add("DCGM_FI_PROF_GR_ENGINE_ACTIVE", base, g.busy)
    for p in pods():
        for instance in ("10.0.1.1:8080", "10.0.1.2:8080"):
            labels = {"namespace": p.namespace, "pod": p.pod, "raycluster": p.raycluster, "group": p.group,
                      "cluster_queue": p.cluster_queue, "local_queue": p.local_queue, "flavor": p.flavor,
                      "job_kind": p.job_kind, "job": "queuepilot-controller", "instance": instance}
            add("queuepilot_pod_info", {k: v for k, v in labels.items() if v}, const(1))
    for (ns, rc, group), (lo, hi) in WORKER_LIMITS.items():
        for kind, v in (("min", lo), ("max", hi), ("current", hi)):
            add("queuepilot_raycluster_workers", {"namespace": ns, "raycluster": rc, "group": group, "kind": kind,
                                                  "job": "queuepilot-controller", "instance": "10.0.1.1:8080"},
                const(v))
    for name, series in families.items():
        yield f"# TYPE {name} gauge"
        for labels, fn in series:
            for t in times:
                yield f"{name}{{{labels}}} {_num(fn(t))} {t}"
    yield "# EOF"


# ------------------------------------------------------------------- the answers, from the definitions
def window_steps(end: int, window_s: int) -> list[int]:
    return list(range(end - window_s + STEP, end + 1, STEP))


def team_gpus(namespace: str) -> list[Gpu]:
    return [g for g in gpus() if g.namespace == namespace]


def expected_team(namespace: str, end: int, window_s: int) -> dict[str, float]:
    """GPU-hours allocated / used / idle, waste ratio and cost of a team over the window."""
    hours = STEP / 3600
    mine = team_gpus(namespace)
    pod_flavor = {p.pod: p.flavor for p in pods()}
    allocated = used = cost = effective = 0.0
    for t in window_steps(end, window_s):
        for g in mine:
            price = PRICES.get(pod_flavor[g.pod or ""]) or PRICES[MODEL]
            allocated += hours
            used += g.busy(t) * hours
            cost += price * hours
            effective += price * g.busy(t) * hours
    return {"allocated_gpu_hours": allocated, "used_gpu_hours": used, "idle_gpu_hours": allocated - used,
            "waste_ratio": (allocated - used) / allocated, "cost": cost, "effective_cost": effective}
