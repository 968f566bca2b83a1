"""``queuepilot_pod_info`` label sets and the recommender's snapshot observations, on hand-built snapshots."""

from __future__ import annotations

import pytest

from autoscaler.controller.pod_info import (
    CLUSTER_QUEUE_LABEL,
    LABELS,
    LOCAL_QUEUE_LABEL,
    PODSET_LABEL,
    KueuePod,
    pod_info,
)
from autoscaler.core.policy import rightsizing as rs
from autoscaler.core.snapshot import (
    QUEUE_NAME_LABEL,
    FlavorState,
    LocalQueueState,
    NodeState,
    RayWorker,
    WorkerGroupState,
)
from tests.economics.snapshots import NOW, gpu, ray_cluster, snapshot, wl


def row(**labels) -> dict[str, str]:
    return {k: labels.get(k, "") for k in LABELS}


def test_ray_workers_with_queue_label_and_workload():
    rc = ray_cluster("team-a", "rc-tune", [
        WorkerGroupState("gpu-workers", 2, 0, 4, gpus_per_worker=8,
                         workers=(RayWorker("rc-tune-gpu-w-1", gpus=8), RayWorker("rc-tune-gpu-w-2", gpus=8))),
        WorkerGroupState("cpu", 1, 0, 2, workers=(RayWorker("rc-tune-cpu-1"),)),  # no GPUs: no series
    ], labels={QUEUE_NAME_LABEL: "lq-a"}, cluster_queue="cq-a")
    snap = snapshot(
        ray_clusters={"team-a/rc-tune": rc},
        local_queues={"team-a/lq-a": LocalQueueState("team-a", "lq-a", "cq-a")},
        workloads={"team-a/raycluster-rc-tune-1": wl("team-a", "raycluster-rc-tune-1", "lq-a", "cq-a",
                                                     "RayCluster", "rc-tune", podsets=("head", "gpu-workers"))},
    )
    assert pod_info(snap) == [
        row(namespace="team-a", pod=p, raycluster="rc-tune", group="gpu-workers", local_queue="lq-a",
            cluster_queue="cq-a", flavor="h100", job_kind="RayCluster")
        for p in ("rc-tune-gpu-w-1", "rc-tune-gpu-w-2")
    ]


def test_rayjob_cluster_gets_its_queues_from_the_rayjob_workload():
    rc = ray_cluster("team-b", "train-x7k2p", [
        WorkerGroupState("workers", 1, 1, 1, gpus_per_worker=4, workers=(RayWorker("train-x7k2p-w-1", gpus=4),)),
    ], labels={"ray.io/originated-from-cr-name": "train", "ray.io/originated-from-crd": "RayJob"})
    snap = snapshot(ray_clusters={"team-b/train-x7k2p": rc},
                    workloads={"team-b/rayjob-train-1": wl("team-b", "rayjob-train-1", "lq-b", "cq-b", "RayJob",
                                                           "train", podsets=("head", "workers"), flavor="a100")})
    assert pod_info(snap) == [row(namespace="team-b", pod="train-x7k2p-w-1", raycluster="train-x7k2p",
                                  group="workers", local_queue="lq-b", cluster_queue="cq-b", flavor="a100",
                                  job_kind="RayJob")]


def test_labelled_kueue_pods_and_the_owning_workload():
    snap = snapshot(workloads={
        "team-c/job-train-1": wl("team-c", "job-train-1", "lq-c", "cq-c", "Job", "train"),
        "team-c/job-train-2-1": wl("team-c", "job-train-2-1", "lq-c", "cq-c", "PyTorchJob", "train-2",
                                   podsets=("master", "worker"), flavor="h100"),
    })
    labels = {LOCAL_QUEUE_LABEL: "lq-c", CLUSTER_QUEUE_LABEL: "cq-c"}
    pods = [
        KueuePod("team-c", "train-2-worker-0", 2, {**labels, PODSET_LABEL: "worker"}),  # longest job name wins
        KueuePod("team-c", "train-abcde", 1, {**labels, PODSET_LABEL: "main"}),
        KueuePod("team-c", "cpu-only-xyz", 0, {**labels, PODSET_LABEL: "main"}),  # holds no GPU
    ]
    assert pod_info(snap, pods) == [
        row(namespace="team-c", pod="train-2-worker-0", local_queue="lq-c", cluster_queue="cq-c", flavor="h100",
            job_kind="PyTorchJob"),
        row(namespace="team-c", pod="train-abcde", local_queue="lq-c", cluster_queue="cq-c", flavor="h100",
            job_kind="Job"),
    ]


def test_exporter_attributed_pods_matched_by_job_name_or_namespace_only():
    snap = snapshot(
        workloads={"team-d/job-sweep-1": wl("team-d", "job-sweep-1", "lq-d", "cq-d", "Job", "sweep"),
                   "team-d/job-old-1": wl("team-d", "job-old-1", "lq-d", "cq-d", "Job", "old", admitted=False)},
        nodes={"n1": NodeState("n1", gpu_allocatable=4, gpus=(
            gpu("n1", 0, ("team-d", "sweep-q8x2m")), gpu("n1", 1, ("team-d", "sweep-q8x2m")),
            gpu("n1", 2, ("team-d", "old-abcde")),  # its workload is not admitted: namespace only
            gpu("n1", 3),
        ))},
    )
    assert pod_info(snap) == [
        row(namespace="team-d", pod="old-abcde"),
        row(namespace="team-d", pod="sweep-q8x2m", local_queue="lq-d", cluster_queue="cq-d",
            flavor="h100", job_kind="Job"),
    ]


