"""Controller test fixtures: ``answers`` (the exporter stub's scrape answers); ``fake_api`` and
``kube_client`` come from tests/fakeapi/plugin.py."""

from tests.controller.exporter_stub import answers

__all__ = ["answers"]
