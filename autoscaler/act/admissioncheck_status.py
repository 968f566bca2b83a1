"""Keep ``Active=True`` on every AdmissionCheck whose ``spec.controllerName`` is ours.

Without it Kueue marks every ClusterQueue that uses the check inactive (reason
``AdmissionCheckInactive``) and nothing is admitted.  Server-side apply on
``admissionchecks/status`` with our field manager and ``force=true``, only the ``Active``
condition in the body; written only when the snapshot shows the check not active (write little).
Written in dry-run too: a shadow controller must leave Kueue admitting as it would without it.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes_asyncio.client import CustomObjectsApi
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.act.outcome import WriteOutcome, error_kind, rfc3339

log = logging.getLogger(__name__)

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
PLURAL = "admissionchecks"
RESOURCE = "admissionchecks/status"
APPLY = "application/apply-patch+yaml"
ACTIVE_MESSAGE = "queuepilot GPU-capacity admission check is active"


def active_body(name: str, now: float) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "status": {"conditions": [{
            "type": "Active", "status": "True", "reason": "Active", "message": ACTIVE_MESSAGE,
            "lastTransitionTime": rfc3339(now),
        }]},
    }


async def ensure_active(
    api_client: Any, name: str, *, field_manager: str, now: float, counters: Any = None
) -> WriteOutcome:
    """Apply ``Active=True`` on AdmissionCheck ``name`` (the caller checked it is ours and not active)."""
    try:
        await CustomObjectsApi(api_client).patch_cluster_custom_object_status(
            GROUP, VERSION, PLURAL, name, active_body(name, now),
            field_manager=field_manager, force=True, _content_type=APPLY,
        )
    except ApiException as exc:
        if counters is not None:
            counters.write_errors.labels(resource=RESOURCE, kind=error_kind(exc)).inc()
        log.warning("could not set Active on AdmissionCheck %s: %s %s", name, exc.status, exc.reason)
        return WriteOutcome("error", error_kind(exc), 1)
    except Exception as exc:
        if counters is not None:
            counters.write_errors.labels(resource=RESOURCE, kind=error_kind(exc)).inc()
        return WriteOutcome("error", error_kind(exc), 1)
    if counters is not None:
        counters.writes.labels(resource=RESOURCE, verb="patch").inc()
    return WriteOutcome("written", "", 1)
