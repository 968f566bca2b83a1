"""Real processes a test starts and must not leave behind."""

from __future__ import annotations

import subprocess


def stop(proc: subprocess.Popen, grace: float = 10.0) -> int:
    """SIGTERM, as Kubernetes stops a pod; SIGKILL after ``grace`` seconds; its exit status (reaped)."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()
