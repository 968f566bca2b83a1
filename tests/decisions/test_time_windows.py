"""Time windows (``queuepilot.io/schedule``, ``scaling.cluster_queue_schedules``): the schedule's syntax
and its hard validation, which window is in force when (time zones, midnight, the week's end, daylight
saving), and the scaling decisions they bound, with hand-built snapshots."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from autoscaler.core import reasons as R
from autoscaler.core.policy.annotations import SCHEDULE_ANNOTATION, parse_policy_annotations
from autoscaler.core.policy.config import ScalingDefaults, scaling_defaults
from autoscaler.core.policy.scaling import GroupHistory, decide_scaling
from autoscaler.core.policy.schedule import (
    DAY_NAMES,
    MAX_SCHEDULE_CHARS,
    MAX_WINDOWS,
    Schedule,
    Window,
    parse_schedule,
)
from autoscaler.core.snapshot import ClusterQueueState, frozen_map
from tests.decisions.builders import gpu_demand, group, ray_cluster, snapshot, worker

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
D = ScalingDefaults()
# Tuesday 2024-06-04, UTC
TUE_2200 = datetime(2024, 6, 4, 22, 0, tzinfo=UTC).timestamp()
TUE_1000 = datetime(2024, 6, 4, 10, 0, tzinfo=UTC).timestamp()
NIGHT_AND_DAY = "Mon-Fri 20:00-08:00 max=2 name=night; Mon-Fri 08:00-20:00 min=3"


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def decide(rc, now, defaults=D, history=None, cqs=()):
    return decide_scaling(snapshot(ray=[rc], now=now, cqs=cqs), rc, defaults, history or {}, now)


def one(rc, now, **kw):
    (d,) = decide(rc, now, **kw).decisions
    return d


def rc_with(workers, *, now, schedule=NIGHT_AND_DAY, demand=(), lo=0, hi=10, replicas=None, **kw):
    ann = {SCHEDULE_ANNOTATION: schedule} if schedule is not None else {}
    ann.update(kw.pop("annotations", {}))
    return ray_cluster([group(workers=workers, lo=lo, hi=hi, replicas=replicas)], demand=demand, now=now,
                       annotations=ann, **kw)


def idle(n, prefix="i"):
    return [worker(f"{prefix}{k}", util=0.0, busy=False) for k in range(n)]


def busy(n, prefix="b"):
    return [worker(f"{prefix}{k}") for k in range(n)]


def long_idle(rc, now):
    """The history of a pass long ago that saw ``rc``'s idle workers idle (their idle window is over)."""
    since = {w.pod: now - 3600 for g in rc.groups for w in g.workers if w.ray_busy is False}
    return {g.name: GroupHistory(idle_since=frozen_map(since)) for g in rc.groups}


# ------------------------------------------------------------------------------------------- syntax
@pytest.mark.parametrize(("text", "windows", "zone"), [
    ("Mon-Fri 20:00-08:00 max=2", [((0, 1, 2, 3, 4), 1200, 480, None, 2, None, None, None)], "UTC"),
    ("sat,SUNDAY 00:00-24:00 min=1 max=4 name=weekend group=gpu; tz=Europe/Berlin",
     [((5, 6), 0, 1440, 1, 4, "weekend", "gpu", None)], "Europe/Berlin"),
    ("Fri-Mon 22:00-06:00 max=0", [((0, 4, 5, 6), 1320, 360, None, 0, None, None, None)], "UTC"),
    ("* 09:30-17:45 min=2\nMon,Wed-Fri 18:00-19:00 max=3\n TZ=America/New_York ",
     [((0, 1, 2, 3, 4, 5, 6), 570, 1065, 2, None, None, None, None), ((0, 2, 3, 4), 1080, 1140, None, 3, None, None, None)],
     "America/New_York"),
    ("Fri 20:00-Mon 08:00 max=1 name=weekend", [((4,), 1200, 480, None, 1, "weekend", None, 0)], "UTC"),
])
def test_schedules_parse(text, windows, zone):
    s = parse_schedule(text)
    assert [(w.days, w.start, w.end, w.min_workers, w.max_workers, w.name, w.group, w.end_day)
            for w in s.windows] == windows
    assert s.zone == zone
    assert parse_schedule(s.text) == s  # the canonical text reads back to the same schedule


