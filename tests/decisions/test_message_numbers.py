"""Numbers in decision messages are for people: bytes in binary units, counts without exponents."""

from __future__ import annotations

from autoscaler.core.policy.packing import amount_text, shape_text


def test_a_ray_bundle_reads_in_binary_units() -> None:
    assert shape_text({"CPU": 8.0, "GPU": 1.0, "memory": 68719476736.0, "object_store_memory": 1.5 * 2**30}) == \
        "{CPU: 8, GPU: 1, memory: 64 GiB, object_store_memory: 1.5 GiB}"
    assert shape_text({"GPU": 0.0, "CPU": 0.5}) == "{CPU: 0.5}"


def test_amounts_never_use_exponents() -> None:
    assert amount_text("memory", 512) == "512 B"
    assert amount_text("memory", 3 * 2**20) == "3 MiB"
    assert amount_text("memory", 1023 * 2**40) == "1,023 TiB"
    assert amount_text("CPU", 12000) == "12,000"
    assert "e" not in amount_text("custom", 1e20)
