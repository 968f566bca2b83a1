"""The pure MultiKueue dispatch policy: which worker clusters a manager Workload is nominated to."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.policy import dispatch as D
from autoscaler.core.policy.dispatch import (
    DispatchConfig,
    DispatchHistory,
    DispatchTarget,
    WorkerView,
    decide_dispatch,
    release_worker_ledger,
)
from autoscaler.core.policy.ledger import Ledger
from autoscaler.core.policy.packing import gpu_sets
from tests.decisions.builders import NOW, node, snapshot, workload

CFG = DispatchConfig()


def worker(name: str, nodes, *, active=True, reachable=True, age=5.0, gpu_age: float | None = 5.0, wls=()):
    return WorkerView(name, active, reachable, NOW - age, snapshot(nodes, wls, gpu_age=gpu_age))


def target(wl, clusters=("a", "b"), nominated=(), cluster_name=None):
    return DispatchTarget(wl, tuple(clusters), tuple(nominated), cluster_name)


def decide(targets, workers, ledgers=None, history=None, cfg=CFG, now=NOW):
    ws = {w.name: w for w in workers}
    return decide_dispatch(targets, ws, ledgers or {}, history or {}, cfg, now)


# one worker broken / fragmented, the other with room -> nominated where it fits
@pytest.mark.parametrize("a_nodes, expect, reason", [
    ([node("a1", 8, unhealthy=6)], ("b",), D.NOMINATED),             # a: GPUs broken
    ([node("a1", 8, requested=4), node("a2", 8, requested=4)], ("b",), D.NOMINATED),  # a: fragmented 4+4
    ([node("a1", 8)], ("a", "b"), D.NOMINATED),                       # both fit: both, a tighter (tie -> order)
])
def test_nominates_where_it_fits(a_nodes, expect, reason):
    wl = workload("w1", (("main", 1, 8),))
    r = decide([target(wl)], [worker("a", a_nodes), worker("b", [node("b1", 8)])])
    (d,) = r.decisions
    assert d.nominate == expect and d.reason == reason
    for c in expect:
        assert r.ledgers[c].promised_by_node()  # GPUs promised on every nominated cluster


def test_best_first_is_least_fragmentation_left():
    wl = workload("w1", (("main", 1, 4),))
    # a: a node with 8 free (leaves 4 behind); b: a node with exactly 4 free (leaves 0)
    r = decide([target(wl)], [worker("a", [node("a1", 8)]), worker("b", [node("b1", 8, requested=4)])])
    assert r.decisions[0].nominate == ("b", "a")


def test_max_nominations():
    wl = workload("w1", (("main", 1, 4),))
    r = decide([target(wl)], [worker("a", [node("a1", 8)]), worker("b", [node("b1", 8, requested=4)])],
               cfg=DispatchConfig(max_nominations=1))
    assert r.decisions[0].nominate == ("b",)
    assert not r.ledgers["a"].reservations


@pytest.mark.parametrize("kw, why", [
    (dict(active=False), "inactive"), (dict(reachable=False), "unreachable"), (dict(age=1000.0), "stale"),
    (dict(gpu_age=1000.0), "stale"), (dict(gpu_age=None), "stale"),
])
def test_never_nominates_unusable_cluster(kw, why):
    wl = workload("w1", (("main", 1, 8),))
    r = decide([target(wl)], [worker("a", [node("a1", 8)], **kw), worker("b", [node("b1", 8, unhealthy=1)])])
    (d,) = r.decisions
    assert d.nominate == () and d.reason == D.NO_CLUSTER_FITS
    assert f"a: {why}" in d.message and "b: insufficient on a100: largest free blocks 7" in d.message
    assert d.retry_after_seconds == CFG.backoff_base_seconds
    assert "a" not in d.blocks and d.blocks["b"]["a100"] == (7,)


def test_no_usable_cluster_and_backoff_history():
    wl = workload("w1", (("main", 1, 8),))
    ws = [worker("a", [node("a1", 8)], reachable=False)]
    r1 = decide([target(wl, ("a",))], ws)
    assert r1.decisions[0].reason == D.NO_USABLE_CLUSTER and r1.history[wl.key].attempts == 1
    # within the backoff: no decision
    r2 = decide([target(wl, ("a",))], ws, history=r1.history, now=NOW + 5)
    assert r2.decisions == ()
    # after it: decided again, backoff doubled
    r3 = decide([target(wl, ("a",))], ws, history=r1.history, now=NOW + 11)
    assert r3.decisions[0].retry_after_seconds == 2 * CFG.backoff_base_seconds
    # fits again -> history cleared
    r4 = decide([target(wl, ("a",))], [worker("a", [node("a1", 8)], age=-100)], history=r3.history, now=NOW + 100)
    assert r4.decisions[0].nominate == ("a",) and wl.key not in r4.history


def test_message_names_largest_blocks_per_cluster():
    wl = workload("w1", (("main", 2, 8),))
    r = decide([target(wl)], [worker("a", [node("a1", 8, requested=2), node("a2", 8, requested=6)]),
                              worker("b", [node("b1", 8)])])
    d = r.decisions[0]
    assert d.reason == D.NO_CLUSTER_FITS
    assert "a: insufficient on a100: largest free blocks 6, 2" in d.message
    assert "b: insufficient on a100: largest free blocks 8" in d.message


def test_two_workloads_never_share_gpus_in_one_pass():
    w1 = workload("w1", (("main", 1, 8),), priority=10)
    w2 = workload("w2", (("main", 1, 8),))
    r = decide([target(w2), target(w1)], [worker("a", [node("a1", 8)]), worker("b", [node("b1", 4)])])
    by = {d.name: d for d in r.decisions}
    assert by["w1"].nominate == ("a",)  # higher priority first
    assert by["w2"].nominate == ()


def test_kept_nomination_is_not_rewritten_and_survives_restart():
    wl = workload("w1", (("main", 1, 8),))
    ws = [worker("a", [node("a1", 8)]), worker("b", [node("b1", 8)])]
    r1 = decide([target(wl)], ws)
    nominated = r1.decisions[0].nominate
    r2 = decide([target(wl, nominated=nominated)], ws, ledgers=r1.ledgers)
    assert r2.decisions[0].nominate is None and r2.decisions[0].reason == D.NOMINATION_KEPT
    # a new leader (empty ledgers): kept, and the reservation re-taken
    r3 = decide([target(wl, nominated=nominated)], ws)
    assert r3.decisions[0].reason == D.NOMINATION_KEPT and r3.ledgers["a"].reservations


def test_unreachable_nominated_cluster_drops_out():
    wl = workload("w1", (("main", 1, 8),))
    r1 = decide([target(wl)], [worker("a", [node("a1", 8)]), worker("b", [node("b1", 8)])])
    assert r1.decisions[0].nominate == ("a", "b")
    r2 = decide([target(wl, nominated=("a", "b"))],
                [worker("a", [node("a1", 8)], reachable=False), worker("b", [node("b1", 8)])], ledgers=r1.ledgers)
    assert r2.decisions[0].nominate == ("b",)
    assert wl.key not in r2.ledgers["a"].reservations


def test_cluster_name_set_and_ineligible_are_left_alone():
    wl = workload("w1", (("main", 1, 8),))
    ws = [worker("a", [node("a1", 8)])]
    assert decide([target(wl, ("a",), cluster_name="a")], ws).decisions == ()
    assert decide([target(workload("w2", evicted=True), ("a",))], ws).decisions == ()
    assert decide([target(workload("w3", quota_reserved=False), ("a",))], ws).decisions == ()


def test_cpu_only_goes_to_every_usable_cluster():
    wl = workload("w1", (("main", 2, 0),))
    r = decide([target(wl)], [worker("a", [node("a1", 8)]), worker("b", [], active=False)])
    assert r.decisions[0].nominate == ("a",) and r.decisions[0].reason == D.NO_GPUS_REQUESTED


def test_release_drops_reservation_when_placed_elsewhere():
    wl = workload("w1", (("main", 1, 8),))
    ws = [worker("a", [node("a1", 8)], wls=[wl]), worker("b", [node("b1", 8)], wls=[wl])]
    r = decide([target(wl)], ws)
    t = {wl.key: target(wl, cluster_name="b")}
    la = release_worker_ledger(r.ledgers["a"], ws[0], t, NOW, 600)
    lb = release_worker_ledger(r.ledgers["b"], ws[1], t, NOW, 600)
    assert not la.reservations and lb.reservations


def test_config_validation():
    with pytest.raises(ValueError):
        DispatchConfig(max_nominations=-1)
    with pytest.raises(ValueError):
        DispatchConfig(backoff_base_seconds=10, backoff_cap_seconds=5)


@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.lists(st.integers(0, 8), min_size=0, max_size=4), min_size=1, max_size=3),
    wls=st.lists(st.tuples(st.integers(1, 3), st.sampled_from([1, 2, 4, 8]), st.integers(0, 3)), min_size=1, max_size=8),
    max_nom=st.integers(0, 2),
)
def test_property_never_promises_a_gpu_twice(free, wls, max_nom):
    workers = []
    for ci, frees in enumerate(free):
        nodes = [node(f"c{ci}-n{i}", 8, requested=8 - f) for i, f in enumerate(frees)]
        workers.append(worker(f"c{ci}", nodes))
    targets = [target(workload(f"w{i}", (("main", c, g),), priority=p), tuple(w.name for w in workers))
               for i, (c, g, p) in enumerate(wls)]
    r = decide(targets, workers, cfg=DispatchConfig(max_nominations=max_nom))
    for w in workers:
        promised = r.ledgers[w.name].promised_by_node()
        for n, g in promised.items():
            assert g <= w.snapshot.nodes[n].free_gpus  # never more than the node has free
    for d in r.decisions:
        if d.nominate:
            assert len(d.nominate) == len(set(d.nominate))
            assert not max_nom or len(d.nominate) <= max_nom
            for c in d.nominate:
                assert d.workload in r.ledgers[c].reservations


def test_history_of_gone_workloads_dropped():
    wl = workload("w1")
    r = decide([target(wl, ("a",))], [worker("a", [node("a1", 8)])], history={"x/gone": DispatchHistory(3, 0.0)})
    assert "x/gone" not in r.history and r.decisions[0].nominate == ("a",)


def test_empty_ledgers_keep_unknown_workers():
    r = decide([], [], ledgers={"z": Ledger()})
    assert "z" in r.ledgers


def test_nothing_usable_keeps_nominations():
    wl = workload("w1", (("main", 1, 8),))
    r = decide([target(wl, nominated=("a",))], [worker("a", [node("a1", 8)], reachable=False),
                                                worker("b", [node("b1", 8)], active=False)])
    (d,) = r.decisions
    assert d.reason == D.NO_USABLE_CLUSTER and d.nominate is None and not d.changes


@settings(max_examples=80, deadline=None)
@given(frees=st.lists(st.integers(0, 8), min_size=1, max_size=12), count=st.integers(1, 4),
       gpus=st.sampled_from([1, 2, 4, 8]))
def test_property_fragmentation_score_matches_brute_force(frees, count, gpus):
    w = worker("a", [node(f"n{i}", 8, requested=8 - f) for i, f in enumerate(frees)])
    wl = workload("w", (("main", count, gpus),))
    state = D._Worker(w, Ledger(), CFG)
    fit, _ = state.fit({"a100": gpu_sets(wl)})
    if fit is None:
        return
    used = fit.reservation["a100"]
    after = {f"n{i}": f - used.get(f"n{i}", 0) for i, f in enumerate(frees)}
    assert fit.leftover == sum(after[n] for n in used)
    assert fit.largest_left == max(after.values())
