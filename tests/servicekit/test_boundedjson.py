"""servicekit.boundedjson: the value bound is never below what json.loads builds, and hostile bodies are
refused with a clear error before they are parsed."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from servicekit.boundedjson import NotJson, TooLarge, loads_bounded, value_bound

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=5), children, max_size=5),
    max_leaves=40,
)


def built(doc: object) -> int:
    """The values json.loads builds for ``doc`` (every container and scalar; object keys not counted)."""
    if isinstance(doc, list):
        return 1 + sum(built(v) for v in doc)
    if isinstance(doc, dict):
        return 1 + sum(built(v) for v in doc.values())
    return 1


@given(json_values)
@settings(max_examples=300, deadline=None)
def test_the_bound_is_never_below_the_values_built(doc: object) -> None:
    for text in (json.dumps(doc), json.dumps(doc, indent=1), json.dumps(doc, separators=(",", ":"))):
        assert value_bound(text) >= built(doc)
        assert value_bound(text.encode()) == value_bound(text)
        assert loads_bounded(text.encode(), value_bound(text)) == json.loads(text)


def test_empty_objects_are_refused_before_parsing() -> None:
    body = b"[" + b",".join([b"{}"] * 100_000) + b"]"
    with pytest.raises(TooLarge, match="200001 JSON values"):
        loads_bounded(body, 10_000)
    with pytest.raises(TooLarge, match="bytes"):
        loads_bounded(body, 10**9, max_bytes=1000)


@pytest.mark.parametrize(("body", "message"), [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"a": 1', "not JSON"),
    (b'{"a": "\xff\xfe"}', "not UTF-8"),
    (b"7" * 5000, "not acceptable JSON"),
])
def test_what_the_decoder_refuses_is_one_clear_error(body: bytes, message: str) -> None:
    assert sys.getrecursionlimit() < 100_000
    with pytest.raises(NotJson, match=message):
        loads_bounded(body, 10**9)


def test_objects_and_arrays_have_their_own_bound() -> None:
    body = b"[" + b",".join([b'{"a":1}'] * 10_000) + b"]"  # 20 001 values, 10 001 containers
    assert loads_bounded(body, 30_000) == [{"a": 1}] * 10_000
    with pytest.raises(TooLarge, match="10001 JSON objects and arrays"):
        loads_bounded(body, 30_000, max_containers=5_000)
    scalars = b"[" + b",".join([b'"ab"'] * 10_000) + b"]"  # the same number of values, one container
    assert len(loads_bounded(scalars, 30_000, max_containers=5_000)) == 10_000
