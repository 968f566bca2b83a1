"""The node-scoring page (benchmarks/placement.py) reads its verdicts from the numbers it is given."""

from __future__ import annotations

from typing import Any

from benchmarks import placement as page


def _summary(gang: float, single: float, unplaceable: int = 0, ray: float = 100.0) -> dict[str, Any]:
    waits = {"ray_task": ray, "single_pod": single, "gang": gang, "workload": 1.0}
    return {"wait_p95_s_by_class": waits, "wait_p99_s_by_class": {k: 2 * v for k, v in waits.items()},
            "unplaceable_admissions": unplaceable, "unplaceable_gpu_hours": 3.0 * unplaceable,
            "pods_ready_evictions": unplaceable // 2, "idle_gpu_hours": 5000.0, "delivered_gpu_hours": 9000.0}


def _data(weeks: dict[str, dict[tuple[str, str], dict[str, Any]]]) -> dict[str, Any]:
    meta = {"generated": "g", "command": "c", "git": "x", "machine": "m", "cpu_s": 10.0, "wall_s": 60.0,
            "jobs": 2, "hours": 168.0, "weeks": list(weeks), "seed": 1, "rate": 0.01}
    runs = [{"policy": pol, "placement": pl, "start": w, "summary": s, "cpu_s": 1.0}
            for w, cells in weeks.items() for (pol, pl), s in cells.items()]
    return {"meta": meta, "runs": runs}


def test_the_check_is_read_beside_the_packed_scheduler(tmp_path) -> None:
    # week a: the check halves the gang tail under spread, and bin-packing alone does better still
    # week b: the check's gang tail beats kueue-quota's under either scoring, but single pods wait longer
    data = _data({
        "a": {("kueue-quota", "spread"): _summary(1000.0, 100.0, unplaceable=40),
              ("queuepilot", "spread"): _summary(500.0, 100.0),
              ("kueue-quota", "pack"): _summary(10.0, 1.0),
              ("queuepilot", "pack"): _summary(10.0, 1.0)},
        "b": {("kueue-quota", "spread"): _summary(1000.0, 100.0, unplaceable=10),
              ("queuepilot", "spread"): _summary(600.0, 300.0),
              ("kueue-quota", "pack"): _summary(900.0, 50.0, unplaceable=2),
              ("queuepilot", "pack"): _summary(700.0, 50.0)},
    })
    text = page.render(data)
    # a: 0.5x gang, 1.0x others under spread (met); under pack kueue-quota's gangs wait 10 / 20 s: nothing
    # to cut; kueue-quota packed has 0.01x its own gang tail
    assert "| a | 0.50x, 1.00x | met | 1.00x, 1.00x | no gang wait to cut | 0.01x | 50.00x, 100x |" in text
    # b: single_pod 3x under spread; 0.78x gang under pack (met); the check beats the packed quota's gang tail
    assert "| b | 0.60x, 3.00x | not met | 0.78x, 1.00x | met | 0.90x | 0.67x, 6.00x |" in text
    assert "on 1 of 2 weeks; under MostAllocated on 1 of 2; on 1 of 2 there is no gang wait to cut" in text
    assert "admits 2 unplaceable workloads over the 2 weeks" in text
    assert "is at most 1,800 s there, against 2,000-2,000 s under the default scoring." in text
    assert "both policies: 1.00x-1.00x over the 4 pairs of runs." in text
    assert "kueue-quota under MostAllocated on 1 of 2 weeks: the check keeps a gain there." in text
    assert "| queuepilot | MostAllocated | 50 / 100 | 700 / 1,400 | 100 | 0 | 0 | 0 | 5,000 | 9,000 |" in text
    page.plot(tmp_path / "p.png", data)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_a_missing_run_reads_as_not_measured() -> None:
    data = _data({"a": {("queuepilot", "spread"): _summary(500.0, 100.0)}})
    text = page.render(data)
    assert "| a | n/a, n/a | n/a | n/a, n/a | n/a | n/a | n/a, n/a |" in text
    assert "on 0 of 1 weeks; under MostAllocated on 0 of 1; on 0 of 1 there is no gang wait" in text


def test_the_plan_runs_both_policies_under_both_scorings_per_week() -> None:
    assert page.plan(["w"]) == [("kueue-quota", "spread", "w"), ("queuepilot", "spread", "w"),
                                ("kueue-quota", "pack", "w"), ("queuepilot", "pack", "w")]
