"""The decision scenarios' fixtures (a controller context on a private registry, the Kueue/KubeRay
world on the fake API server's store), shared with the act tests."""

from tests.decisions.fixtures import make_ctx, world  # noqa: F401
