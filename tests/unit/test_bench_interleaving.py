"""The throughput benchmark's slot schedule (``tests.bench_scale.interleaving``): every side gets the same time,
once per cycle, and no side always follows the same one (round 36 of the performance notes)."""

from collections import Counter
from itertools import pairwise

import pytest

from tests.bench_scale import interleaving


@pytest.mark.parametrize(("sides", "slots"), [(4, 8), (2, 8), (3, 5), (1, 3)])
def test_each_side_gets_one_slot_per_cycle(sides: int, slots: int) -> None:
    schedule = interleaving(sides, slots)
    assert len(schedule) == sides * slots
    for cycle in range(slots):
        assert sorted(schedule[cycle * sides:(cycle + 1) * sides]) == list(range(sides))


def test_the_order_rotates_so_predecessors_vary() -> None:
    schedule = interleaving(4, 8)
    predecessors = {side: Counter(a for a, b in pairwise(schedule) if b == side) for side in range(4)}
    # With one fixed order, each side would always follow the same one.
    assert all(len(before) > 1 for before in predecessors.values())
    assert schedule[:4] != schedule[4:8]
