"""Per-namespace Ray dashboard tokens, read one named Secret at a time.

A RayCluster names its token Secret in the annotation ``queuepilot.io/ray-token-secret``; the
Secret lives in the RayCluster's own namespace and holds the bearer token under key ``token``.
The controller may only ``get`` Secrets it was granted by name (a namespaced Role with
``resourceNames``, rendered by the chart from ``controller.rayTokenSecrets``): it never lists or
watches Secrets, so :class:`SecretTokens` reads each one with a GET and keeps it for ``ttl``
seconds (a rotated token is picked up within that time).  A failed read is remembered for
``retry_seconds`` so that an RBAC gap costs one request per Secret per interval, not one per poll.

Failures raise :class:`CredentialError` with a bounded ``kind``: ``forbidden`` (no Role grants
this Secret), ``missing`` (no such Secret or no key ``token``), ``malformed`` (not base64 text),
``unavailable`` (the API server did not answer).
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from autoscaler.cluster.client import KubeError, request_json

TOKEN_KEY = "token"
CREDENTIAL_ERROR_KINDS = ("forbidden", "missing", "malformed", "unavailable")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def is_dns_subdomain(name: str) -> bool:
    """A Secret's name: a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', at most 253)."""
    return isinstance(name, str) and len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


def is_namespace_name(name: str) -> bool:
    return isinstance(name, str) and _DNS_LABEL.fullmatch(name) is not None


class CredentialError(Exception):
    """The token Secret of a RayCluster could not be read; ``kind`` is one of :data:`CREDENTIAL_ERROR_KINDS`."""

    def __init__(self, kind: str, message: str) -> None:
        if kind not in CREDENTIAL_ERROR_KINDS:
            raise ValueError(f"unknown CredentialError kind {kind!r}")
        super().__init__(f"{kind}: {message}")
        self.kind = kind


async def read_secret_key(
    api: ApiClient,
    namespace: str,
    name: str,
    key: str,
    *,
    request_timeout: float,
    error: Callable[[str, str], Exception],
    forbidden_hint: str,
) -> tuple[str, Mapping[str, Any]]:
    """(the still base64-encoded value of ``key``, the whole Secret) of Secret ``namespace/name``.

    Raises ``error(kind, message)``: ``malformed`` (a name or namespace that is not one: nothing is
    requested, so a name can never reach another path or namespace), ``forbidden`` (401/403; the
    message ends with ``forbidden_hint``, how to grant it), ``missing`` (no such Secret, or no
    non-empty ``key``), ``unavailable`` (any other API or connection failure)."""
    if not is_namespace_name(namespace) or not is_dns_subdomain(name):
        raise error("malformed", f"Secret {str(namespace)[:64]!r}/{str(name)[:100]!r}: not a namespace and Secret name")
    where = f"Secret {namespace}/{name}"
    try:
        body = await request_json(api, "GET", f"/api/v1/namespaces/{namespace}/secrets/{name}",
                                  request_timeout=request_timeout)
    except KubeError as e:
        if e.status in (401, 403):
            raise error("forbidden", f"{where}: not granted to the controller ({forbidden_hint})") from e
        if e.status == 404:
            raise error("missing", f"{where} does not exist") from e
        raise error("unavailable", f"{where}: {e}") from e
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as e:
        raise error("unavailable", f"{where}: {type(e).__name__}: {e}") from e
    data = body.get("data")
    raw = data.get(key) if isinstance(data, dict) else None
    if not isinstance(raw, str) or not raw:
        raise error("missing", f"{where} has no key {key!r}")
    return raw, body


@dataclass(frozen=True, slots=True)
class _Entry:
    token: str | None
    error: CredentialError | None
    until: float


class SecretTokens:
    """``await tokens.token(namespace, name)``: the ``token`` key of one Secret, cached."""

    def __init__(
        self,
        api: ApiClient,
        *,
        ttl: float = 300.0,
        retry_seconds: float = 60.0,
        request_timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._ttl = ttl
        self._retry = retry_seconds
        self._timeout = request_timeout
        self._clock = clock
        self._cache: dict[tuple[str, str], _Entry] = {}
        self.reads = 0  # GETs sent (tests and the docs' cost estimate)

    async def token(self, namespace: str, name: str) -> str:
        key = (namespace, name)
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and now < hit.until:
            if hit.error is not None:
                raise hit.error
            assert hit.token is not None
            return hit.token
        try:
            token = await self._read(namespace, name)
        except CredentialError as e:
            self._cache[key] = _Entry(None, e, now + self._retry)
            raise
        self._cache[key] = _Entry(token, None, now + self._ttl)
        return token

    def forget(self, keep: set[tuple[str, str]]) -> None:
        """Drop cached Secrets no cluster names any more."""
        self._cache = {k: v for k, v in self._cache.items() if k in keep}

    async def _read(self, namespace: str, name: str) -> str:
        where = f"Secret {namespace}/{name}"
        self.reads += 1
        raw, _ = await read_secret_key(self._api, namespace, name, TOKEN_KEY, request_timeout=self._timeout,
                                       error=CredentialError, forbidden_hint="add it to controller.rayTokenSecrets")
        try:
            token = base64.b64decode(raw, validate=True).decode("utf-8").strip()
        except (binascii.Error, UnicodeDecodeError) as e:
            raise CredentialError("malformed", f"{where} key {TOKEN_KEY!r} is not base64 UTF-8 text") from e
        if not token or any(c in token for c in "\r\n\0"):
            raise CredentialError("malformed", f"{where} key {TOKEN_KEY!r} is empty or not one line")
        return token
