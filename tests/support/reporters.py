"""A WatchReporter (what the watch caches and the fleet source report to: autoscaler.cluster) that keeps
what it is told, for the test to assert on."""

from __future__ import annotations


class RecordingReporter:
    def __init__(self) -> None:
        self.restarts: list[str] = []  # resource, per watch restart
        self.errors: list[tuple[str, str]] = []  # (source, kind), per error reported

    def watch_restarted(self, resource: str) -> None:
        self.restarts.append(resource)

    def source_error(self, source: str, kind: str) -> None:
        self.errors.append((source, kind))
