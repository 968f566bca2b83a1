"""Write a worker group's scale decision onto the RayCluster spec in ONE JSON patch.

The patch (``application/json-patch+json``) carries:
- ``test`` that ``/spec/workerGroupSpecs/<i>/groupName`` is the group (``i`` is the decision's
  ``group_index``, its position in the snapshot, whose resourceVersion the next op pins);
- ``replace /metadata/resourceVersion`` with the snapshot's value: the API server treats a
  resourceVersion in the patched object as a precondition, so a RayCluster that changed since
  (the Ray autoscaler, a user) answers 409 Conflict.  We then do NOT retry: the next pass decides
  again from what the other writer wrote (no fight);
- autoscaler off: ``replicas`` and ``scaleStrategy.workersToDelete`` together (the list set to the
  idlest pods on a scale-down, emptied once those pods are gone — the operator never clears it;
  a clearing-only patch leaves ``replicas`` as it is);
- in-tree autoscaler on: ``minReplicas`` / ``maxReplicas`` only.

Any other failure holds the RayCluster back (``act.guard``: per-object backoff, counted, logged).
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.act.guard import WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome
from autoscaler.act.pinned_patch import patch_pinned
from autoscaler.core.policy.scaling import GroupDecision

log = logging.getLogger(__name__)

GROUP = "ray.io"
VERSION = "v1"
PLURAL = "rayclusters"
RESOURCE = "rayclusters"
JSON_PATCH = "application/json-patch+json"


def patch_ops(decision: GroupDecision) -> list[dict[str, Any]] | None:
    """The JSON patch for ``decision`` (on its group's entry of spec.workerGroupSpecs), or None when it
    writes nothing."""
    if decision.write == "none":
        return None
    base = f"/spec/workerGroupSpecs/{decision.group_index}"
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


def raycluster_key(decision: GroupDecision) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "RayCluster", decision.namespace, decision.cluster)


async def patch_group(
    api_client: ApiClient | None,
    decision: GroupDecision,
    *,
    field_manager: str,
    now: float,
    write_guard: WriteGuard | None = None,
    dry_run: bool = False,
) -> WriteOutcome:
    """One JSON patch for ``decision``; 409 -> ``conflict`` (no retry), 404 -> ``skipped``/``gone``,
    any other failure -> the RayCluster is held back (``act.guard``)."""
    ops = patch_ops(decision)
    if ops is None:
        return WriteOutcome("unchanged")
    if dry_run or api_client is None:
        log.info("dry-run: would patch %s/%s group %s: %s", decision.namespace, decision.cluster, decision.group,
                 ops[2:])
        return WriteOutcome("dry_run")
    return await patch_pinned(api_client, write_guard, raycluster_key(decision), group=GROUP, version=VERSION,
                              plural=PLURAL, body=ops, content_type=JSON_PATCH, field_manager=field_manager,
                              now=now, changed=f"RayCluster {decision.namespace}/{decision.cluster}", log=log)