def test_observe_snapshot_counts_active_gpus_per_worker():
    pol = rs.RightsizingPolicy(active_utilization=0.05, active_memory_bytes=1e9)
    rc = ray_cluster("team-a", "rc", [WorkerGroupState("g", 3, 0, 4, gpus_per_worker=4, workers=(
        RayWorker("w1", gpus=4), RayWorker("w2", gpus=4), RayWorker("w3", gpus=4, deleting=True),
        RayWorker("w4", gpus=4),  # no GPU series for it: left out (no data is not idleness)
    ))])
    gpus = (
        gpu("n1", 0, ("team-a", "w1"), util=0.9), gpu("n1", 1, ("team-a", "w1"), util=0.0, mem=2e9),  # memory only
        gpu("n1", 2, ("team-a", "w1"), util=0.01), gpu("n1", 3, ("team-a", "w1"), util=0.0, mem=1e6),
        gpu("n2", 0, ("team-a", "w2"), util=0.0), gpu("n2", 1, ("team-a", "w3"), util=0.9),
    )
    snap = snapshot(ray_clusters={"team-a/rc": rc}, nodes={"n1": NodeState("n1", gpus=gpus[:4]),
                                                            "n2": NodeState("n2", gpus=gpus[4:])})
    obs = rs.observe_snapshot(snap, pol, duration_s=30)
    o = obs[rs.GroupKey("team-a", "rc", "g")]
    assert o.t == NOW and o.duration_s == 30
    assert o.workers == (rs.WorkerObservation("w1", 4, 2), rs.WorkerObservation("w2", 4, 0))
    assert (o.busy_workers, o.held_gpus, o.active_gpus) == (1, 8, 2)


def test_history_recommends_from_snapshots_and_prunes():
    h = rs.RightsizingHistory(keep_s=3 * 86400)
    key = rs.GroupKey("ns", "rc", "g")
    obs = [rs.GroupObservation(n * 300.0, 300, (rs.WorkerObservation("w", 8, 2),)) for n in range(4 * 24 * 12)]
    for o in obs:
        h.add({key: o})
    h.prune(now=4 * 86400)
    [r] = h.recommend(rs.RightsizingPolicy())
    # the first day is forgotten: the numbers are those of the last three days' observations alone
    alone = rs.recommend_group(key, [o for o in obs if o.t >= 86400], rs.RightsizingPolicy())
    assert r.recommended_gpus_per_worker == 2 and r.reason == rs.RECOMMENDED
    assert (r.observed_idle_gpu_hours, r.saved_gpu_hours) == (alone.observed_idle_gpu_hours, alone.saved_gpu_hours)
    assert r.observed_idle_gpu_hours == pytest.approx(3 * 24 * 6)
    assert len(h.groups[key].usage) == 3  # one state per day: memory does not grow with the samples
    h.prune(now=100 * 86400)
    assert h.groups == {}


def test_ray_workers_without_a_kueue_flavor_are_priced_by_their_node_flavor():
    """A RayCluster Kueue does not manage (no Workload): its workers carry the flavor whose nodeLabels select
    their node, the most specific where several do (a flavor without labels selects every node), none where
    two equally specific flavors select it; so `queuepilot report` can price them."""
    rc = ray_cluster("team-c", "rc-nb", [
        WorkerGroupState("workers", 3, 0, 4, gpus_per_worker=2, workers=(
            RayWorker("rc-nb-w-1", node="h100-1", gpus=2), RayWorker("rc-nb-w-2", node="a100-1", gpus=2),
            RayWorker("rc-nb-w-3", node="both-1", gpus=2), RayWorker("rc-nb-w-4", node=None, gpus=2))),
    ])
    snap = snapshot(
        ray_clusters={"team-c/rc-nb": rc},
        flavors={
            "default": FlavorState("default", {}, ("h100-1", "a100-1", "both-1")),
            "h100": FlavorState("h100", {"gpu": "h100"}, ("h100-1",)),
            "a100": FlavorState("a100", {"gpu": "a100"}, ("a100-1", "both-1")),
            "h100-spot": FlavorState("h100-spot", {"pool": "spot"}, ("both-1",)),
        },
    )
    flavors = {r["pod"]: r["flavor"] for r in pod_info(snap)}
    assert flavors == {"rc-nb-w-1": "h100", "rc-nb-w-2": "a100", "rc-nb-w-3": "", "rc-nb-w-4": ""}
    # the Workload's admitted flavor wins over the node's
    workload = wl("team-c", "raycluster-rc-nb", "lq-c", "cq-c", "RayCluster", "rc-nb", podsets=("workers",),
                  flavor="a100")
    snap2 = snapshot(ray_clusters={"team-c/rc-nb": rc}, flavors=dict(snap.flavors),
                     workloads={"team-c/raycluster-rc-nb": workload})
    assert {r["flavor"] for r in pod_info(snap2)} == {"a100"}
