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
import yaml
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


def _yaml_problem(e: yaml.YAMLError) -> str:
    mark = getattr(e, "problem_mark", None)
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return f"{where}{problem}"


def _named(entries: Any, name: str, what: str, path: str) -> dict[str, Any]:
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(what)
            if not isinstance(body, dict):
                raise KubeConfigError(f"kubeconfig {path}: {what} {name!r} has no {what} mapping")
            return body
    raise KubeConfigError(f"kubeconfig {path}: no {what} named {name!r} (in its {what}s list)")


def check_kubeconfig(path: str, context: str | None = None) -> str:
    """Validate a kubeconfig file offline (no connection, no credential plugin is run): YAML, the
    kubeconfig shape, and that the context names a cluster with a server.  Returns a one-line
    summary (``context C, server URL``); KubeConfigError with a one-line message otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise KubeConfigError(f"cannot read kubeconfig {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise KubeConfigError(f"kubeconfig {path} is not a text file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise KubeConfigError(f"kubeconfig {path} is not valid YAML: {_yaml_problem(e)}") from None
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"a {type(data).__name__} ({str(data)[:40]!r})"
        raise KubeConfigError(f"kubeconfig {path} is not a kubeconfig: expected a mapping with clusters, "
                              f"contexts and users, found {found}")
    for key in ("clusters", "contexts"):
        if not isinstance(data.get(key), list) or not data[key]:
            raise KubeConfigError(f"kubeconfig {path} is not a kubeconfig: no {key} list")
    name = context or data.get("current-context")
    if not name or not isinstance(name, str):
        raise KubeConfigError(f"kubeconfig {path} has no current-context; pass --context")
    ctx = _named(data["contexts"], name, "context", path)
    cluster_name = ctx.get("cluster")
    if not isinstance(cluster_name, str) or not cluster_name:
        raise KubeConfigError(f"kubeconfig {path}: context {name!r} names no cluster")
    cluster = _named(data["clusters"], cluster_name, "cluster", path)
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeConfigError(f"kubeconfig {path}: cluster {cluster_name!r} has no https:// server URL")
    user_name = ctx.get("user")
    if user_name:
        _named(data.get("users"), str(user_name), "user", path)
    return f"context {name}, server {server}"


def credentials_source(kubeconfig: str | None = None) -> tuple[str, str | None]:
    """Where ``make_api_client`` would take credentials from: ("kubeconfig", path),
    ("in-cluster", None) or ("none", None)."""
    if kubeconfig:
        return "kubeconfig", kubeconfig
    if os.environ.get(IN_CLUSTER_ENV):
        return "in-cluster", None
    if os.path.exists(DEFAULT_KUBECONFIG):
        return "kubeconfig", DEFAULT_KUBECONFIG
    return "none", None


async def make_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An ``ApiClient`` from ``kubeconfig``, else the in-cluster service account, else ~/.kube/config.
    KubeConfigError (one line) for missing or malformed credentials."""
    config = Configuration()
    source, path = credentials_source(kubeconfig)
    try:
        if source == "kubeconfig":
            assert path is not None
            if not os.path.isfile(path):  # noqa: ASYNC240 (start-up, once)
                raise KubeConfigError(f"kubeconfig {path} not found")
            check_kubeconfig(path, context)  # a clear line for YAML or shape errors, before the loader sees it
            await load_kube_config(config_file=path, context=context, client_configuration=config)
        elif source == "in-cluster":
            load_incluster_config(client_configuration=config)
        else:
            raise KubeConfigError(
                "no Kubernetes credentials: not in a cluster (KUBERNETES_SERVICE_HOST unset) and no "
                f"{DEFAULT_KUBECONFIG}; pass --kubeconfig"
            )
    except KubeConfigError:
        raise
    except (ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as e:
        where = path or "the in-cluster service account"
        detail = " ".join(str(e).split())[:300] or type(e).__name__
        raise KubeConfigError(f"cannot load Kubernetes credentials from {where}: {detail}") from e
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
