"""Malformed policy values never raise and never reach a decision.

Every ``queuepilot.io/*`` annotation parser and ``policy_from_annotations`` get arbitrary strings and
the values that used to break them (overflow such as ``Pods:1:inf`` and ``1e400``, NaN, negative,
out of range, huge integers): no exception, a policy that is finite and in range (checked here
independently of the dataclasses' own checks, and by deciding a cluster with it), and one warning
naming each rejected annotation, with its default left in place.  The configuration file's parsers
answer the same values with a ``ValueError`` naming the key.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.policy import config as C
from autoscaler.core.policy.annotations import KNOWN_ANNOTATIONS, PREFIX, policy_from_annotations
from autoscaler.core.policy.behavior import ScalingRules
from autoscaler.core.policy.config import ScalingDefaults, admission_config, scaling_defaults
from autoscaler.core.policy.scaling import decide_scaling
from autoscaler.core.snapshot import AUTOSCALE_ANNOTATION
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
D = ScalingDefaults()
KEYS = sorted(KNOWN_ANNOTATIONS - {AUTOSCALE_ANNOTATION})

DURATIONS = ["idle-window", "pressured-idle-window", "queue-pressure-wait"]
RATIOS = ["target-gpu-utilization", "idle-gpu-utilization", "target-cpu-utilization",
          "target-memory-utilization", "idle-cpu-utilization"]
RULES = ["scale-up-policy", "scale-down-policy"]

HUGE = "9" * 400
NASTY_NUMBERS = ["inf", "-inf", "Infinity", "nan", "NaN", "-nan", "1e400", "-1e400", "1e309", HUGE, "-" + HUGE,
                 "9" * 5000, "-1", "-0.5", "-1e-9", ""]
# values every parser of the kind must reject (each with one warning)
BAD = {
    **{k: [*NASTY_NUMBERS, "31d", "744h", "10d", "5 minutes", "1h-5m", "--5", "0x10", "2592001"] for k in DURATIONS},
    **{k: [*NASTY_NUMBERS, "0", "0%", "1.5", "101%", "nan%", "inf%", "1e400%", "70 %%"] for k in RATIOS},
    **{k: ["Pods:1:inf", "Pods:1:1e400", "Pods:1:nan", "Pods:1:-5", "Pods:1:0", "Pods:1:1801", f"Pods:{HUGE}:60",
           "Percent:1e400:60", "Percent:inf:60", "Pods:-1:60", "Pods:0:60", "Pods:100001:60", "Pods:1.5:60",
           "Nodes:1:60", "Pods:1", "Pods:1:60:5", "Pods:1:60;window=inf", "Pods:1:60;window=nan",
           "Pods:1:60;window=3601", "Pods:1:60;window=-1", "Pods:1:60;select=Sometimes", "Pods:1:60;color=red",
           ";", "", "Pods:1:60;window=1e400"] for k in RULES},
    "tolerance": [*NASTY_NUMBERS, "1", "1.0", "2", "10%"],
    "reclaim-idle-actors": ["yes", "1", "on", "", "truee", "nan"],
}


def valid(p: ScalingDefaults) -> None:
    """Independent check that a policy is usable: every number finite and in its range."""
    for name in ("target_gpu_utilization", "idle_gpu_utilization", "target_cpu_utilization",
                 "target_memory_utilization", "idle_cpu_utilization"):
        v = getattr(p, name)
        assert isinstance(v, float) and math.isfinite(v) and 0 < v <= 1, (name, v)
    assert math.isfinite(p.tolerance) and 0 <= p.tolerance < 1
    for name in ("idle_window_seconds", "pressured_idle_window_seconds", "queue_pressure_wait_seconds"):
        v = getattr(p, name)
        assert isinstance(v, float) and math.isfinite(v) and 0 <= v <= 30 * 86400, (name, v)
    assert p.pressured_idle_window_seconds <= p.idle_window_seconds
    for rules in (p.scale_up, p.scale_down):
        assert isinstance(rules, ScalingRules)
        assert rules.select_policy in ("Max", "Min", "Disabled")
        assert isinstance(rules.stabilization_window_seconds, int) and 0 <= rules.stabilization_window_seconds <= 3600
        for pol in rules.policies:
            assert pol.type in ("Pods", "Percent")
            assert isinstance(pol.value, int) and 1 <= pol.value <= 100_000
            assert isinstance(pol.period_seconds, int) and 0 < pol.period_seconds <= 1800
    assert isinstance(p.reclaim_idle_actors, bool)


def decide_with(annotations: dict[str, str]) -> None:
    """The policy really decides: a cluster with pending demand and idle workers, up and down."""
    for demand in ([gpu_demand(1, count=40)], []):
        rc = ray_cluster([group(workers=[worker("w0", util=0.0, busy=False), worker("w1")], hi=50)],
                         demand=demand, annotations=annotations)
        r = decide_scaling(snapshot(ray=[rc]), rc, D, {}, NOW)
        assert len(r.decisions) == 1


# --------------------------------------------------------------------------------------- one at a time
VALUE = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="0123456789.:;,=-+eEinfaNPodsPercentMaxMinwindowselect%hms ", max_size=40),
    st.sampled_from(NASTY_NUMBERS),
    st.builds(lambda a, b, c: f"{a}:{b}:{c}", st.sampled_from(["Pods", "Percent", "pods", "x"]),
              st.sampled_from(["1", "0", "-1", "1e400", "inf", HUGE, "4", "100"]),
              st.sampled_from(["60", "0", "inf", "nan", "1e400", "1801", "15s", "1m"])),
)


@SETTINGS
@given(st.sampled_from(KEYS), VALUE)
def test_any_single_value_gives_a_valid_policy_or_one_warning(key, value):
    policy, warnings = policy_from_annotations({key: value}, D)
    valid(policy)
    assert len(warnings) <= 1
    if warnings:
        assert warnings[0].startswith(f"annotation {key}=")
        assert policy == D  # the default stays
        assert len(warnings[0]) < 1024  # fits an Event message
    decide_with({key: value})


@pytest.mark.parametrize(("short", "value"), [(k, v) for k, vs in BAD.items() for v in vs])
def test_malformed_values_are_rejected_with_a_warning(short, value):
    key = PREFIX + short
    policy, warnings = policy_from_annotations({key: value}, D)
    assert policy == D
    assert len(warnings) == 1 and warnings[0].startswith(f"annotation {key}="), warnings
    valid(policy)
    decide_with({key: value})


@pytest.mark.parametrize(("short", "value", "field", "expected"), [
    ("idle-window", "1h30m", "idle_window_seconds", 5400.0),
    ("idle-window", "720h", "idle_window_seconds", 30 * 86400.0),  # the limit itself
    ("queue-pressure-wait", "0", "queue_pressure_wait_seconds", 0.0),
    ("target-gpu-utilization", "100%", "target_gpu_utilization", 1.0),
    ("tolerance", "0", "tolerance", 0.0),
    ("reclaim-idle-actors", "TRUE", "reclaim_idle_actors", True),
])
def test_edge_values_in_range_are_accepted(short, value, field, expected):
    policy, warnings = policy_from_annotations({PREFIX + short: value}, D)
    assert warnings == ()
    assert getattr(policy, field) == expected


def test_rules_at_their_limits_are_accepted():
    policy, warnings = policy_from_annotations({PREFIX + "scale-up-policy": "Pods:100000:1800;window=3600s"}, D)
    assert warnings == ()
    (pol,) = policy.scale_up.policies
    assert (pol.value, pol.period_seconds, policy.scale_up.stabilization_window_seconds) == (100_000, 1800, 3600)


# ----------------------------------------------------------------------------------------- together
@SETTINGS
@given(st.dictionaries(st.sampled_from([*KEYS, PREFIX + "idle-windw", "other.io/x"]), VALUE, max_size=6))
def test_any_annotations_give_a_valid_policy_and_a_warning_per_rejected_key(annotations):
    policy, warnings = policy_from_annotations(annotations, D)
    valid(policy)
    ours = [k for k in annotations if k.startswith(PREFIX)]
    named = [next(k for k in ours if w.startswith((f"annotation {k}=", f"unknown annotation {k}="))) for w in warnings]
    assert len(named) == len(set(named))  # at most one warning per annotation
    for k in ours:  # an unrejected known annotation is in effect
        if k not in named and k in KEYS:
            alone, _ = policy_from_annotations({k: annotations[k]}, policy)
            assert alone == policy
    decide_with(annotations)


def test_the_reported_cases_no_longer_raise():
    for value in ("Pods:1:inf", "Pods:1:1e400"):
        policy, warnings = policy_from_annotations({PREFIX + "scale-down-policy": value}, D)
        assert policy.scale_down == D.scale_down and len(warnings) == 1 and "not a finite duration" in warnings[0]
    policy, warnings = policy_from_annotations({PREFIX + "idle-window": "nan"}, D)
    assert policy.idle_window_seconds == D.idle_window_seconds and len(warnings) == 1


def test_long_values_are_cut_in_the_warning():
    _, (w,) = policy_from_annotations({PREFIX + "idle-window": "x" * 100_000}, D)
    assert len(w) < 300


# --------------------------------------------------------------------------------- the helpers alone
ANY_OBJECT = st.one_of(
    st.text(max_size=30), st.floats(allow_nan=True, allow_infinity=True), st.integers(),
    st.sampled_from([10**400, -(10**400), True, False, None, [], {}, ["Pods:1:60"], {"policies": 5}]),
    st.sampled_from(NASTY_NUMBERS),
)


@SETTINGS
@given(ANY_OBJECT)
def test_helpers_answer_a_value_or_a_value_error(value):
    results: list[Any] = []
    for parse in (C.parse_duration, C.parse_ratio, C.parse_fraction, C.parse_bool,
                  lambda v: C.parse_count(v, "n"), lambda v: C.parse_rules(v, D.scale_down)):
        try:
            results.append(parse(value))
        except ValueError:
            continue
    for r in results:
        if isinstance(r, float):
            assert math.isfinite(r)


# ---------------------------------------------------------------------------------- the config file
@pytest.mark.parametrize(("section", "key", "value"), [
    ("scaling", "idle_window", float("inf")),
    ("scaling", "idle_window", float("nan")),
    ("scaling", "idle_window", 10**400),
    ("scaling", "idle_window", "1e400"),
    ("scaling", "idle_window_seconds", -1),
    ("scaling", "pressured_idle_window", "31d"),
    ("scaling", "tolerance", float("nan")),
    ("scaling", "tolerance", 10**400),
    ("scaling", "target_gpu_utilization", float("inf")),
    ("scaling", "idle_gpu_utilization", 10**400),
    ("scaling", "scale_down", "Pods:1:inf"),
    ("scaling", "scale_up", {"policies": [{"type": "Pods", "value": float("inf"), "periodSeconds": 60}]}),
    ("scaling", "scale_up", {"policies": [{"type": "Percent", "value": 10**400, "periodSeconds": 60}]}),
    ("scaling", "scale_up", {"policies": [{"type": "Pods", "value": 1.5, "periodSeconds": 60}]}),
    ("scaling", "scale_up", {"stabilization_window": float("inf")}),
    ("scaling", "scale_up", {"policies": 5}),
    ("scaling", "reclaim_idle_actors", "yes"),
    ("admission", "max_retries", float("inf")),
    ("admission", "max_retries", 10**400),
    ("admission", "max_retries", -1),
    ("admission", "retry_backoff_base", float("nan")),
    ("admission", "reservation_timeout", "1e400"),
    ("admission", "check_cpu_memory", "no"),
])
def test_config_file_values_fail_with_the_key_named(section, key, value):
    parse = scaling_defaults if section == "scaling" else admission_config
    with pytest.raises(ValueError, match=f"config {section}.{key}: "):
        parse({section: {key: value}})


def test_config_file_values_in_range_still_parse():
    s = scaling_defaults({"scaling": {"idle_window": 3600, "tolerance": 0.2, "scale_up": {
        "policies": [{"type": "Pods", "value": 2.0, "periodSeconds": "1m"}], "select_policy": "min"}}})
    assert (s.idle_window_seconds, s.tolerance, s.scale_up.select_policy) == (3600.0, 0.2, "Min")
    assert s.scale_up.policies[0].value == 2 and s.scale_up.policies[0].period_seconds == 60
    a = admission_config({"admission": {"max_retries": "3", "check_cpu_memory": "false"}})
    assert (a.max_retries, a.check_cpu_memory) == (3, False)


def test_ray_signal_annotations_are_known_and_not_warned_about():
    """The Ray signal's own annotations (token Secret, dashboard scheme) are read by the cluster layer:
    the policy parser neither applies nor warns about them, while a misspelt one is still reported."""
    from autoscaler.core.policy.annotations import policy_from_annotations
    from autoscaler.core.policy.config import ScalingDefaults

    _, warnings = policy_from_annotations({"queuepilot.io/ray-token-secret": "ray-token",
                                           "queuepilot.io/ray-dashboard-scheme": "https"}, ScalingDefaults())
    assert warnings == ()
    _, warnings = policy_from_annotations({"queuepilot.io/ray-token-secrt": "ray-token"}, ScalingDefaults())
    assert len(warnings) == 1 and "ray-token-secrt" in warnings[0]


def test_a_raycluster_parses_its_annotations_once_and_hands_the_parse_on():
    """The view parser (or whoever makes the state) parses the annotations; the snapshot builder's
    ``dataclasses.replace`` keeps that parse, and the decision applies it to the defaults it is given."""
    from dataclasses import replace

    from autoscaler.core.policy.annotations import parse_policy_annotations
    from autoscaler.core.snapshot import RayClusterState

    notes = {"queuepilot.io/autoscale": "true", "queuepilot.io/idle-window": "4m",
             "queuepilot.io/scale-down-policy": "Pods:2:30", "queuepilot.io/nonsense": "x"}
    rc = RayClusterState("ns", "rc", "uid", "1", annotations=notes)
    assert rc.policy_annotations == parse_policy_annotations(notes)
    later = replace(rc, demand=(), resource_version="2")
    assert later.policy_annotations is rc.policy_annotations
    for defaults in (D, replace(D, down_after_up_seconds=D.down_after_up_seconds + 60)):
        assert rc.policy_annotations.apply(defaults) == policy_from_annotations(notes, defaults)
    policy, warnings = rc.policy_annotations.apply(D)
    assert policy.idle_window_seconds == 240 and policy.scale_down.policies[0].value == 2
    assert len(warnings) == 1 and "nonsense" in warnings[0]
