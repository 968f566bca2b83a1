"""The stall structure (``--stall-resume-share``): long idle runs that are final stalls or pauses the job
resumes from, the work a deactivation loses, the owner's resubmission, the reaper baseline's GPU rule and
the controller's Ray-aware stall handling on the same jobs."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from simulator.cli import main
from simulator.engine import Engine, SimConfig, work_done, work_total
from simulator.inputs import stall_share_of, util_model_for
from simulator.utilization import MODELS, PhasedModel, PhasedProfile, fleet_samples
from simulator.workload import Job

H = 3600.0


def _job(stall: float | None, resume: float | None, *, end: float = 6 * H, gpus: int = 8, job_id: int = 7) -> Job:
    """A job at 80 % but for its long idle run: ``[stall, resume)`` (a pause) or from ``stall`` on (final)."""
    prof = PhasedProfile(job_id, end, 60.0, 0.0, stall, 0.0, (0.8,), resume)
    return Job(job_id, "team-a", 10.0, end, gpus, 0.8, 0.0, prof)


def test_work_done_leaves_out_the_stall_and_the_pause():
    final = _job(4 * H, None)
    assert work_total(final) == 4 * H
    assert [work_done(final, t) for t in (H, 4 * H, 5 * H, 9 * H)] == [H, 4 * H, 4 * H, 4 * H]
    pause = _job(H, 3 * H)
    assert work_total(pause) == 4 * H  # 6 h less the 2-h pause
    assert [work_done(pause, t) for t in (H / 2, 2 * H, 3 * H, 5 * H, 6 * H)] == [H / 2, H, H, 3 * H, 4 * H]
    assert pause.util_at(2 * H) == 0.0 and pause.util_at(3.5 * H) == 0.8  # it works again after the pause


def test_the_resume_share_turns_stalls_into_pauses_of_the_same_length():
    base = MODELS["grounded"]
    assert isinstance(base, PhasedModel)
    draws = {}
    for share in (0.0, 1.0):
        model = base.with_resume_share(share)
        draws[share] = [model.draw(random.Random(i), i, 8 * H, 8).profile for i in range(400)]
    stalled = [(a, b) for a, b in zip(draws[0.0], draws[1.0], strict=True) if a.stall_start is not None]
    assert stalled and all(a.stall_end is None for a, _ in stalled)
    for a, b in stalled:  # the same length, now inside the run, and the job works to its end
        assert b.stall_end is not None and b.stall_end - b.stall_start == pytest.approx(a.end - a.stall_start)
        assert a.start_end <= b.stall_start and b.stall_end <= b.end + 1e-6
    # the same draws otherwise: the pause's draws come after every other
    assert [p.key for p in draws[0.0]] == [p.key for p in draws[1.0]]
    # a pause is drawn from the job's own stream: the run's stream moves on as without one
    streams = [random.Random(9), random.Random(9)]
    for model, rng in zip((base.with_resume_share(0.0), base.with_resume_share(1.0)), streams, strict=True):
        for i in range(50):
            model.draw(rng, i, 8 * H, 8)
    assert streams[0].random() == streams[1].random()
    with pytest.raises(ValueError, match="resume share"):
        base.with_resume_share(1.5)


def _run(policy: str, job: Job, *, remember_owners: float | None = None, **kw) -> Engine:
    cfg = SimConfig(nodes=1, teams=("team-a",), check_invariants=True, gpu_failure_rate=0.0, **kw)
    e = Engine([job], 12 * H, policy, cfg)
    if remember_owners is not None:  # the controller's stall.remember_owners
        assert e.stall is not None
        e.stall.config = replace(e.stall.config, remember_owners_seconds=remember_owners)
    e.run()
    return e


def test_the_reaper_kills_a_pause_and_its_owner_runs_it_again_from_scratch():
    e = _run("reaper", _job(H, 4 * H))  # a 3-h pause after an hour of work
    s = e.metrics.summary()
    # killed 2 h into the pause (at ~3 h), resubmitted 30 min later to run from scratch, it pauses and is
    # killed again (~6.5 h), and again (~10 h): three times the hour of work done before the pause lost
    assert (s["deactivated_workloads"], s["resubmitted_workloads"], s["completed_jobs"]) == (3, 3, 0)
    assert s["killed_gpu_hours"] == pytest.approx(3 * 8 * 1.0, abs=0.5)


def test_ray_aware_stall_handling_holds_a_pause_ray_sees_and_deactivates_a_final_stall():
    held = _run("queuepilot", _job(H, 4 * H), stall_reclaim=True, pause_invisible_share=0.0)
    s = held.metrics.summary()
    assert (s["deactivated_workloads"], s["killed_gpu_hours"], s["completed_jobs"]) == (0, 0.0, 1)
    assert held.writer.event_counts[("Workload", "Normal", "StallDeactivationHeld")] >= 1
    hidden = _run("queuepilot", _job(H, 4 * H), stall_reclaim=True, pause_invisible_share=1.0, reactivate_share=0.0,
                  remember_owners=0.0)
    # a pause Ray does not see goes (as the reaper), and, with no memory of the owner, each time the job comes
    # back as a new Workload
    assert hidden.metrics.summary()["deactivated_workloads"] == 3
    final = _run("queuepilot", _job(2 * H, None), stall_reclaim=True, hang_share=0.0)
    f = final.metrics.summary()
    # deactivated once every GPU was idle 2 h and Ray quiet: its work was done, nothing lost or resubmitted
    assert (f["deactivated_workloads"], f["resubmitted_workloads"], f["killed_gpu_hours"], f["completed_jobs"]) == (
        1, 0, 0.0, 1)
    hung = _run("queuepilot", _job(2 * H, None), stall_reclaim=True, hang_share=1.0)
    assert hung.metrics.summary()["deactivated_workloads"] == 0  # a task still runs: no verdict to kill


def test_a_workload_its_owner_reactivated_is_not_killed_in_the_same_pause_again():
    """Brought back by reactivation, the Workload's history (Kueue's schedulingStats) holds the deactivation:
    the controller holds the second one, the job runs through its pause and completes; the reaper, which reads
    no history, kills it on every return."""
    back = _run("queuepilot", _job(H, 4 * H), stall_reclaim=True, pause_invisible_share=1.0, reactivate_share=1.0)
    s = back.metrics.summary()
    assert (s["deactivated_workloads"], s["resubmitted_workloads"], s["completed_jobs"]) == (1, 1, 1)
    assert s["killed_gpu_hours"] == pytest.approx(8 * 1.0, abs=0.5)  # the first hour of work, once
    assert back.writer.event_counts[("Workload", "Normal", "StallDeactivationHeld")] >= 1
    reaper = _run("reaper", _job(H, 4 * H), reactivate_share=1.0).metrics.summary()
    assert (reaper["deactivated_workloads"], reaper["completed_jobs"]) == (3, 0)


def test_a_job_created_again_under_its_name_is_not_killed_in_the_same_pause_again():
    """Created anew (a new Workload, no history), the job keeps its RayJob's name: the controller remembers
    the owner it deactivated (stall.remember_owners) and holds the second deactivation; the job completes."""
    again = _run("queuepilot", _job(H, 4 * H), stall_reclaim=True, pause_invisible_share=1.0, reactivate_share=0.0)
    s = again.metrics.summary()
    assert (s["deactivated_workloads"], s["resubmitted_workloads"], s["completed_jobs"]) == (1, 1, 1)
    assert s["killed_gpu_hours"] == pytest.approx(8 * 1.0, abs=0.5)
    assert again.stall is not None and list(again.stall.owners) == ["team-a/RayJob/rayjob-7"]
    held = [m for m in again.context.published.last_decisions if "StallDeactivationHeld" in m]
    assert held and "RayJob rayjob-7 created again after a deactivation" in held[-1]
    # a memory shorter than the owner's way back (resubmitted 30 min after the deactivation) holds nothing
    short = _run("queuepilot", _job(H, 4 * H), stall_reclaim=True, pause_invisible_share=1.0, reactivate_share=0.0,
                 remember_owners=600.0)
    assert short.metrics.summary()["deactivated_workloads"] == 3


def _draws(model: PhasedModel, n: int = 2000, seed: int = 11):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        gpus = 8 if i % 4 == 0 else 1
        out.append(model.draw(rng, i, rng.uniform(H, 12 * H), gpus))
    return out, rng.random()


def _zero_share(draws) -> float:
    jobs = [Job(i, "t", 0.0, u.work_s, 8 if i % 4 == 0 else 1, u.util, u.idle_tail, u.profile)
            for i, u in enumerate(draws)]
    s = fleet_samples(jobs)
    return sum(w for u, w in zip(s.util, s.weight, strict=True) if u < 0.01) / sum(s.weight)


@pytest.mark.parametrize("name", ["grounded", "serving"])
def test_the_stall_share_moves_the_long_idle_runs_and_keeps_the_fitted_share_at_zero(name):
    base = MODELS[name]
    assert isinstance(base, PhasedModel)
    own, after_own = _draws(base)
    same, after_same = _draws(base.with_stall_share(base.params.stall_p))
    assert [u.profile for u in same] == [u.profile for u in own] and after_same == after_own  # its own: draw for draw
    zero = _zero_share(own)
    for factor in (0.5, 1.5):
        share = base.params.stall_p * factor
        drawn, after = _draws(base.with_stall_share(share))
        stalled = sum(u.profile.stall_start is not None for u in drawn) / len(drawn)
        assert stalled == pytest.approx(share, abs=0.03), (factor, stalled)
        # refitted: the share of GPU-time at 0 % stays the published one the model was fitted to
        assert _zero_share(drawn) == pytest.approx(zero, abs=0.02), factor
        # the run's stream moves on as the fitted model's (another share moves no other job's draws) ...
        assert after == after_own
        assert [u.profile.levels for u in drawn] == [u.profile.levels for u in own]
        # ... and a larger share stalls the same jobs and more
        mine = {i for i, u in enumerate(drawn) if u.profile.stall_start is not None}
        theirs = {i for i, u in enumerate(own) if u.profile.stall_start is not None}
        assert (theirs <= mine) if factor > 1 else (mine <= theirs)
    # the resume share and the stall share compose
    both = base.with_resume_share(1.0).with_stall_share(base.params.stall_p / 2)
    assert (both.resume_share, both.stall_p) == (1.0, base.params.stall_p / 2)


def test_a_stall_share_no_fit_can_hold_is_refused_and_so_is_one_for_scattered(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"cannot keep the fitted share of GPU-time at 0 % \(31\.5%\): choose one "
                                         r"from 0\.00 to 0\.62"):
        MODELS["grounded"].with_stall_share(0.7)
    with pytest.raises(ValueError, match="applies to the phased models"):
        util_model_for("scattered", stall_share=0.2)
    assert stall_share_of("grounded") == 0.37 and stall_share_of("scattered") is None
    assert stall_share_of("serving", 0.1) == 0.1
    for args, needle in ((["--stall-share", "0.7"], "choose one from 0.00 to 0.62"),
                         (["--util-model", "scattered", "--stall-share", "0.2"], "applies to the phased models"),
                         (["--stall-share", "1.5"], "must be a share in [0, 1]")):
        try:
            rc = main(["--trace", "synthetic", "--no-progress", *args])
        except SystemExit as e:  # argparse usage errors
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2 and needle in err and "Traceback" not in err, (args, err)
    out = tmp_path / "r.json"
    assert main(["--trace", "synthetic", "--hours", "2", "--nodes", "4", "--policies", "ray-idle", "--stall-share",
                 "0.2", "--json", str(out), "--no-progress"]) == 0
    assert json.loads(out.read_text())["meta"]["stall_share"] == 0.2
