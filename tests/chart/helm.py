"""Run the real helm binaries (tools/bin/helm3, tools/bin/helm4) on the chart and parse what they render."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from tests.support.paths import REPO

CHART = REPO / "charts" / "queuepilot"
HELMS = ("helm3", "helm4")
RELEASE = "qp"
NAMESPACE = "queuepilot-system"
PROM_OPERATOR = ("monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1/PodMonitor",
                 "monitoring.coreos.com/v1/PrometheusRule")
MAPPING = ("config.webhook.namespace_queues.team-a=team-a-queue",
           "config.webhook.namespace_queues.team-b=team-b-lq")

_HOME = Path(tempfile.mkdtemp(prefix="qp-helm-home-"))
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


def helm_binary(name: str) -> Path:
    path = REPO / "tools" / "bin" / name
    if not path.exists():
        raise RuntimeError(f"{path} missing: run `make helm` (tools/install-helm.sh)")
    return path


def run_helm(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HELM_CACHE_HOME": str(_HOME / "cache"), "HELM_CONFIG_HOME": str(_HOME / "config"),
           "HELM_DATA_HOME": str(_HOME / "data")}
    return subprocess.run([str(helm_binary(name)), *args], capture_output=True, text=True, env=env, timeout=120)


@dataclass(frozen=True)
class Rendered:
    docs: tuple[dict[str, Any], ...]

    def kinds(self) -> list[str]:
        return [d["kind"] for d in self.docs]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name_suffix: str = "") -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"].endswith(name_suffix)]
        assert len(found) == 1, f"expected one {kind} named *{name_suffix}, got {[d['metadata']['name'] for d in found]}"
        return found[0]


def _sets(sets: tuple[str, ...]) -> list[str]:
    out: list[str] = []
    for s in sets:
        out += ["--set", s]
    return out


@cache
def render(helm: str, sets: tuple[str, ...] = (), api_versions: tuple[str, ...] = ()) -> Rendered:
    """``helm template`` -> parsed documents (NOTES: see ``notes``)."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *_sets(sets)]
    for v in api_versions:
        args += ["--api-versions", v]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, f"{helm} template failed: {proc.stderr}"
    docs = tuple(d for d in yaml.safe_load_all(proc.stdout) if d)
    return Rendered(docs=docs)


@cache
def notes(helm: str, sets: tuple[str, ...] = (), api_versions: tuple[str, ...] = ()) -> str:
    """NOTES.txt, rendered by ``helm install --dry-run=client`` (no cluster contacted)."""
    args = ["install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *_sets(sets)]
    for v in api_versions:
        args += ["--api-versions", v]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, f"{helm} install --dry-run failed: {proc.stderr}"
    _, _, tail = proc.stdout.partition("NOTES:\n")
    return tail
