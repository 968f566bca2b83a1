"""The admission reconciler's quiet pass: a pass on the last quiet pass's very Workload and
AdmissionCheck maps decides nothing, and gives way to everything that can change a decision on
those same maps (a hold, a reservation that times out, another map)."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from prometheus_client import CollectorRegistry

from autoscaler.act.outcome import WriteOutcome
from autoscaler.controller.admission import AdmissionReconciler
from autoscaler.controller.context import ControllerContext
from autoscaler.controller.counters import ControllerCounters
from autoscaler.core import reasons as R
from autoscaler.core.policy.admission import AdmissionDecision
from autoscaler.core.snapshot import CHECK_READY, CheckState, ClusterSnapshot, SignalStatus, frozen_map
from tests.decisions.builders import CHECK, NOW, node, snapshot, workload


class _Recorder:
    """A writer that writes nowhere: every status write "succeeds" without the snapshot changing, as
    when the watch has not yet brought the write back."""

    dry_run = False

    def __init__(self) -> None:
        self.written: list[AdmissionDecision] = []

    async def activate_check(self, name: str, now: float) -> WriteOutcome:
        return WriteOutcome("written")

    async def set_check_state(self, decision: AdmissionDecision, now: float) -> WriteOutcome:
        self.written.append(decision)
        return WriteOutcome("written")

    def post_event(self, ref: object, type_: str, reason: str, message: str, now: float) -> None:
        pass

    async def close(self) -> None:
        pass


def _reconciler(**admission: object) -> tuple[AdmissionReconciler, _Recorder, ControllerContext]:
    registry = CollectorRegistry()
    ctx = ControllerContext(api_client=None, registry=registry, counters=ControllerCounters(registry),
                            settings={"admission": dict(admission)})
    writer = _Recorder()
    return AdmissionReconciler(ctx, writer), writer, ctx  # type: ignore[arg-type]


def _at(snap: ClusterSnapshot, now: float, *, fresh: bool = True) -> ClusterSnapshot:
    """``snap`` at ``now`` with the same Workload and AdmissionCheck maps (the same objects)."""
    gpu = SignalStatus("gpu", now - 5.0 if fresh else None, 60.0)
    return replace(snap, taken_at=now, signals=frozen_map({"gpu": gpu}))


def _pass(rec: AdmissionReconciler, snap: ClusterSnapshot, now: float) -> None:
    asyncio.run(rec.reconcile(snap, now))


def test_a_pass_on_the_same_maps_after_a_quiet_one_decides_nothing():
    rec, writer, _ = _reconciler()
    quiet = snapshot([node("n0")], [workload("done", state=CHECK_READY)])
    _pass(rec, quiet, NOW)
    assert rec.quiet_passes == 0 and not writer.written
    _pass(rec, _at(quiet, NOW + 30), NOW + 30)
    assert rec.quiet_passes == 1 and not writer.written and rec.outcomes == []
    # another Workload map, though equal, is not known to be unchanged: the pass runs in full
    _pass(rec, replace(quiet, taken_at=NOW + 60, workloads=frozen_map(dict(quiet.workloads))), NOW + 60)
    assert rec.quiet_passes == 1


def test_a_workload_that_turns_pending_is_decided_at_the_next_pass():
    rec, writer, _ = _reconciler()
    quiet = snapshot([node("n0")], [workload("w", state=CHECK_READY)])
    _pass(rec, quiet, NOW)
    pending = snapshot([node("n0")], [workload("w")], now=NOW + 30)
    _pass(rec, pending, NOW + 30)
    assert [(d.workload, d.state, d.reason) for d in writer.written] == [("team-a/w", "Ready", R.CAPACITY_CONFIRMED)]


def test_a_hold_is_decided_again_on_the_same_maps_once_the_signal_is_fresh():
    """A hold (stale GPU signal, ``stale_signal_mode: hold``) leaves the entry Pending and the maps as
    they were: the next pass on them must decide again, not skip."""
    rec, writer, _ = _reconciler(stale_signal_mode="hold")
    snap = snapshot([node("n0")], [workload("w")], gpu_age=None)
    _pass(rec, snap, NOW)
    assert [(d.state, d.reason) for d in writer.written] == [(None, R.GPU_SIGNAL_STALE)]
    _pass(rec, _at(snap, NOW + 30), NOW + 30)
    assert [(d.state, d.reason) for d in writer.written][1:] == [(CHECK_READY, R.CAPACITY_CONFIRMED)]
    assert rec.quiet_passes == 0


def _ready(w: str, at: float, *, requested: int = 0, gpus: int = 8, now: float = NOW) -> ClusterSnapshot:
    """Workload ``w`` with our check Ready since ``at``, its pods' ``requested`` GPUs on node n0."""
    ready = replace(workload(w), checks=(CheckState(CHECK, CHECK_READY, at),))
    return snapshot([node("n0", gpus=gpus, requested=requested)], [ready], now=now)


def test_a_reservation_held_on_the_same_maps_times_out():
    """After a Ready the ledger holds its GPUs until the pods show on the nodes or the reservation
    times out; passes on the same maps while it is held must release it at its timeout."""
    rec, writer, ctx = _reconciler(reservation_timeout_seconds=300)
    _pass(rec, snapshot([node("n0")], [workload("w")]), NOW)
    assert writer.written[-1].state == CHECK_READY and rec.ledger is not None and rec.ledger.reservations
    ready = _ready("w", NOW, now=NOW + 30)
    for t in (30, 130, 230):  # nothing to decide, the promise still held: no pass is quiet
        _pass(rec, _at(ready, NOW + t), NOW + t)
        assert rec.ledger.reservations and sum(ctx.published.reserved_gpus.values()) == 8, t
    _pass(rec, _at(ready, NOW + 330), NOW + 330)  # the same maps, past the timeout: released
    assert rec.ledger.reservations == {} and not any(ctx.published.reserved_gpus.values())
    assert rec.quiet_passes == 0
    _pass(rec, _at(ready, NOW + 360), NOW + 360)  # now quiet: nothing decided, nothing reserved
    assert rec.quiet_passes == 1 and len(writer.written) == 1


def test_after_a_gap_the_ledger_is_rebuilt_though_the_maps_are_the_same():
    """A pass after a gap (another leader may have promised meanwhile) rebuilds the ledger from the
    checks that are Ready, on the same maps too: a Ready within the reservation timeout is reserved
    again (the safe direction), where a quiet pass would have kept the empty ledger."""
    rec, writer, ctx = _reconciler(reservation_timeout_seconds=600)
    _pass(rec, snapshot([node("n0", gpus=16)], [workload("w")]), NOW)
    assert writer.written[-1].state == CHECK_READY
    bound = _ready("w", NOW, requested=8, gpus=16, now=NOW + 30)  # its pods took their GPUs
    _pass(rec, bound, NOW + 30)
    assert rec.ledger is not None and rec.ledger.reservations == {}
    _pass(rec, _at(bound, NOW + 60), NOW + 60)
    assert rec.quiet_passes == 1
    _pass(rec, _at(bound, NOW + 400), NOW + 400)  # 340 s without a pass: rebuilt
    assert rec.quiet_passes == 1 and sum(ctx.published.reserved_gpus.values()) == 8
