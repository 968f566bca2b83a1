"""One bounded vocabulary of error kinds, for the ``kind`` label of error counters.

Every failure of an outbound call (an HTTP answer, a Kubernetes API exception, a timeout, a refused
connection, an answer that does not parse) maps to one of :data:`KINDS`, so a counter labelled by
kind has a fixed, small set of series whatever the exception.
"""

from __future__ import annotations

TIMEOUT = "timeout"
CONNECTION = "connection"
BAD_RESPONSE = "bad_response"  # an answer that is not what was asked for (not JSON, wrong shape, HTML)
CONFLICT = "conflict"  # 409
GONE = "gone"  # 410: a watch's resourceVersion is too old
INVALID = "invalid"  # 400, 415, 422: the request was refused as malformed
FORBIDDEN = "forbidden"  # 401, 403
NOT_FOUND = "not_found"  # 404
THROTTLED = "throttled"  # 429
SERVER = "server"  # 5xx
CLIENT = "client"  # any other 4xx
OTHER = "other"

KINDS: tuple[str, ...] = (TIMEOUT, CONNECTION, BAD_RESPONSE, CONFLICT, GONE, INVALID, FORBIDDEN, NOT_FOUND,
                          THROTTLED, SERVER, CLIENT, OTHER)


def status_kind(status: int) -> str:
    """The kind of an HTTP status that is not a success (a 1xx-3xx answer where data was expected is a
    bad response)."""
    if status == 409:
        return CONFLICT
    if status == 410:
        return GONE
    if status in (400, 415, 422):
        return INVALID
    if status in (401, 403):
        return FORBIDDEN
    if status == 404:
        return NOT_FOUND
    if status == 429:
        return THROTTLED
    if status >= 500:
        return SERVER
    if status >= 400:
        return CLIENT
    return BAD_RESPONSE


def error_kind(exc: BaseException) -> str:
    """The kind of an exception.

    An exception with an integer ``status`` (kubernetes-asyncio's ``ApiException``, aiohttp's
    ``ClientResponseError``, the controller's ``KubeError``) is classified by that status; then
    timeouts, connection failures (``OSError`` or any class named ``*Connect*`` / ``*Connection*``
    in its hierarchy), and parse failures (``ValueError``, ``KeyError``, ``TypeError``).
    """
    status = getattr(exc, "status", None)
    if isinstance(status, int) and not isinstance(status, bool) and status > 0:
        return status_kind(status)
    if isinstance(exc, TimeoutError):
        return TIMEOUT
    if isinstance(exc, OSError) or any("Connect" in c.__name__ for c in type(exc).__mro__):
        return CONNECTION
    if isinstance(exc, ValueError | KeyError | TypeError):
        return BAD_RESPONSE
    return OTHER
