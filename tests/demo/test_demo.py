"""``queuepilot demo`` as a person runs it (a real subprocess): it serves both real endpoints with the
catalogs' metrics, prints one line per decision as it happens when stdout is not a terminal, stops on
SIGTERM, SIGINT and SIGHUP (even when its parent ignores SIGHUP, as make does) and frees its ports, and
with --prometheus runs a Prometheus with the generated rules that ``queuepilot report`` can read."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from autoscaler import metrics as controller_catalog
from exporter import metrics as exporter_catalog
from tests.support.paths import REPO
from tests.support.processes import stop


def _start(*args: str, tui: bool = False, ignore_sighup: bool = False) -> subprocess.Popen:
    """The demo with stdout a pipe (not a terminal); ``tui``: without --no-tui (it must notice the pipe)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "queuepilot", "demo", *(() if tui else ("--no-tui",)), "--exporter-listen",
         "127.0.0.1:0", "--controller-listen", "127.0.0.1:0", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        preexec_fn=(lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN)) if ignore_sighup else None,
    )


def _refused(url: str) -> bool:
    """Whether nothing listens at ``url``'s port any more (its port was released)."""
    try:
        urllib.request.urlopen(url, timeout=2)
    except urllib.error.URLError as e:
        return isinstance(e.reason, ConnectionRefusedError)
    return False


def _urls(proc: subprocess.Popen, timeout: float = 60.0) -> tuple[list[str], str, list[str]]:
    exporters: list[str] = []
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("demo exited early:\n" + "".join(lines))
        lines.append(line)
        m = re.search(r"exporter .*: (http://\S+/metrics)", line)
        if m:
            exporters.append(m.group(1))
        m = re.search(r"controller: (http://\S+/metrics)", line)
        if m:
            return exporters, m.group(1), lines
    raise AssertionError("no URLs printed:\n" + "".join(lines))


def _stop(proc: subprocess.Popen) -> None:
    """Test clean-up on failure: SIGTERM first (the demo stops its Prometheus), then kill."""
    stop(proc, grace=15)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        return r.read().decode()


def _families(text: str) -> set[str]:
    return set(re.findall(r"^# TYPE (\S+) ", text, flags=re.M))


def test_demo_serves_both_endpoints_and_exits_cleanly():
    proc = _start("--duration", "8")
    try:
        exporters, controller, _ = _urls(proc)
        assert len(exporters) == 4
        time.sleep(2.5)  # a few simulated minutes at 60x, at least two exporter collections
        exp_text = [_get(u) for u in exporters]
        ctl_text = _get(controller)
        rest, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 0, rest

    # exporter: every family of the catalog except the DCGM-source-only profiling ratios
    exp_families = set().union(*(_families(t) for t in exp_text))
    wanted = {s.name for s in exporter_catalog.CATALOG if not s.name.startswith("DCGM_FI_PROF_")}
    assert wanted - exp_families == set()
    # the simulation drives the source: GPUs are attributed to the simulated pods, in team namespaces
    assert any(re.search(r'DCGM_FI_DEV_GPU_UTIL\{[^}]*namespace="team-[abc]"', t) for t in exp_text)

    # controller: every gauge of the catalog, plus the decision counters fed from the decisions
    ctl_families = _families(ctl_text)
    # (MultiKueue worker-cluster gauges describe a manager's worker clusters: the demo has none)
    gauges = {s.name for s in controller_catalog.CATALOG
              if s.type == "gauge" and not s.name.startswith("queuepilot_worker_cluster_")}
    assert gauges - ctl_families == set()
    assert re.search(r'^queuepilot_flavor_gpus\{flavor="a100",state="nominal"\} 32\.0$', ctl_text, flags=re.M)
    assert re.search(r"^queuepilot_scale_decisions_total\{", ctl_text, flags=re.M)
    assert re.search(r'^queuepilot_raycluster_workers\{.*kind="desired"', ctl_text, flags=re.M)
    assert "Mon 10:" in rest  # --no-tui status lines: the demo opens on Monday 10:00
    assert "stopped at simulated" in rest


