"""The embedded demo's world: a small simulated cluster that the real controller runs against.

``DemoWorld`` owns an ``Engine`` (4 nodes x 8 GPUs, three teams, a synthetic trace) and steps it
by simulated time.  The decisions are the controller's: during the warm-up the engine runs the
controller's reconcilers itself (as the simulator does); then ``hand_over`` gives the world to a
real ``Controller`` (``simulator.demo.app``), which reads it through ``SimClusterSource`` and
``SimRayClient``, scrapes the GPUs from the real exporters, and writes back through the engine's
``SimWriter`` (a fresh leader taking over a running cluster: it rebuilds its ledger from the
Workloads whose check is Ready).  After each step the world drives one ``SimSource`` per node:
utilization of the pod on each GPU, and XID 79 + fallen-off-the-bus for a failed GPU (cleared on
repair); which pod holds which GPU reaches the exporter through its PodResources client
(``SimPodResources``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.controller.context import Published
from exporter.sources.sim import SimSource
from simulator.demo.sources import SimClusterSource, SimPodResources
from simulator.engine import Engine, SimConfig
from simulator.workload import SyntheticParams, synthetic

DEMO_TEAMS = ("team-a", "team-b", "team-c")
FAILED_XID = 79  # fallen off the bus
# an "LLM-era" mix: more multi-GPU RayJobs than Philly's 7 %, so admission has work to show
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
        self.published: Published = self.engine.context.published
        self.source = SimClusterSource(self.engine)
        self.sources = {
            n.name: SimSource(n.name, gpus=n.gpus, model="NVIDIA A100-SXM4-80GB", seed=cfg.seed, pods=0,
                              fault_script=())
            for n in self.engine.cluster.nodes
        }
        self.pod_resources = {name: SimPodResources(self.engine, name, src.uuids) for name, src in self.sources.items()}
        self.on_step: Callable[[], None] | None = None  # the controller's request_pass, after the hand-over
        self._lost: dict[tuple[str, int], bool] = {}
        self.engine.start()

    # -------------------------------------------------------------------------------- stepping
    @property
    def sim_now(self) -> float:
        return self.engine.now

    async def warm_up(self) -> None:
        await self.step_to(self.cfg.warmup_s)

    def hand_over(self, published: Published, counters: Any, request_pass: Callable[[], None]) -> None:
        """From now on a ``Controller`` decides: the engine stops running the reconcilers itself, the
        writer counts into the controller's counters, and each step asks it for a pass."""
        self.engine.drive_reconcilers = False
        self.engine.writer.counters = counters
        self.published = published
        self.on_step = request_pass
        self.source.mark_synced()

    async def step_to(self, sim_t: float) -> None:
        """Advance the simulation to ``sim_t`` and refresh what the exporters show."""
        await self.engine.advance(min(sim_t, self.engine.window_s))
        self._drive_sources()
        if self.on_step is not None:
            self.on_step()

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
                src.set_load(i, 0.0 if owner is None else min(1.0, max(0.0, util.get(owner, 0.0))))
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
