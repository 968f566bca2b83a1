"""The owner memory's ConfigMap document (autoscaler.act.stall_owners): written within its bounds, the
oldest owners dropped first; read entry by entry, a malformed document or entry refused."""

from __future__ import annotations

import json

import pytest

from autoscaler.act.stall_owners import MAX_BYTES, MAX_READ_BYTES, decode_owners, encode_owners
from autoscaler.core.policy.stall import MAX_OWNERS


def test_what_is_written_reads_back_the_same() -> None:
    owners = {"team-a/RayJob/train": 1_765_000_000.25, "team-b/Job/x": 1_765_000_100.0}
    assert decode_owners(encode_owners(owners)) == (owners, 0)
    assert list(json.loads(encode_owners(owners))) == sorted(owners)  # stable: keys sorted


def test_at_most_max_owners_the_most_recent_kept() -> None:
    owners = {f"ns/Job/j{i}": float(i) for i in range(MAX_OWNERS + 5)}
    kept, bad = decode_owners(encode_owners(owners))
    assert bad == 0 and len(kept) == MAX_OWNERS
    assert min(kept.values()) == 5.0 and "ns/Job/j4" not in kept


def test_within_max_bytes_the_oldest_dropped_first() -> None:
    long = "x" * 250  # names near Kubernetes' longest: 10,000 of them would be about 2.6 MB
    owners = {f"ns-{i:05d}/RayJob/{long}": 1e9 + i for i in range(MAX_OWNERS)}
    text = encode_owners(owners)
    kept, _ = decode_owners(text)
    assert len(text.encode()) <= MAX_BYTES and 0 < len(kept) < MAX_OWNERS
    newest = sorted(owners, key=owners.__getitem__)[-len(kept):]
    assert set(kept) == set(newest)


@pytest.mark.parametrize("text, why", [
    ("[1, 2]", "not an object"), ("{oops", "not JSON"), ('"a/b/c"', "not an object"),
    ("{" + " " * MAX_READ_BYTES + "}", "over"),
])
def test_a_malformed_document_is_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        decode_owners(text)


def test_malformed_entries_are_left_out_and_counted() -> None:
    doc = {"ok/Job/a": 10, "two/parts": 1, "a//b": 2, "x/Job/" + "n" * 400: 3, "t/Job/nan": float("nan"),
           "t/Job/str": "10", "t/Job/bool": True, "t/Job/inf": float("inf"), "ok/RayJob/b": 11.5}
    kept, bad = decode_owners(json.dumps(doc))
    assert kept == {"ok/Job/a": 10.0, "ok/RayJob/b": 11.5} and bad == 7
