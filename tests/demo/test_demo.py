"""``queuepilot demo`` starts, serves both real endpoints with the catalogs' metrics, and exits cleanly."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

from autoscaler import metrics as controller_catalog
from exporter import metrics as exporter_catalog
from tests.support.paths import REPO


def _start(*args: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "queuepilot", "demo", "--no-tui", "--exporter-listen", "127.0.0.1:0",
         "--controller-listen", "127.0.0.1:0", *args],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )


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
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    gauges = {s.name for s in controller_catalog.CATALOG if s.type == "gauge"}
    assert gauges - ctl_families == set()
    assert re.search(r'^queuepilot_flavor_gpus\{flavor="a100",state="nominal"\} 32\.0$', ctl_text, flags=re.M)
    assert re.search(r"^queuepilot_scale_decisions_total\{", ctl_text, flags=re.M)
    assert re.search(r'^queuepilot_raycluster_workers\{.*kind="desired"', ctl_text, flags=re.M)
    assert "sim d0" in rest  # --no-tui status lines
    assert "stopped at simulated" in rest


def test_demo_stops_on_sigterm_with_code_zero():
    proc = _start("--duration", "0")
    try:
        _urls(proc)
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        _stop(proc)
    assert proc.returncode == 0, out
    assert "stopped at simulated" in out


def test_demo_rejects_a_bad_listen_address():
    proc = subprocess.run([sys.executable, "-m", "queuepilot", "demo", "--no-tui", "--controller-listen", "nope"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "HOST:PORT" in proc.stderr


def test_demo_prometheus_scrapes_both_endpoints():
    """--prometheus: a real Prometheus (Debian package) scrapes every exporter and the controller."""
    import json
    import shutil
    import urllib.parse

    if shutil.which("prometheus") is None:
        raise RuntimeError("prometheus not installed: run 'make apt' (the Makefile installs it for make test)")
    proc = _start("--duration", "20", "--prometheus")
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
