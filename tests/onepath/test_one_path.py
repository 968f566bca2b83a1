"""One decide -> act -> explain path: the same scenario through the Kubernetes writer and the simulator's.

The scenario is played twice, step by step, with the controller's own reconcilers
(``build_reconcilers``):

- **kube**: ``KubeWriter`` against the fake API server through the real kubernetes-asyncio client;
  the test plays Kueue and KubeRay (``tests/decisions/kube_world.py``), and snapshots come from the
  controller's views + ``build_snapshot``;
- **sim**: ``SimWriter`` on the simulator's engine, which plays Kueue and KubeRay itself, and
  snapshots come from the simulator's inputs (``SimSnapshotBuilder``) through the same ``build_snapshot``.

Both worlds hold the same objects under the same names.  After every pass the decisions (state or
direction, reason, message, write outcome), the Events (object, type, reason, message) and the
decision / write / write-error counters must be the same.  The scenario: the AdmissionCheck is
activated; a workload is admitted (Ready); a GPU fails and the next one is told to Retry (Kueue
evicts and requeues it); a RayCluster's idle worker is scaled down by name; somebody else writes the
RayCluster between our snapshot and our patch (409 on both sides, history rolled back); the next
pass writes.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.reconcilers import build_reconcilers
from autoscaler.controller.scaling import ScalingReconciler
from autoscaler.core.snapshot import RayDemand, frozen_map
from simulator.engine import Engine, SimConfig
from simulator.kueue import SimWorkload
from simulator.workload import Job
from tests.decisions import kube_world as k

T0 = 100_000.0
TEAMS = ("team-a", "team-b")
FLAVOR = "a100"
GROUP = "gpu-workers"
FAMILIES = ("queuepilot_admission_decisions_total", "queuepilot_scale_decisions_total",
            "queuepilot_writes_total", "queuepilot_write_errors_total")
# the scaler's windows, short enough for a scenario of a few passes (same settings on both sides)
SETTINGS = {"scaling": {"idle_window": "2m", "pressured_idle_window": "2m",
                        "scale_down": {"stabilization_window": "30s"}},
            "admission": {"capacity_wait": "5m"}}


# --------------------------------------------------------------------------------- the sim side
class SimSide:
    def __init__(self) -> None:
        cfg = SimConfig(nodes=2, gpus_per_node=8, teams=TEAMS, flavor=FLAVOR)
        self.engine = Engine([], 10 * 86400.0, "queuepilot", cfg)
        self.engine.context.settings.update(SETTINGS)
        # the reconcilers read their settings at construction: build them again with the scenario's
        self.admission, self.scaling = _pair(build_reconcilers(self.engine.context))
        self.engine.now = T0

    async def pass_(self, now: float, *, admission: bool = True, scaling: bool = True) -> None:
        self.engine.now = now
        snap = self.engine.snapshot(now)
        if admission:
            await self.admission.reconcile(snap, now)
        if scaling:
            await self.scaling.reconcile(snap, now)

    def reserve(self, job_id: int, team: str, gpus: int, now: float) -> None:
        e = self.engine
        e.now = now
        w = SimWorkload(Job(job_id, team, now, 3600.0, gpus, 0.5), f"cq-{team}", created=now, queue_ts=now)
        e.workloads[w.name] = w
        e.kueue.submit(w)
        assert w in e.kueue.schedule(now, (FLAVOR,))
        w.check_state, w.check_changed_at = "Pending", now

    def events(self) -> list[tuple[str, str, str, str, str]]:
        return sorted((ev.kind, ev.name, ev.type, ev.reason, ev.message) for ev in self.engine.writer.events)

    def counters(self) -> dict:
        return _samples(self.engine.context.registry)


def _pair(reconcilers: list[Any]) -> tuple[AdmissionReconciler, ScalingReconciler]:
    adm = next(r for r in reconcilers if isinstance(r, AdmissionReconciler))
    sc = next(r for r in reconcilers if isinstance(r, ScalingReconciler))
    return adm, sc


# -------------------------------------------------------------------------------- the kube side
def ray_cluster(name: str, ns: str, replicas: int, hi: int) -> dict[str, Any]:
    group = {"groupName": GROUP, "replicas": replicas, "minReplicas": 0, "maxReplicas": hi,
             "rayStartParams": {"num-cpus": "8", "num-gpus": "1"},
             "template": {"spec": {"containers": [k.container("ray-worker", gpus=1, cpu="8", memory="64Gi")]}}}
    return {"apiVersion": k.RAY, "kind": "RayCluster",
            "metadata": {"name": name, "namespace": ns, "creationTimestamp": k.ts(0.0),
                         "labels": {"kueue.x-k8s.io/queue-name": "default"},
                         "annotations": {"queuepilot.io/autoscale": "true", "kueue.x-k8s.io/elastic-job": "true"}},
            "spec": {"enableInTreeAutoscaling": False,
                     "headGroupSpec": {"rayStartParams": {}, "template": {"spec": {"containers": [k.container("ray-head")]}}},
                     "workerGroupSpecs": [group]}}


def pod(name: str, ns: str, node: str, gpus: int, created: float, labels: dict | None = None) -> dict[str, Any]:
    p = k.pod(name, ns, node, gpus, labels=labels)
    p["metadata"]["creationTimestamp"] = k.ts(created)
    if gpus == 1 and labels:  # a Ray worker: what the sim's worker asks for
        p["spec"]["containers"] = [k.container("ray-worker", gpus=1, cpu="8", memory="64Gi")]
    return p


class KubeSide:
    def __init__(self, world: k.World, ctx: Any, sim: Engine) -> None:
        self.world, self.ctx = world, ctx
        ctx.settings.update(SETTINGS)
        self.admission, self.scaling = _pair(build_reconcilers(ctx))
        world.add(k.flavor(FLAVOR), k.admission_check(active=False),
                  *(k.node(n.name, n.gpus, FLAVOR) for n in sim.cluster.nodes))
        for team in TEAMS:
            world.add(k.cluster_queue(f"cq-{team}", {FLAVOR: sim.nominal[team]}),
                      k.local_queue("default", team, f"cq-{team}"))
        for rc in sim.rays.values():
            world.add(ray_cluster(rc.name, rc.namespace, rc.replicas, rc.max_replicas))
        for cq in sim.kueue.cqs.values():  # the sim's queues share one cohort
            obj = world.get("ClusterQueue", cq.name)
            obj["spec"]["cohortName"] = cq.cohort
            world.api.replace(obj)

    def sync_usage(self, sim: Engine) -> None:
        """Kueue's ClusterQueue status (quota reserved), as the sim's Kueue holds it."""
        for cq in sim.kueue.cqs.values():
            obj = self.world.get("ClusterQueue", cq.name)
            obj["status"] = {"flavorsReservation": [{"name": f, "resources": [
                {"name": k.GPU, "total": str(int(used))}]} for f, used in cq.usage.items()]}
            self.world.api.update_status(obj)

    async def pass_(self, now: float, *, admission: bool = True, scaling: bool = True) -> None:
        snap = self.world.snapshot(now)
        if admission:
            await self.admission.reconcile(snap, now)
        if scaling:
            await self.scaling.reconcile(snap, now)
        await self.admission.events.drain()

    def events(self) -> list[tuple[str, str, str, str, str]]:
        return sorted((e["involvedObject"]["kind"], e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
                      for ns in TEAMS for e in self.world.api.list("v1", "Event", ns))

    def counters(self) -> dict:
        return _samples(self.ctx.registry)


def _samples(registry: Any) -> dict:
    out = {}
    for mf in registry.collect():
        for s in mf.samples:
            if s.name in FAMILIES and s.value:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def admission_seen(r: AdmissionReconciler) -> list[tuple]:
    return [(d.workload, d.state, d.reason, d.message, d.requeue_after_seconds, o.result) for d, o in r.outcomes]


def scaling_seen(r: ScalingReconciler) -> list[tuple]:
    return [(d.key, d.direction, d.reason, d.current, d.desired, d.workers_to_delete, d.message, o.result)
            for d, o in r.outcomes]


def team_a(r: ScalingReconciler) -> list[tuple]:
    return [x for x in scaling_seen(r) if x[0][0] == "team-a"]


def same(kube: KubeSide, sim: SimSide) -> None:
    assert admission_seen(kube.admission) == admission_seen(sim.admission)
    assert scaling_seen(kube.scaling) == scaling_seen(sim.scaling)
    assert kube.events() == sim.events()
    assert kube.counters() == sim.counters()


# ------------------------------------------------------------------------------------ scenario
async def test_the_same_scenario_through_both_writers(fake_api, world, make_ctx):
    sim = SimSide()
    e = sim.engine
    kube = KubeSide(world, make_ctx(), e)
    rc = e.rays["team-a"]

    # 1. our AdmissionCheck is not Active yet: the first pass activates it on both sides
    await asyncio.gather(kube.pass_(T0), sim.pass_(T0))
    same(kube, sim)
    ac = world.get("AdmissionCheck", k.CHECK)
    assert [(c["type"], c["status"]) for c in ac["status"]["conditions"]] == [("Active", "True")]
    assert e.checks_active == {k.CHECK: True}

    # 2. rayjob-0 (1 pod x 8 GPUs) gets quota: Ready, Kueue admits it and its pod is bound
    sim.reserve(0, "team-a", 8, T0 + 10)
    world.add(k.workload("rayjob-0", "team-a", "default", (("workers", 1, 8),), T0 + 10, owner=("RayJob", "job-0")))
    world.reserve("rayjob-0", "cq-team-a", {"workers": FLAVOR}, T0 + 10)
    kube.sync_usage(e)
    await kube.pass_(T0 + 11, scaling=False)
    await sim.pass_(T0 + 11, scaling=False)
    same(kube, sim)
    assert [x[1] for x in admission_seen(sim.admission)] == ["Ready"]
    assert world.kueue_react(T0 + 12) == [("rayjob-0", "admitted")]
    node0 = e.cluster.node_of("team-a/rayjob-0-0")
    assert node0 is not None and e.workloads["rayjob-0"].state == "running"
    world.add(pod("rayjob-0-0", "team-a", node0, 8, T0 + 12))

    # 3. a GPU of the other node fails; rayjob-1 (8 GPUs) cannot be placed: it waits with its quota
    #    (Pending, written once), then Retry once the capacity wait is over; Kueue evicts it
    other = next(n for n in e.cluster.nodes if n.name != node0)
    e.cluster.fail(other, 3)
    world.unhealthy.add((other.name, 3))
    sim.reserve(1, "team-b", 8, T0 + 20)
    world.add(k.workload("rayjob-1", "team-b", "default", (("workers", 1, 8),), T0 + 20, owner=("RayJob", "job-1")))
    world.reserve("rayjob-1", "cq-team-b", {"workers": FLAVOR}, T0 + 20, ns="team-b")
    kube.sync_usage(e)
    await kube.pass_(T0 + 21, scaling=False)
    await sim.pass_(T0 + 21, scaling=False)
    same(kube, sim)
    assert [x[1:3] + x[5:] for x in admission_seen(sim.admission)] == [(None, "InsufficientGpus", "written")]
    assert world.kueue_react(T0 + 22) == []
    await kube.pass_(T0 + 200, scaling=False)
    await sim.pass_(T0 + 200, scaling=False)
    same(kube, sim)
    assert admission_seen(sim.admission) == []  # the same wait: nothing to write on either side
    await kube.pass_(T0 + 320, scaling=False)
    await sim.pass_(T0 + 320, scaling=False)
    same(kube, sim)
    assert [x[1:3] for x in admission_seen(sim.admission)] == [("Retry", "InsufficientGpus")]
    assert world.kueue_react(T0 + 322) == [("rayjob-1", "evicted")]
    assert e.workloads["rayjob-1"].state == "pending" and e.metrics.retries == 1
    assert "Traceback" not in str(admission_seen(sim.admission))
    # a decision for a workload that no longer holds quota is skipped on both sides (the guard)
    stale = replace(sim.admission.outcomes[0][0], state="Ready", reason="CapacityConfirmed")
    kube_out = await kube.admission.writer.set_check_state(replace(stale, uid=""), T0 + 23)
    sim_out = await sim.admission.writer.set_check_state(replace(stale, uid=""), T0 + 23)
    assert (kube_out.result, kube_out.detail) == (sim_out.result, sim_out.detail) == ("skipped", "no_quota")

    # 4. team-a's RayCluster: two workers, one busy, one idle; the idle one goes, by name
    e.now = T0 - 1000
    e.kuberay_patch(rc, replicas=2, workers_to_delete=None, min_replicas=None, max_replicas=None, reason="setup")
    busy, idle = sorted(rc.workers)
    rc.workers[busy].task = Job(99, "team-a", T0 - 900, 10**6, 1, 0.3)
    rc.workers[busy].busy_until = rc.workers[busy].tail_until = T0 + 10**6
    rc.workers[idle].idle_since = T0 - 900
    world.api.patch(k.RAY, "RayCluster", rc.name, [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                                                    "value": 2}], namespace="team-a",
                    content_type="application/json-patch+json")
    labels = {"ray.io/cluster": rc.name, "ray.io/group": GROUP, "ray.io/node-type": "worker"}
    for name in (busy, idle):
        world.add(pod(name, "team-a", e.cluster.node_of(f"team-a/{name}"), 1, T0 - 1000, labels))
    world.gpu_util[("team-a", busy)] = 0.3
    world.ray_busy.update({busy: True, idle: False})
    kube.sync_usage(e)
    for t in (T0 + 30, T0 + 100):
        await kube.pass_(t, admission=False)
        await sim.pass_(t, admission=False)
        same(kube, sim)
    assert {x[1] for x in scaling_seen(sim.scaling)} == {"hold"}
    await kube.pass_(T0 + 200, admission=False)
    await sim.pass_(T0 + 200, admission=False)
    same(kube, sim)
    (_, direction, _, current, desired, delete, _, result), = team_a(sim.scaling)
    assert (direction, current, desired, delete, result) == ("down", 2, 1, (idle,), "written"), team_a(sim.scaling)
    g = world.get("RayCluster", rc.name)["spec"]["workerGroupSpecs"][0]
    assert (g["replicas"], g["scaleStrategy"]["workersToDelete"]) == (1, [idle])
    assert sorted(rc.workers) == [busy]  # the sim's operator deleted exactly the named worker
    world.kuberay_sync(rc.name)

    # 5. Ray has 3 pending GPU tasks; somebody raises maxReplicas between our snapshot and our patch
    rc.queue.extend((Job(100 + i, "team-a", T0 + 250, 600.0, 1, 0.5), T0 + 250) for i in range(3))
    world.ray_demand[f"team-a/{rc.name}"] = (RayDemand("task", frozen_map({"GPU": 1.0}), count=3),)
    kube.sync_usage(e)
    e.now = T0 + 260
    sim_snap, kube_snap = e.snapshot(T0 + 260), world.snapshot(T0 + 260)
    e.kuberay_patch(rc, replicas=None, workers_to_delete=None, min_replicas=None, max_replicas=rc.max_replicas + 1,
                    reason="user")
    world.api.patch(k.RAY, "RayCluster", rc.name, [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": rc.max_replicas}],
        namespace="team-a", content_type="application/json-patch+json")
    await kube.scaling.reconcile(kube_snap, T0 + 260)
    await sim.scaling.reconcile(sim_snap, T0 + 260)
    await kube.admission.events.drain()
    same(kube, sim)
    assert [x[-1] for x in team_a(sim.scaling)] == ["conflict"]
    # 6. the next pass decides from what they wrote, and writes (the refused change did not count)
    kube.sync_usage(e)
    await kube.pass_(T0 + 270, admission=False)
    await sim.pass_(T0 + 270, admission=False)
    same(kube, sim)
    (_, direction, _, current, desired, _, _, result), = team_a(sim.scaling)
    assert (direction, current, result) == ("up", 1, "written") and desired > 1
    assert world.get("RayCluster", rc.name)["spec"]["workerGroupSpecs"][0]["replicas"] == desired == rc.replicas

    await kube.admission.close()
