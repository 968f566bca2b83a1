"""Ray polling orchestration (bounded, ages kept, errors counted), flags/env/config file, and the
process: start-up failures exit 2 with one line; SIGTERM releases the Lease and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

import pytest

from autoscaler.controller.config import ConfigError, parse_config
from autoscaler.core.snapshot import RayDemand
from autoscaler.signals.ray import RaySignals
from tests.controller.harness import StubRay, http_get, ready, running_controller
from tests.support import objects as o
from tests.support.eventually import eventually
from tests.support.paths import REPO
from tests.support.ports import free_port


@dataclass
class Status:
    demand: tuple
    nodes: tuple = ()
    observed_at: float = 0.0


class RaySignalError(Exception):
    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class SlowRay:
    def __init__(self) -> None:
        self.active = 0
        self.peak = 0

    async def fetch_status(self, base_url: str, now: float):
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.05)
        self.active -= 1
        return Status((), observed_at=now)


async def test_ray_polls_are_bounded_and_keep_last_good_data():
    slow = SlowRay()
    errors: Counter[str] = Counter()
    sig = RaySignals(slow, lambda k: errors.update([k]), concurrency=3)
    await sig.poll({f"ns{i % 5}/rc{i}": f"http://h{i}:8265" for i in range(10)} | {"ns/nohead": None}, now=5.0)
    assert slow.peak == 3
    assert set(sig.observations) == {f"ns{i % 5}/rc{i}" for i in range(10)}

    demand = (RayDemand("task", {"GPU": 1.0}),)
    stub = StubRay({"http://a:8265": Status(demand, observed_at=10.0)})
    sig = RaySignals(stub, lambda k: errors.update([k]), timeout=0.2)
    await sig.poll({"ns/a": "http://a:8265"}, now=10.0)
    assert sig.observations["ns/a"].status.demand == demand
    stub.answers["http://a:8265"] = RaySignalError("auth")
    await sig.poll({"ns/a": "http://a:8265"}, now=20.0)
    obs = sig.observations["ns/a"]
    assert obs.status.demand == demand and obs.observed_at == 10.0 and obs.error == "auth"
    assert errors["auth"] == 1
    await sig.poll({}, now=30.0)  # the RayCluster was deleted: forgotten
    assert sig.observations == {}


async def test_controller_polls_ray_heads_and_reports_demand(fake_api):
    """Only opted-in clusters are polled, at their own head pod's IP (from the pod cache) or, before a
    head pod is seen, their head Service's name; never at what ``status`` names."""
    fake_api.create(o.namespace("team-a"))
    opted = {"queuepilot.io/autoscale": "true"}
    # status points at 10.66.6.6: a tenant-writable field the controller must never use
    fake_api.create(o.ray_cluster("rc", head_ip="10.66.6.6", dashboard_port=8266, annotations=opted))
    fake_api.create(o.ray_head_pod("rc", ip="10.1.1.1"))
    fake_api.create(o.ray_cluster("broken", head_ip="10.2.2.2", annotations=opted))  # no head pod yet
    fake_api.create(o.ray_cluster("other", head_ip="10.3.3.3"))  # not opted in
    fake_api.create(o.ray_head_pod("other", ip="10.3.3.4"))
    demand = (RayDemand("task", {"GPU": 1.0}, count=3),)
    stub = StubRay({"http://10.1.1.1:8266": Status(demand, observed_at=time.time())})
    async with running_controller(fake_api, ray=stub) as c:
        await eventually(lambda: c.snapshot is not None and c.snapshot.ray_clusters.get("team-a/rc")
                         and c.snapshot.ray_clusters["team-a/rc"].demand == demand)
        await eventually(lambda: "http://broken-head-svc.team-a.svc:8265" in stub.calls)
        snap = c.snapshot
        assert not snap.signals["ray/team-a/rc"].is_stale(snap.taken_at)
        assert snap.signals["ray/team-a/broken"].is_stale(snap.taken_at)
        assert set(stub.calls) == {"http://10.1.1.1:8266", "http://broken-head-svc.team-a.svc:8265"}
        _, text = await http_get(f"http://127.0.0.1:{c.port}/metrics")
        assert 'queuepilot_raycluster_pending_gpus{group="gpu",namespace="team-a",raycluster="rc"} 3.0' in text
        assert 'queuepilot_source_errors_total{kind="connection",source="ray"}' in text


