"""Trace loading, the synthetic generator's statistics, and ``queuepilot simulate`` (JSON contract, seeds)."""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from datetime import datetime

import pytest

from simulator.cli import main
from simulator.metrics import CONTRACT_KEYS
from simulator.workload import OTHER_TEAM, VC_TEAMS, load_philly, synthetic
from tests.support.paths import REPO


def test_philly_window_and_team_mapping(shared_dir):
    path = shared_dir / "traces" / "philly-pollux" / "philly.csv"
    start = datetime(2017, 10, 10)
    w = load_philly(path, start, 6.0, seed=0, max_gpus=64)
    expected = []
    with path.open() as f:
        for r in csv.DictReader(f):
            ts = datetime.fromisoformat(r["timestamp"])
            if start <= ts < datetime(2017, 10, 10, 6):
                expected.append(r)
    assert len(w.jobs) + w.dropped_too_large == len(expected) > 0
    assert [j.submit for j in w.jobs] == sorted(j.submit for j in w.jobs)
    assert all(0 <= j.submit < 6 * 3600 for j in w.jobs)
    by_vc = {VC_TEAMS.get(r["cluster"], OTHER_TEAM) for r in expected}
    assert {j.team for j in w.jobs} <= by_vc
    assert sum(j.gpus for j in w.jobs) == sum(int(r["num_gpus"]) for r in expected if int(r["num_gpus"]) <= 64)


def test_philly_rejects_a_file_that_is_not_a_trace(tmp_path):
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_philly(bad, datetime(2017, 10, 1), 1.0, 0, 8)


