"""Keep ``Active=True`` on every AdmissionCheck whose ``spec.controllerName`` is ours.

Without it Kueue marks every ClusterQueue that uses the check inactive (reason
``AdmissionCheckInactive``) and nothing is admitted.  Server-side apply on
``admissionchecks/status`` with our field manager and ``force=true``, only the ``Active``
condition in the body; written only when the snapshot shows the check not active (write little).
Written in dry-run too: a shadow controller must leave Kueue admitting as it would without it.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from autoscaler.act.guard import Failure, WriteGuard, WriteKey
from autoscaler.act.outcome import WriteOutcome, rfc3339

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


def check_key(name: str) -> WriteKey:
    return WriteKey(RESOURCE, f"{GROUP}/{VERSION}", "AdmissionCheck", "", name)


async def ensure_active(
    api_client: ApiClient, name: str, *, field_manager: str, now: float, write_guard: WriteGuard | None = None
) -> WriteOutcome:
    """Apply ``Active=True`` on AdmissionCheck ``name`` (the caller checked it is ours and not active)."""
    wg = write_guard or WriteGuard()
    key = check_key(name)
    held = wg.blocked(key, now)
    if held is not None:
        return held
    # (the client's type stubs leave out ``_content_type``, which it takes and which must be set)
    res = await wg.call(key, partial(CustomObjectsApi(api_client).patch_cluster_custom_object_status,  # type: ignore[call-arg]
                                     GROUP,
                                     VERSION, PLURAL, name, active_body(name, now), field_manager=field_manager,
                                     force=True, _content_type=APPLY), now)
    if isinstance(res, Failure):
        return WriteOutcome("error", res.kind, 1)
    wg.succeeded(key, "patch")
    return WriteOutcome("written", "", 1)