def test_flags_env_and_config_file(tmp_path):
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("admission:\n  stale_signal_mode: hold\nscaling:\n  target_gpu_utilization: 0.6\n")
    c = parse_config(["--listen", "127.0.0.1:9999", "--config", str(cfg), "--no-leader-elect"],
                     env={"QUEUEPILOT_RESYNC_SECONDS": "12", "QUEUEPILOT_DRY_RUN": "true",
                          "QUEUEPILOT_GPU_SIGNAL": "scrape", "POD_NAME": "qp-7f9"})
    assert (c.listen_host, c.listen_port, c.resync_seconds, c.dry_run, c.gpu_signal) == (
        "127.0.0.1", 9999, 12.0, True, "scrape")
    assert not c.leader_elect and c.identity == "qp-7f9"
    assert c.settings == {"admission": {"stale_signal_mode": "hold"}, "scaling": {"target_gpu_utilization": 0.6}}
    # the command line wins over the environment
    assert parse_config(["--resync-seconds", "5"], env={"QUEUEPILOT_RESYNC_SECONDS": "12"}).resync_seconds == 5
    with pytest.raises(ConfigError, match="QUEUEPILOT_DRY_RUN"):
        parse_config([], env={"QUEUEPILOT_DRY_RUN": "maybe"})
    with pytest.raises(ConfigError, match="QUEUEPILOT_GPU_SIGNAL"):
        parse_config([], env={"QUEUEPILOT_GPU_SIGNAL": "nvml"})
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ConfigError, match="mapping of sections"):
        parse_config(["--config", str(bad)], env={})
    with pytest.raises(ConfigError, match="cannot read"):
        parse_config(["--config", str(tmp_path / "missing.yaml")], env={})


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "queuepilot", "controller", *args], cwd=REPO, capture_output=True, text=True,
        timeout=60, env={**os.environ, **(env or {}), "KUBERNETES_SERVICE_HOST": ""},
    )


def test_unreachable_api_server_exits_2_with_one_line(tmp_path):
    port = free_port()  # nothing listens there
    kc = tmp_path / "kubeconfig"
    kc.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    r = run_cli("--kubeconfig", str(kc), "--listen", "127.0.0.1:0")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert f"cannot reach the Kubernetes API at http://127.0.0.1:{port}: connection refused" in lines[0]
    assert "--kubeconfig" in lines[0]
    r = run_cli("--kubeconfig", str(tmp_path / "nope"))
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        f"queuepilot controller: kubeconfig {tmp_path / 'nope'} not found"]
    r = run_cli(env={"QUEUEPILOT_RESYNC_SECONDS": "-1", "QUEUEPILOT_KUBECONFIG": str(kc)})
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "queuepilot controller: QUEUEPILOT_RESYNC_SECONDS='-1': must be > 0 seconds, got -1"]