@pytest.mark.parametrize(("text", "match"), [
    ("", "no window"),
    ("tz=Europe/Berlin", "no window"),
    ("Mon-Fri 20:00-08:00", "DAYS HH:MM-HH:MM"),
    ("Mon-Fri 20:00-08:00 min=1", None),  # (valid: checked below to keep the table honest)
    ("Mon 08:00-09:00 min=3 max=2", "min=3 is above max=2"),
    ("Mon 08:00-09:00 max=-1", "whole number"),
    ("Mon 08:00-09:00 max=1000001", "whole number"),
    ("Mon 08:00-09:00 max=1e3", "whole number"),
    ("Mon 08:00-09:00 max=inf", "whole number"),
    ("Mon 08:00-09:00 max=1 max=2", "max= given twice"),
    ("Mon 08:00-09:00 size=1", "unknown window option"),
    ("Mon 08:00-09:00 max", "unknown window option"),
    ("Mon 08:00-08:00 max=1", "empty"),
    ("Mon 24:00-08:00 max=1", "24:00 only as an end"),
    ("Mon 08:60-09:00 max=1", "no such time"),
    ("Mon 8:00-09:00 max=1", "HH:MM"),
    ("Mon 08:00 max=1", "HH:MM"),
    ("Mon-Fri 20:00-Mon 08:00 max=1", "across days"),
    ("Fri 20:00-Fri 20:00 max=1", "empty"),
    ("Funday 08:00-09:00 max=1", "not a day"),
    ("Mon-Fri,, 08:00-09:00 max=1", "not a day"),
    ("Mon 08:00-09:00 max=1 name=Night", "window name"),
    ("Mon 08:00-09:00 max=1 name=n; Tue 08:00-09:00 max=1 name=n", "name used twice"),
    ("Mon 08:00-09:00 max=1 group=-x", "worker group"),
    ("Mon 08:00-09:00 max=1; tz=Mars/Olympus", "unknown time zone"),
    ("Mon 08:00-09:00 max=1; tz=../../etc/passwd", "not a time zone"),
    ("Mon 08:00-09:00 max=1; tz=/etc/localtime", "not a time zone"),
    ("Mon 08:00-09:00 max=1; tz=Europe", "unknown time zone"),  # a folder of the zone database
    ("Mon 08:00-09:00 max=1; tz=UTC; tz=UTC", "tz= given twice"),
    # overlaps: the same day, across midnight, across the week's end, a group window in an all-groups one
    ("Mon-Fri 08:00-20:00 min=4; Fri 19:00-21:00 max=1", "overlap at Fri 19:00"),
    ("Mon-Fri 20:00-08:00 max=2; Sat,Sun 00:00-24:00 max=2", "overlap at Sat 00:00"),
    ("Sun 22:00-02:00 max=1; Mon 01:00-03:00 max=2", "overlap at Mon 01:00"),
    ("Fri 20:00-Mon 08:00 max=1; Mon 07:00-09:00 min=1", "overlap at Mon 07:00"),
    ("Mon 08:00-20:00 max=1; Mon 12:00-13:00 max=2 group=gpu", "overlap"),
])
def test_malformed_schedules_are_refused_naming_the_part(text, match):
    if match is None:
        parse_schedule(text)
        return
    with pytest.raises(ValueError, match=match):
        parse_schedule(text)


def test_adjacent_windows_and_windows_of_different_groups_may_touch():
    s = parse_schedule("Sun 22:00-02:00 max=1; Mon 02:00-03:00 max=2; Mon 08:00-20:00 max=1 group=a; "
                       "Mon 08:00-20:00 max=2 group=b; Fri 20:00-Sun 22:00 max=3")
    assert len(s.windows) == 5


