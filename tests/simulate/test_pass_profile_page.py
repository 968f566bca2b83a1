"""The pass profile (benchmarks/pass_profile.py): its timers change no result, count what ran, and its page
reads its verdicts from the numbers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from benchmarks import pass_profile as page
from simulator.engine import Engine, SimConfig
from simulator.inputs import load_window

HOURS = 3.0


def _engine(policy: str, stall: bool) -> Engine:
    cfg = replace(SimConfig(), seed=3, gpu_failure_rate=0.5, stall_reclaim=stall)
    window = load_window("synthetic", "", HOURS, 3, cfg.nodes * cfg.gpus_per_node)
    return Engine(window.jobs, HOURS * 3600.0, policy, cfg)


@pytest.mark.parametrize(("policy", "stall"), [("queuepilot-reclaim", True), ("ray-idle", False)])
def test_the_timers_change_no_result_and_count_every_pass(policy: str, stall: bool) -> None:
    plain = _engine(policy, stall)
    plain.run()
    timed = _engine(policy, stall)
    prof = page.PassProfile()
    prof.attach(timed)
    timed.run()
    prof.finish()
    assert timed.metrics.summary() == plain.metrics.summary()
    ticks = int(HOURS * 3600 / 30) + 1  # a tick at 0 and one every 30 s through the window's end
    assert prof.calls["tick"] == ticks
    builds = prof.calls["snapshot build"]
    assert builds >= ticks and prof.reuse["snapshots"] == builds - 1
    assert prof.calls["reconciler: AdmissionReconciler"] == builds  # at every tick and Kueue pass
    if stall:
        assert prof.calls["reconciler: StallReconciler"] == ticks and "baseline scaler" not in prof.calls
    else:
        assert prof.calls["baseline scaler"] == ticks and "reconciler: ScalingReconciler" not in prof.calls
    for key in ("all unchanged", "nodes unchanged", "workloads unchanged", "cluster queues unchanged"):
        assert 0 <= prof.reuse[key] <= prof.reuse["snapshots"]
    # RayClusters are compared where both passes read them: every tick under queuepilot (its scaling
    # reconciler), only the right-sizing feed's passes (every few minutes) under a baseline
    read = prof.reuse["ray clusters read"]
    assert prof.reuse["groups"] % len(timed.rays) == 0 and prof.reuse["groups"] <= read * len(timed.rays)
    if stall:
        assert read >= ticks - 1 and prof.reuse["groups"] >= (ticks - 2) * len(timed.rays) // 2
    else:
        assert 0 < read < ticks / 4
    assert 0 <= prof.reuse["groups unchanged"] <= prof.reuse["groups"]
    # every part runs inside the run, and the snapshot build inside a tick or a Kueue pass
    assert prof.seconds["snapshot build"] <= prof.seconds["tick"] + prof.seconds["Kueue pass"]


def _run(label: str, wall: float, seconds: dict[str, float], reuse: dict[str, int]) -> dict[str, Any]:
    calls = {k: 100 for k in seconds}
    return {"label": label, "wall_s": wall, "cpu_s": wall, "seconds": seconds, "calls": calls, "reuse": reuse,
            "summary": {}}


def test_the_page_derives_its_reading_from_the_numbers() -> None:
    runs = [
        _run("queuepilot", 100.0, {"tick": 90.0, "Kueue pass": 5.0, "snapshot build": 20.0,
                                   "reconciler: ScalingReconciler": 40.0, "accounting": 10.0},
             {"snapshots": 200, "all unchanged": 20, "groups": 1000, "groups unchanged": 500}),
        _run("static", 50.0, {"tick": 40.0, "snapshot build": 25.0, "baseline scaler": 1.0},
             {"snapshots": 100, "all unchanged": 50, "groups": 500, "groups unchanged": 100}),
    ]
    b = page.bounds(runs[0])
    assert b["skip_passes_saves"] == pytest.approx(0.1 * 0.9)  # 10 % of the passes, ticks 90 % of the run
    assert b["skip_groups_saves"] == pytest.approx(0.5 * 0.4)
    rows = {p: s for p, s, _ in page.cost_rows(runs[0])}
    assert rows["outside ticks and Kueue passes (the other events, the event loop)"] == pytest.approx(5.0)
    text = "\n".join(page.reading(runs))
    assert "`queuepilot`: the largest part is the reconciler: ScalingReconciler (40.0 % of the run)" in text
    assert "`static`: the largest part is the snapshot build (50.0 % of the run); the ticks are 80.0 %" in text
    # the most over both runs: static's half of its passes unchanged, its ticks 80 % of it
    assert "would save at most 40.0 % of a run here; skipping every unchanged scaling decision at most 20.0 %" in text
    data = {"meta": {"generated": "g", "command": "c", "git": "x", "machine": "m", "hours": 1.0,
                     "start": "2017-10-03", "model": "grounded", "seed": 1, "rate": 0.01}, "runs": runs}
    assert "| reconciler: ScalingReconciler | 40.0 | 40.0 % | 100 | 400,000 |" in page.render(data)


@pytest.mark.parametrize("bad", ["", "nope", "static,nope+stall"])
def test_unknown_policies_are_refused(bad: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        page.main(["--policies", bad, "--hours", "1"])
    assert exc.value.code == 2 and "--policies" in capsys.readouterr().err