@pytest.mark.parametrize(("args", "message"), [
    (["--resync-seconds", "0"], "argument --resync-seconds: must be > 0 seconds, got 0"),
    (["--gpu-poll-seconds", "-5"], "argument --gpu-poll-seconds: must be > 0 seconds"),
    (["--ray-poll-seconds", "nan"], "argument --ray-poll-seconds: must be a finite number of seconds"),
    (["--signal-stale-seconds", "inf"], "must be a finite number of seconds"),
    (["--debounce-seconds", "-0.1"], "argument --debounce-seconds: must be >= 0 seconds"),
    (["--ray-concurrency", "0"], "argument --ray-concurrency: must be >= 1, got 0"),
    (["--exporter-port", "70000"], "argument --exporter-port: must be between 1 and 65535"),
    (["--max-connections", "x"], "argument --max-connections: expected a whole number"),
    (["--listen", "8080"], "argument --listen: listen address must be HOST:PORT"),
    (["--webhook-listen", "nope", "--webhook-cert-dir", "/tmp"], "--webhook-listen: listen address must be"),
    (["--prometheus-url", "prometheus:9090"], "--prometheus-url must be an http:// or https:// URL"),
    (["--retry-period-seconds", "12"], "--retry-period-seconds must be shorter than --renew-deadline-seconds"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_durations_counts_and_flags_are_one_line_and_exit_2(args, message):
    r = run_cli(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("queuepilot controller: ") and message in lines[0], r.stderr


KUBECONFIG_OK = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: c, cluster: {server: 'https://10.0.0.1:6443'}}]\n"
    "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
)


@pytest.mark.parametrize(("text", "message"), [
    ("hello\n", "is not a kubeconfig: expected a mapping with clusters, contexts and users, found a str ('hello')"),
    ("apiVersion: v1\nclusters: [\n  - a: b\n", "is not valid YAML: line 3, column 3: expected the node content"),
    ("", "is not a kubeconfig: expected a mapping with clusters, contexts and users, found an empty file"),
    ("apiVersion: v1\nkind: Config\nclusters: []\n", "is not a kubeconfig: no clusters list"),
    (KUBECONFIG_OK.replace("current-context: c", "current-context: other"), "no context named 'other'"),
    (KUBECONFIG_OK.replace("server: 'https://10.0.0.1:6443'", "insecure: true"), "has no https:// server URL"),
])
@pytest.mark.parametrize("check", [False, True])
def test_malformed_kubeconfig_is_one_line_and_exit_2(tmp_path, text, message, check):
    kc = tmp_path / "kubeconfig"
    kc.write_text(text)
    r = run_cli("--kubeconfig", str(kc), *(["--check-config"] if check else []))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"queuepilot controller: kubeconfig {kc}") and message in lines[0], \
        r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_check_config_validates_offline_and_says_what_would_run(tmp_path):
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG_OK)  # its server does not exist: --check-config never connects
    cfg = tmp_path / "policy.yaml"
    cfg.write_text("admission:\n  stale_signal_mode: hold\nscaling:\n  idle_window: 10m\n"
                   "webhook:\n  namespace_queues: {team-a: team-a-queue}\n")
    r = run_cli("--check-config", "--kubeconfig", str(kc), "--config", str(cfg), "--dry-run", "--no-leader-elect",
                "--prometheus-url", "http://prom.monitoring:9090")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith("queuepilot controller: configuration valid: mode dry-run")
    for part in ("leader election off", "GPU signal prometheus http://prom.monitoring:9090",
                 "AdmissionCheck controller queuepilot.io/gpu-capacity", f"config {cfg}",
                 f"credentials: kubeconfig {kc} (context c, server https://10.0.0.1:6443)"):
        assert part in line, line
    assert r.stderr == ""


@pytest.mark.parametrize(("text", "message"), [
    ("admision:\n  stale_signal_mode: hold\n", "unknown section(s) 'admision' (known: admission, scaling, stall, webhook)"),
    ("admission:\n  staleSignal: hold\n", "config admission.staleSignal: unknown key 'staleSignal'"),
    ("scaling:\n  idle_window: soon\n", "config scaling.idle_window: not a duration"),
    ("scaling:\n  tolerance: [1]\n", "--config"),
    ("scaling:\n  target_gpu_utilization: 1.5\n", "ratio must be in (0, 1]"),
    ("admission: {\n", "is not valid YAML: line 2, column 1"),
    ("webhook:\n  namespace_queues: {Team_A: q}\n", "'Team_A' is not a namespace name"),
])
@pytest.mark.parametrize("check", [False, True])
def test_malformed_config_file_is_one_line_and_exit_2(tmp_path, text, message, check):
    cfg = tmp_path / "policy.yaml"
    cfg.write_text(text)
    kc = tmp_path / "kubeconfig"
    kc.write_text(KUBECONFIG_OK)
    # without --check-config the file is refused before any connection is tried (10.0.0.1 is never dialled)
    r = run_cli("--config", str(cfg), "--kubeconfig", str(kc), *(["--check-config"] if check else []))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"queuepilot controller: --config {cfg}"), r.stderr
    assert message in lines[0]


def test_help_shows_every_default():
    r = run_cli("--help")
    assert r.returncode == 0
    out = " ".join(r.stdout.split())
    for text in ("--resync-seconds SECONDS periodic pass interval (passes also follow watch events) "
                 "[env QUEUEPILOT_RESYNC_SECONDS] (default: 30.0)",
                 "(default: 0.0.0.0:8080)", "(default: prometheus)", "[env QUEUEPILOT_DRY_RUN] (default: False)",
                 "--check-config", "(default: 128)"):
        assert text in out, text
    assert "`" not in r.stdout  # plain text


