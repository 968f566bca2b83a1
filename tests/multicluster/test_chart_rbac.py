"""The chart grants dispatcher mode exactly autoscaler/rbac.py MULTIKUEUE_API_CALLS, and worker kubeconfig
Secrets only by name in Kueue's namespace (rendered with the real helm binaries)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from autoscaler.rbac import MULTIKUEUE_API_CALLS, MULTIKUEUE_SECRET_CALLS
from tests.chart.helm import CHART, HELMS, NAMESPACE, RELEASE, helm_binary

pytestmark = pytest.mark.e2e

ON = ("controller.multikueue.dispatcher=true", "controller.multikueue.kubeconfigSecrets={worker-b-kc,worker-a-kc}")


def render(helm: str, sets: tuple[str, ...]) -> list[dict]:
    args = [str(helm_binary(helm)), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for s in sets:
        args += ["--set", s]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def triples(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


@pytest.mark.parametrize("helm", HELMS)
def test_dispatcher_rbac(helm: str) -> None:
    docs = render(helm, ON)
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    cr = roles[("ClusterRole", f"{RELEASE}-queuepilot-controller-multikueue")]
    assert triples(cr["rules"]) == MULTIKUEUE_API_CALLS
    role = roles[("Role", f"{RELEASE}-queuepilot-controller-multikueue-kubeconfigs")]
    assert role["metadata"]["namespace"] == "kueue-system"
    assert triples(role["rules"]) == MULTIKUEUE_SECRET_CALLS
    assert role["rules"][0]["resourceNames"] == ["worker-a-kc", "worker-b-kc"]
    bound = {d["roleRef"]["name"] for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")}
    assert {cr["metadata"]["name"], role["metadata"]["name"]} <= bound


@pytest.mark.parametrize("helm", HELMS)
def test_off_by_default_and_no_secrets_without_names(helm: str) -> None:
    assert not [d for d in render(helm, ()) if "multikueue" in d["metadata"]["name"]]
    docs = render(helm, ON[:1])
    names = {d["metadata"]["name"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    assert f"{RELEASE}-queuepilot-controller-multikueue" in names
    assert f"{RELEASE}-queuepilot-controller-multikueue-kubeconfigs" not in names


@pytest.mark.parametrize("helm", HELMS)
def test_malformed_secret_name_fails_the_render(helm: str) -> None:
    sets = ["--set", "controller.multikueue.dispatcher=true", "--set", "controller.multikueue.kubeconfigSecrets={Bad/Name}"]
    base = [str(helm_binary(helm)), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    # the values schema refuses it first
    proc = subprocess.run([*base, *sets], capture_output=True, text=True, timeout=120)
    message = proc.stderr.replace("/", ".")  # helm 4 says at '/controller/...', helm 3 controller....
    assert proc.returncode != 0 and "schema" in proc.stderr and "multikueue.kubeconfigSecrets" in message, proc.stderr
    # and without the schema (--skip-schema-validation) the template's own check still fails the render
    proc = subprocess.run([*base, "--skip-schema-validation", *sets], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "kubeconfigSecrets[0]" in proc.stderr, proc.stderr
