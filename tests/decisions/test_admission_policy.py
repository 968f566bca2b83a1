"""Table tests for the admission policy: one or more cases per reason, plus ordering, ledger, backoff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.core import reasons as R
from autoscaler.core.policy.admission import AdmissionConfig, decide_admissions, rebuild_ledger
from autoscaler.core.policy.ledger import Ledger, release
from autoscaler.core.snapshot import CheckState
from tests.decisions.builders import CHECK, NOW, node, snapshot, workload

# Retry at once when the GPUs are not free: the table below is the ladder after the capacity wait,
# which has tests of its own (the ``test_capacity_wait_*`` ones, on the default configuration)
CFG = AdmissionConfig(capacity_wait_seconds=0)


def decide(snap, ledger=None, history=None, config=CFG):
    return decide_admissions(snap, ledger or Ledger(), history or {}, config, NOW)


def only(result):
    assert len(result.decisions) == 1, result.decisions
    return result.decisions[0]


FOUR_NODES = [node("n0"), node("n1"), node("n2", requested=2), node("n3", requested=5)]  # free 8, 8, 6, 3


@pytest.mark.parametrize(
    ("nodes", "pod_sets", "state", "reason"),
    [
        (FOUR_NODES, [("main", 2, 8)], "Ready", R.CAPACITY_CONFIRMED),
        (FOUR_NODES, [("main", 4, 8)], "Retry", R.INSUFFICIENT_GPUS),  # needs 32, 25 free
        (FOUR_NODES, [("main", 3, 8)], "Retry", R.FRAGMENTED),  # needs 24, 25 free, only two 8-blocks
        (FOUR_NODES, [("main", 1, 16)], "Rejected", R.POD_LARGER_THAN_NODE),
        (FOUR_NODES, [("main", 5, 8)], "Rejected", R.EXCEEDS_FLAVOR_CAPACITY),  # 40 > 32 in all
        (FOUR_NODES, [("main", 3, 0)], "Ready", R.NO_GPUS_REQUESTED),
        ([], [("main", 1, 8)], "Retry", R.FLAVOR_HAS_NO_NODES),
    ],
)
def test_reason_table(nodes, pod_sets, state, reason):
    d = only(decide(snapshot(nodes, [workload("w", pod_sets)])))
    assert (d.state, d.reason) == (state, reason)
    if state == "Retry":
        assert d.requeue_after_seconds == CFG.backoff_seconds(0) == 30
    else:
        assert d.requeue_after_seconds is None


def test_retry_message_names_the_blocks():
    d = only(decide(snapshot(FOUR_NODES, [workload("w", [("main", 4, 8)])])))
    assert "needs 4 pods x 8 GPUs (main) on flavor a100; largest free healthy blocks: 8, 8, 6, 3" in d.message
    assert d.infeasible == ("main: 2 of 4 pods unplaced on a100",)


def test_flavor_not_assigned_and_unknown():
    w = workload("w")
    w = replace(w, flavors={})
    assert only(decide(snapshot(FOUR_NODES, [w]))).reason == R.FLAVOR_NOT_ASSIGNED
    w2 = workload("w2", flavor="h100")  # h100 is not a flavor of the snapshot
    assert only(decide(snapshot(FOUR_NODES, [w2]))).reason == R.FLAVOR_NOT_ASSIGNED


def test_unhealthy_gpus_are_not_capacity():
    # XID 79 on 3 GPUs of n0: free 5 there; a 8-GPU pod must go elsewhere
    nodes = [node("n0", unhealthy=3), node("n1", requested=8)]
    d = only(decide(snapshot(nodes, [workload("w", [("main", 1, 8)])])))
    assert (d.state, d.reason) == ("Retry", R.INSUFFICIENT_GPUS)
    assert "3 unhealthy" in d.message


def test_not_ready_and_unschedulable_nodes_are_not_capacity():
    nodes = [node("n0", ready=False), node("n1", schedulable=False)]
    assert only(decide(snapshot(nodes, [workload("w")]))).state == "Retry"


def test_stale_gpu_signal_fail_open_and_hold():
    snap = snapshot(FOUR_NODES, [workload("w", [("main", 4, 8)])], gpu_age=600)
    d = only(decide(snap))
    assert (d.state, d.reason) == ("Ready", R.READY_GPU_SIGNAL_STALE)
    r = decide(snap, config=replace(CFG, stale_signal_mode="hold"))
    d = only(r)
    assert (d.state, d.reason) == (None, R.GPU_SIGNAL_STALE)
    assert r.ledger.reservations == {}
    # never any data at all counts as stale too
    assert only(decide(snapshot(FOUR_NODES, [workload("w")], gpu_age=None))).reason == R.READY_GPU_SIGNAL_STALE


def test_rejection_does_not_depend_on_the_signal():
    snap = snapshot(FOUR_NODES, [workload("w", [("main", 1, 16)])], gpu_age=None)
    assert only(decide(snap, config=replace(CFG, stale_signal_mode="hold"))).state == "Rejected"


def test_retry_backoff_grows_and_caps():
    snap = snapshot(FOUR_NODES, [workload("w", [("main", 4, 8)])])
    hist: dict = {}
    seen = []
    for _ in range(7):
        r = decide(snap, history=hist)
        seen.append(only(r).requeue_after_seconds)
        hist = r.history
    # base 30 * 2^n, capped at 900: 30, 60, 120, 240, 480, 900, 900
    assert seen == [30, 60, 120, 240, 480, 900, 900]


def test_retry_limit_rejects():
    snap = snapshot(FOUR_NODES, [workload("w", [("main", 4, 8)])])
    d = only(decide(snap, history={"team-a/w": 2}, config=replace(CFG, max_retries=2)))
    assert (d.state, d.reason) == ("Rejected", R.RETRY_LIMIT_EXCEEDED)


def test_ready_resets_history_and_retry_history_drops_deleted():
    snap = snapshot(FOUR_NODES, [workload("w", [("main", 1, 8)])])
    r = decide(snap, history={"team-a/w": 3, "team-a/gone": 2})
    assert dict(r.history) == {}


def test_order_priority_then_reservation_time_and_no_double_promise():
    # two free 8-GPU blocks; three workloads want one each; the low-priority one loses
    nodes = [node("n0"), node("n1")]
    wls = [workload("low", priority=0, reserved_at=8_000), workload("high", priority=10, reserved_at=9_500),
           workload("mid", priority=5, reserved_at=9_000)]
    r = decide(snapshot(nodes, wls))
    assert [(d.name, d.state) for d in r.decisions] == [("high", "Ready"), ("mid", "Ready"), ("low", "Retry")]
    assert r.ledger.promised_by_flavor() == {"a100": 16}
    assert sorted(r.ledger.promised_by_node().items()) == [("n0", 8), ("n1", 8)]


def test_ledger_carries_promises_to_the_next_pass():
    nodes = [node("n0"), node("n1")]
    r1 = decide(snapshot(nodes, [workload("a", [("main", 2, 8)])]))
    assert only(r1).state == "Ready"
    # next pass: a is admitted (check Ready now), b arrives; pods of a are not yet bound
    a_ready = replace(workload("a", [("main", 2, 8)]), checks=(CheckState(CHECK, "Ready", NOW),), admitted=True)
    snap2 = snapshot(nodes, [a_ready, workload("b")])
    ledger = release(r1.ledger, snap2, NOW + 1, CFG.reservation_timeout_seconds)
    d = only(decide_admissions(snap2, ledger, {}, CFG, NOW + 1))
    assert (d.name, d.state) == ("b", "Retry")
    # a's pods run: the GPUs are requested on the nodes; the reservation is consumed; b still can't fit
    snap3 = snapshot([node("n0", requested=8), node("n1", requested=8)], [a_ready, workload("b")])
    ledger = release(ledger, snap3, NOW + 2, CFG.reservation_timeout_seconds)
    assert ledger.reservations == {}
    # the reservation also ends when the timeout passes
    ledger = release(r1.ledger, snap2, NOW + CFG.reservation_timeout_seconds + 1, CFG.reservation_timeout_seconds)
    assert ledger.reservations == {}


@pytest.mark.parametrize("change", [dict(evicted=True), dict(finished=True), dict(quota_reserved=False),
                                    dict(uid="other-uid")])
def test_ledger_releases_ended_workloads(change):
    nodes = [node("n0")]
    r = decide(snapshot(nodes, [workload("a")]))
    assert r.ledger.promised_on("n0") == 8
    snap = snapshot(nodes, [replace(workload("a"), **change)])
    assert release(r.ledger, snap, NOW, 600).reservations == {}
    assert release(r.ledger, snapshot(nodes, []), NOW, 600).reservations == {}


def test_a_workload_already_promised_keeps_its_promise():
    nodes = [node("n0")]
    r1 = decide(snapshot(nodes, [workload("a")]))
    r2 = decide(snapshot(nodes, [workload("a")]), ledger=r1.ledger)  # the watch has not caught up yet
    d = only(r2)
    assert (d.state, d.reason) == ("Ready", R.CAPACITY_CONFIRMED)
    assert r2.ledger.promised_on("n0") == 8  # not 16
    assert d.placement == only(r1).placement


@pytest.mark.parametrize("change", [dict(evicted=True), dict(finished=True), dict(quota_reserved=False),
                                    dict(state="Ready"), dict(state="Retry"), dict(check="other")])
def test_guards_leave_workloads_alone(change):
    d = decide(snapshot(FOUR_NODES, [workload("w", **change)]))
    assert d.decisions == ()


def test_only_checks_of_our_controller():
    snap = snapshot(FOUR_NODES, [workload("w")], controller="example.com/not-us")
    assert decide(snap).decisions == ()


def test_pytorchjob_master_and_workers_are_packed_together():
    # Master 1 x 8 + Worker 3 x 8 = 32 on blocks 8, 8, 8, 6, 4 (34 free): only three 8-blocks -> Fragmented
    nodes = [node("n0"), node("n1"), node("n2"), node("n3", requested=2), node("n4", requested=4)]
    w = workload("pytorchjob-x", [("master", 1, 8), ("worker", 3, 8)], owner_kind="PyTorchJob")
    d = only(decide(snapshot(nodes, [w])))
    assert (d.state, d.reason) == ("Retry", R.FRAGMENTED)
    assert "1 pod x 8 GPUs (master) + 3 pods x 8 GPUs (worker)" in d.message
    w2 = workload("pytorchjob-y", [("master", 1, 8), ("worker", 2, 8)], owner_kind="PyTorchJob")
    d2 = only(decide(snapshot(nodes, [w2])))
    assert d2.state == "Ready"
    assert sum(sum(v.values()) for v in d2.placement.values()) == 24
    assert set(d2.placement) == {"master", "worker"}


def test_rayjob_submitter_and_head_without_gpus_do_not_block():
    w = workload("rayjob-x", [("head", 1, 0), ("submitter", 1, 0), ("workers", 2, 4)], owner_kind="RayJob")
    d = only(decide(snapshot([node("n0")], [w])))
    assert d.state == "Ready"
    assert dict(d.placement["workers"]) == {"n0": 8}


def test_cpu_and_memory_are_checked_when_the_node_reports_them():
    nodes = [node("n0", cpu=64, cpu_requested=60)]
    w = workload("w")
    w = replace(w, pod_sets=(replace(w.pod_sets[0], requests={"nvidia.com/gpu": 8, "cpu": 8.0}),))
    assert only(decide(snapshot(nodes, [w]))).state == "Retry"
    assert only(decide(snapshot(nodes, [w]), config=replace(CFG, check_cpu_memory=False))).state == "Ready"


def test_rebuild_ledger_for_a_new_leader():
    nodes = [node("n0"), node("n1")]
    ready = replace(workload("a"), checks=(CheckState(CHECK, "Ready", NOW - 60),))
    old = replace(workload("b"), checks=(CheckState(CHECK, "Ready", NOW - 3600),))
    ledger = rebuild_ledger(snapshot(nodes, [ready, old]), CFG, NOW)
    assert set(ledger.reservations) == {"team-a/a"}
    assert ledger.reservations["team-a/a"].promised_at == NOW - 60  # expires at Ready time + timeout


def test_same_inputs_same_decisions():
    snap = snapshot(FOUR_NODES, [workload(f"w{i}", [("main", i % 3 + 1, 4)]) for i in range(6)])
    assert decide(snap) == decide(snap)


def test_config_from_settings_and_errors():
    from autoscaler.core.policy.config import admission_config

    c = admission_config({"admission": {"stale_signal_mode": "hold", "retry_backoff_base": "1m",
                                        "reservation_timeout": "15m", "max_retries": 5}})
    assert (c.stale_signal_mode, c.retry_backoff_base_seconds, c.reservation_timeout_seconds, c.max_retries) == (
        "hold", 60.0, 900.0, 5)
    with pytest.raises(ValueError, match="unknown key"):
        admission_config({"admission": {"stale_mode": "hold"}})
    with pytest.raises(ValueError, match="fail-open or hold"):
        admission_config({"admission": {"stale_signal_mode": "maybe"}})


def test_a_workload_that_keeps_failing_on_fragmentation_is_told_what_to_do():
    """The first Fragmented retries state the blocks; from the fourth try on, the message (and so the
    check entry and the Event) also says what an operator can do about fragmentation."""
    from autoscaler.core.policy.admission import FRAGMENTED_HINT_AFTER

    w = workload("w", [("main", 3, 8)])
    first = only(decide(snapshot(FOUR_NODES, [w]), history={w.key: FRAGMENTED_HINT_AFTER - 1}))
    later = only(decide(snapshot(FOUR_NODES, [w]), history={w.key: FRAGMENTED_HINT_AFTER}))
    assert first.reason == later.reason == R.FRAGMENTED
    assert "ResourceFlavor" not in first.message
    assert f"fragmented on {FRAGMENTED_HINT_AFTER + 1} tries" in later.message
    assert "reserve whole nodes" in later.message and "reclaim-idle-actors" in later.message
    assert "score GPU nodes MostAllocated" in later.message and "MostAllocated" not in first.message
    # not for a workload that is short of GPUs altogether: more blocks would not help it
    big = workload("big", [("main", 4, 8)])
    short = only(decide(snapshot(FOUR_NODES, [big]), history={big.key: 10}))
    assert short.reason == R.INSUFFICIENT_GPUS and "reserve whole nodes" not in short.message


# ---------------------------------------------------------------------------------- capacity wait

WAIT = AdmissionConfig()  # the default: wait capacity_wait_seconds with quota reserved, then Retry


def test_capacity_wait_holds_pending_with_quota_then_retries():
    assert WAIT.capacity_wait_seconds == 1800
    for pod_sets, reason in (([("main", 4, 8)], R.INSUFFICIENT_GPUS), ([("main", 3, 8)], R.FRAGMENTED)):
        # reserved 1,000 s ago: within the wait, the entry stays Pending (state None), no backoff counted
        r = decide(snapshot(FOUR_NODES, [workload("w", pod_sets, reserved_at=NOW - 1_000)]),
                   history={"team-a/w": 2}, config=WAIT)
        d = only(r)
        assert (d.state, d.reason, d.requeue_after_seconds) == (None, reason, None)
        assert "waiting with quota reserved for up to 1800s from its reservation, then Retry" in d.message
        assert dict(r.history) == {"team-a/w": 2} and r.ledger.reservations == {}
        # the wait is over: Retry with the backoff of the history, as without a wait
        r = decide(snapshot(FOUR_NODES, [workload("w", pod_sets, reserved_at=NOW - 1_800)]),
                   history={"team-a/w": 2}, config=WAIT)
        d = only(r)
        assert (d.state, d.reason, d.requeue_after_seconds) == ("Retry", reason, WAIT.backoff_seconds(2))
        assert dict(r.history) == {"team-a/w": 3}


def test_capacity_wait_message_does_not_change_with_the_free_blocks():
    # one message for the whole wait, so the entry is written (and an Event left) once
    w = workload("w", [("main", 4, 8)], reserved_at=NOW - 10)
    a = only(decide(snapshot(FOUR_NODES, [w]), config=WAIT))
    b = only(decide(snapshot([node("n0"), node("n1", requested=7), node("n2"), node("n3", requested=1)], [w]),
                    config=WAIT))
    assert (a.state, b.state) == (None, None) and a.message == b.message
    assert a.message.startswith("needs 4 pods x 8 GPUs (main) on flavor a100; not enough free healthy GPUs")


def test_capacity_wait_ready_as_soon_as_the_gpus_are_free():
    w = workload("w", [("main", 3, 8)], reserved_at=NOW - 100)
    assert only(decide(snapshot(FOUR_NODES, [w]), config=WAIT)).state is None
    freed = [node("n0"), node("n1"), node("n2"), node("n3", requested=5)]  # n2's 2 GPUs freed: three 8-blocks
    d = only(decide(snapshot(freed, [w]), config=WAIT))
    assert (d.state, d.reason, d.reserved_gpus) == ("Ready", R.CAPACITY_CONFIRMED, 24)


def test_capacity_wait_does_not_hold_back_a_younger_workload_that_fits():
    # the older whole-node workload waits; the younger one takes a free block it fits, as pods would
    nodes = [node("n0", requested=1), node("n1", requested=4)]
    wls = [workload("big", [("main", 1, 8)], reserved_at=NOW - 600), workload("small", [("main", 1, 2)],
                                                                          reserved_at=NOW - 60)]
    r = decide(snapshot(nodes, wls), config=WAIT)
    assert [(d.name, d.state) for d in r.decisions] == [("big", None), ("small", "Ready")]


def test_capacity_wait_needs_a_known_reservation_time_and_zero_turns_it_off():
    nodes = FOUR_NODES
    unknown = replace(workload("w", [("main", 4, 8)]), quota_reserved_at=None)
    assert only(decide(snapshot(nodes, [unknown]), config=WAIT)).state == "Retry"
    future = workload("w", [("main", 4, 8)], reserved_at=NOW + 60)  # a clock skew never makes it wait longer
    assert only(decide(snapshot(nodes, [future]), config=WAIT)).state == "Retry"
    now = workload("w", [("main", 4, 8)], reserved_at=NOW)
    assert only(decide(snapshot(nodes, [now]), config=CFG)).state == "Retry"


def test_capacity_wait_leaves_the_ladder_before_it_alone():
    # rejections and stale-signal handling come first; the wait is only for GPUs not free yet
    w = workload("w", [("main", 1, 16)], reserved_at=NOW - 10)
    assert only(decide(snapshot(FOUR_NODES, [w]), config=WAIT)).reason == R.POD_LARGER_THAN_NODE
    w = workload("w", [("main", 4, 8)], reserved_at=NOW - 10)
    assert only(decide(snapshot(FOUR_NODES, [w], gpu_age=600), config=WAIT)).state == "Ready"
    assert only(decide(snapshot([], [w]), config=WAIT)).reason == R.FLAVOR_HAS_NO_NODES
