"""TLS for the webhook server: the server SSLContext and a reloader for rotated certificate files.

The chart mounts a ``kubernetes.io/tls`` Secret (cert-manager's or the chart's own) as a directory
holding ``tls.crt`` and ``tls.key``.  Kubernetes updates such a mount in place (an atomic symlink
swap) when the Secret changes; ``CertReloader`` notices the change and loads the new pair into the
same context, so new connections use it without a restart.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from pathlib import Path

from servicekit.tasks import cancel_tasks

log = logging.getLogger("queuepilot.webhook")

CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"


def cert_paths(cert_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """(certfile, keyfile) inside a mounted ``kubernetes.io/tls`` Secret directory."""
    d = Path(cert_dir)
    return str(d / CERT_FILE), str(d / KEY_FILE)


def make_server_ssl_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """A server context (TLS 1.2 or newer) holding the certificate chain and key."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(certfile, keyfile)
    return ctx


def _stamp(*paths: str) -> tuple[tuple[int, int], ...]:
    out: list[tuple[int, int]] = []
    for p in paths:
        try:
            st = os.stat(p)  # follows the Secret mount's ..data symlink
            out.append((st.st_mtime_ns, st.st_ino))
        except OSError:
            out.append((-1, -1))
    return tuple(out)


class CertReloader:
    """Poll the certificate files; reload them into ``ctx`` when they change."""

    def __init__(self, ctx: ssl.SSLContext, certfile: str, keyfile: str, interval: float = 60.0) -> None:
        self.ctx, self.certfile, self.keyfile, self.interval = ctx, certfile, keyfile, interval
        self._stamp = _stamp(certfile, keyfile)
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0

    def check(self) -> bool:
        """Reload now if the files changed; True when a new pair was loaded.  A half-written or
        mismatched pair keeps the old one (and is retried at the next check)."""
        stamp = _stamp(self.certfile, self.keyfile)
        if stamp == self._stamp:
            return False
        try:
            self.ctx.load_cert_chain(self.certfile, self.keyfile)
        except (OSError, ssl.SSLError) as e:
            log.warning("webhook certificate changed but cannot be loaded (keeping the old one): %s", e)
            return False
        self._stamp = stamp
        self.reloads += 1
        log.info("webhook certificate reloaded from %s", self.certfile)
        return True

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="webhook-cert-reloader")

    async def stop(self) -> None:
        if self._task is not None:
            await cancel_tasks([self._task])
            self._task = None
