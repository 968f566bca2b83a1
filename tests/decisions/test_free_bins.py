"""FreeBins (the incremental packer the admission pass reuses) agrees with a fresh ``pack`` on the
same free room, leaves the room as it was, and never places more than a node has free."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.policy.packing import Bin, FreeBins, PodShape, pack

nodes = st.lists(st.integers(min_value=0, max_value=8), min_size=1, max_size=12)
shape = st.builds(
    PodShape,
    pod_set=st.sampled_from(["main", "worker", "launcher"]),
    count=st.integers(min_value=0, max_value=5),
    gpus=st.integers(min_value=0, max_value=9),
)
workloads = st.lists(st.lists(shape, min_size=1, max_size=3), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(free=nodes, sequence=workloads)
def test_incremental_packing_matches_a_fresh_pack_after_each_promise(free: list[int], sequence) -> None:
    room = {f"n{i:02d}": g for i, g in enumerate(free)}
    bins = FreeBins(Bin(n, g) for n, g in room.items())
    for shapes in sequence:
        before = bins.blocks()
        result = bins.pack(shapes)
        assert bins.blocks() == before, "pack must leave the room as it was"
        fresh = pack(shapes, [Bin(n, g) for n, g in room.items()])
        assert result == fresh
        placed = result.gpus_by_node()
        for node, gpus in placed.items():
            assert gpus <= room[node]
        if result.fits:  # keep the promise, as the admission pass does
            for node, gpus in placed.items():
                bins.take(node, gpus)
                room[node] -= gpus
        assert sorted((g for g in room.values() if g > 0), reverse=True) == bins.blocks()
