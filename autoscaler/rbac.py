"""Every Kubernetes API call the controller makes, as (api group, resource, verb).

This set is the contract between the code and the chart's RBAC: ``charts/queuepilot`` must grant
exactly these (tests/chart compares them both ways), and the tests that run the controller
against the fake API server check that every request it observed is in this set.
The core API group is "".

:data:`NAMED_SECRET_CALLS` are granted only by name, in the namespaces the chart's
``controller.rayTokenSecrets`` lists (one Role per namespace with ``resourceNames``); without that
list the chart grants none of them and no Secret is ever readable.
"""

from __future__ import annotations

from autoscaler.cluster.resources import COORD, KUEUE, RAY

CONTROLLER_API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {
        # cluster view: list + watch (and get for a fresh read before a retried write)
        *((KUEUE, r, v) for r in ("workloads", "clusterqueues", "localqueues", "resourceflavors", "admissionchecks")
          for v in ("list", "watch")),
        (KUEUE, "workloads", "get"),
        (KUEUE, "workloads", "patch"),  # stall: deactivate a stalled Workload (spec.active: false), opt-in
        (KUEUE, "workloads/status", "patch"),  # our admissionChecks entry, server-side apply
        (KUEUE, "admissionchecks/status", "patch"),  # the Active condition
        *((RAY, r, v) for r in ("rayclusters", "rayjobs") for v in ("list", "watch")),
        (RAY, "rayclusters", "get"),
        (RAY, "rayclusters", "patch"),  # worker group replicas / min / max / workersToDelete; the recommendation annotation
        ("", "nodes", "list"),
        ("", "nodes", "watch"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "events", "create"),
        (COORD, "leases", "get"),
        (COORD, "leases", "create"),
        (COORD, "leases", "update"),
        # a RayCluster's dashboard token (autoscaler.cluster.secrets): granted per Secret name only
        ("", "secrets", "get"),
        # the stall reconciler's owner memory (autoscaler.act.stall_owners): one ConfigMap in the release
        # namespace, read and server-side applied (an apply that creates it is authorized as create too)
        ("", "configmaps", "get"),
        ("", "configmaps", "patch"),
        ("", "configmaps", "create"),
    }
)

NAMED_SECRET_CALLS: frozenset[tuple[str, str, str]] = frozenset({("", "secrets", "get")})

# MultiKueue dispatcher mode (``--multikueue-dispatcher``, manager cluster only; the chart grants these
# only with ``controller.multikueue.dispatcher: true``).  Workloads (list/watch/get, status patch),
# AdmissionChecks (list/watch) and Events are already in CONTROLLER_API_CALLS.
MULTIKUEUE_API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {(KUEUE, r, v) for r in ("multikueueclusters", "multikueueconfigs") for v in ("list", "watch")}
)
# the kubeconfig Secrets MultiKueueClusters name, in Kueue's namespace: granted per Secret name only
# (``controller.multikueue.kubeconfigSecrets``)
MULTIKUEUE_SECRET_CALLS: frozenset[tuple[str, str, str]] = NAMED_SECRET_CALLS
# what the dispatcher asks of each WORKER cluster, with the identity of the MultiKueue kubeconfig
# (granted there, next to what Kueue's MultiKueue needs; docs/multicluster.md)
WORKER_API_CALLS: frozenset[tuple[str, str, str]] = frozenset(
    {("", r, v) for r in ("nodes", "pods") for v in ("list", "watch")}
)