def _samples(text: str, family: str) -> list[tuple[dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    return [(dict(s.labels), s.value) for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == family]


def test_demo_serves_the_real_controller():
    """The demo's controller endpoint is the real Controller's: /readyz 200 once its (simulated) caches
    are synced, reconcile_seconds observed for both reconcilers, decisions counted only when they
    change, queue gauges for every queue, and GPUs attributed by the exporter's PodResources client."""
    proc = _start("--duration", "10", "--speed", "120")
    try:
        exporters, controller, _ = _urls(proc)
        base = controller.removesuffix("/metrics")
        assert _get(base + "/readyz").strip() == "ok"
        assert _get(base + "/healthz").strip() == "ok"
        time.sleep(5.0)  # ~10 simulated minutes: many passes
        ctl = _get(controller)
        exp = [_get(u) for u in exporters]
        proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 0
    counts = {lab["loop"]: v for lab, v in _samples(ctl, "queuepilot_reconcile_seconds_count")}
    passes = counts.get("scaling", 0)
    assert counts.get("admission", 0) >= 3 and passes >= 3 and counts.get("snapshot", 0) >= passes
    # as the controller counts them: a decision is counted when it is written or differs from the
    # group's previous one, so an unchanged WithinTarget hold is not counted on every pass
    decisions = _samples(ctl, "queuepilot_scale_decisions_total")
    for group in {lab["raycluster"] for lab, _ in decisions}:
        mine = [(lab, v) for lab, v in decisions if lab["raycluster"] == group]
        within = sum(v for lab, v in mine if lab["reason"] == "WithinTarget" and lab["direction"] == "hold")
        others = sum(v for lab, v in mine) - within
        assert within <= others + 1, (group, mine)
        assert sum(v for _, v in mine) < passes or passes < 2, (group, passes, mine)
    queues = {lab["cluster_queue"] for lab, _ in _samples(ctl, "queuepilot_queue_pending_workloads")}
    assert queues == {"cq-team-a", "cq-team-b", "cq-team-c"}
    synced = {lab["resource"]: v for lab, v in _samples(ctl, "queuepilot_cache_synced")}
    assert synced and all(v == 1.0 for v in synced.values())
    assert all(v == 0.0 for _, v in _samples(ctl, "queuepilot_signal_stale"))
    # pod labels on exporter series come from the PodResources answer, and say so
    for text in exp:
        assert _samples(text, "queuepilot_exporter_pod_resources_up")[0][1] == 1.0
    assert any(lab.get("pod") for t in exp for lab, _ in _samples(t, "queuepilot_gpu_allocated"))


def test_demo_rejects_bad_input_with_one_line():
    def run(*args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "queuepilot", "demo", "--no-tui", *args], cwd=REPO,
                              capture_output=True, text=True, timeout=60, env=dict(os.environ, **env))

    for args, env, needle in (
        (("--duration", "-1"), {}, "--duration"),
        (("--nodes", "0"), {}, "--nodes"),
        (("--speed", "0"), {}, "--speed"),
        ((), {"QUEUEPILOT_DURATION": "soon"}, "QUEUEPILOT_DURATION"),
        ((), {"QUEUEPILOT_NO_TUI": "maybe"}, "QUEUEPILOT_NO_TUI"),
    ):
        p = run(*args, **env)
        assert p.returncode == 2, (args, env, p.stderr)
        assert needle in p.stderr and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr  # no usage block before it
    shown = run("--help")
    assert shown.returncode == 0, shown.stderr
    assert "default: 60.0" in shown.stdout and "QUEUEPILOT_SPEED" in shown.stdout, shown.stdout


def test_no_tui_false_in_the_environment_keeps_the_live_view_setting():
    from servicekit.envflags import apply_env
    from simulator.demo.app import build_parser

    for raw, expected in (("false", False), ("0", False), ("no", False), ("true", True), ("1", True)):
        parser = build_parser()
        apply_env(parser, {"QUEUEPILOT_NO_TUI": raw})
        assert parser.parse_args([]).no_tui is expected, raw


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_demo_stops_on_a_signal_and_frees_its_ports(sig):
    """SIGTERM, or SIGHUP from a closed terminal / ``tmux kill-session`` (with SIGHUP ignored by the parent,
    as under make): exit status 0, every port it listened on refuses connections afterwards."""
    proc = _start("--duration", "0", ignore_sighup=sig == signal.SIGHUP)
    try:
        exporters, controller, _ = _urls(proc)
        urls = [*exporters, controller]
        assert all(_get(u) for u in urls)
        time.sleep(1.0)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out
    assert "stopped at simulated" in out
    assert [u for u in urls if not _refused(u)] == []


def test_without_a_terminal_one_line_per_decision_as_it_happens():
    """No --no-tui, stdout a pipe: no live view (nothing held back until exit); each decision is one line,
    printed while the demo runs."""
    proc = _start("--duration", "40", tui=True)
    decision = re.compile(r"^Mon \d\d:\d\d (Ready|Retry|Reject|Up|Down|Reclaim|Stall|GPU ✗|GPU ok|Note) \S+")
    try:
        _, _, lines = _urls(proc)
        seen: list[str] = []
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "demo exited early:\n" + "".join(lines + seen)
            if decision.match(line):
                seen.append(line)
        assert len(seen) >= 3 and proc.poll() is None  # printed while it runs
        rest, _ = proc.communicate(timeout=60)
    finally:
        _stop(proc)
    assert proc.returncode == 0
    out = "".join(seen) + rest
    assert "\x1b[" not in out  # no terminal control sequences in a pipe
    retries = [line for line in out.splitlines() if decision.match(line) and " Retry " in line]
    assert retries and all("largest free healthy blocks" in r and "retry in" in r for r in retries)


def test_demo_rejects_a_bad_listen_address():
    proc = subprocess.run([sys.executable, "-m", "queuepilot", "demo", "--no-tui", "--controller-listen", "nope"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "HOST:PORT" in proc.stderr and "Traceback" not in proc.stderr


def test_demo_prometheus_scrapes_both_endpoints(tmp_path):
    """--prometheus: a real Prometheus (Debian package) scrapes every exporter and the controller."""
    import shutil
    import urllib.parse

    if shutil.which("prometheus") is None:
        raise RuntimeError("prometheus not installed: run 'make apt' (the Makefile installs it for make test)")
    proc = _start("--duration", "40", "--prometheus")
    try:
        _, _, lines = _urls(proc)
        prom = None
        while prom is None:
            line = proc.stdout.readline()
            assert line, "demo exited early:\n" + "".join(lines)
            lines.append(line)
            m = re.search(r"prometheus: (http://\S+)", line)
            prom = m.group(1) if m else None
        deadline = time.monotonic() + 15
        ups: dict[str, str] = {}
        while time.monotonic() < deadline:
            q = urllib.parse.urlencode({"query": "up"})
            try:
                with urllib.request.urlopen(f"{prom}/api/v1/query?{q}", timeout=5) as r:
                    res = json.load(r)["data"]["result"]
            except OSError:
                res = []
            ups = {s["metric"]["job"] + "/" + s["metric"]["instance"]: s["value"][1] for s in res}
            if len(ups) == 5 and all(v == "1" for v in ups.values()):
                break
            time.sleep(0.5)
        assert len(ups) == 5 and all(v == "1" for v in ups.values()), ups
        # the generated alert and recording rules are loaded
        with urllib.request.urlopen(f"{prom}/api/v1/rules", timeout=5) as r:
            groups = {g["name"] for g in json.load(r)["data"]["groups"]}
        assert {"queuepilot-queues", "queuepilot-economics-gpus", "queuepilot-economics-teams"} <= groups, groups
        # queuepilot report works against it (the raw series until the recording rules have run)
        report = subprocess.run([sys.executable, "-m", "queuepilot", "report", "--prometheus-url", prom,
                                 "--window", "10m", "--json", str(tmp_path / "report.json")], cwd=REPO,
                                capture_output=True, text=True, timeout=60)
        assert report.returncode == 0, report.stderr + report.stdout
        doc = json.loads((tmp_path / "report.json").read_text())
        assert {t["namespace"] for t in doc["teams"]} <= {"team-a", "team-b", "team-c"} and doc["teams"]
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out
    # the Prometheus child is gone with the demo
    try:
        urllib.request.urlopen(prom + "/-/ready", timeout=2)
        raise AssertionError("Prometheus still running after the demo exited")
    except OSError:
        pass
