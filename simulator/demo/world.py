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

The demo tells its story in the first real minute: the warm-up ends on Monday 10:00 (the morning
peak of the synthetic trace), and besides the trace's own jobs and random failures a few things
happen on a script, each at a set simulated time after the hand-over (``DemoConfig``):

- ``hang_after_s``: a running RayJob hangs (a stuck data loader: its GPUs drop to 0 % while it keeps
  them); the controller's stall detector flags it once the stall window has passed;
- ``burst_after_s``: a burst of Ray tasks lands on team-a's RayCluster, which the controller scales up
  for (and down again when the tasks are done);
- ``reject_after_s``: a team-c user asks for more GPUs in one pod than any node has; once Kueue has
  quota for it the check rejects it (Kueue deactivates it);
- ``fail_after_s``: one GPU that holds running work falls off the bus (XID 79), repaired
  ``repair_mean_s`` later;
- ``reclaim_teams``: those teams' RayClusters opted in to idle reclaim
  (``queuepilot.io/reclaim-idle-actors: "true"``), so workers that Ray actors hold at 0 % GPU go.

``story`` is what happened since the hand-over, for people: each controller decision line (Ready,
Retry with its reason, Rejected, scale up/down, idle workers reclaimed, a stalled workload) and each
GPU failure/repair, stamped with the simulated time; ``counts`` counts them by kind.  ``starving()``
names the multi-GPU workloads that have waited long on ``Fragmented`` (the view turns it into a hint
of what an operator can do).
"""

from __future__ import annotations

import re
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from autoscaler.controller.context import Published
from autoscaler.core.policy.stall import StallConfig
from exporter.health import HealthConfig
from exporter.sources.sim import SimSource
from simulator.cluster import SimNode
from simulator.demo.sources import SimClusterSource, SimPodResources
from simulator.engine import Engine, SimConfig
from simulator.kueue import RUNNING
from simulator.workload import Job, SyntheticParams, synthetic

DEMO_TEAMS = ("team-a", "team-b", "team-c")
FAILED_XID = 79  # fallen off the bus
# an "LLM-era" mix: more multi-GPU RayJobs than Philly's 7 %, so admission has work to show
DEMO_GPU_MIX: tuple[tuple[int, float], ...] = ((1, 60.0), (2, 10.0), (4, 15.0), (8, 15.0))
RECLAIM_ANNOTATION = "queuepilot.io/reclaim-idle-actors"
SCRIPTED_IDS = 9_000_000  # job ids of the scripted jobs (the trace's are smaller)


@dataclass(slots=True)
class OnePodJob(Job):
    """A RayJob that asks for all its GPUs in one pod (the scripted request no node can hold)."""

    @property
    def pods(self) -> int:
        return 1

    @property
    def gpus_per_pod(self) -> int:
        return self.gpus


@dataclass(frozen=True, slots=True)
class DemoConfig:
    nodes: int = 4
    gpus_per_node: int = 8
    speed: float = 60.0  # simulated seconds per real second
    seed: int = 0
    hours: float = 24.0 * 7  # trace length (the demo stops at --duration or when it runs out)
    warmup_s: float = 10 * 3600.0  # simulated before serving: opens on Monday 10:00, the morning peak
    jobs_per_hour: float = 6.0
    gpu_failure_rate: float = 0.2  # random, per GPU per day: one every ~3.75 simulated hours on 32 GPUs
    fail_after_s: float | None = 1500.0  # scripted XID 79 on a busy GPU this long after the hand-over (25 s at 60x)
    repair_mean_s: float = 1800.0
    starving_after_s: float = 600.0  # a multi-GPU workload waiting this long on Fragmented gets a hint
    # the script (simulated seconds after the hand-over; None: not played; see the module docstring)
    hang_after_s: float | None = 0.0
    burst_after_s: float | None = 60.0
    burst_tasks: int = 6
    burst_task_s: float = 900.0  # each burst task's work
    reject_after_s: float | None = 30.0
    reject_gpus: int = 12  # in one pod, on nodes of gpus_per_node
    reclaim_teams: tuple[str, ...] = ("team-b",)
    # the demo's scenario: tasks end and leave empty workers within the first minute, so the story shows
    # scale-downs; under the grounded model (the simulator's default) long idle-actor tails hold the
    # workers for hours at 10:00 on a Monday and the first minute shows none (docs/simulation.md)
    util_model: str = "scattered"


# kinds of story entries
READY, RETRY, WAITING, REJECTED, UNHEALTHY, REPAIRED, SCALE_DOWN, SCALE_UP, RECLAIMED, STALLED, OTHER = (
    "ready", "retry", "waiting", "rejected", "unhealthy", "repaired", "scale-down", "scale-up", "reclaimed", "stalled",
    "other")
# what a person is shown within the first real minute (tests/demo measure when each first appears)
STORY_KINDS = (SCALE_UP, SCALE_DOWN, RETRY, REJECTED, RECLAIMED, STALLED)
RECLAIM_REASONS = frozenset({"IdleActorsReclaimed", "IdleWorkersReplaced"})
_ADMISSION = re.compile(r"^(?:\(dry-run\) )?(?P<wl>\S+) \[(?P<cq>[^\]]*)\] (?:would )?(?P<state>Ready|Retry|Rejected|Pending|"
                        r"leave Pending) (?P<reason>\w+): (?P<msg>.*)$")
_SCALING = re.compile(r"^(?:\(dry-run\) )?(?P<rc>\S+/\S+)/(?P<group>\S+) (?:would scale )?(?P<dir>up|down|hold) "
                      r"(?P<cur>\d+)->(?P<new>\d+) (?P<reason>\w+): (?P<msg>.*)$")
_STALL = re.compile(r"^(?:\(dry-run\) )?(?P<wl>\S+/\S+) (?P<reason>StalledWorkload(?:Deactivated)?): (?P<msg>.*)$")


class StoryEntry(NamedTuple):
    at: float  # simulated seconds
    kind: str
    subject: str  # workload, RayCluster or GPU
    reason: str
    text: str  # for people, without the subject


class _Tap(list):
    """``published.last_decisions`` that also hands every appended line to ``on_line``."""

    def __init__(self, lines: list[str], on_line: Callable[[str], None]) -> None:
        super().__init__(lines)
        self.on_line = on_line

    def append(self, line: str) -> None:  # type: ignore[override]
        super().append(line)
        self.on_line(line)


def classify(line: str) -> tuple[str, str, str, str]:
    """A controller decision line -> (kind, subject, reason, message for people)."""
    m = _ADMISSION.match(line)
    if m:
        kind = {"Ready": READY, "Retry": RETRY, "Rejected": REJECTED, "Pending": WAITING,
                "leave Pending": WAITING}.get(m["state"], OTHER)
        return kind, m["wl"], m["reason"], _tidy(m["msg"])
    m = _SCALING.match(line)
    if m:
        cur, new = int(m["cur"]), int(m["new"])
        if m["reason"] in RECLAIM_REASONS:
            kind = RECLAIMED
        else:
            kind = SCALE_DOWN if new < cur else SCALE_UP if new > cur else OTHER
        return kind, m["rc"], m["reason"], _tidy(m["msg"])
    m = _STALL.match(line)
    if m:
        return STALLED, m["wl"], m["reason"], _tidy(m["msg"])
    return OTHER, "", "", _tidy(line)


def _tidy(msg: str) -> str:
    """Controller messages, shorter for a terminal: no flavor repeated, no pod-set name, no raw seconds, no
    workload named twice, no wall-clock date (the story stamps the simulated time)."""
    msg = msg.replace(" on flavor a100", "").replace(" (workers)", "").replace("a100: ", "")
    msg = re.sub(r"^workload \S+ \([^)]*\) in ClusterQueue \S+: ", "", msg)
    msg = re.sub(r", since \d{4}-\d\d-\d\dT[\d:]+Z", "", msg)
    msg = re.sub(r"retry in (\d+)s", lambda m: f"retry in {_duration(float(m[1]))}", msg)
    msg = re.sub(r"scale (?:down|up) \d+ -> \d+: ", "", msg)
    msg = re.sub(r"GPU gr_engine_active under", "GPU under", msg)
    msg = re.sub(r"\b(\d+) (\w+)\(s\)", lambda m: f"{m[1]} {m[2]}{'' if m[1] == '1' else 's'}", msg)
    msg = re.sub(r"\bfor (\d+(?:\.\d+)?)m\b", r"for \1 min", msg)
    return msg


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


class DemoWorld:
    def __init__(self, cfg: DemoConfig) -> None:
        self.cfg = cfg
        params = SyntheticParams(jobs_per_hour=cfg.jobs_per_hour, teams=DEMO_TEAMS, team_weights=(0.5, 0.3, 0.2),
                                 gpu_mix=DEMO_GPU_MIX)
        window = synthetic(cfg.hours, cfg.seed, cfg.nodes * cfg.gpus_per_node, params, util_model=cfg.util_model)
        sim_cfg = replace(SimConfig(), nodes=cfg.nodes, gpus_per_node=cfg.gpus_per_node, seed=cfg.seed,
                          gpu_failure_rate=cfg.gpu_failure_rate, teams=DEMO_TEAMS, repair_mean_s=cfg.repair_mean_s)
        self.engine = Engine(window.jobs, cfg.hours * 3600.0, "queuepilot", sim_cfg)
        self.published: Published = self.engine.context.published
        self.source = SimClusterSource(self.engine, {
            f"{t}/{rc.name}": {RECLAIM_ANNOTATION: "true"} for t, rc in self.engine.rays.items() if t in cfg.reclaim_teams})
        self.sources = {
            n.name: SimSource(n.name, gpus=n.gpus, model="NVIDIA A100-SXM4-80GB", seed=cfg.seed, pods=0,
                              fault_script=())
            for n in self.engine.cluster.nodes
        }
        self.pod_resources = {name: SimPodResources(self.engine, name, src.uuids) for name, src in self.sources.items()}
        self.on_step: Callable[[], None] | None = None  # the controller's request_pass, after the hand-over
        self._lost: dict[tuple[str, int], bool] = {}  # (node, GPU) -> fallen off the bus, as last driven
        self._xid_at: dict[tuple[str, int], float] = {}  # (node, GPU) -> when it last reported XID 79
        self._told_healthy: dict[tuple[str, int], bool] = {}  # (node, GPU) -> health as the story last told it
        self.xid_window_s = HealthConfig().xid_window_seconds  # the exporters' fatal-XID window (their default)
        self.handed_over_at: float | None = None
        self.story: deque[StoryEntry] = deque(maxlen=200)
        self.counts: Counter[str] = Counter()  # story kinds since the hand-over
        self._last_reason: dict[str, tuple[str, float]] = {}  # workload -> (last admission reason, since)
        self._script: list[tuple[float, str]] = []  # (simulated time, beat), played in step_to
        self._next_id = SCRIPTED_IDS
        self.hung: str | None = None  # the workload whose GPUs the script hung
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
        published.last_decisions = _Tap(published.last_decisions, self._on_decision)
        self.published = published
        self.on_step = request_pass
        self.handed_over_at = now = self.engine.now
        c = self.cfg
        beats = (("fail", c.fail_after_s), ("hang", c.hang_after_s), ("burst", c.burst_after_s),
                 ("reject", c.reject_after_s))
        self._script = sorted((now + after, beat) for beat, after in beats if after is not None)
        self.source.mark_synced()

    async def step_to(self, sim_t: float) -> None:
        """Advance the simulation to ``sim_t`` (playing the script's beats on the way) and refresh what
        the exporters show.  A beat that cannot be played yet (no running RayJob to hang, no quota for
        the rejected request) is tried again at the next step."""
        target = min(sim_t, self.engine.window_s)
        while self._script and self._script[0][0] <= target:
            at, beat = self._script.pop(0)
            await self.engine.advance(at)
            if not self._play(beat):
                self._script.append((target, beat))
                self._script.sort()
                break
        await self.engine.advance(target)
        self._drive_sources()
        if self.on_step is not None:
            self.on_step()

    def _play(self, beat: str) -> bool:
        """Play one beat of the script now; False when it cannot be played yet."""
        if beat == "fail":
            self.fail_busy_gpu()
            return True
        if beat == "hang":
            return self.hang_a_workload()
        if beat == "burst":
            self.submit_burst()
            return True
        return self.submit_unfittable()

    def _job(self, team: str, gpus: int, duration: float, util: float, cls: type[Job] = Job) -> Job:
        self._next_id += 1
        return cls(id=self._next_id, team=team, submit=self.engine.now, duration=duration, gpus=gpus, util=util)

    def submit_burst(self) -> None:
        """``burst_tasks`` one-GPU Ray tasks on team-a's RayCluster at once."""
        for _ in range(self.cfg.burst_tasks):
            self.engine.push(self.engine.now, "arrive", self._job("team-a", 1, self.cfg.burst_task_s, 0.8))

    def submit_unfittable(self) -> bool:
        """A team-c RayJob asking ``reject_gpus`` GPUs in one pod (more than a node has), once the cohort
        has quota for it (before, Kueue would only keep it waiting, and the check never sees it)."""
        e = self.engine
        free = e.kueue.cohort_nominal("research", e.cfg.flavor) - e.kueue.cohort_usage("research", e.cfg.flavor)
        gpus = self.cfg.reject_gpus
        if gpus <= self.cfg.gpus_per_node:
            return True  # it fits a node: nothing to reject, the beat is dropped
        if free < gpus:
            return False
        e.push(e.now, "arrive", self._job("team-c", gpus, 3600.0, 0.9, OnePodJob))
        return True

    def hang_a_workload(self) -> bool:
        """The running RayJob that would run longest hangs: its GPUs read 0 % from now on (it keeps them)
        until it ends; False while none runs long enough for the stall window to pass first."""
        e = self.engine
        window = StallConfig().window_seconds
        ends = sorted((e.run_start[n] + e.cfg.rayjob_startup_s + w.job.duration, n)
                      for n, w in e.workloads.items() if n in e.run_start and w.state == RUNNING)
        if not ends or ends[-1][0] < e.now + window + 600:
            return False
        self.hung = ends[-1][1]
        return True

    def fail_busy_gpu(self) -> tuple[str, int] | None:
        """Script an XID 79 on a healthy GPU that holds running work (a RayJob pod first, else a Ray
        worker); it is repaired ``repair_mean_s`` later.  Returns (node, GPU index), None if none is busy."""
        e = self.engine
        candidates = [(0 if "-ray-" not in o else 1, n.name, i) for n in e.cluster.nodes
                      for i, o in enumerate(n.owner) if o is not None and n.healthy[i]]
        if not candidates:
            return None
        _, name, idx = min(candidates)
        node = e.cluster.by_name[name]
        if e.cluster.fail(node, idx):
            e.metrics.gpu_failures += 1
            e.push(e.now + self.cfg.repair_mean_s, "gpu_repair", (name, idx))
        return name, idx

    # -------------------------------------------------------------------------------- story
    def _tell(self, kind: str, subject: str, reason: str, text: str) -> None:
        self.story.append(StoryEntry(self.engine.now, kind, subject, reason, text))
        self.counts[kind] += 1

    def _on_decision(self, line: str) -> None:
        kind, subject, reason, text = classify(line)
        if kind in (READY, RETRY, WAITING, REJECTED):
            prev = self._last_reason.get(subject)
            since = prev[1] if prev is not None and prev[0] == reason else self.engine.now
            self._last_reason[subject] = (reason, since)
        if kind == OTHER and not subject:
            return  # e.g. the AdmissionCheck activation
        self._tell(kind, subject, reason, text)

    def starving(self) -> list[tuple[str, int, float]]:
        """Multi-GPU workloads still waiting whose admission says ``Fragmented`` and that have waited
        more than ``starving_after_s``: (workload, GPUs, seconds waited), longest first."""
        e = self.engine
        out = []
        for key, (reason, _since) in self._last_reason.items():
            if reason != "Fragmented":
                continue
            ns, _, name = key.partition("/")
            w = e.find_workload(ns, name)
            if w is None or w.name in e.run_start or w.gpus < 2:
                continue
            waited = e.now - w.job.submit
            if waited > self.cfg.starving_after_s:
                out.append((key, w.gpus, waited))
        return sorted(out, key=lambda x: -x[2])

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
            u = 0.0 if name == self.hung else e.rayjob_util(w, start)
            for i in range(w.job.pods):
                out[f"{w.namespace}/{w.name}-{i}"] = u
        return out

    def gpu_healthy(self, node: SimNode, i: int) -> bool:
        """GPU ``i`` of ``node`` as its exporter classifies it: unhealthy while it is off the bus and for
        the fatal-XID window after its XID 79 (a GPU repaired sooner stays unhealthy until then)."""
        if not node.healthy[i]:
            return False
        at = self._xid_at.get((node.name, i))
        return at is None or self.engine.now - at >= self.xid_window_s

    def unhealthy_gpus(self) -> int:
        return sum(1 for n in self.engine.cluster.nodes for i in range(n.gpus) if not self.gpu_healthy(n, i))

    def _drive_sources(self) -> None:
        util = self.pod_utilization()
        now = self.engine.now
        for node in self.engine.cluster.nodes:
            src = self.sources[node.name]
            for i, owner in enumerate(node.owner):
                key = (node.name, i)
                src.set_load(i, 0.0 if owner is None else min(1.0, max(0.0, util.get(owner, 0.0))))
                lost = not node.healthy[i]
                if self._lost.get(key, False) != lost:
                    if lost:
                        src.inject_xid(i, FAILED_XID, at=now)
                        self._xid_at[key] = now
                    src.set_lost(i, lost)
                    self._lost[key] = lost
                healthy = self.gpu_healthy(node, i)
                if self._told_healthy.get(key, True) != healthy:
                    self._told_healthy[key] = healthy
                    if self.handed_over_at is not None:
                        self._tell_health(node.name, i, owner, healthy)

    def _tell_health(self, node: str, i: int, owner: str | None, healthy: bool) -> None:
        gpu = f"{node} GPU {i}"
        if not healthy:
            held = f"; {owner} keeps it, degraded" if owner else ""
            self._tell(UNHEALTHY, gpu, "XID 79",
                       f"fell off the bus (XID {FAILED_XID}){held}; no longer offered to admission")
        else:
            self._tell(REPAIRED, gpu, "repaired", "healthy again, offered to admission")


DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")  # the synthetic trace starts on a Monday at 00:00


def _clock(sim_t: float) -> str:
    d, rem = divmod(int(sim_t), 86400)
    h, rem = divmod(rem, 3600)
    week = f" wk{d // 7 + 1}" if d >= 7 else ""
    return f"{DAYS[d % 7]}{week} {h:02d}:{rem // 60:02d}"
