from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from autoscaler.webhook.server import cert_paths, start_webhook
from tests.support.ports import free_port
from tests.webhook.certs import Pki, make_pki
from tests.webhook.mapping import MAPPING


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def client_ssl(pki: Pki) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(pki.ca_file))


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __call__(self, kind: str, result: str) -> None:
        self.calls.append((kind, result))


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
async def webhook_url(pki: Pki, recorder: Recorder) -> AsyncIterator[str]:
    # the files as the chart mounts them: tls.crt / tls.key in the Secret's directory
    certfile, keyfile = cert_paths(pki.cert_file.parent)
    assert (certfile, keyfile) == (str(pki.cert_file), str(pki.key_file))
    server = await start_webhook(f"127.0.0.1:{free_port()}", certfile, keyfile, MAPPING,
                                 on_review=recorder, reload_seconds=0.05)
    try:
        yield f"https://127.0.0.1:{server.port}/mutate-ray"
    finally:
        await server.close()


@pytest.fixture
async def session(client_ssl: ssl.SSLContext) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=client_ssl, force_close=True)) as s:
        yield s
