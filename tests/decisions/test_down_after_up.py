"""Over random runs of consecutive passes (hypothesis), with the decisions fed back as KubeRay would
apply them: no worker is removed within down-after-up (300 s) of a launch in its group, a starting
worker is never named, and reclaims stay within the hourly budget."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from autoscaler.core.policy.scaling import GroupHistory, ScalingDefaults, decide_scaling
from tests.decisions.builders import NOW, gpu_demand, group, ray_cluster, snapshot, worker

D = ScalingDefaults()


@st.composite
def run_st(draw):
    steps = []
    for _ in range(draw(st.integers(3, 12))):
        steps.append({
            "dt": draw(st.sampled_from([5.0, 30.0, 60.0, 95.0, 200.0, 301.0, 700.0])),
            "demand": draw(st.integers(0, 3)),
            "utils": draw(st.lists(st.sampled_from([0.0, 0.01, 0.3, 0.9, None]), min_size=8, max_size=8)),
            "busy": draw(st.lists(st.sampled_from([True, False, None]), min_size=8, max_size=8)),
        })
    reclaim = draw(st.booleans())
    return steps, reclaim, draw(st.integers(1, 4)), draw(st.integers(3, 6))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_st())
def test_no_removal_within_down_after_up_of_a_launch(run):
    steps, reclaim, start, hi = run
    annotations = {"queuepilot.io/reclaim-idle-actors": "true", "queuepilot.io/reclaim-grace": "0"} if reclaim else {}
    pods = [f"w{i}" for i in range(start)]
    starting: set[str] = set()  # launched in the last pass: not Running yet
    made = start
    replicas = start
    history: dict[str, GroupHistory] = {}
    launches: list[float] = []
    removals: list[tuple[float, tuple[str, ...]]] = []
    t = NOW
    for step in steps:
        t += step["dt"]
        ws = [worker(p, util=step["utils"][i % 8], busy=step["busy"][i % 8],
                     phase="Pending" if p in starting else "Running", ready=p not in starting)
              for i, p in enumerate(pods)]
        demand = [gpu_demand(1, count=step["demand"])] if step["demand"] else []
        rc = ray_cluster([group(workers=ws, replicas=replicas, hi=hi)], demand=demand, annotations=annotations, now=t)
        r = decide_scaling(snapshot(ray=[rc], now=t), rc, D, history, t)
        (d,) = r.decisions
        history = dict(r.history)
        assert not set(d.workers_to_delete) & starting  # a starting worker is never named
        if d.write == "replicas":
            if d.workers_to_delete:
                assert all(t - u >= D.down_after_up_seconds for u in launches), (t, launches, d)
                removals.append((t, d.workers_to_delete))
            if d.desired > d.current or (d.workers_to_delete and d.desired >= d.current):
                launches.append(t)
            if d.desired < d.current:
                assert all(t - u >= D.down_after_up_seconds for u in launches), (t, launches, d)
            # KubeRay: delete the named pods, then create pods up to replicas
            replicas = d.desired
            pods = [p for p in pods if p not in d.workers_to_delete]
            starting = set()
            while len(pods) < replicas:
                pods.append(f"w{made}")
                starting.add(f"w{made}")
                made += 1
            pods = pods[:replicas] if len(pods) > replicas else pods
        else:
            starting = set()
        reclaimed = sum(1 for _, h in history.items() for u in h.reclaims if t - u < 3600)
        assert reclaimed <= D.reclaim_budget_per_hour
    event("a removal after a launch" if any(u < rt for rt, _ in removals for u in launches) else "no such removal")
