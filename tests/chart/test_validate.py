"""Rendered objects against real schemas: kubernetes-validate --strict (core kinds, offline), the Kueue
CRD's openAPIV3Schema (AdmissionCheck), promtool (the PrometheusRule's spec), and the Prometheus
operator / cert-manager objects' fields."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from tests.chart.combos import COMBOS
from tests.chart.crd_schema import crd_validator, errors
from tests.chart.helm import HELMS, MAPPING, PROM_OPERATOR, render
from tests.support.paths import REPO
from tests.support.prometheus import promtool

pytestmark = pytest.mark.e2e

K8S_VERSION = "1.33"
# the chart's kubeVersion floor and a recent release
K8S_VERSIONS = ("1.28", "1.33")
CRD_KINDS = {"AdmissionCheck"}
OPERATOR_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
CERT_MANAGER_KINDS = {"Certificate", "Issuer"}


def _all_docs() -> list[tuple[str, dict]]:
    """Every distinct object any combination renders, with the combination that produced it."""
    seen: set[str] = set()
    out = []
    for helm in HELMS:
        for name, c in sorted(COMBOS.items()):
            for d in render(helm, c.sets, c.api_versions).docs:
                key = json.dumps(d, sort_keys=True)
                if key not in seen:
                    seen.add(key)
                    out.append((f"{helm}/{name}", d))
    return out


@pytest.mark.parametrize("k8s", K8S_VERSIONS)
def test_core_objects_pass_kubernetes_validate_strict(k8s: str) -> None:
    checked: dict[str, int] = {}
    failures = []
    for where, d in _all_docs():
        if d["kind"] in CRD_KINDS | OPERATOR_KINDS | CERT_MANAGER_KINDS:
            continue
        try:
            kubernetes_validate.validate(d, k8s, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            failures.append(f"{where}: no schema for {d['apiVersion']} {d['kind']}")
        except kubernetes_validate.ValidationError as e:
            failures.append(f"{where}: {d['kind']}/{d['metadata']['name']}: {e.message} at {list(e.path)}")
        checked[d["kind"]] = checked.get(d["kind"], 0) + 1
    assert not failures, "\n".join(failures)
    assert {"DaemonSet", "Deployment", "MutatingWebhookConfiguration", "ClusterRole", "Role",
            "PodDisruptionBudget", "Secret", "Service", "ConfigMap", "NetworkPolicy"} <= set(checked)


def test_kubernetes_validate_strict_catches_a_typo() -> None:
    # the validator the test above relies on does reject a misspelled field in our DaemonSet
    ds = copy.deepcopy(render("helm3").one("DaemonSet"))
    ds["spec"]["template"]["spec"]["containers"][0]["resource"] = {}
    with pytest.raises(kubernetes_validate.ValidationError, match="resource"):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def test_admission_checks_match_the_kueue_crd(crds_dir: Path) -> None:
    validator = crd_validator(crds_dir / "kueue" / "kueue.x-k8s.io_admissionchecks.yaml", "v1beta2")
    acs = [d for _, d in _all_docs() if d["kind"] == "AdmissionCheck"]
    assert acs
    for ac in acs:
        assert errors(validator, ac) == []
    bad = copy.deepcopy(acs[0])
    bad["spec"]["controllername"] = bad["spec"].pop("controllerName")
    assert errors(validator, bad)  # the strict schema rejects an unknown/missing field


def test_notes_clusterqueue_shape_matches_the_crd(crds_dir: Path) -> None:
    # the reference NOTES.txt and docs/install.md show: spec.admissionChecksStrategy.admissionChecks[].name
    validator = crd_validator(crds_dir / "kueue" / "kueue.x-k8s.io_clusterqueues.yaml", "v1beta2")
    ac = render("helm3").one("AdmissionCheck")["metadata"]["name"]
    cq = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "team-a"},
          "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": ac}]}}}
    assert errors(validator, cq) == []


@pytest.mark.parametrize("helm", HELMS)
def test_prometheus_rule_passes_promtool(helm: str, tmp_path: Path) -> None:
    rules = render(helm, (), PROM_OPERATOR).of_kind("PrometheusRule")
    files = sorted((REPO / "charts/queuepilot/files/rules").glob("*.yaml"))
    assert len(rules) == len(files)
    generated = REPO / "alerts/generated"
    for rule, f in zip(sorted(rules, key=lambda r: r["metadata"]["name"]), files, strict=True):
        assert rule["apiVersion"] == "monitoring.coreos.com/v1"
        # with default values the spec is the plain generated rule file ({{ $labels.x }} survives the
        # template engine); tests/chart/test_prometheusrule.py renders it with other values
        assert rule["spec"] == yaml.safe_load((generated / f.name).read_text())
        path = tmp_path / f.name
        path.write_text(yaml.safe_dump(rule["spec"]))
        proc = promtool("check", "rules", "--lint-fatal", str(path))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "SUCCESS" in proc.stdout
    if files:
        assert "{{ $labels." in json.dumps(rules[0]["spec"])


def _scrape_objects(helm: str, kind_combo: str) -> list[dict]:
    c = COMBOS[kind_combo]
    return [d for d in render(helm, c.sets, c.api_versions).docs if d["kind"] in ("ServiceMonitor", "PodMonitor")]


@pytest.mark.parametrize("helm", HELMS)
def test_scrape_objects_name_the_jobs_the_alerts_select(helm: str) -> None:
    from alerts.config import AlertConfig

    selectors = {AlertConfig().exporter_selector, AlertConfig().controller_selector}
    for combo, endpoints_key in (("prometheus-operator", "endpoints"), ("podmonitor", "podMetricsEndpoints")):
        r = render(helm, COMBOS[combo].sets, COMBOS[combo].api_versions)
        objs = _scrape_objects(helm, combo)
        assert len(objs) == 2
        jobs = set()
        for o in objs:
            assert o["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(o["spec"]) == {"selector", "namespaceSelector", endpoints_key}
            (ep,) = o["spec"][endpoints_key]
            assert ep["honorLabels"] is True and ep["port"] == "metrics" and ep["path"] == "/metrics"
            (job,) = [rl["replacement"] for rl in ep["relabelings"] if rl.get("targetLabel") == "job"]
            jobs.add(f'job="{job}"')
            # the selector finds the pods that have a port named metrics
            pods = [d for d in r.docs if d["kind"] in ("DaemonSet", "Deployment")
                    and o["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()]
            assert len(pods) == 1
            assert "metrics" in {p["name"] for p in pods[0]["spec"]["template"]["spec"]["containers"][0]["ports"]}
        assert jobs == selectors


@pytest.mark.parametrize("helm", HELMS)
def test_dashboard_config_maps(helm: str) -> None:
    files = sorted((REPO / "charts/queuepilot/files/dashboards").glob("*.json"))
    cms = [d for d in render(helm).of_kind("ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(cms) == len(files)
    by_key = {k: v for cm in cms for k, v in cm["data"].items()}
    for cm in cms:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["grafana_folder"] == "queuepilot"
    for f in files:
        assert json.loads(by_key[f.name]) == json.loads(f.read_text())
    # ConfigMaps are limited to 1 MiB
    assert all(len(json.dumps(cm["data"])) < 1_000_000 for cm in cms)
    assert not [d for d in render(helm, COMBOS["monitoring-off"].sets).of_kind("ConfigMap")
                if "grafana_dashboard" in d["metadata"]["labels"]]


@pytest.mark.parametrize("helm", HELMS)
def test_cert_manager_objects(helm: str) -> None:
    r = render(helm, COMBOS["cert-manager"].sets)
    for d in r.docs:
        if d["kind"] in CERT_MANAGER_KINDS:
            assert d["apiVersion"] == "cert-manager.io/v1"
    cert = r.one("Certificate")["spec"]
    assert set(cert) <= {"secretName", "commonName", "dnsNames", "duration", "renewBefore", "privateKey", "usages",
                         "issuerRef"}
    assert "server auth" in cert["usages"]
    assert render(helm, MAPPING).of_kind("Certificate") == []
