"""The chart with the real helm 3.17 and helm 4.1: lint --strict, template, NOTES, schema rejections."""

from __future__ import annotations

import base64
import re
import shutil
import textwrap

import pytest
import yaml
from cryptography import x509

from tests.chart.combos import COMBOS
from tests.chart.helm import CHART, HELMS, MAPPING, NAMESPACE, PROM_OPERATOR, notes, render, run_helm

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("helm", HELMS)
def test_versions_are_the_pinned_ones(helm: str) -> None:
    out = run_helm(helm, "version", "--short").stdout
    assert out.startswith({"helm3": "v3.17.", "helm4": "v4.1."}[helm]), out


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_lint_strict(helm: str, combo: str) -> None:
    c = COMBOS[combo]
    args = ["lint", "--strict", str(CHART), "--namespace", NAMESPACE]
    for s in c.sets:
        args += ["--set", s]
    proc = run_helm(helm, *args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 chart(s) failed" in proc.stdout
    assert "[WARNING]" not in proc.stdout and "[ERROR]" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_template_kinds(helm: str, combo: str) -> None:
    c = COMBOS[combo]
    kinds = set(render(helm, c.sets, c.api_versions).kinds())
    assert c.present <= kinds, f"missing {sorted(c.present - kinds)}"
    assert not (c.absent & kinds), f"unexpected {sorted(c.absent & kinds)}"


@pytest.mark.parametrize("helm", HELMS)
def test_both_helms_render_the_same_objects(helm: str) -> None:
    # certificates differ per run; everything else must be identical between helm 3 and helm 4
    def strip(docs):
        out = []
        for d in docs:
            d = yaml.safe_load(yaml.safe_dump(d))
            if d["kind"] == "Secret":
                d["data"] = sorted(d["data"])
            if d["kind"] == "MutatingWebhookConfiguration":
                for w in d["webhooks"]:
                    w["clientConfig"].pop("caBundle", None)
            out.append(d)
        return sorted(out, key=lambda d: (d["kind"], d["metadata"]["name"]))

    sets = (*MAPPING, "exporter.source=dcgm", "exporter.dcgm.url=http://dcgm.gpu.svc:9400/metrics")
    assert strip(render(helm, sets, PROM_OPERATOR).docs) == strip(render("helm3", sets, PROM_OPERATOR).docs)


@pytest.mark.parametrize("helm", HELMS)
def test_exporter_daemonset(helm: str) -> None:
    ds = render(helm).one("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert ctr["args"][0] == "exporter" and "--source=nvml" in ctr["args"]
    assert "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock" in ctr["args"]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    # GPU nodes only, tolerating the usual GPU taint; never requests a GPU itself
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert "nvidia.com/gpu" not in str(ctr["resources"])
    # the PodResources directory, read-only
    mounts = {m["name"]: m for m in ctr["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert mounts["pod-resources"] == {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources",
                                       "readOnly": True}
    assert vols["pod-resources"]["hostPath"] == {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"}
    assert set(vols) == {"pod-resources", "tmp"}  # no other host access
    # smallest securityContext: root only for the kubelet socket, and without any capability
    sc, psc = ctr["securityContext"], pod["securityContext"]
    assert sc == {"allowPrivilegeEscalation": False, "privileged": False, "readOnlyRootFilesystem": True,
                  "capabilities": {"drop": ["ALL"]}}
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"} and psc["runAsUser"] == 0
    assert pod["hostPID"] is False and pod["hostNetwork"] is False and pod["hostIPC"] is False
    assert pod["automountServiceAccountToken"] is False
    for probe in ("livenessProbe", "readinessProbe"):
        assert ctr[probe]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert ctr["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert "runtimeClassName" not in pod


@pytest.mark.parametrize("helm", HELMS)
def test_exporter_variants(helm: str) -> None:
    c = COMBOS["no-pod-resources"]
    pod = render(helm, c.sets).one("DaemonSet")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert "--pod-resources-socket=" in pod["containers"][0]["args"]
    assert {v["name"] for v in pod["volumes"]} == {"tmp"}

    c = COMBOS["dcgm"]
    ctr = render(helm, c.sets).one("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert "--source=dcgm" in ctr["args"] and "--dcgm-url=http://$(HOST_IP):9400/metrics" in ctr["args"]
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in ctr["env"]}  # no GPU runtime needed
    assert "HOST_IP" in {e["name"] for e in ctr["env"]}  # so that $(HOST_IP) expands

    c = COMBOS["scrape-live-no-leader"]
    r = render(helm, c.sets)
    pod = r.one("DaemonSet")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert pod["containers"][0]["image"].endswith(":9.9.9")


@pytest.mark.parametrize("helm", HELMS)
def test_default_values_install_in_shadow_mode(helm: str) -> None:
    """A bare ``helm install``: the controller runs with --dry-run; one value turns it live."""
    def args(sets: tuple[str, ...]) -> list[str]:
        return render(helm, sets).one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert "--dry-run" in args(())
    assert "--dry-run" not in args(("controller.dryRun=false",))


@pytest.mark.parametrize("helm", HELMS)
def test_controller_deployment(helm: str) -> None:
    r = render(helm, MAPPING)
    dep = r.one("Deployment")
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    args = ctr["args"]
    assert args[0] == "controller"
    assert "--dry-run" in args  # shadow mode unless controller.dryRun=false
    assert "--leader-elect" in args and f"--lease-namespace={NAMESPACE}" in args
    assert "--webhook-listen=0.0.0.0:9443" in args and "--webhook-cert-dir=/etc/queuepilot/webhook-tls" in args
    assert ctr["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert ctr["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert ctr["securityContext"]["readOnlyRootFilesystem"] is True
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {p["name"]: p["containerPort"] for p in ctr["ports"]} == {"metrics": 8080, "webhook": 9443}
    pdb = r.one("PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == dep["spec"]["selector"]["matchLabels"]
    # the config file the args name is the ConfigMap mounted there
    cm_name = next(v["configMap"]["name"] for v in pod["volumes"] if v["name"] == "config")
    assert r.one("ConfigMap", cm_name.removeprefix("qp-queuepilot-controller"))["metadata"]["name"] == cm_name
    assert "--config=/etc/queuepilot/config/config.yaml" in args
    assert any(m["mountPath"] == "/etc/queuepilot/config" for m in ctr["volumeMounts"])

    args = render(helm, COMBOS["scrape-live-no-leader"].sets).one("Deployment")["spec"]["template"]["spec"][
        "containers"][0]["args"]
    assert "--dry-run" not in args and "--no-leader-elect" in args and "--gpu-signal=scrape" in args
    assert "--exporter-selector=app.kubernetes.io/name=queuepilot,app.kubernetes.io/instance=qp," \
           "app.kubernetes.io/component=exporter" in args


@pytest.mark.parametrize("helm", HELMS)
def test_multikueue_dispatcher_args(helm: str) -> None:
    def args(sets: tuple[str, ...]) -> list[str]:
        return render(helm, sets).one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]

    assert not [a for a in args(()) if a.startswith("--multikueue")]  # off by default
    on = args(("controller.multikueue.dispatcher=true",))
    assert [a for a in on if a.startswith("--multikueue")] == [
        "--multikueue-dispatcher", "--multikueue-namespace=kueue-system", "--multikueue-cluster-label=cluster"]
    custom = args(COMBOS["multikueue-dispatcher"].sets)
    assert [a for a in custom if a.startswith("--multikueue")] == [
        "--multikueue-dispatcher", "--multikueue-namespace=kueue", "--multikueue-cluster-label=k8s_cluster"]
    # the namespace and Secrets reach the RBAC too
    role = render(helm, COMBOS["multikueue-dispatcher"].sets).one("Role", "-multikueue-kubeconfigs")
    assert role["metadata"]["namespace"] == "kueue"
    assert role["rules"][0]["resourceNames"] == ["worker-a-kc", "worker-b-kc"]
    # values without the dispatcher flag change nothing
    off = args(("controller.multikueue.namespace=kueue", "controller.multikueue.clusterLabel=region"))
    assert not [a for a in off if a.startswith("--multikueue")]


@pytest.mark.parametrize("helm", HELMS)
def test_services_select_their_pods(helm: str) -> None:
    r = render(helm, MAPPING)
    pods = {d["kind"]: d["spec"]["template"]["metadata"]["labels"] for d in r.docs if d["kind"] in ("DaemonSet", "Deployment")}
    ports = {d["kind"]: {p["name"] for p in d["spec"]["template"]["spec"]["containers"][0]["ports"]}
             for d in r.docs if d["kind"] in ("DaemonSet", "Deployment")}
    svcs = {d["metadata"]["name"]: d["spec"] for d in r.of_kind("Service")}
    expect = {"qp-queuepilot-exporter": ("DaemonSet", 9400, "metrics"),
              "qp-queuepilot-controller": ("Deployment", 8080, "metrics"),
              "qp-queuepilot-webhook": ("Deployment", 443, "webhook")}
    assert set(svcs) == set(expect)
    for name, (kind, port, target) in expect.items():
        spec = svcs[name]
        assert spec["selector"].items() <= pods[kind].items(), name
        (p,) = spec["ports"]
        assert p["port"] == port and p["targetPort"] == target and target in ports[kind]
    assert svcs["qp-queuepilot-exporter"]["clusterIP"] == "None"


@pytest.mark.parametrize("helm", HELMS)
def test_webhook_configuration_and_self_signed_tls(helm: str) -> None:
    r = render(helm, MAPPING)
    (wh,) = r.one("MutatingWebhookConfiguration")["webhooks"]
    assert wh["failurePolicy"] == "Ignore" and wh["sideEffects"] == "None"
    assert wh["admissionReviewVersions"] == ["v1"]
    assert wh["rules"] == [{"apiGroups": ["ray.io"], "apiVersions": ["v1"], "operations": ["CREATE"],
                            "resources": ["rayclusters", "rayjobs"], "scope": "Namespaced"}]
    svc = wh["clientConfig"]["service"]
    assert svc == {"name": "qp-queuepilot-webhook", "namespace": NAMESPACE, "path": "/mutate-ray", "port": 443}
    # only the mapped namespaces are sent to the webhook, and only objects without the label
    assert wh["namespaceSelector"] == {"matchExpressions": [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["team-a", "team-b"]}]}
    assert wh["objectSelector"]["matchExpressions"] == [{"key": "kueue.x-k8s.io/queue-name", "operator": "DoesNotExist"}]
    # the caBundle is the CA that signed the served certificate, valid for the Service's DNS name
    secret = r.one("Secret", "-webhook-tls")
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(wh["clientConfig"]["caBundle"]))
    assert base64.b64decode(secret["data"]["ca.crt"]) == base64.b64decode(wh["clientConfig"]["caBundle"])
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value.get_values_for_type(x509.DNSName)
    assert f"qp-queuepilot-webhook.{NAMESPACE}.svc" in sans
    secret_name = next(v["secret"]["secretName"] for v in r.one("Deployment")["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == "webhook-tls")
    assert secret_name == secret["metadata"]["name"]


@pytest.mark.parametrize("helm", HELMS)
def test_webhook_options(helm: str) -> None:
    r = render(helm, (*MAPPING, "webhook.failurePolicy=Fail", "webhook.namespaceSelector.matchLabels.queuepilot=on"))
    (wh,) = r.one("MutatingWebhookConfiguration")["webhooks"]
    assert wh["failurePolicy"] == "Fail" and wh["namespaceSelector"] == {"matchLabels": {"queuepilot": "on"}}
    args = render(helm, COMBOS["webhook-off"].sets).one("Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--webhook") for a in args)


@pytest.mark.parametrize("helm", HELMS)
def test_network_policies_admit_what_the_pods_serve(helm: str) -> None:
    r = render(helm, COMBOS["network-policy"].sets)
    pods = {d["metadata"]["name"]: d for d in r.docs if d["kind"] in ("DaemonSet", "Deployment")}
    monitoring = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    for np in r.of_kind("NetworkPolicy"):
        pod = pods[np["metadata"]["name"]]
        assert np["spec"]["podSelector"]["matchLabels"].items() <= pod["spec"]["template"]["metadata"]["labels"].items()
        served = {p["containerPort"]: p["name"] for p in pod["spec"]["template"]["spec"]["containers"][0]["ports"]}
        allowed = {p["port"]: rule.get("from") for rule in np["spec"]["ingress"] for p in rule["ports"]}
        assert set(allowed) == set(served)  # every served port, nothing else
        for port, name in served.items():
            if name == "metrics":
                assert monitoring in allowed[port]
            else:  # the webhook: from the API server, which is not a pod
                assert allowed[port] is None
    assert len(r.of_kind("NetworkPolicy")) == 2


@pytest.mark.parametrize("helm", HELMS)
def test_cert_manager(helm: str) -> None:
    r = render(helm, COMBOS["cert-manager"].sets)
    cert = r.one("Certificate")
    mwc = r.one("MutatingWebhookConfiguration")
    assert mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == f"{NAMESPACE}/{cert['metadata']['name']}"
    assert "caBundle" not in mwc["webhooks"][0]["clientConfig"]
    issuer = r.one("Issuer")
    assert issuer["spec"] == {"selfSigned": {}}
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": issuer["metadata"]["name"]}
    assert f"qp-queuepilot-webhook.{NAMESPACE}.svc" in cert["spec"]["dnsNames"]
    dep_secret = next(v["secret"]["secretName"] for v in r.one("Deployment")["spec"]["template"]["spec"]["volumes"]
                      if v["name"] == "webhook-tls")
    assert cert["spec"]["secretName"] == dep_secret
    r = render(helm, COMBOS["cert-manager-issuer"].sets)
    assert r.one("Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


@pytest.mark.parametrize("helm", HELMS)
def test_admission_check(helm: str) -> None:
    from autoscaler.core.policy.config import DEFAULT_CONTROLLER_NAME

    ac = render(helm).one("AdmissionCheck")
    assert ac["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert ac["metadata"]["name"] == "queuepilot-gpu-capacity" and "namespace" not in ac["metadata"]
    assert ac["spec"] == {"controllerName": DEFAULT_CONTROLLER_NAME}
    two = render(helm, ("admissionChecks[0].name=gpu-a100", "admissionChecks[1].name=gpu-h100")).of_kind("AdmissionCheck")
    assert sorted(a["metadata"]["name"] for a in two) == ["gpu-a100", "gpu-h100"]


# helm 3's `install --dry-run=client` still asks a cluster for its version (and `helm template` never
# renders NOTES.txt), so the NOTES are rendered with helm 4, whose client dry run needs no cluster.
@pytest.mark.parametrize("helm", ["helm4"])
def test_notes(helm: str) -> None:
    text = notes(helm, MAPPING)
    # how to reference the check from a ClusterQueue, in the v1beta2 shape
    start = text.rindex("\n", 0, text.index("apiVersion: kueue.x-k8s.io/v1beta2")) + 1
    snippet = textwrap.dedent(text[start:text.index("For example")])
    cq = yaml.safe_load(re.sub(r"<your-cluster-queue>", "cq", snippet))
    assert cq["kind"] == "ClusterQueue"
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": "queuepilot-gpu-capacity"}]
    assert "team-a -> team-a-queue" in text
    assert "not serve monitoring.coreos.com/v1/ServiceMonitor" in text
    assert "not registered" in notes(helm)  # no mapping, no webhook: said so


@pytest.mark.parametrize("helm", HELMS)
@pytest.mark.parametrize(
    ("sets", "field"),
    [
        (("exporter.source=gpu",), "exporter.source"),
        (("exporter.source=dcgm",), "dcgm"),  # source dcgm needs its URL
        (("controller.replicas=0",), "controller.replicas"),
        (("controller.gpuSignal=guess",), "controller.gpuSignal"),
        (("image.repository=",), "image.repository"),
        (("image.pullPolicy=Sometimes",), "image.pullPolicy"),
        (("exporter.port=80",), "exporter.port"),
        (("webhook.failurePolicy=Deny",), "webhook.failurePolicy"),
        (("config.admission.stale_signal_mode=maybe",), "stale_signal_mode"),
        (("config.scaling.target_gpu_utilization=1.5",), "target_gpu_utilization"),
        (("config.webhook.namespace_queues.team-a=Bad_Queue",), "namespace_queues"),
        (("config.scaling.reclaim_budget_per_hour=5000",), "reclaim_budget_per_hour"),
        (("config.scaling.cluster_queue_schedules.Bad_Queue=Mon 08:00-20:00 max=1",), "Bad_Queue"),  # not a name
        (("config.scaling.cluster_queue_schedules.cq-a=",), "cluster_queue_schedules"),  # empty: not a schedule
        (("config.scaling.cluster_queue_schedules.cq-a=" + "x" * 1025,), "cluster_queue_schedules"),
        (("config.stall.gpu_utilization=2",), "gpu_utilization"),
        (("config.stall.deactivate_cluster_queues=cq-a",), "deactivate_cluster_queues"),  # a list, not a name
        (("config.stall.deactivate=true",), "deactivate"),
        (("config.stall.deactivate_after=soon",), "deactivate_after"),
        (("exporter.typo=1",), "typo"),
        (("monitoring.kind=Probe",), "monitoring.kind"),
        (("networkPolicy.enabled=true",), "metricsFrom"),  # no peers would mean no scraping at all
        (("controller.multikueue.clusterLabel=k8s-cluster",), "multikueue.clusterLabel"),  # not a Prometheus label name
        (("controller.multikueue.namespace=Kueue_System",), "multikueue.namespace"),
        (("controller.multikueue.kubeconfigSecrets={a-kc,a-kc}",), "multikueue.kubeconfigSecrets"),
        (("controller.multikueue.dispatcher=maybe",), "multikueue.dispatcher"),
        (("controller.multikueue.workers=3",), "workers"),
    ],
)
def test_schema_rejects_bad_values(helm: str, sets: tuple[str, ...], field: str) -> None:
    args = ["template", "qp", str(CHART)]
    for s in sets:
        args += ["--set", s]
    proc = run_helm(helm, *args)
    assert proc.returncode != 0
    message = proc.stderr.replace("/", ".")  # helm 4 says at '/exporter/source', helm 3 exporter.source
    assert "schema" in message and field in message, proc.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_pdb_that_blocks_drains_fails_clearly(helm: str) -> None:
    proc = run_helm(helm, "template", "qp", str(CHART), "--set", "controller.replicas=1")
    assert proc.returncode != 0
    assert "controller.podDisruptionBudget.minAvailable (1) must be lower than controller.replicas (1)" in proc.stderr
    ok = run_helm(helm, "template", "qp", str(CHART), "--set", "controller.replicas=1",
                  "--set", "controller.podDisruptionBudget.enabled=false")
    assert ok.returncode == 0, ok.stderr


@pytest.mark.parametrize("helm", HELMS)
def test_chart_without_generated_files(helm: str, tmp_path) -> None:
    # before the first `make generate` (or with every dashboard/rule removed) the chart still works
    chart = tmp_path / "queuepilot"
    shutil.copytree(CHART, chart, ignore=shutil.ignore_patterns("files"))
    lint = run_helm(helm, "lint", "--strict", str(chart))
    assert lint.returncode == 0, lint.stdout + lint.stderr
    proc = run_helm(helm, "template", "qp", str(chart), *[a for v in PROM_OPERATOR for a in ("--api-versions", v)])
    assert proc.returncode == 0, proc.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(proc.stdout) if d]
    assert "PrometheusRule" not in kinds and "ServiceMonitor" in kinds
    assert kinds.count("ConfigMap") == 1  # the controller's config only, no dashboards
