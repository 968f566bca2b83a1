"""The simulated fleet: seeded patterns, the scripted fault, and the drivable API."""

from __future__ import annotations

import statistics

import pytest

from exporter.agent import Agent
from exporter.collector import ExporterCollector
from exporter.sample import PodRef
from exporter.sources.sim import Fault, SimSource

UTIL, POWER, TEMP, FB_USED = "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_FB_USED"
T0 = 1_700_000_000.0


def run_hours(source: SimSource, hours: float = 4.0, step: float = 15.0):
    return [source.sample(T0 + i * step) for i in range(int(hours * 3600 / step))]


def test_same_seed_same_fleet_other_seed_other_fleet() -> None:
    a = run_hours(SimSource("n", seed=7, fault_script=()), hours=0.5)
    b = run_hours(SimSource("n", seed=7, fault_script=()), hours=0.5)
    c = run_hours(SimSource("n", seed=8, fault_script=()), hours=0.5)
    assert a == b
    assert [s.gpus[0].uuid for s in a[:1]] != [s.gpus[0].uuid for s in c[:1]]
    assert [g.fields for s in a for g in s.gpus] != [g.fields for s in c for g in s.gpus]


def test_half_the_gpus_are_allocated_two_per_pod_by_default() -> None:
    s = SimSource("n", gpus=8)
    pods = [s.allocation(i) for i in range(8)]
    assert all(p is not None for p in pods[:4]) and pods[4:] == [None] * 4
    assert len({p for p in pods if p}) == 2
    assert len({SimSource("n", gpus=8, pods=4).allocation(i) for i in range(4)}) == 4
    assert all(SimSource("n", gpus=8, pods=0).allocation(i) is None for i in range(8))


def test_utilization_is_bimodal_and_power_temperature_follow_it() -> None:
    samples = run_hours(SimSource("n", gpus=8, seed=3, fault_script=()), hours=6)
    allocated = [g.fields for s in samples for g in s.gpus if g.pod is not None]
    free = [g.fields for s in samples for g in s.gpus if g.pod is None]
    zero = [f for f in allocated if f[UTIL] == 0]
    busy = [f for f in allocated if f[UTIL] > 0]
    assert 0.15 < len(zero) / len(allocated) < 0.5  # idle-but-allocated about a third of the time
    assert all(60 <= f[UTIL] <= 100 for f in busy)
    assert all(f[UTIL] == 0 and f[FB_USED] == 0 for f in free)
    assert statistics.mean(f[POWER] for f in busy) > 3 * statistics.mean(f[POWER] for f in free)
    assert statistics.mean(f[TEMP] for f in busy) > statistics.mean(f[TEMP] for f in free) + 20
    assert all(f[FB_USED] > 0 for f in zero)  # an idle pod keeps its model resident
    for f in allocated:
        assert f["DCGM_FI_DEV_FB_FREE"] + f[FB_USED] + f["DCGM_FI_DEV_FB_RESERVED"] == pytest.approx(81559, abs=1)


