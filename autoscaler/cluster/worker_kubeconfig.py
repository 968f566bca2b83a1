"""A MultiKueue worker's kubeconfig, held to Kueue's bar before any credential in it is used.

Whoever can write a MultiKueueCluster's kubeconfig Secret chooses where the controller connects and
what it sends there, so the kubeconfig is read as hostile input (``docs/multicluster.md``,
"Worker kubeconfigs"):

- credentials must be inline: ``exec`` / ``auth-provider`` plugins, impersonation and file references
  (``tokenFile``, ``client-certificate``, ``client-key``, ``certificate-authority``) are refused
  (``unsupported``), as Kueue's MultiKueue refuses them;
- credentials must not travel where others can read or redirect them (``insecure``): the server must
  be ``https://`` (``http://`` only with ``allow_insecure_http``, the off-by-default
  ``--multikueue-allow-insecure-http`` meant for test fleets on loopback, which the chart never sets),
  certificate verification cannot be turned off (``insecure-skip-tls-verify``), and basic auth
  (``username`` / ``password``), credentials in the server URL and ``proxy-url`` are refused;
- the kubeconfig must say which cluster and user it means (``current-context``, or its only
  context) and carry a bearer token or a client certificate and key (``malformed`` otherwise), and
  its ``certificate-authority-data`` and client certificate must load (``malformed``).

:func:`check_kubeconfig` applies these rules and answers the :class:`WorkerCredentials` to use;
:func:`api_client_for` builds the worker's kubernetes-asyncio ``ApiClient`` from them, with nothing
else of the kubeconfig (no proxy, no plugin, verification always on).  The TLS material is written
to a private temporary directory only while the client loads it and removed at once (Python's
``ssl`` reads a CA bundle or client certificate only from files), so replacing a worker's client
leaves nothing behind in ``/tmp``.
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kubernetes_asyncio.client import ApiClient, Configuration

FILE_KEYS = ("tokenFile", "client-certificate", "client-key")
PLUGIN_KEYS = ("exec", "auth-provider")
IMPERSONATION_KEYS = ("as", "as-uid", "as-groups", "as-user-extra")
BASIC_AUTH_KEYS = ("username", "password")

Fail = Callable[[str, str], Exception]  # (kind, message) -> the exception to raise


@dataclass(frozen=True, slots=True)
class WorkerCredentials:
    """What the controller uses of a checked kubeconfig, and nothing more."""

    server: str
    token: str | None = None
    client_certificate: bytes | None = None  # PEM
    client_key: bytes | None = None  # PEM
    certificate_authority: bytes | None = None  # PEM; None: the system's CAs
    tls_server_name: str | None = None

    def __repr__(self) -> str:  # never print a credential
        return f"WorkerCredentials(server={self.server!r}, token={'***' if self.token else None})"


class KubeconfigRefused(ValueError):
    """A rule of this module refused the kubeconfig; ``kind`` is unsupported, insecure or malformed."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def _named(entries: Any, name: str, what: str, where: str) -> dict[str, Any]:
    for e in entries:
        if isinstance(e, dict) and e.get("name") == name and isinstance(e.get(what), dict):
            return dict(e[what])
    raise KubeconfigRefused("malformed", f"{where}: the kubeconfig has no {what} named {name!r}")


def _b64(value: Any, key: str, where: str) -> bytes:
    if not isinstance(value, str) or not value:
        raise KubeconfigRefused("malformed", f"{where}: {key} is not base64 text")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigRefused("malformed", f"{where}: {key} is not base64 text") from None


def _check_user(user: Mapping[str, Any], where: str) -> None:
    if any(k in user for k in PLUGIN_KEYS):
        raise KubeconfigRefused("unsupported", f"{where}: credential plugins (exec, auth-provider) are not run; "
                                               "put a token or client certificate data in the kubeconfig")
    files = sorted(k for k in FILE_KEYS if k in user)
    if files:
        raise KubeconfigRefused("unsupported", f"{where}: file references ({', '.join(files)}) are not read; "
                                               "inline the data")
    imp = sorted(k for k in IMPERSONATION_KEYS if k in user)
    if imp:
        raise KubeconfigRefused("unsupported", f"{where}: impersonation ({', '.join(imp)}) is not supported")
    if any(k in user for k in BASIC_AUTH_KEYS):
        raise KubeconfigRefused("insecure", f"{where}: basic auth (username/password) is refused; use a token "
                                            "or a client certificate")


def _check_cluster(cluster: Mapping[str, Any], where: str, allow_insecure_http: bool) -> None:
    if "certificate-authority" in cluster:
        raise KubeconfigRefused("unsupported", f"{where}: certificate-authority file references are not read; "
                                               "use certificate-authority-data")
    if cluster.get("insecure-skip-tls-verify") not in (None, False):
        raise KubeconfigRefused("insecure", f"{where}: insecure-skip-tls-verify is refused: the worker's "
                                            "certificate must be verified (certificate-authority-data)")
    if "proxy-url" in cluster:
        raise KubeconfigRefused("insecure", f"{where}: proxy-url is refused: credentials go to the worker's "
                                            "API server only")
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigRefused("malformed", f"{where}: a cluster has no server")
    try:
        url = urlsplit(server)
        url.port  # noqa: B018 (raises ValueError for a bad port)
    except ValueError:
        raise KubeconfigRefused("malformed", f"{where}: server {server[:100]!r} is not a URL") from None
    if url.username is not None or url.password is not None:
        raise KubeconfigRefused("insecure", f"{where}: credentials in the server URL are refused")
    if url.scheme == "http" and not allow_insecure_http:
        raise KubeconfigRefused("insecure", f"{where}: server {server[:100]} is plain http: credentials would "
                                            "cross the network in clear; use https")
    if url.scheme not in ("https", "http") or not url.hostname or url.query or url.fragment:
        raise KubeconfigRefused("malformed", f"{where}: server {server[:100]!r} is not an https:// URL")


