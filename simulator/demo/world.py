"""The embedded demo's world: a small simulated cluster under the queuepilot policy, wired to the
real exporter source and the real controller metrics.

``DemoWorld`` owns an ``Engine`` (4 nodes x 8 GPUs, three teams, a synthetic trace), steps it by
simulated time, and after each step:

- drives one ``SimSource`` per node from the simulated GPUs: allocation (namespace/pod/container),
  utilization, and XID 79 + fallen-off-the-bus for a failed GPU (cleared on repair);
- keeps the latest ``ClusterSnapshot`` for the ``ControllerCollector`` and fills ``Published``;
- increments ``ControllerCounters`` from every admission and scaling decision (the reconcilers'
  job in the real controller) and observes queue waits with ``queue_wait.new_admissions``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from autoscaler.core.snapshot import ClusterSnapshot
from exporter.sample import PodRef
from exporter.sources.sim import SimSource
from simulator.engine import Engine, SimConfig
from simulator.workload import SyntheticParams, synthetic

DEMO_TEAMS = ("team-a", "team-b", "team-c")
FAILED_XID = 79  # fallen off the bus
# an "LLM-era" mix (research-traces.md 3.1): more multi-GPU RayJobs than Philly, so admission shows
DEMO_GPU_MIX: tuple[tuple[int, float], ...] = ((1, 60.0), (2, 10.0), (4, 15.0), (8, 15.0))


@dataclass(frozen=True, slots=True)
class DemoConfig:
    nodes: int = 4
    gpus_per_node: int = 8
    speed: float = 60.0  # simulated seconds per real second
    seed: int = 0
    hours: float = 24.0 * 7  # trace length (the demo stops at --duration or when it runs out)
    warmup_s: float = 3 * 3600.0  # simulated before serving, so the first scrape shows a busy cluster
    jobs_per_hour: float = 6.0
    gpu_failure_rate: float = 0.2  # per GPU per day: a failure every ~20 simulated minutes on 32 GPUs


class DemoWorld:
    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        params = SyntheticParams(jobs_per_hour=cfg.jobs_per_hour, teams=DEMO_TEAMS, team_weights=(0.5, 0.3, 0.2),
                                 gpu_mix=DEMO_GPU_MIX)
        window = synthetic(cfg.hours, cfg.seed, cfg.nodes * cfg.gpus_per_node, params)
        sim_cfg = replace(SimConfig(), nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node, seed=cfg.seed,
                          gpu_failure_rate=cfg.gpu_failure_rate, teams=DEMO_TEAMS, repair_mean_s=1800.0)
        self.engine = Engine(window.jobs, cfg.hours * 3600.0, "queuepilot", sim_cfg)
        self.published = self.engine.context.published
        self.snapshot: ClusterSnapshot | None = None
        self.sources = {
            n.name: SimSource(n.name, gpus=n.gpus, model="NVIDIA A100-SXM4-80GB", seed=cfg.seed, pods=0,
                              fault_script=())
            for n in self.engine.cluster.nodes
        }
        self._lost: dict[tuple[str, int], bool] = {}
        self.engine.start()

    # -------------------------------------------------------------------------------- stepping
    @property
    def sim_now(self) -> float:
        return self.engine.now

    async def warm_up(self) -> None:
        await self.step_to(self.cfg.warmup_s)

    async def step_to(self, sim_t: float) -> None:
        """Advance the simulation to ``sim_t`` and refresh everything the endpoints and view show."""
        await self.engine.advance(min(sim_t, self.engine.window_s))
        self.snapshot = self.engine.snapshot(self.engine.now)
        self._drive_sources()

    @property
    def decisions(self) -> list[str]:
        return list(self.published.last_decisions)

    @property
    def finished(self) -> bool:
        return self.engine.now >= self.engine.window_s

    # -------------------------------------------------------------------------------- sources
    def pod_utilization(self) -> dict[str, float]:
        """Pod id ("ns/name") -> GPU utilization now, for every pod holding GPUs."""
        e = self.engine
        out: dict[str, float] = {}
        for rc in e.rays.values():
            for w in rc.workers.values():
                out[f"{rc.namespace}/{w.name}"] = w.util(e.now)
        for name, start in e.run_start.items():
            w = e.workloads.get(name)
            if w is None:
                continue
            t = e.now - start - e.cfg.rayjob_startup_s
            u = w.job.util_at(t) if t >= 0 else 0.0
            for i in range(w.job.pods):
                out[f"{w.namespace}/{w.name}-{i}"] = u
        return out

    def _drive_sources(self) -> None:
        util = self.pod_utilization()
        for node in self.engine.cluster.nodes:
            src = self.sources[node.name]
            for i, owner in enumerate(node.owner):
                if owner is None:
                    src.set_allocation(i, None)
                    src.set_load(i, 0.0)
                else:
                    ns, _, pod = owner.partition("/")
                    container = "ray-worker" if "-gpu-workers-" in pod else "ray-job"
                    src.set_allocation(i, PodRef(ns, pod, container))
                    src.set_load(i, min(1.0, max(0.0, util.get(owner, 0.0))))
                lost = not node.healthy[i]
                if self._lost.get((node.name, i), False) != lost:
                    if lost:
                        src.inject_xid(i, FAILED_XID)
                    src.set_lost(i, lost)
                    self._lost[(node.name, i)] = lost


def _clock(sim_t: float) -> str:
    d, rem = divmod(int(sim_t), 86400)
    h, rem = divmod(rem, 3600)
    return f"d{d} {h:02d}:{rem // 60:02d}"
