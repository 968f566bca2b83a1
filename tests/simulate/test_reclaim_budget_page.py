"""The reclaim-budget page (benchmarks/reclaim_budget.py) reads its verdict from the numbers."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import reclaim_budget as page


def _summary(ctrl: float, idle_actor: float, actors: int, p95: float = 1000.0) -> dict[str, Any]:
    rest = ctrl - idle_actor
    return {"idle_gpu_hours_controllable": ctrl, "idle_gpu_hours": ctrl + 1000.0, "killed_gpu_hours": 0.0,
            "delivered_gpu_hours": 10_000.0, "actors_killed": actors, "actors_killed_peak_hour": actors // 50,
            "idle_gpu_hours_by_class": {"empty": rest / 2, "starting": rest / 2, "idle_actor": idle_actor,
                                        "stalled": 0.0, "in_job": 1000.0},
            "wait_p95_s_by_class": {"ray_task": p95, "workload": 1.0},
            "wait_p99_s_by_class": {"ray_task": 2 * p95, "workload": 1.0}}


def _data(rows: list[tuple[str, int | None, dict[str, Any]]]) -> dict[str, Any]:
    meta = {"generated": "g", "command": "c", "git": "x", "machine": "m", "cpu_s": 1.0, "hours": 100.0,
            "start": "2017-10-03", "models": ["scattered"], "seed": 1, "rate": 0.01}
    return {"meta": meta, "runs": [{"policy": pol, "model": "scattered", "budget": b, "stall_reclaim": False,
                                    "clusters": 5, "summary": s, "cpu_s": 1.0} for pol, b, s in rows]}


def test_the_verdict_names_the_smallest_budget_within_the_target(tmp_path) -> None:
    data = _data([("ray-idle", None, _summary(4000.0, 3800.0, 0)),
                  ("queuepilot-reclaim", 4, _summary(3000.0, 2800.0, 100)),
                  ("queuepilot-reclaim", 64, _summary(1500.0, 1300.0, 900, p95=800.0)),
                  ("queuepilot-reclaim", 1000, _summary(1000.0, 800.0, 2000, p95=500.0))])
    text = page.render(data)
    assert "within 40% of ray-idle's controllable idle is 64 (38%); the default is 4." in text
    # 900 actors over 100 h and 5 RayClusters: 1.8 per RayCluster-hour; p95 800 s against 1000 s
    assert "| 64 | 1,500 | 38% |" in text and "| -20 % / -20 % | 900 | 1.80 | 18 |" in text
    page.plot(tmp_path / "p.png", data)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_no_budget_within_the_target_names_what_is_left() -> None:
    text = page.render(_data([("ray-idle", None, _summary(4000.0, 3800.0, 0)),
                              ("queuepilot-reclaim", 4, _summary(3000.0, 200.0, 10))]))
    assert "no budget here brings controllable idle within 40%" in text
    assert "the largest class left there is empty (1,400 GPU-h, 47% of its controllable idle)" in text


@pytest.mark.parametrize("bad", ["-1", "1001", "four", ""])
def test_bad_budgets_are_refused(bad: str, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        page.main(["--budgets", bad, "--hours", "1"])
    assert exc.value.code == 2 and "--budgets" in capsys.readouterr().err