def check_kubeconfig(cfg: Any, where: str, *, allow_insecure_http: bool = False) -> WorkerCredentials:
    """The credentials of kubeconfig ``cfg`` if it passes every rule of the module doc, else
    :class:`KubeconfigRefused` with the first rule it breaks."""
    if not isinstance(cfg, dict):
        raise KubeconfigRefused("malformed", f"{where}: the kubeconfig is not a YAML mapping")
    for section in ("clusters", "users", "contexts"):
        if not isinstance(cfg.get(section), list) or not cfg[section]:
            raise KubeconfigRefused("malformed", f"{where}: the kubeconfig has no {section}")
    for u in cfg["users"]:  # every entry, used or not: none may ask for a plugin or a file
        user = u.get("user") if isinstance(u, dict) else None
        if isinstance(user, dict):
            _check_user(user, where)
    for c in cfg["clusters"]:
        cluster = c.get("cluster") if isinstance(c, dict) else None
        if isinstance(cluster, dict):
            _check_cluster(cluster, where, allow_insecure_http)
    current = cfg.get("current-context")
    contexts = [c for c in cfg["contexts"] if isinstance(c, dict)]
    if not current:
        if len(contexts) != 1:
            raise KubeconfigRefused("malformed", f"{where}: no current-context, and not exactly one context")
        current = contexts[0].get("name")
    context = _named(contexts, str(current), "context", where)
    cluster = _named(cfg["clusters"], str(context.get("cluster")), "cluster", where)
    user = _named(cfg["users"], str(context.get("user")), "user", where)
    token = user.get("token")
    if token is not None and (not isinstance(token, str) or not token.strip() or any(c in token for c in "\r\n\0")):
        raise KubeconfigRefused("malformed", f"{where}: the user's token is empty or not one line")
    cert = _b64(user["client-certificate-data"], "client-certificate-data", where) \
        if "client-certificate-data" in user else None
    key = _b64(user["client-key-data"], "client-key-data", where) if "client-key-data" in user else None
    if (cert is None) != (key is None):
        raise KubeconfigRefused("malformed", f"{where}: client-certificate-data and client-key-data go together")
    if token is None and cert is None:
        raise KubeconfigRefused("malformed", f"{where}: the user has no credentials (token or client certificate data)")
    ca = _b64(cluster["certificate-authority-data"], "certificate-authority-data", where) \
        if "certificate-authority-data" in cluster else None
    if ca is not None:
        try:
            ssl.create_default_context(cadata=ca.decode("ascii"))
        except (ssl.SSLError, ValueError, UnicodeDecodeError) as e:
            raise KubeconfigRefused("malformed", f"{where}: certificate-authority-data is not a PEM CA "
                                                 f"certificate ({type(e).__name__})") from None
    name = cluster.get("tls-server-name")
    return WorkerCredentials(server=str(cluster["server"]).rstrip("/"), token=token.strip() if token else None,
                             client_certificate=cert, client_key=key, certificate_authority=ca,
                             tls_server_name=name if isinstance(name, str) and name else None)


def api_client_for(creds: WorkerCredentials, where: str) -> ApiClient:
    """The worker's ApiClient: its server, its token or client certificate, its CA (verification on),
    no proxy.  :class:`KubeconfigRefused` (``malformed``) when the TLS material does not load."""
    configuration = Configuration()
    configuration.host = creds.server
    configuration.proxy = None
    configuration.verify_ssl = True
    if creds.token:
        configuration.api_key = {"BearerToken": f"Bearer {creds.token}"}
    if creds.tls_server_name:
        configuration.tls_server_name = creds.tls_server_name
    with tempfile.TemporaryDirectory(prefix="queuepilot-kubeconfig-") as tmp:
        def put(name: str, data: bytes) -> str:
            path = Path(tmp) / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            return str(path)

        configuration.ssl_ca_cert = put("ca.crt", creds.certificate_authority) if creds.certificate_authority else None
        if creds.client_certificate is not None and creds.client_key is not None:
            configuration.cert_file = put("tls.crt", creds.client_certificate)
            configuration.key_file = put("tls.key", creds.client_key)
        try:
            client = ApiClient(configuration=configuration)  # reads the files into its SSL context now
        except (ssl.SSLError, OSError, ValueError) as e:
            raise KubeconfigRefused("malformed", f"{where}: the TLS material does not load "
                                                 f"({type(e).__name__}: {' '.join(str(e).split())[:120]})") from None
    configuration.ssl_ca_cert = configuration.cert_file = configuration.key_file = None  # (removed with the directory)
    return client
