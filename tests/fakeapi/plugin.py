"""pytest fixtures: `fake_api` (a started FakeApiServer) and `kube_client` (a kubernetes-asyncio ApiClient);
`status_of`, the Status body of a refused request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from tests.fakeapi.server import FakeApiServer
from tests.support import paths


@pytest_asyncio.fixture
async def fake_api(tmp_path: Path) -> AsyncIterator[FakeApiServer]:
    """A started fake API server serving the core kinds and every CRD in the shared crds dir."""
    crds = paths.crds_dir()
    if not crds.is_dir():
        raise RuntimeError(f"CRDs not found at {crds}: set QUEUEPILOT_SHARED or run 'make fetch-shared'")
    server = FakeApiServer(crds, workdir=tmp_path)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def api_client_for(server: FakeApiServer) -> client.ApiClient:
    """A kubernetes-asyncio ApiClient loaded from the server's kubeconfig, without global state."""
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(server.kubeconfig_path), client_configuration=configuration)
    return client.ApiClient(configuration=configuration)


@pytest_asyncio.fixture
async def kube_client(fake_api: FakeApiServer) -> AsyncIterator[client.ApiClient]:
    api = await api_client_for(fake_api)
    try:
        yield api
    finally:
        await api.close()


def status_of(exc: ApiException) -> dict:
    """The Status body the server answered a refused request with."""
    return json.loads(exc.body)
