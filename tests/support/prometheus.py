"""Start a real Prometheus / Alertmanager on 127.0.0.1 for a test, every Debian default overridden.

Both are ready in well under a second; start a fresh one per
scenario rather than hot-reloading rules.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.eventually import eventually_sync
from tests.support.ports import free_port
from tests.support.processes import stop


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        raise RuntimeError(f"{binary} not found: run 'make test' (it installs the Debian packages) first")
    return path


@contextmanager
def _serving(argv: list[str], log_path: Path, ready_url: str) -> Iterator[subprocess.Popen]:
    """``argv`` started with its output in ``log_path``, once ``ready_url`` answers 200; stopped after."""
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            def ready() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"process exited early with {proc.returncode}: {ready_url}")
                try:
                    with urllib.request.urlopen(ready_url, timeout=1) as r:
                        return r.status == 200
                except OSError:
                    return False

            eventually_sync(ready, f"{ready_url} to answer 200", timeout=20.0)
            yield proc
        finally:
            stop(proc)


@dataclass
class Prometheus:
    url: str
    data_dir: Path
    proc: subprocess.Popen

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        params = {"query": expr}
        if at is not None:
            params["time"] = str(at)
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}", timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"query failed: {expr}: {body}")
        return body["data"]["result"]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        params = {"query": expr, "start": str(start), "end": str(end), "step": str(step)}
        with urllib.request.urlopen(f"{self.url}/api/v1/query_range?{urllib.parse.urlencode(params)}", timeout=10) as r:
            body = json.load(r)
        if body.get("status") != "success":
            raise RuntimeError(f"query_range failed: {expr}: {body}")
        return body["data"]["result"]

    def wait_for(self, expr: str, timeout: float = 30.0, predicate=lambda result: bool(result)) -> list[dict]:
        """Query ``expr`` until ``predicate`` holds for its result; that result."""
        answers: list[list[dict]] = []

        def holds() -> bool:
            answers.append(self.query(expr))
            return predicate(answers[-1])

        try:
            eventually_sync(holds, f"a result of {expr!r}", timeout=timeout, interval=0.25)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; its last result: {answers[-1]}") from None
        return answers[-1]

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as r:
            return json.load(r)


@contextmanager
def run_prometheus(
    workdir: Path,
    targets: Sequence[str] = (),
    rule_files: Sequence[Path] = (),
    alertmanager: str | None = None,
    scrape_interval: str = "1s",
    evaluation_interval: str = "1s",
    data_dir: Path | None = None,
    extra_scrape_configs: Sequence[dict] = (),
) -> Iterator[Prometheus]:
    """A real Prometheus scraping ``targets`` (host:port), evaluating ``rule_files``, firing to ``alertmanager``."""
    binary = require("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config: dict = {
        "global": {"scrape_interval": scrape_interval, "evaluation_interval": evaluation_interval},
        "rule_files": [str(Path(p).resolve()) for p in rule_files],
        "scrape_configs": (
            [{"job_name": "queuepilot", "static_configs": [{"targets": list(targets)}]}] if targets else []
        )
        + list(extra_scrape_configs),
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    cfg = workdir / "prometheus.yml"
    cfg.write_text(yaml.safe_dump(config))
    data = data_dir or (workdir / "prom-data")
    argv = [
        binary,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        f"--web.external-url=http://127.0.0.1:{port}",
        "--web.enable-lifecycle",
        "--storage.tsdb.retention.time=30d",
    ]
    url = f"http://127.0.0.1:{port}"
    with _serving(argv, workdir / "prometheus.log", f"{url}/-/ready") as proc:
        yield Prometheus(url=url, data_dir=data, proc=proc)


@dataclass
class Alertmanager:
    url: str
    address: str  # host:port for Prometheus' alerting config
    proc: subprocess.Popen


@contextmanager
def run_alertmanager(workdir: Path, config: dict) -> Iterator[Alertmanager]:
    binary = require("prometheus-alertmanager")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    cfg = workdir / "alertmanager.yml"
    cfg.write_text(yaml.safe_dump(config))
    argv = [
        binary,
        f"--config.file={cfg}",
        f"--storage.path={workdir / 'am-data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    url = f"http://127.0.0.1:{port}"
    with _serving(argv, workdir / "alertmanager.log", f"{url}/-/ready") as proc:
        yield Alertmanager(url=url, address=f"127.0.0.1:{port}", proc=proc)


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), *args], input=stdin, capture_output=True, text=True, timeout=120)
