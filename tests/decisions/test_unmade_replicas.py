"""Replicas whose pods were never created (quota or no free GPU) count as in flight, and a scale-down
is computed from the pods that exist: otherwise replicas ratchet up to maxReplicas and the new, lower
value still lies above the pod count, so the operator deletes none of workersToDelete."""

from __future__ import annotations

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.config import ScalingDefaults
from autoscaler.core.policy.scaling import GroupHistory, decide_scaling
from autoscaler.core.snapshot import frozen_map
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker

LONG_AGO = NOW - 3600


def idle(*pods):
    return {"gpu": GroupHistory(idle_since=frozen_map({p: LONG_AGO for p in pods}))}


BUSY3 = [worker("w0"), worker("w1"), worker("w2")]
MIXED = [worker("w0", util=0.95), worker("w1", util=0.0, busy=False), worker("w2", util=0.0, busy=False)]


@pytest.mark.parametrize(
    ("case", "workers", "replicas", "demand", "history", "want"),
    [
        # (direction, reason, desired, workers_to_delete)
        ("demand already asked for: no ratchet", BUSY3, 8, 2, {}, ("down", R.WITHIN_TARGET, 5, ())),
        ("demand beyond the unmade replicas", BUSY3, 5, 4, {}, ("up", R.PENDING_DEMAND, 7, ())),
        ("no demand: replicas follow the pods", BUSY3, 6, 0, {}, ("down", R.WITHIN_TARGET, 3, ())),
        ("idle scale-down lands below the pods", MIXED, 8, 0, idle("w1", "w2"),
         ("down", R.IDLE_WORKERS, 1, ("w1", "w2"))),
        ("all pods exist: unchanged", BUSY3, 3, 2, {}, ("up", R.PENDING_DEMAND, 5, ())),
    ],
)
def test_unmade_replicas(case, workers, replicas, demand, history, want):
    rc = ray_cluster([group(workers=workers, replicas=replicas)],
                     demand=[gpu_demand(1, count=demand)] if demand else [])
    d = decide_scaling(snapshot(ray=[rc]), rc, ScalingDefaults(), history, NOW).decisions[0]
    assert (d.direction, d.reason, d.desired, d.workers_to_delete) == want, case
    if d.direction == "down" and d.workers_to_delete:
        assert d.desired < len(workers)  # the operator has something to delete


def test_in_tree_autoscaler_gap_is_left_to_ray():
    # with Ray's autoscaler on, replicas above the pods are Ray's own scale-up: maxReplicas is not lowered
    rc = ray_cluster([group(workers=BUSY3, replicas=6)], in_tree=True)
    d = decide_scaling(snapshot(ray=[rc]), rc, ScalingDefaults(), {}, NOW).decisions[0]
    assert d.write == "none" and d.direction == "hold"
