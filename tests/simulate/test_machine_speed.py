"""benchmarks/machine_speed.py: the probes of the machine's speed a benchmark takes while it runs, and
the sentence the policy page prints of them (a page without probes, an older one, prints none)."""

from __future__ import annotations

import pytest

from benchmarks import policy
from benchmarks.machine_speed import SpeedLog, describe, margin
from tests.simulate.policy_records import record, source

WARM_UP = 9.9  # the first probe's value, dropped


def _log(values: list[float], every_s: float = 20.0) -> SpeedLog:
    it = iter([WARM_UP, *values])
    return SpeedLog(every_s, probe=lambda: next(it))


def test_a_probe_is_taken_at_the_first_call_after_a_dropped_one_then_at_most_every_interval() -> None:
    log = _log([0.020, 0.030, 0.025])
    for now in (100.0, 105.0, 119.9):
        log.maybe(now)
    assert log.samples == [0.020]
    log.maybe(120.0)  # due: 20 s after the first
    log.maybe(139.0)  # not yet: 20 s after the second is 140
    log.maybe(500.0)  # late: taken once, not once per missed interval
    assert log.samples == [0.020, 0.030, 0.025]


def test_the_summary_is_in_milliseconds_and_none_without_probes() -> None:
    assert _log([]).summary() is None
    log = _log([0.010, 0.040, 0.020])
    for now in (0.0, 20.0, 40.0):
        log.maybe(now)
    s = log.summary()
    assert s is not None
    assert (s["n"], s["median_ms"], s["min_ms"], s["max_ms"]) == (3, 20.0, 10.0, 40.0)
    assert "median 20.0 ms over 3 probes (10.0-40.0)" in describe(s)
    assert describe(None) == ""


def test_a_non_positive_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="every_s"):
        SpeedLog(0.0)


def test_the_page_says_the_machine_speed_where_its_run_measured_it() -> None:
    runs = [record("grounded", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "queuepilot")]
    speed = {"n": 70, "median_ms": 21.4, "min_ms": 18.0, "max_ms": 30.2, "probe_n": 30000}
    measured = source("aaa", runs)
    measured["meta"]["machine_speed"] = speed
    page = policy.render(measured, None, "policy")
    assert "Machine speed while it ran" in page and "median 21.4 ms over 70 probes (18.0-30.2)" in page
    assert "Machine speed" not in policy.render(source("bbb", runs), None, "policy")  # an older page: none
    other = source("ccc", [record("grounded", 2, 0.01, "ray-idle")])
    merged = policy.render(policy.merge([("a.json", measured), ("c.json", other)], "merge"), None, "policy")
    assert "- `a.json`: 2 of its 2 runs kept; git aaa, date of aaa, 1.0 min wall on 2 processes (machine speed: " \
           "median probe 21.4 ms)" in merged
    assert "- `c.json`: 1 of its 1 runs kept; git ccc, date of ccc, 1.0 min wall on 2 processes: " in merged


def _speed(median_ms: float) -> dict[str, float]:
    return {"n": 50, "median_ms": median_ms, "min_ms": median_ms - 1.0, "max_ms": median_ms + 9.0, "probe_n": 30000}


def test_the_margin_is_the_probe_median_at_which_the_run_would_take_the_limit() -> None:
    # 15 min at 20 ms: 30 min at twice the median; 30 min at 20 ms: the limit itself
    assert "30 minutes at a probe median of 40.0 ms (2.00x this run's)" in margin(900.0, _speed(20.0), 30.0)
    assert "at a probe median of 20.0 ms (1.00x this run's)" in margin(1800.0, _speed(20.0), 30.0)
    assert margin(900.0, None, 30.0) == "" and margin(0.0, _speed(20.0), 30.0) == ""
    assert margin(900.0, _speed(0.0), 30.0) == ""


def test_only_a_whole_matrix_page_says_its_margin_to_the_30_minute_target() -> None:
    runs = [record("grounded", 1, 0.01, "ray-idle"), record("grounded", 1, 0.01, "queuepilot")]
    whole = source("aaa", runs, wall_s=1260.0)  # 21 min at a median of 21 ms
    whole["meta"].update(policy.axes(policy.build_parser().parse_args([])), caps=[1.0, 2.0, 4.0], quick=False,
                         machine_speed=_speed(21.0))
    target = ("The whole matrix's target is 30 minutes on 2 cores: this run would take 30 minutes at a probe "
              "median of 30.0 ms (1.43x this run's)")
    assert target in policy.render(whole, None, "policy")
    for change in ({"models": ["grounded"]}, {"seeds": [1]}, {"quick": True}, {"caps": []}, {"hours": 168.0}):
        part = {"meta": {**whole["meta"], **change}, "runs": runs}
        page = policy.render(part, None, "policy")
        assert "Machine speed while it ran" in page and "target is 30 minutes" not in page, change
