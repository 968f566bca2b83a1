"""A faithful fake Kubernetes API server for tests (see README.md in this directory)."""

from tests.fakeapi.errors import ApiError
from tests.fakeapi.server import FakeApiServer, RecordedRequest

__all__ = ["ApiError", "FakeApiServer", "RecordedRequest"]
