"""The chart's side of issue #44: operators can restrict the webhook port to the control plane, a shared Ray
token never renders beside per-namespace token Secrets, and nothing the chart renders turns on plain-http
worker kubeconfigs."""

from __future__ import annotations

import pytest

from tests.chart.combos import COMBOS
from tests.chart.helm import CHART, HELMS, render, run_helm

CONTROL_PLANE = {"ipBlock": {"cidr": "10.0.0.0/24"}}


@pytest.mark.parametrize("helm", HELMS)
def test_the_webhook_port_admits_only_the_listed_peers(helm: str) -> None:
    r = render(helm, (*COMBOS["network-policy"].sets, "networkPolicy.webhookFrom[0].ipBlock.cidr=10.0.0.0/24"))
    np = r.one("NetworkPolicy", "-controller")
    rules = {p["port"]: rule.get("from") for rule in np["spec"]["ingress"] for p in rule["ports"]}
    assert rules[9443] == [CONTROL_PLANE]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}} in rules[8080]
    # left empty (the default), the webhook port stays open to the API server wherever it is
    default = render(helm, COMBOS["network-policy"].sets).one("NetworkPolicy", "-controller")
    assert {p["port"]: rule.get("from") for rule in default["spec"]["ingress"] for p in rule["ports"]}[9443] is None


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("shared", [("controller.extraArgs={--ray-token-file=/etc/ray/token}",),
                                    ("controller.extraEnv[0].name=QUEUEPILOT_RAY_TOKEN_FILE",
                                     "controller.extraEnv[0].value=/etc/ray/token")])
def test_a_shared_ray_token_never_renders_beside_per_namespace_token_secrets(helm: str, shared: tuple[str, ...]
                                                                             ) -> None:
    args = ["template", "qp", str(CHART), "--set", "controller.rayTokenSecrets={team-a/ray-token}"]
    for s in shared:
        args += ["--set", s]
    proc = run_helm(helm, *args)
    assert proc.returncode != 0 and "never go together" in proc.stderr
    alone = ["template", "qp", str(CHART)] + [x for s in shared for x in ("--set", s)]
    assert run_helm(helm, *alone).returncode == 0  # single-tenant: the shared token alone is fine


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_no_combination_turns_on_plain_http_worker_kubeconfigs(helm: str, combo: str) -> None:
    r = render(helm, COMBOS[combo].sets)
    for d in r.of_kind("Deployment"):
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        assert not any("allow-insecure-http" in a for a in args)
