"""Status errors shaped like the real API server's (k8s.io/apimachinery/pkg/api/errors)."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """An error the server answers with a `kind: Status` body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(f"{code} {reason}: {message}")
        self.status = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    @property
    def body(self) -> dict[str, Any]:
        status: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            status["details"] = self.details
        status["code"] = self.status
        return status


def _details(resource: str, group: str, name: str | None, **extra: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = resource
    d.update(extra)
    return d


def qualified(resource: str, group: str) -> str:
    return f"{resource}.{group}" if group else resource


def not_found(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(resource, group)} "{name}" not found', _details(resource, group, name)
    )


def already_exists(resource: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(resource, group)} "{name}" already exists',
        _details(resource, group, name),
    )


def conflict(resource: str, group: str, name: str, why: str) -> ApiError:
    msg = f'Operation cannot be fulfilled on {qualified(resource, group)} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(resource, group, name))


MODIFIED = "the object has been modified; please apply your changes to the latest version and try again"


def stale(resource: str, group: str, name: str) -> ApiError:
    return conflict(resource, group, name, MODIFIED)


def invalid(kind: str, group: str, name: str, causes: list[dict[str, str]]) -> ApiError:
    """422 Invalid; causes are {reason, message, field} as in field.ErrorList."""
    texts = [f"{c['field']}: {c['message']}" for c in causes]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    msg = f'{qualified(kind, group)} "{name}" is invalid: {joined}'
    return ApiError(422, "Invalid", msg, _details(kind, group, name, causes=causes))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def unsupported_media_type(accepted: list[str]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        "the body of the request was in an unknown format - accepted media types include: "
        + ", ".join(accepted),
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def internal(message: str) -> ApiError:
    """A non-Status Go error: the server answers 500 with an empty reason."""
    return ApiError(500, "", message)


def method_not_allowed(resource: str, group: str, verb: str) -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        f"{verb} is not supported on resources of kind {qualified(resource, group)!r}",
        _details(resource, group, None),
    )


def unauthorized() -> ApiError:
    return ApiError(401, "Unauthorized", "Unauthorized")


def injected(code: int, retry_after: float | None) -> ApiError:
    """What fail_next produces: the real server's shapes for 429 / 500 / 503 / 504."""
    headers: dict[str, str] = {}
    details: dict[str, Any] | None = None
    if retry_after is not None:
        headers["Retry-After"] = (
            str(int(retry_after)) if float(retry_after).is_integer() else str(retry_after)
        )
        details = {"retryAfterSeconds": int(retry_after)}
    if code == 429:
        return ApiError(
            429, "TooManyRequests", "Too many requests, please try again later.", details, headers
        )
    if code == 503:
        return ApiError(503, "ServiceUnavailable", "The service is unavailable.", details, headers)
    if code == 504:
        return ApiError(
            504, "Timeout", "Timeout: request did not complete within the allowed duration", details, headers
        )
    if code == 500:
        return ApiError(500, "InternalError", "Internal error occurred: injected failure", details, headers)
    return ApiError(code, "", f"injected failure {code}", details, headers)


def refused(
    code: int,
    verb: str,
    plural: str,
    subresource: str,
    group: str,
    namespace: str | None,
    name: str | None,
    retry_after: float | None = None,
    message: str | None = None,
) -> ApiError:
    """What refuse_writes produces: the real server's Status for ``code`` on this write.

    403: RBAC's Forbidden (``... is forbidden: User "..." cannot patch resource "workloads/status" in API
    group "kueue.x-k8s.io" in the namespace "team-a"``); 422: Invalid (as a validating admission policy or
    webhook denial reads); 409: Conflict (object modified); 404: NotFound; 400: BadRequest; 429:
    TooManyRequests with ``Retry-After``; 500 / 503 / 504 as :func:`injected`; any other code: that
    code with an empty reason.  ``message`` replaces the default text.
    """
    what = qualified(plural, group)
    resource = f"{plural}/{subresource}" if subresource else plural
    obj = name or ""
    if code == 403:
        where = f' in the namespace "{namespace}"' if namespace else ""
        text = message or (
            f'{what} "{obj}" is forbidden: User "system:serviceaccount:queuepilot-system:queuepilot-controller" '
            f'cannot {verb} resource "{resource}" in API group "{group}"{where}'
        )
        return ApiError(403, "Forbidden", text, _details(plural, group, name))
    if code == 422:
        cause = {"reason": "FieldValueInvalid", "message": message or "Invalid value: refused by policy",
                 "field": "spec"}
        return invalid(plural, group, obj, [cause])
    if code == 409:
        return conflict(plural, group, obj, message or MODIFIED)
    if code == 404:
        return not_found(plural, group, obj)
    if code == 400:
        return bad_request(message or f"refused {verb} of {what} {obj!r}")
    err = injected(code, retry_after)
    if message:
        err = ApiError(err.status, err.reason, message, err.details, err.headers)
    return err