def test_size_and_count_bounds():
    windows = [f"Mon {h:02d}:00-{h:02d}:30 max=1" for h in range(MAX_WINDOWS + 1)]
    assert len(parse_schedule("; ".join(windows[:MAX_WINDOWS])).windows) == MAX_WINDOWS
    with pytest.raises(ValueError, match=f"more than {MAX_WINDOWS} windows"):
        parse_schedule("; ".join(windows))
    text = "Mon 08:00-09:00 max=1 name=x;" + " " * MAX_SCHEDULE_CHARS
    with pytest.raises(ValueError, match=f"longer than {MAX_SCHEDULE_CHARS}"):
        parse_schedule(text)
    with pytest.raises(ValueError, match="is text"):
        parse_schedule(5)


@SETTINGS
@given(st.text(max_size=80) | st.text(alphabet="MonTueFriSatSun*,-:0123456789 ;=maxminzt/ABE\n", max_size=80))
def test_any_text_is_a_schedule_or_a_value_error(text):
    try:
        s = parse_schedule(text)
    except ValueError as e:
        assert len(str(e)) < 400
        return
    assert 1 <= len(s.windows) <= MAX_WINDOWS
    assert parse_schedule(s.text) == s


ZONES = ["UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Kiritimati"]


@st.composite
def windows_st(draw):
    across = draw(st.booleans())
    start = draw(st.integers(0, 1439))
    end = draw(st.integers(0, 1440))
    lo = draw(st.none() | st.integers(0, 20))
    hi = draw(st.none() | st.integers(lo or 0, 30)) if lo is not None else draw(st.integers(0, 30))
    if across:
        day, end_day = draw(st.integers(0, 6)), draw(st.integers(0, 6))
        assume((end_day, min(end, 1439)) != (day, start))
        return Window((day,), start, min(end, 1439), lo, hi, end_day=end_day)
    assume(start != end)
    days = tuple(sorted(draw(st.sets(st.integers(0, 6), min_size=1))))
    return Window(days, start, end, lo, hi)


@SETTINGS
@given(windows_st(), st.sampled_from(ZONES))
def test_a_window_reads_back_from_its_text(w, zone):
    s = Schedule((w,), zone, ZoneInfo(zone))
    assert parse_schedule(s.text) == s


def covers(w: Window, local: datetime) -> bool:
    """Independently of ``Window.spans``: is ``local`` (a wall-clock time) inside ``w``?"""
    day, minute = local.weekday(), local.hour * 60 + local.minute
    if w.end_day is not None:
        since_start = (day * 1440 + minute - w.days[0] * 1440 - w.start) % (7 * 1440)
        length = (w.end_day * 1440 + w.end - w.days[0] * 1440 - w.start) % (7 * 1440)
        return since_start < length
    if w.start < w.end:
        return day in w.days and w.start <= minute < w.end
    return (day in w.days and minute >= w.start) or ((day - 1) % 7 in w.days and minute < w.end)


@SETTINGS
@given(windows_st(), st.sampled_from(ZONES), st.integers(1_500_000_000, 2_000_000_000))
def test_the_window_in_force_is_the_one_its_local_time_falls_in(w, zone, now):
    s = Schedule((w,), zone, ZoneInfo(zone))
    found = s.window_at(now)
    assert (found is not None) == covers(w, datetime.fromtimestamp(now, ZoneInfo(zone)))
    if found is not None:
        assert found[0] == w and found[1][:3] in DAY_NAMES


