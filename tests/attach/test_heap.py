"""The snapshot of every tracked object (hicache_cli/attach/heap.py), in this process: the
collector's lists walked a chunk a hold give what gc.get_objects() gives, the frozen
generation included; the walk starts a list again when the program's collector reorders it
or a freeze moves it, and takes it in one hold when it never could walk it whole. (The census on real
Works, frozen and walked, is tests/attach/test_census.py.)"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hicache_cli.attach import heap


class Pace:
    """The census walker's side of a walk (walk.Walker): holds counted, and between two of
    them `between()` runs, as the program would."""

    chunk_s = 0.0005  # small chunks: many holds on a small heap

    def __init__(self, between: Callable[[int], None] = lambda _hold: None) -> None:
        self.holds = 0
        self.between = between

    def hold(self) -> float:
        return time.perf_counter()

    def rest(self, held_since: float) -> None:
        self.holds += 1
        self.between(self.holds)

    def out_of_time(self) -> bool:
        return False


@pytest.fixture
def chunked(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The oldest generation walked whatever its size, and any freeze undone after."""
    monkeypatch.setattr(heap, "WHOLE_BELOW", 0)
    try:
        yield
    finally:
        gc.unfreeze()


def ids(objects: list[Any]) -> set[int]:
    return set(map(id, objects))


def test_the_layout_of_this_python_is_known() -> None:
    assert heap.Lists.find() is not None  # CPython 3.11 here: the walk, not the fallback


@pytest.mark.usefixtures("chunked")
def test_walked_in_chunks_it_takes_what_gc_get_objects_takes_and_not_itself() -> None:
    keep = [[i] for i in range(50_000)]
    before = gc.get_objects()
    pace = Pace()
    taken = heap.every_object(pace)
    seen = ids(taken.objects)
    assert all(id(o) in seen for o in before if o is not before)
    assert id(taken.objects) not in seen and not gc.is_tracked(taken.objects)  # no collection traverses it
    assert pace.holds > 10 and not taken.partial and taken.frozen == 0  # in many holds
    assert len(keep) == 50_000


@pytest.mark.usefixtures("chunked")
def test_frozen_objects_are_walked_too() -> None:
    keep = {"pending": [[i] for i in range(20_000)]}
    gc.freeze()
    assert id(keep["pending"]) not in ids(gc.get_objects())  # why the census walks the lists itself
    taken = heap.every_object(Pace())
    seen = ids(taken.objects)
    assert id(keep["pending"]) in seen and id(keep["pending"][-1]) in seen
    assert taken.frozen >= 20_000 and not taken.unseen


def test_where_the_layout_is_unknown_it_says_how_many_frozen_objects_it_did_not_examine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(heap, "_layout_known", lambda: False)
    keep = [[i] for i in range(1_000)]
    gc.freeze()
    try:
        pace = Pace()
        taken = heap.every_object(pace)
    finally:
        gc.unfreeze()
    assert id(keep) not in ids(taken.objects) and pace.holds == 1  # one gc.get_objects(), nothing walked
    assert "objects the program froze with gc.freeze()" in taken.unseen and "not counted" in taken.unseen


@pytest.mark.usefixtures("chunked")
def test_a_full_collection_under_the_walk_starts_the_list_again() -> None:
    keep = [[i] for i in range(30_000)]
    collected = Pace(lambda hold: gc.collect() if hold == 3 else None)
    taken = heap.every_object(collected)
    assert not taken.partial and id(keep[-1]) in ids(taken.objects) and collected.holds > 3
    always = Pace(lambda _hold: gc.collect())
    taken = heap.every_object(always)  # never walked whole: one gc.get_objects() after all
    assert not taken.partial and id(keep[-1]) in ids(taken.objects) and always.holds > 3 * 2


@pytest.mark.usefixtures("chunked")
def test_full_collections_under_the_walk_of_the_frozen_objects_do_not_start_it_again() -> None:
    keep = [[i] for i in range(30_000)]
    gc.freeze()
    taken = heap.every_object(Pace(lambda _hold: gc.collect()))  # (a collection never touches the frozen)
    assert not taken.partial and id(keep[-1]) in ids(taken.objects) and taken.frozen > 30_000


@pytest.mark.usefixtures("chunked")
def test_a_freeze_under_the_walk_is_followed_onto_the_frozen_list() -> None:
    keep = [[i] for i in range(30_000)]
    frozen = Pace(lambda hold: gc.freeze() if hold == 3 else None)
    taken = heap.every_object(frozen)
    seen = ids(taken.objects)
    assert not taken.partial and id(keep) in seen and id(keep[-1]) in seen
    assert taken.frozen > 30_000


def test_doctor_s_check_tells_a_python_whose_frozen_heap_is_walked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert heap.sees_frozen() is True and gc.get_freeze_count() == 0  # (its freeze undone)
    monkeypatch.setattr(heap, "_layout_known", lambda: False)
    assert heap.sees_frozen() is False


@pytest.mark.usefixtures("chunked")
def test_a_walk_under_freezes_and_unfreezes_ends_on_its_own() -> None:
    """Each freeze or unfreeze moves whole lists, the walk's last object with them: followed
    from list to list, the walk met the same objects again and did not end. It starts again
    instead, and gives up after a few tries."""
    keep = [[i] for i in range(30_000)]
    tracked = len(gc.get_objects())
    churn = Pace(lambda hold: gc.freeze() if hold % 2 else gc.unfreeze())
    churn.out_of_time = lambda: churn.holds > 2_000  # type: ignore[method-assign]
    taken = heap.every_object(churn)
    assert churn.holds < 200  # ended by the walk's own rule, long before the budget
    assert len(taken.objects) < 2 * tracked and len(keep) == 30_000  # no object many times over
