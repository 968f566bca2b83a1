"""charts/queuepilot/README.md documents every value of values.yaml."""

from __future__ import annotations

import json
import re

import yaml

from tests.chart.helm import CHART


def _leaves(d: dict, prefix: str = ""):
    for k, v in d.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            yield from _leaves(v, path + ".")
        else:
            yield path


def test_every_value_is_documented() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, flags=re.M))
    undocumented = []
    for leaf in _leaves(values):
        parts = leaf.split(".")
        if not any(".".join(parts[:i]) in documented for i in range(1, len(parts) + 1)):
            undocumented.append(leaf)
    assert not undocumented, f"values missing from charts/queuepilot/README.md: {undocumented}"
    # and the README documents nothing that is not a value
    assert not {p for p in documented if p.split(".")[0] not in values}


def test_documented_defaults_are_the_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    rows = re.findall(r"^\| `([^`]+)` \| `(.*?)` \|", readme, flags=re.M)
    assert len(rows) > 50
    stale = []
    for path, default in rows:
        node = values
        for part in path.split("."):
            node = node[part]
        if json.loads(default) != node:
            stale.append(f"{path}: README says {default}, values.yaml has {json.dumps(node)}")
    assert not stale, "\n".join(stale)
