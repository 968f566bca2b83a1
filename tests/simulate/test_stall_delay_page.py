"""The stall-delay page (benchmarks/stall_delay.py) reads its verdict from the numbers."""

from __future__ import annotations

from typing import Any

from benchmarks import stall_delay as page


def _summary(ctrl: float, killed: float, delivered: float = 10_000.0) -> dict[str, Any]:
    return {"idle_gpu_hours_controllable": ctrl, "idle_gpu_hours": ctrl + 1000.0, "killed_gpu_hours": killed,
            "delivered_gpu_hours": delivered, "idle_gpu_hours_by_class": {"stalled": ctrl / 2},
            "stall_deactivations": 3}


def _data(rows: list[tuple[float | None, dict[str, Any]]]) -> dict[str, Any]:
    meta = {"generated": "g", "command": "c", "git": "x", "machine": "m", "cpu_s": 1.0, "hours": 720.0,
            "start": "2017-10-03", "model": "grounded", "seed": 1, "rate": 0.01}
    return {"meta": meta, "runs": [{"policy": "p", "delay_s": d, "summary": s, "cpu_s": 1.0} for d, s in rows]}


def test_the_verdict_names_the_shortest_delay_within_one_percent(tmp_path) -> None:
    data = _data([(None, _summary(4000.0, 0.0)), (1800.0, _summary(500.0, 300.0)),
                  (3600.0, _summary(800.0, 100.0)), (7200.0, _summary(1200.0, 20.0))])
    text = page.render(data)
    assert "within 1 % of delivered GPU-hours is 1 h; the default is 2 h." in text
    assert "| 30 min | 500 | 12% |" in text and "| 2 h (default) | 1,200 | 30% |" in text
    assert "`stall_delay.png`: killed work" in text
    assert "`stall_delay-serving.png`: killed work" in page.render(data, "stall_delay-serving")
    page.plot(tmp_path / "p.png", data)
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_no_delay_within_one_percent_is_said() -> None:
    text = page.render(_data([(None, _summary(4000.0, 0.0)), (7200.0, _summary(1200.0, 500.0))]))
    assert "no delay here keeps killed work within 1 %" in text
