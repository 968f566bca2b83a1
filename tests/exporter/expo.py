"""Read an exposition back with prometheus_client's own parser (tests only)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def series(text: str, family: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample of ``family`` (the parser names counter samples ``*_total``)."""
    fam = families(text).get(family)
    return [] if fam is None else [(dict(s.labels), s.value) for s in fam.samples]


def by_gpu(text: str, family: str) -> dict[str, dict[str, str]]:
    """gpu index -> labels of that GPU's (non-MIG) series of ``family``."""
    return {labels["gpu"]: labels for labels, _ in series(text, family) if "GPU_I_ID" not in labels}


def header_lines(text: str) -> dict[str, str]:
    """family name as written on the ``# TYPE`` line -> type."""
    out = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            out[name] = typ
    return out