def test_wall_clock_times_across_daylight_saving():
    s = parse_schedule("Sun 01:00-04:00 max=1; tz=Europe/Berlin")  # 2024-03-31: 02:00 CET -> 03:00 CEST
    assert s.window_at(at("2024-03-31T00:30:00+00:00")) is not None  # 01:30 CET
    assert s.window_at(at("2024-03-31T01:30:00+00:00")) is not None  # 03:30 CEST
    assert s.window_at(at("2024-03-31T02:00:00+00:00")) is None  # 04:00 CEST
    office = parse_schedule("Mon-Fri 08:00-20:00 min=1; tz=Europe/Berlin")
    assert office.window_at(at("2024-01-08T07:30:00+00:00")) is not None  # 08:30 CET (winter)
    assert office.window_at(at("2024-07-08T06:30:00+00:00")) is not None  # 08:30 CEST (summer)
    assert office.window_at(at("2024-01-08T06:30:00+00:00")) is None  # 07:30 CET
    assert office.window_at(at("2024-07-08T18:30:00+00:00")) is None  # 20:30 CEST


def test_until_names_the_local_end():
    s = parse_schedule("Fri 20:00-Mon 08:00 max=1 name=weekend; tz=America/New_York")
    w, until = s.window_at(at("2024-06-08T12:00:00-04:00"))  # a Saturday
    assert (w.label, until) == ("weekend", "Mon 08:00")


# -------------------------------------------------------------------------------------- annotation
def test_the_annotation_is_parsed_once_with_the_rest():
    parsed = parse_policy_annotations({SCHEDULE_ANNOTATION: NIGHT_AND_DAY, "queuepilot.io/idle-window": "5m"})
    assert parsed.schedule == parse_schedule(NIGHT_AND_DAY)
    policy, warnings = parsed.apply(D)
    assert warnings == () and policy.idle_window_seconds == 300


def test_a_malformed_schedule_is_one_warning_and_changes_nothing():
    parsed = parse_policy_annotations({SCHEDULE_ANNOTATION: "Mon-Fri 20:00-08:00 max=2; tz=Mars/Olympus",
                                       "queuepilot.io/idle-window": "5m"})
    assert parsed.schedule is None
    policy, (warning,) = parsed.apply(D)
    assert policy == replace(D, idle_window_seconds=300.0)  # the other annotation still applies
    assert warning.startswith(f"annotation {SCHEDULE_ANNOTATION}=") and "unknown time zone" in warning
    assert "its ClusterQueue's, if any, still apply" in warning and len(warning) < 1024
    # and the decision is the one without the annotation
    rc = rc_with(busy(2), now=TUE_2200, schedule="Mon-Fri 20:00-08:00 max=2; tz=Mars/Olympus",
                 demand=[gpu_demand(1, count=4)])
    d = one(rc, TUE_2200)
    assert (d.reason, d.desired) == (R.PENDING_DEMAND, 6) and 'window "' not in d.message


# --------------------------------------------------------------------------------------- decisions
def test_a_min_window_scales_up_to_its_min_and_names_itself():
    d = one(rc_with(busy(1), now=TUE_1000), TUE_1000)
    assert (d.direction, d.reason, d.desired, d.write) == ("up", R.SCHEDULED_MIN_REPLICAS, 3, "replicas")
    assert 'window "Mon-Fri 08:00-20:00" (RayCluster annotation: Mon-Fri 08:00-20:00 min=3, UTC, until Tue 20:00)' \
        in d.message
    assert "at least 3 worker(s)" in d.message


def test_a_min_window_keeps_idle_workers_and_leaving_it_lets_the_idle_path_remove_them():
    rc = rc_with(idle(5), now=TUE_1000)
    d = one(rc, TUE_1000, history=long_idle(rc, TUE_1000))
    assert (d.direction, d.reason, d.desired) == ("down", R.SCHEDULED_MIN_REPLICAS, 3)
    assert len(d.workers_to_delete) == 2
    # at 20:00 the window is over: nothing is removed for leaving it, the idle workers go by the idle path
    after = datetime(2024, 6, 4, 20, 0, tzinfo=UTC).timestamp()
    rc = rc_with(idle(3), now=after, schedule="Mon-Fri 08:00-20:00 min=3")
    d = one(rc, after, history=long_idle(rc, after))
    assert (d.direction, d.reason, d.desired) == ("down", R.IDLE_WORKERS, 0)
    rc = rc_with(busy(3), now=after, schedule="Mon-Fri 08:00-20:00 min=3")
    d = one(rc, after)
    assert (d.direction, d.reason, d.desired) == ("hold", R.WITHIN_TARGET, 3)
    assert 'window "' not in d.message  # none in force


