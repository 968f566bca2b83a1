"""Fixtures for the decision scenarios, shared with the act and one-path tests (their conftest.py files
import them): a controller context with a private registry, and the Kueue/KubeRay world on the fake API
server's store."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from autoscaler.controller.context import ControllerContext
from autoscaler.controller.counters import ControllerCounters
from tests.decisions.kube_world import World


@pytest.fixture
def make_ctx(kube_client):
    def make(dry_run: bool = False, settings: dict | None = None) -> ControllerContext:
        registry = CollectorRegistry()
        return ControllerContext(api_client=kube_client, registry=registry, counters=ControllerCounters(registry),
                                 dry_run=dry_run, settings=settings or {})
    return make


@pytest.fixture
def world(fake_api) -> World:
    return World(fake_api)
