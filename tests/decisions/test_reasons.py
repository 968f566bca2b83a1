"""The reason vocabulary: bounded CamelCase constants, each explained in the docs."""

from __future__ import annotations

import re

from autoscaler.core import reasons as R


def test_reasons_are_unique_camelcase_constants(repo_root):
    names = {k: v for k, v in vars(R).items() if k.isupper() and isinstance(v, str)}
    assert len(set(names.values())) == len(names)
    for v in names.values():
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", v), v
    assert set(names.values()) == set(R.MEANING) == R.ALL_REASONS


def test_every_reason_is_documented(repo_root):
    docs = (repo_root / "docs" / "admission.md").read_text() + (repo_root / "docs" / "autoscaling.md").read_text()
    missing = [r for r in R.ALL_REASONS if f"`{r}`" not in docs]
    assert missing == []
