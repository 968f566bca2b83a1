"""Write a worker group's scale decision onto the RayCluster spec in ONE JSON patch.

The patch (``application/json-patch+json``) carries:
- ``test`` that ``/spec/workerGroupSpecs/<i>/groupName`` is the group (the index comes from the
  snapshot, whose resourceVersion the next op pins);
- ``replace /metadata/resourceVersion`` with the snapshot's value: the API server treats a
  resourceVersion in the patched object as a precondition, so a RayCluster that changed since
  (the Ray autoscaler, a user) answers 409 Conflict.  We then do NOT retry: the next pass decides
  again from what the other writer wrote (no fight);
- autoscaler off: ``replicas`` and ``scaleStrategy.workersToDelete`` together (the list set to the
  idlest pods on a scale-down, emptied once those pods are gone — the operator never clears it;
  a clearing-only patch leaves ``replicas`` as it is);
- in-tree autoscaler on: ``minReplicas`` / ``maxReplicas`` only.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.act.outcome import WriteOutcome, error_kind
from autoscaler.core.policy.scaling import GroupDecision

log = logging.getLogger(__name__)

GROUP = "ray.io"
VERSION = "v1"
PLURAL = "rayclusters"
RESOURCE = "rayclusters"
JSON_PATCH = "application/json-patch+json"


def patch_ops(decision: GroupDecision, index: int) -> list[dict[str, Any]] | None:
    """The JSON patch for ``decision`` on group ``index``, or None when it writes nothing."""
    if decision.write == "none":
        return None
    base = f"/spec/workerGroupSpecs/{index}"
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": f"{base}/groupName", "value": decision.group},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": decision.resource_version},
    ]
    if decision.write == "replicas":
        if decision.desired != decision.current:
            ops.append({"op": "add", "path": f"{base}/replicas", "value": int(decision.desired)})
        if decision.workers_to_delete or decision.clear_workers_to_delete:
            ops.append({"op": "add", "path": f"{base}/scaleStrategy",
                        "value": {"workersToDelete": list(decision.workers_to_delete)}})
    elif decision.write == "min_max":
        if decision.new_min is not None:
            ops.append({"op": "add", "path": f"{base}/minReplicas", "value": int(decision.new_min)})
        if decision.new_max is not None:
            ops.append({"op": "add", "path": f"{base}/maxReplicas", "value": int(decision.new_max)})
    return ops


async def patch_group(
    api_client: Any,
    decision: GroupDecision,
    index: int,
    *,
    field_manager: str,
    counters: Any = None,
    dry_run: bool = False,
) -> WriteOutcome:
    ops = patch_ops(decision, index)
    if ops is None:
        return WriteOutcome("unchanged")
    if dry_run:
        log.info("dry-run: would patch %s/%s group %s: %s", decision.namespace, decision.cluster, decision.group,
                 ops[2:])
        return WriteOutcome("dry_run")
    try:
        await CustomObjectsApi(api_client).patch_namespaced_custom_object(
            GROUP, VERSION, decision.namespace, PLURAL, decision.cluster, ops,
            field_manager=field_manager, _content_type=JSON_PATCH,
        )
    except ApiException as exc:
        kind = error_kind(exc)
        if counters is not None:
            counters.write_errors.labels(resource=RESOURCE, kind=kind).inc()
        if exc.status == 409:
            log.info("RayCluster %s/%s changed since the snapshot; deciding again next pass",
                     decision.namespace, decision.cluster)
            return WriteOutcome("conflict", kind, 1)
        if exc.status == 404:
            return WriteOutcome("skipped", "gone", 1)
        log.warning("patch of RayCluster %s/%s failed: %s %s", decision.namespace, decision.cluster,
                    exc.status, exc.reason)
        return WriteOutcome("error", kind, 1)
    except Exception as exc:
        if counters is not None:
            counters.write_errors.labels(resource=RESOURCE, kind=error_kind(exc)).inc()
        return WriteOutcome("error", error_kind(exc), 1)
    if counters is not None:
        counters.writes.labels(resource=RESOURCE, verb="patch").inc()
    return WriteOutcome("written", "", 1)
