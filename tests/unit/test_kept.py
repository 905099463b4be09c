"""Values kept per live object (shared.kept): found again by the same object only, least recently used dropped."""

from __future__ import annotations

import weakref

from shared.kept import KeptPerObject


def test_a_value_is_found_by_the_same_object_and_key_only() -> None:
    kept: KeptPerObject[str, int] = KeptPerObject(4)
    owner, twin = {"type": "object"}, {"type": "object"}
    kept.put(owner, "a", 1)
    assert kept.get(owner, "a") == 1
    assert kept.get(twin, "a") is None  # equal, not the same object
    assert kept.get(owner, "b") is None


def test_the_least_recently_used_is_dropped_first() -> None:
    kept: KeptPerObject[int, int] = KeptPerObject(2)
    owner = {}
    kept.put(owner, 1, 1)
    kept.put(owner, 2, 2)
    assert kept.get(owner, 1) == 1  # 2 is now the least recently used
    kept.put(owner, 3, 3)
    assert (kept.get(owner, 1), kept.get(owner, 2), kept.get(owner, 3)) == (1, None, 3)


def test_an_owner_is_kept_alive_with_its_values() -> None:
    """Its id() cannot name another object while the entry lives."""

    class Owner:
        pass

    kept: KeptPerObject[str, int] = KeptPerObject(1)
    owner = Owner()
    alive = weakref.ref(owner)
    kept.put(owner, "a", 1)
    del owner
    assert alive() is not None
    kept.put(Owner(), "b", 2)  # the first entry is dropped, and its owner with it
    assert alive() is None
