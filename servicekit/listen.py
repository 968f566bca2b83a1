"""Listen addresses: ``HOST:PORT``, ``:PORT`` (every interface) or ``[IPv6]:PORT``."""

from __future__ import annotations

import argparse
from typing import NamedTuple

ALL_INTERFACES = "0.0.0.0"


class ListenAddress(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def local_host(self) -> str:
        """The host a client on this machine connects to (a wildcard address becomes loopback)."""
        return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(self.host, self.host)

    def url(self, scheme: str = "http", port: int | None = None) -> str:
        """``scheme://host:port`` a local client can use; ``port`` overrides (the bound port for port 0)."""
        host = self.local_host
        host = f"[{host}]" if ":" in host else host
        return f"{scheme}://{host}:{self.port if port is None else port}"


def parse_listen(text: str) -> ListenAddress:
    """``HOST:PORT``, ``:PORT`` or ``[IPv6]:PORT`` -> ListenAddress; ValueError with a one-line message."""
    value = text.strip()
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, :PORT or [IPv6]:PORT (port 0-65535), got {text!r}")
    if host.startswith("["):
        if not host.endswith("]") or len(host) < 3:
            raise ValueError(f"listen address {text!r}: unbalanced brackets around the IPv6 address")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"listen address {text!r}: put an IPv6 address in brackets, e.g. [::]:{port}")
    if any(c.isspace() or c in "/[]" for c in host):
        raise ValueError(f"listen address {text!r}: {host!r} is not a host name or IP address")
    return ListenAddress(host or ALL_INTERFACES, int(port))


def listen_arg(text: str) -> ListenAddress:
    """``type=`` for an argparse flag: the same rules, reported as a usage error."""
    try:
        return parse_listen(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
