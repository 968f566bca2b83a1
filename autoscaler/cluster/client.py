"""Kubernetes client set-up (kubeconfig or in-cluster) and the few raw JSON calls the controller makes.

All requests go through ``kubernetes_asyncio``'s ``ApiClient`` (auth, TLS, proxies from the
kubeconfig) with ``_preload_content=False``, so list and watch bodies are read as plain JSON and
turned into small views at once; no generated model objects are built.  Every path used here is
declared in ``autoscaler.rbac.CONTROLLER_API_CALLS``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration
from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config

IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
DEFAULT_KUBECONFIG = os.path.expanduser("~/.kube/config")


class KubeConfigError(Exception):
    """No usable credentials / kubeconfig: a start-up error with a one-line message."""


class KubeError(Exception):
    """A non-2xx answer from the API server (or a watch ERROR event)."""

    def __init__(self, status: int, reason: str = "", message: str = "", retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after

    @property
    def kind(self) -> str:
        """Bounded label value for error counters."""
        if self.status == 410:
            return "gone"
        if self.status == 429:
            return "throttled"
        if self.status == 409:
            return "conflict"
        if self.status in (401, 403):
            return "forbidden"
        if self.status == 404:
            return "not_found"
        if self.status >= 500:
            return "server"
        return "client"


async def make_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An ``ApiClient`` from ``kubeconfig``, else the in-cluster service account, else ~/.kube/config."""
    config = Configuration()
    try:
        if kubeconfig:
            if not os.path.isfile(kubeconfig):  # noqa: ASYNC240 (start-up, once)
                raise KubeConfigError(f"kubeconfig {kubeconfig} not found")
            await load_kube_config(config_file=kubeconfig, context=context, client_configuration=config)
        elif os.environ.get(IN_CLUSTER_ENV):
            load_incluster_config(client_configuration=config)
        elif os.path.exists(DEFAULT_KUBECONFIG):  # noqa: ASYNC240 (start-up, once)
            await load_kube_config(config_file=DEFAULT_KUBECONFIG, context=context, client_configuration=config)
        else:
            raise KubeConfigError(
                "no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
                f"{DEFAULT_KUBECONFIG}; pass --kubeconfig"
            )
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        where = kubeconfig or ("in-cluster service account" if os.environ.get(IN_CLUSTER_ENV) else DEFAULT_KUBECONFIG)
        raise KubeConfigError(f"cannot load Kubernetes credentials from {where}: {e}") from e
    return ApiClient(configuration=config)


def server_url(api: ApiClient) -> str:
    return str(api.configuration.host)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return float(headers.get("Retry-After", ""))
    except ValueError:
        return None


async def raise_for_status(resp: aiohttp.ClientResponse) -> None:
    if 200 <= resp.status < 300:
        return
    body = await resp.read()
    reason, message = resp.reason or "", ""
    try:
        st = json.loads(body)
        reason, message = str(st.get("reason", reason)), str(st.get("message", ""))
    except ValueError:
        message = body[:200].decode(errors="replace")
    resp.release()
    raise KubeError(resp.status, reason, message, _retry_after(resp.headers))


async def request(
    api: ApiClient,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    content_type: str = "application/json",
    request_timeout: Any = 30.0,
) -> aiohttp.ClientResponse:
    """One raw request; returns the open response (2xx) or raises :class:`KubeError`."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    resp = await api.call_api(
        path,
        method,
        query_params=list(query),
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
        _preload_content=False,
        _request_timeout=request_timeout,
    )
    await raise_for_status(resp)
    return resp


async def request_json(
    api: ApiClient,
    method: str,
    path: str,
    query: Sequence[tuple[str, Any]] = (),
    body: Any = None,
    request_timeout: Any = 30.0,
) -> dict[str, Any]:
    resp = await request(api, method, path, query, body, request_timeout=request_timeout)
    try:
        data = await resp.read()
    finally:
        resp.release()
    out = json.loads(data)
    if not isinstance(out, dict):
        raise KubeError(resp.status, "BadResponse", "response body is not a JSON object")
    return out


async def probe(api: ApiClient, probe_timeout: float = 10.0) -> None:
    """List one node: proves the server is reachable and the credentials work (raises on failure)."""
    await request_json(api, "GET", "/api/v1/nodes", [("limit", 1)], request_timeout=probe_timeout)