def test_synthetic_matches_the_published_statistics():
    jobs = synthetic(24 * 14, seed=5, max_gpus=64).jobs
    n = len(jobs)
    assert 40 * 24 * 14 * 0.7 < n < 40 * 24 * 14 * 1.3  # ~40 jobs/h on average
    one = sum(1 for j in jobs if j.gpus == 1) / n
    assert 0.90 < one < 0.96  # Philly: 93.17 % single-GPU
    med = statistics.median(j.duration for j in jobs if j.gpus == 1)
    assert 700 < med < 1800  # log-normal median 1,117 s
    # diurnal: the busiest hour of day sees at least twice the quietest (peak/trough ~2.6)
    per_hour = [0] * 24
    for j in jobs:
        per_hour[int(j.submit // 3600) % 24] += 1
    assert max(per_hour) > 2 * min(per_hour)
    # utilization (the default, grounded model) over the time each RayJob runs: about a third of the
    # samples under 1 % and a median near Philly's published 48.6 % (docs/simulation.md)
    big = [j for j in jobs if j.gpus > 1]
    samples = [j.util_at(t) for j in big for t in range(0, int(j.duration), 300)]
    zero = sum(1 for u in samples if u < 0.01) / len(samples)
    assert 0.22 < zero < 0.42
    assert 0.35 < statistics.median(samples) < 0.70


def _run(tmp_path, name, *extra):
    out = tmp_path / f"{name}.json"
    rc = main(["--trace", "synthetic", "--hours", "8", "--nodes", "8", "--policies", "queuepilot,ray-idle,kueue-quota",
               "--gpu-failure-rate", "0.2", "--json", str(out), "--no-progress", *extra])
    assert rc == 0
    return json.loads(out.read_text())


def test_simulate_json_contract_and_determinism(tmp_path):
    a = _run(tmp_path, "a", "--seed", "4")
    b = _run(tmp_path, "b", "--seed", "4")
    c = _run(tmp_path, "c", "--seed", "5")
    assert set(a["policies"]) == {"queuepilot", "ray-idle", "kueue-quota"}
    for r in a["policies"].values():
        assert set(CONTRACT_KEYS) <= set(r)
        assert 0.0 <= r["gpu_util_allocated"] <= 1.0
        assert r["wait_p50_s"] <= r["wait_p95_s"] <= r["wait_p99_s"]
    a["meta"].pop("command"), b["meta"].pop("command"), c["meta"].pop("command")
    assert a == b  # same seed: identical results
    assert a["policies"] != c["policies"]


def test_simulate_writes_plots_and_rejects_bad_input(tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["--trace", "synthetic", "--hours", "4", "--nodes", "4", "--policies", "static,ray-idle", "--out", str(out),
               "--json", str(tmp_path / "r.json"), "--no-progress"])
    assert rc == 0
    for f in ("wait_cdf.png", "idle_gpu_hours.png", "timeline.png", "timeline-static.csv", "timeline-ray-idle.csv"):
        assert (out / f).stat().st_size > 0
    assert (out / "wait_cdf.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["--trace", "synthetic", "--policies", "nope", "--no-progress"]) == 2
    assert "unknown policies" in capsys.readouterr().err
    # the oracle was dropped (no bound: an online policy beat it); named, it is refused with why
    assert main(["--trace", "synthetic", "--policies", "queuepilot,oracle", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'oracle' was removed" in err and "lower_bound_idle_gpu_hours" in err and len(err.splitlines()) == 1
    assert main(["--trace", str(tmp_path / "missing.csv"), "--no-progress"]) == 2


def test_simulate_bad_input_is_one_line_and_exit_2(tmp_path, capsys, shared_dir, monkeypatch):
    """Each bad input is refused before any simulation runs (a zero control interval used to hang)."""
    trace = str(shared_dir / "traces" / "philly-pollux" / "philly.csv")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cases = [
        (["--control-interval", "0"], "--control-interval"),
        (["--control-interval", "-5"], "--control-interval"),
        (["--nodes", "0"], "--nodes"),
        (["--gpu-failure-rate", "-0.1"], "--gpu-failure-rate"),
        (["--hours", "0"], "--hours"),
        (["--trace", trace, "--start", "2030-01-01"], "outside the trace: the trace runs from 2017-09-04 10:30 to "
                                                      "2017-12-22 08:02"),
        # a window that starts inside the trace but ends after it: refused with the range, not run short
        (["--trace", trace, "--start", "2017-12-22", "--hours", "48"], "runs 40.0 h past the end of the trace: "
                                                                       "the trace runs from 2017-09-04 10:30"),
        (["--trace", trace, "--start", "soon"], "not an ISO date"),
        (["--out", str(blocker / "sub")], f"cannot write folder {blocker / 'sub'}: {blocker} is not a folder"),
        (["--json", str(blocker / "r.json")], f"cannot write file {blocker / 'r.json'}: {blocker} is not a folder"),
        (["--json", str(tmp_path)], f"cannot write file {tmp_path}: it is a folder"),
        (["--bogus"], "unrecognized arguments: --bogus"),
        (["--capacity-wait", "-1m"], "--capacity-wait"),
        (["--capacity-wait", "31d"], "--capacity-wait"),
    ]
    for args, needle in cases:
        try:
            rc = main(["--trace", "synthetic", "--no-progress", *args])
        except SystemExit as e:  # argparse usage errors
            rc = e.code
        err = capsys.readouterr().err
        assert rc == 2, (args, err)
        assert needle in err and "Traceback" not in err and "usage:" not in err, (args, err)
        assert len(err.strip().splitlines()) == 1, (args, err)
    monkeypatch.setenv("QUEUEPILOT_SEED", "three")
    with pytest.raises(SystemExit) as exc:
        main(["--trace", "synthetic"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "QUEUEPILOT_SEED" in err and len(err.strip().splitlines()) == 1


def test_environment_booleans_parse_false_as_false(monkeypatch):
    from servicekit.envflags import apply_env
    from simulator.cli import build_parser

    for raw, expected in (("0", False), ("false", False), ("no", False), ("1", True), ("yes", True)):
        parser = build_parser()
        apply_env(parser, {"QUEUEPILOT_NO_PROGRESS": raw})
        assert parser.parse_args([]).no_progress is expected, raw


def test_simulate_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert exc.value.code == 0
    assert "(default: 30.0)" in out and "(default: 112)" in out and "``" not in out


def test_quiet_run_closes_with_a_verdict_per_policy(tmp_path):
    """--quiet: no decision lines, no progress bar; the tables stay, and each policy's closing line says in
    words how it did against ray-idle and kueue-quota of the same run, with the run's own numbers."""
    args = ["simulate", "--trace", "synthetic", "--hours", "3", "--nodes", "6", "--policies",
            "queuepilot,ray-idle,kueue-quota", "--json", str(tmp_path / "r.json")]

    def stderr(*more: str) -> list[str]:
        p = subprocess.run([sys.executable, "-m", "queuepilot", *args, *more], capture_output=True, text=True,
                           timeout=300, cwd=REPO)
        assert p.returncode == 0, p.stderr
        return p.stderr.splitlines()

    err = stderr("--quiet")
    loud = stderr("--no-progress")
    decisions = [line for line in loud if line.startswith(("scaling ", "admission "))]
    assert len(decisions) > 20
    # the rest is the same: the header, the tables and the verdicts (the elapsed time aside)
    same = [line for line in loud if line not in decisions and not line.startswith("simulated ")]
    assert [line for line in err if not line.startswith("simulated ")] == same
    policies = json.loads((tmp_path / "r.json").read_text())["policies"]
    verdicts = {line.split(":", 1)[0]: line for line in err[-3:]}
    assert set(verdicts) == {"queuepilot", "ray-idle", "kueue-quota"}
    qp, ray = policies["queuepilot"], policies["ray-idle"]
    line = verdicts["queuepilot"]
    assert "against ray-idle:" in line and "against kueue-quota:" in line
    fewer = ray["idle_gpu_hours"] - qp["idle_gpu_hours"]
    word = "fewer" if fewer > 0 else "more"
    assert f"{abs(fewer):,.1f} idle GPU-hours {word}" in line.split("against kueue-quota:")[0]
    assert "against ray-idle" not in verdicts["ray-idle"] and "against kueue-quota:" in verdicts["ray-idle"]


def test_verdict_words():
    from simulator.report import verdict_lines

    def p(idle, task, workload, killed=0.0):
        return {"idle_gpu_hours": idle, "wait_p95_s_by_class": {"ray_task": task, "workload": workload},
                "killed_gpu_hours": killed}

    lines = verdict_lines({"queuepilot": p(60, 300, 1200, 1.5), "ray-idle": p(100, 120, 3600),
                           "kueue-quota": p(150, 125, 7300)})
    assert lines[0] == (
        "queuepilot: against ray-idle: 40.0 idle GPU-hours fewer (40%), Ray tasks waited 3.0 min longer (5.0 min "
        "against 2.0 min at p95), workloads waited 40.0 min shorter (20.0 min against 60.0 min at p95), 1.5 "
        "GPU-hours of work killed against 0.0; against kueue-quota: 90.0 idle GPU-hours fewer (60%), Ray tasks "
        "waited 2.9 min longer (5.0 min against 2.1 min at p95), workloads waited 1.7 h shorter (20.0 min against "
        "2.0 h at p95), 1.5 GPU-hours of work killed against 0.0.")
    assert lines[1].startswith("ray-idle: against kueue-quota: 50.0 idle GPU-hours fewer (33%), Ray tasks waited "
                               "about as long (2.0 min at p95)")
    assert verdict_lines({"queuepilot": p(1, 1, 1)}) == [
        "(add ray-idle or kueue-quota to --policies to compare the policies with the baselines)"]