def test_a_max_window_caps_demand_and_says_what_is_left_unmet():
    d = one(rc_with(busy(1), now=TUE_2200, demand=[gpu_demand(1, count=9)]), TUE_2200)
    assert (d.direction, d.reason, d.desired) == ("up", R.SCHEDULED_MAX_REPLICAS, 2)
    assert 'window "night" (RayCluster annotation: Mon-Fri 20:00-08:00 max=2, UTC, until Wed 08:00)' in d.message
    assert any('time window "night" allows at most 2' in s for s in d.infeasible)


def test_a_max_window_never_removes_a_busy_worker():
    d = one(rc_with(busy(6), now=TUE_2200), TUE_2200)
    assert (d.direction, d.reason, d.desired, d.workers_to_delete) == ("hold", R.WITHIN_TARGET, 6, ())
    assert "at most 2 worker(s); the 4 worker(s) above it go as they become idle" in d.message
    # those that are idle go by the idle path, the busy ones stay
    rc = rc_with([*busy(4), *idle(2)], now=TUE_2200)
    d = one(rc, TUE_2200, history=long_idle(rc, TUE_2200))
    assert (d.direction, d.reason, d.desired) == ("down", R.IDLE_WORKERS, 4)
    assert set(d.workers_to_delete) == {"i0", "i1"}
    assert "the 4 worker(s) above it go as they become idle" in d.message  # (6 exist while it decides)


def test_replicas_without_pods_above_the_max_are_dropped():
    # 5 replicas, 2 pods; the queue would keep the 3 unmade ones; the window allows 3
    rc = rc_with(busy(2), now=TUE_2200, replicas=5, demand=[gpu_demand(1, count=3)], schedule="* 20:00-08:00 max=3")
    d = one(rc, TUE_2200)
    assert (d.direction, d.reason, d.desired, d.workers_to_delete) == ("down", R.SCHEDULED_MAX_REPLICAS, 3, ())


def test_the_group_bounds_win_over_a_window():
    # max under minReplicas: minReplicas; min over maxReplicas: maxReplicas (KubeRay keeps replicas there)
    d = one(rc_with(busy(1), now=TUE_2200, lo=3, schedule="* 20:00-08:00 max=1", demand=[gpu_demand(1, count=4)]),
            TUE_2200)
    assert d.desired == 3
    d = one(rc_with(busy(1), now=TUE_1000, hi=4, schedule="* 08:00-20:00 min=20"), TUE_1000)
    assert (d.reason, d.desired) == (R.SCHEDULED_MIN_REPLICAS, 4)


def test_a_window_bounds_only_the_group_it_names():
    rc = ray_cluster([group("gpu", workers=busy(1)), group("cpu", workers=busy(1, "c"), gpus=0)], now=TUE_1000,
                     annotations={SCHEDULE_ANNOTATION: "* 08:00-20:00 min=2 group=gpu"})
    gpu, cpu = decide(rc, TUE_1000).decisions
    assert (gpu.group, gpu.reason, gpu.desired) == ("gpu", R.SCHEDULED_MIN_REPLICAS, 2)
    assert (cpu.group, cpu.desired) == ("cpu", 1) and 'window "' not in cpu.message


def test_stale_inputs_hold_whatever_the_window_says():
    d = one(rc_with(busy(1), now=TUE_1000, ray_age=600), TUE_1000)
    assert (d.direction, d.reason, d.desired) == ("hold", R.RAY_SIGNAL_STALE, 1)