def test_energy_is_a_counter_that_integrates_power() -> None:
    s = SimSource("n", gpus=2, fault_script=())
    a, b = s.sample(T0), s.sample(T0 + 10)
    e0, e1 = (x.gpus[0].fields["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] for x in (a, b))
    assert e1 - e0 == pytest.approx(b.gpus[0].fields[POWER] * 10 * 1000, rel=0.01)


async def test_default_fault_script_fatal_xid_then_gpu_off_the_bus() -> None:
    source = SimSource("n", gpus=4)
    t = [T0]
    agent = Agent(source, ExporterCollector(clock=lambda: t[0]), hostname="n", interval=15, clock=lambda: t[0])
    reasons = {}
    for step in range(0, 181, 15):
        t[0] = T0 + step
        state = await agent.collect_once()
        reasons[step] = [g.health.reason for g in state.sample.gpus]
    assert reasons[15] == ["", "", "", ""]
    assert reasons[30] == ["", "", "", ""]  # XID 63 is not a drain reason
    assert reasons[60] == ["", "FatalXid", "", ""]
    assert reasons[120] == ["", "FatalXid", "", "GpuLost"]
    assert state.xid_totals == {(source.uuids[0], 63): 1, (source.uuids[1], 48): 1, (source.uuids[3], 79): 1}
    assert state.sample.gpus[3].lost and not state.sample.gpus[3].fields
    assert state.errors_total[("sim", "gpu_lost")] == 5  # counted on every collection while lost (120..180 s)


def test_driving_the_fleet() -> None:
    s = SimSource("n", gpus=4, pods=0, fault_script=(Fault(5.0, 2, "lost"), Fault(10.0, 2, "recover")))
    pod = PodRef("team-x", "job-1", "main")
    s.set_allocation(3, pod)
    s.set_load(3, 0.5)
    s.set_load(0, 0.25)
    s.inject_xid(1, 79)
    first = s.sample(T0)
    assert first.gpus[3].pod == pod and first.gpus[3].fields[UTIL] == 50
    assert first.gpus[0].fields[UTIL] == 25 and first.gpus[0].pod is None
    assert first.gpus[1].xid_events == ((79, T0),) and first.gpus[1].fields["DCGM_FI_DEV_XID_ERRORS"] == 79
    assert s.sample(T0 + 1).gpus[1].xid_events == ()
    assert s.sample(T0 + 6).gpus[2].lost
    assert not s.sample(T0 + 11).gpus[2].lost
    s.set_lost(0, True)
    s.set_allocation(3, None)
    s.set_load(3, None)
    later = s.sample(T0 + 12)
    assert later.gpus[0].lost and later.errors == {"gpu_lost": 1}
    assert later.gpus[3].pod is None and later.gpus[3].fields[UTIL] == 0
    with pytest.raises(ValueError):
        s.set_load(0, 1.5)
    with pytest.raises(IndexError):
        s.inject_xid(9, 79)


PROF = "DCGM_FI_PROF_"
ENGINE, SM, TENSOR, DRAM = (f"{PROF}GR_ENGINE_ACTIVE", f"{PROF}SM_ACTIVE", f"{PROF}PIPE_TENSOR_ACTIVE", f"{PROF}DRAM_ACTIVE")


def check_profiling_invariants(f) -> None:
    ratios = {k: v for k, v in f.items() if k.startswith(PROF) and not k.endswith("_BYTES")}
    assert all(0.0 <= v <= 1.0 for v in ratios.values()), ratios
    assert f[ENGINE] >= f[SM] >= f[TENSOR] >= 0
    assert f[SM] >= f[f"{PROF}SM_OCCUPANCY"]
    parts = f[f"{PROF}PIPE_TENSOR_HMMA_ACTIVE"] + f[f"{PROF}PIPE_TENSOR_IMMA_ACTIVE"] + f[f"{PROF}PIPE_TENSOR_DFMA_ACTIVE"]
    assert parts <= f[TENSOR] + 1e-6


def test_profiling_fields_are_consistent_with_utilization() -> None:
    samples = run_hours(SimSource("n", gpus=8, seed=3, fault_script=()), hours=2)
    for s in samples:
        for g in s.gpus:
            f = g.fields
            check_profiling_invariants(f)
            assert f[ENGINE] == pytest.approx(f[UTIL] / 100, abs=0.006)  # the engine is busy when GPU_UTIL says so
            if f[UTIL] == 0:
                assert f[SM] == f[TENSOR] == f[DRAM] == 0 and f[f"{PROF}NVLINK_TX_BYTES"] == 0


def test_compute_and_memory_bound_jobs_look_different() -> None:
    by_kind: dict[str, list] = {}
    for seed in range(6):
        source = SimSource("n", gpus=16, pods=8, seed=seed, fault_script=())
        kinds = [source.job_kind(i) for i in range(16)]
        for s in run_hours(source, hours=1, step=60):
            for g in s.gpus:
                if kinds[g.index] and g.fields[ENGINE] > 0:
                    by_kind.setdefault(kinds[g.index], []).append(g.fields)
    assert {"compute", "memory", "light"} <= set(by_kind)

    def mean(kind: str, num: str, den: str) -> float:
        return statistics.mean(f[num] / f[den] for f in by_kind[kind])

    assert mean("compute", TENSOR, SM) > 2 * mean("memory", TENSOR, SM)  # tensor cores busy
    assert mean("memory", DRAM, ENGINE) > 1.5 * mean("compute", DRAM, ENGINE)  # the memory interface busy
    # a loop of tiny kernels: GPU_UTIL and engine high, few SMs with work
    assert mean("light", SM, ENGINE) < 0.25 < mean("compute", SM, ENGINE)


def test_a_driven_load_is_the_engine_activity() -> None:
    s = SimSource("n", gpus=2, pods=0, fault_script=())
    s.set_load(0, 0.42)
    f = s.sample(T0).gpus[0].fields
    assert f[ENGINE] == pytest.approx(0.42) and f[UTIL] == 42
    check_profiling_invariants(f)


def test_mig_gpus_are_opt_in_with_instances_attributed_to_their_own_pods() -> None:
    plain = SimSource("n", gpus=8, seed=5, fault_script=())
    mig = SimSource("n", gpus=8, seed=5, fault_script=(), mig_gpus=2)
    a, b = plain.sample(T0), mig.sample(T0)
    assert all(g.mig == () for g in a.gpus)  # the default fleet has no MIG
    assert [g.fields for g in a.gpus[:6]] == [g.fields for g in b.gpus[:6]]  # and MIG changes nothing else
    for s in run_hours(mig, hours=0.5):
        for g in s.gpus[6:]:
            assert g.pod is None and UTIL not in g.fields  # NVML gives no GPU_UTIL in MIG mode
            assert [m.profile for m in g.mig] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
            assert [m.gpu_instance_id for m in g.mig] == [2, 3, 9, 10]
            assert [m.pod is not None for m in g.mig] == [True, True, True, False]
            assert sum(m.fields[FB_USED] for m in g.mig) == g.fields[FB_USED]
            for m in g.mig:
                check_profiling_invariants(m.fields)
            assert g.fields[ENGINE] == pytest.approx(sum(m.fields[ENGINE] * w for m, w in zip(g.mig, (3, 2, 1, 1), strict=True)) / 7, abs=1e-5)
    assert set(mig.mig_uuids) == {6, 7} and all(u.startswith("MIG-") for us in mig.mig_uuids.values() for u in us)
    with pytest.raises(ValueError):
        SimSource("n", gpus=2, mig_gpus=3)