async def test_sigterm_releases_the_lease_and_exits_0(fake_api, tmp_path):
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "queuepilot", "controller", "--kubeconfig", str(fake_api.kubeconfig_path),
        "--listen", f"127.0.0.1:{port}", "--identity", "proc-1", "--lease-namespace", "default",
        "--prometheus-url", "http://127.0.0.1:1", cwd=REPO, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
    )
    try:
        await eventually(lambda: ready(f"http://127.0.0.1:{port}"), "/readyz", timeout=30)

        def holder():
            try:
                lease = fake_api.get("coordination.k8s.io/v1", "Lease", "queuepilot-controller", "default")
            except Exception:
                return None
            return lease["spec"].get("holderIdentity")

        await eventually(lambda: holder() == "proc-1", timeout=10)
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 20) == 0
        assert not holder()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_controller_serves_the_queue_name_webhook(fake_api, tmp_path):
    """--webhook-listen/--webhook-cert-dir: every replica serves autoscaler.webhook.server over TLS."""
    import base64
    import json
    import ssl

    import aiohttp

    from tests.webhook.certs import make_pki

    pki = make_pki(tmp_path)
    port = free_port()
    settings = {"webhook": {"namespace_queues": {"team-a": "team-a-queue"}}}
    async with running_controller(fake_api, webhook_listen=f"127.0.0.1:{port}", webhook_cert_dir=str(tmp_path),
                                  settings=settings):
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": "u1", "operation": "CREATE", "namespace": "team-a",
            "kind": {"group": "ray.io", "version": "v1", "kind": "RayCluster"},
            "object": o.ray_cluster("rc", "team-a")}}
        ctx = ssl.create_default_context(cafile=str(pki.ca_file))
        async with aiohttp.ClientSession() as s, s.post(
                f"https://127.0.0.1:{port}/mutate-ray", json=review, ssl=ctx) as r:
            body = await r.json()
        patch = json.loads(base64.b64decode(body["response"]["patch"]))
        assert any(op["value"] == "team-a-queue" for op in patch)


def test_webhook_flags_need_certificates_and_a_valid_section(tmp_path):
    with pytest.raises(ConfigError, match="webhook-cert-dir"):
        parse_config(["--webhook-listen", "0.0.0.0:9443"], env={})
    cfg = tmp_path / "c.yaml"
    cfg.write_text("webhook:\n  namespace_queues: {Not_A_Namespace: q}\n")
    with pytest.raises(ConfigError, match="namespace"):
        parse_config(["--webhook-listen", "0.0.0.0:9443", "--webhook-cert-dir", str(tmp_path),
                      "--config", str(cfg)], env={})


async def test_start_up_line_and_an_unreachable_prometheus_logged_once(fake_api, tmp_path):
    """The real process: its first line says what runs; a dead --prometheus-url polled every 0.2 s is
    named once (not on every poll) while the counter keeps counting."""
    port, dead = free_port(), f"http://127.0.0.1:{free_port()}"
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:  # noqa: ASYNC230 (set-up)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "queuepilot", "controller", "--kubeconfig", str(fake_api.kubeconfig_path),
            "--listen", f"127.0.0.1:{port}", "--identity", "proc-2", "--dry-run", "--prometheus-url", dead,
            "--gpu-poll-seconds", "0.2", cwd=REPO, stderr=err, env={**os.environ, "KUBERNETES_SERVICE_HOST": ""},
        )
    try:
        await eventually(lambda: ready(f"http://127.0.0.1:{port}"), "/readyz", timeout=30)

        async def counted_ten():
            _, text = await http_get(f"http://127.0.0.1:{port}/metrics")
            line = next((x for x in text.splitlines()
                         if x.startswith('queuepilot_source_errors_total{kind="connection",source="gpu"}')), "")
            return line and float(line.split()[-1]) >= 10

        await eventually(counted_ten, timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    log = err_path.read_text()
    (start,) = [x for x in log.splitlines() if " started against " in x]
    for part in (f"metrics on 127.0.0.1:{port}", "mode dry-run", "leader election on (lease default/queuepilot-controller, "
                 "identity proc-2)", f"GPU signal prometheus {dead}", "AdmissionCheck controller queuepilot.io/gpu-capacity",
                 "webhook off"):
        assert part in start, (part, start)
    gpu_lines = [x for x in log.splitlines() if "GPU signal from Prometheus" in x]
    assert len(gpu_lines) == 1, gpu_lines
    assert f"GPU signal from Prometheus {dead}: cannot connect" in gpu_lines[0]
    assert "Traceback" not in log