def test_a_cluster_queue_schedule_from_the_config():
    defaults = scaling_defaults({"scaling": {"cluster_queue_schedules": {
        "cq-a": "Mon-Fri 20:00-08:00 max=2 name=night; tz=Europe/Berlin"}}})
    mine = ray_cluster([group(workers=busy(1))], demand=[gpu_demand(1, count=3)], now=TUE_2200, cq="cq-a")
    d = one(mine, TUE_2200, defaults=defaults)
    assert (d.reason, d.desired) == (R.SCHEDULED_MAX_REPLICAS, 2)
    assert 'window "night" (ClusterQueue cq-a: Mon-Fri 20:00-08:00 max=2, Europe/Berlin, until Wed 08:00)' in d.message
    other = replace(mine, cluster_queue="cq-b")
    d = one(other, TUE_2200, defaults=defaults)
    assert (d.reason, d.desired) == (R.PENDING_DEMAND, 4) and 'window "' not in d.message


def test_both_schedules_apply_and_a_max_wins_over_a_min():
    defaults = scaling_defaults({"scaling": {"cluster_queue_schedules": {"cq-a": "* 00:00-24:00 max=2 name=cap"}}})
    rc = rc_with(busy(1), now=TUE_1000, schedule="Mon-Fri 08:00-20:00 min=4 name=warm", cq="cq-a")
    d = one(rc, TUE_1000, defaults=defaults)
    assert (d.reason, d.desired) == (R.SCHEDULED_MIN_REPLICAS, 2)
    assert 'window "warm"' in d.message and 'window "cap"' in d.message and "the max wins" in d.message
    # the larger of two mins
    defaults = scaling_defaults({"scaling": {"cluster_queue_schedules": {"cq-a": "* 00:00-24:00 min=3"}}})
    rc = rc_with(busy(1), now=TUE_1000, schedule="Mon-Fri 08:00-20:00 min=2", cq="cq-a")
    assert one(rc, TUE_1000, defaults=defaults).desired == 3


def cq_state(name, nominal, used, cohort="c"):
    return ClusterQueueState(name, cohort=cohort, nominal_gpus=frozen_map({"a100": nominal}),
                             used_gpus=frozen_map({"a100": used}))


def test_a_min_window_stays_within_the_quota_headroom():
    rc = rc_with(busy(2), now=TUE_1000, schedule="* 08:00-20:00 min=10", cq="a",
                 labels={"kueue.x-k8s.io/queue-name": "lq"}, annotations={"kueue.x-k8s.io/elastic-job": "true"})
    d = one(rc, TUE_1000, cqs=[cq_state("a", 4, 4), cq_state("b", 16, 14)])  # 2 borrowable
    assert (d.direction, d.reason, d.desired) == ("up", R.SCHEDULED_MIN_REPLICAS, 4)
    assert "quota headroom: ClusterQueue a can admit 2 more GPUs" in d.message
    assert any('6 replica(s) time window "* 08:00-20:00" wants beyond quota headroom' in s for s in d.infeasible)


def test_in_tree_autoscaler_min_and_max_are_steered_and_given_back():
    # a min window raises minReplicas (Ray's autoscaler keeps that many), restored after the window
    rc = rc_with(busy(1), now=TUE_1000, in_tree=True)
    r = decide(rc, TUE_1000)
    (d,) = r.decisions
    assert (d.write, d.new_min, d.new_max, d.reason) == ("min_max", 3, 10, R.SCHEDULED_MIN_REPLICAS)
    assert "minReplicas 0 -> 3" in d.message
    later = datetime(2024, 6, 4, 20, 30, tzinfo=UTC).timestamp()  # the night window: max=2
    written = ray_cluster([group(workers=busy(3), lo=3, hi=10)], now=later, in_tree=True,
                          annotations={SCHEDULE_ANNOTATION: NIGHT_AND_DAY})
    (d,) = decide(written, later, history=r.history).decisions
    # the user's min (0) is back; the max is not lowered under the 3 busy workers (Ray would remove them)
    assert (d.write, d.new_min, d.new_max) == ("min_max", 0, 3)
    # with one busy worker the night window's max caps maxReplicas at 2
    rc = rc_with(busy(1), now=TUE_2200, in_tree=True)
    (d,) = decide(rc, TUE_2200).decisions
    assert (d.write, d.new_min, d.new_max) == ("min_max", 0, 2)


