"""Fixtures for the decision scenarios: the fake API server, a real kubernetes-asyncio client, a
controller context with a private registry, and the Kueue/KubeRay world on top of the store
(tests/decisions/fixtures.py)."""

from tests.decisions.fixtures import make_ctx, world

__all__ = ["make_ctx", "world"]
