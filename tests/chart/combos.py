"""The values combinations every chart test renders, with what each must and must not contain."""

from __future__ import annotations

from dataclasses import dataclass

from tests.chart.helm import MAPPING, PROM_OPERATOR


@dataclass(frozen=True)
class Combo:
    sets: tuple[str, ...] = ()
    api_versions: tuple[str, ...] = ()
    present: frozenset[str] = frozenset()
    absent: frozenset[str] = frozenset()


CORE = frozenset({"DaemonSet", "Deployment", "PodDisruptionBudget", "ServiceAccount", "ClusterRole",
                  "ClusterRoleBinding", "Role", "RoleBinding", "ConfigMap", "Service", "AdmissionCheck"})
WEBHOOK = frozenset({"MutatingWebhookConfiguration", "Secret"})
OPERATOR = frozenset({"ServiceMonitor", "PrometheusRule"})
CERT_MANAGER = frozenset({"Certificate", "Issuer"})

COMBOS: dict[str, Combo] = {
    # no mapping: nothing for the webhook to do, so it is not registered
    "defaults": Combo(present=CORE, absent=WEBHOOK | OPERATOR | CERT_MANAGER | {"PodMonitor", "NetworkPolicy"}),
    "webhook": Combo(sets=MAPPING, present=CORE | WEBHOOK, absent=OPERATOR | CERT_MANAGER),
    "webhook-off": Combo(sets=(*MAPPING, "webhook.enabled=false"), present=CORE, absent=WEBHOOK | CERT_MANAGER),
    "cert-manager": Combo(sets=(*MAPPING, "webhook.certManager.enabled=true"),
                          present=CORE | CERT_MANAGER | {"MutatingWebhookConfiguration"}, absent=frozenset({"Secret"})),
    "cert-manager-issuer": Combo(
        sets=(*MAPPING, "webhook.certManager.enabled=true", "webhook.certManager.issuerRef.kind=ClusterIssuer",
              "webhook.certManager.issuerRef.name=corp-ca"),
        present=CORE | {"Certificate", "MutatingWebhookConfiguration"}, absent=frozenset({"Secret", "Issuer"})),
    "dcgm": Combo(sets=("exporter.source=dcgm", "exporter.dcgm.url=http://$(HOST_IP):9400/metrics"),
                  present=CORE, absent=WEBHOOK | OPERATOR),
    "prometheus-operator": Combo(api_versions=PROM_OPERATOR, present=CORE | OPERATOR, absent=frozenset({"PodMonitor"})),
    "podmonitor": Combo(sets=("monitoring.kind=PodMonitor",), api_versions=PROM_OPERATOR,
                        present=CORE | {"PodMonitor", "PrometheusRule"}, absent=frozenset({"ServiceMonitor"})),
    "monitoring-off": Combo(sets=("monitoring.enabled=false", "monitoring.prometheusRule.enabled=false",
                                  "monitoring.dashboards.enabled=false"),
                            api_versions=PROM_OPERATOR, present=CORE, absent=OPERATOR | {"PodMonitor"}),
    "no-pod-resources": Combo(sets=("exporter.podResources.enabled=false",), present=CORE),
    "scrape-live-no-leader": Combo(
        sets=("controller.gpuSignal=scrape", "controller.dryRun=false", "controller.leaderElection.enabled=false",
              "exporter.nvidia.runtimeClassName=nvidia", "imagePullSecrets[0]=regcred", "image.tag=9.9.9"),
        present=CORE),  # the owner memory's Role only (test_rbac: no lease rights)
    "network-policy": Combo(
        sets=(*MAPPING, "networkPolicy.enabled=true",
              "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.kubernetes\\.io/metadata\\.name=monitoring"),
        present=CORE | {"NetworkPolicy"}),
    # MultiKueue manager cluster: the dispatcher flags and its RBAC (tests/multicluster/test_chart_rbac.py)
    "multikueue-dispatcher": Combo(
        sets=("controller.multikueue.dispatcher=true", "controller.multikueue.namespace=kueue",
              "controller.multikueue.kubeconfigSecrets={worker-a-kc,worker-b-kc}",
              "controller.multikueue.clusterLabel=k8s_cluster"),
        present=CORE),
    "exporter-off": Combo(sets=("exporter.enabled=false",), present=CORE - {"DaemonSet"},
                          absent=frozenset({"DaemonSet"})),
}