# ------------------------------------------------------------------------------------------ properties
@st.composite
def cases(draw):
    ws = []
    for k in range(draw(st.integers(0, 8))):
        b = draw(st.booleans())
        ws.append(worker(f"w{k}", util=0.9 if b else 0.0, busy=b,
                         phase=draw(st.sampled_from(["Running", "Running", "Pending"])), ready=draw(st.booleans())))
    lo = draw(st.integers(0, 3))
    hi = draw(st.integers(max(lo, 1), 12))
    replicas = draw(st.integers(max(lo, len(ws)), max(lo, len(ws)) + 3))
    w_lo = draw(st.none() | st.integers(0, 14))
    w_hi = draw(st.none() | st.integers(w_lo or 0, 14)) if w_lo is not None else draw(st.integers(0, 14))
    bounds = " ".join(([f"min={w_lo}"] if w_lo is not None else []) + ([f"max={w_hi}"] if w_hi is not None else []))
    demand = draw(st.integers(0, 12))
    idle_for = draw(st.sampled_from([0, 30, 3600]))
    now = TUE_1000 + draw(st.integers(-2, 2)) * 6 * 3600  # in or out of the window
    return ws, lo, hi, replicas, w_lo, w_hi, bounds, demand, idle_for, now


@SETTINGS
@given(cases())
def test_the_window_bounds_always_hold(case):
    ws, lo, hi, replicas, w_lo, w_hi, bounds, demand, idle_for, now = case
    rc = ray_cluster([group(workers=ws, lo=lo, hi=hi, replicas=replicas)], now=now,
                     demand=[gpu_demand(1, count=demand)] if demand else [],
                     annotations={SCHEDULE_ANNOTATION: f"* 06:00-14:00 {bounds}"})
    since = frozen_map({w.pod: now - idle_for for w in ws if w.ray_busy is False})
    r = decide(rc, now, history={"gpu": GroupHistory(idle_since=since)})
    assert r == decide(rc, now, history={"gpu": GroupHistory(idle_since=since)})  # pure
    (d,) = r.decisions
    in_window = 6 <= datetime.fromtimestamp(now, UTC).hour < 14
    existing = sum(1 for w in ws if not w.deleting)
    assert lo <= d.desired <= max(hi, replicas)  # the group's own bounds (a replicas above max is brought down)
    busy_pods = {w.pod for w in ws if w.ray_busy is not False}
    assert not busy_pods & set(d.workers_to_delete)  # a window never removes a busy worker
    if in_window:
        assert 'window "* 06:00-14:00"' in d.message
        if w_hi is not None:  # no scale-up past the max; only idle workers above it are removed
            cap = max(w_hi, lo)
            assert d.desired <= max(cap, min(existing, replicas))
            if d.direction == "up":
                assert d.desired <= cap
        if w_lo is not None:  # at least the min (within maxReplicas; a max of another window may win)
            floor = min(w_lo, hi, max(w_hi, lo) if w_hi is not None else w_lo)
            assert d.desired >= floor
    else:
        assert 'window "' not in d.message
        assert d.reason not in (R.SCHEDULED_MIN_REPLICAS, R.SCHEDULED_MAX_REPLICAS)


def test_the_window_reasons_are_scaling_reasons():
    assert {R.SCHEDULED_MIN_REPLICAS, R.SCHEDULED_MAX_REPLICAS} <= R.SCALING_REASONS
    assert R.MEANING[R.SCHEDULED_MAX_REPLICAS].count("never removed") == 1


def test_one_day_later_is_another_window():
    # the same wall-clock time a day apart: Tuesday's window, then Saturday's absence
    s = parse_schedule(NIGHT_AND_DAY)
    assert s.window_at(TUE_1000) is not None
    assert s.window_at(TUE_1000 + timedelta(days=4).total_seconds()) is None
