"""The fake API server with the real kubernetes-asyncio client (tests/fakeapi) and the decision
scenarios' fixtures (a controller context on a private registry, the Kueue/KubeRay world)."""

from tests.decisions.fixtures import make_ctx, world

__all__ = ["make_ctx", "world"]
