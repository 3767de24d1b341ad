"""The census's sweeps over big containers (hicache_cli/attach/walk.py), in this process:
each kind of container of more than BIG items is looked at a slice a hold and found when
it holds what the census looks for; one the program resizes meanwhile is read whole then.
(A stand-in class plays the Work: what the sweep tests is the type.)"""

from __future__ import annotations

import collections
from typing import Any

from hicache_cli.attach.census import find_containers
from hicache_cli.attach.walk import BIG, Walker


class Job:
    """Stands in for a Work: the census looks for objects of given types."""


class Resizing(Walker):
    """A walker whose rests let the program add to `grows` (a dict) between holds."""

    def __init__(self, grows: dict[int, Any]) -> None:
        self.grows = grows
        super().__init__(chunk_s=0.001, rest_s=0.0)

    def rest(self, held_since: float) -> None:
        super().rest(held_since)
        self.grows[len(self.grows)] = None


def test_big_containers_of_every_kind_are_found_a_slice_at_a_time() -> None:
    n = BIG + BIG // 2  # two slices
    kept = {
        "list": [Job() for _ in range(n)],
        "dict": {i: Job() for i in range(n)},
        "keys": {Job(): i for i in range(n)},  # found by its keys, after its values
        "set": {Job() for _ in range(n)},
        "deque": collections.deque(Job() for _ in range(n)),
    }
    walker = Walker(chunk_s=0.001, rest_s=0.0)
    try:
        found, _parents = find_containers(walker, frozenset({Job}))
    finally:
        walker.release()
    held = {id(f.obj): len(f.works) for f in found.values()}
    assert {name: held.get(id(c)) for name, c in kept.items()} == dict.fromkeys(kept, n)
    assert walker.cost.max_hold_s < walker.cost.busy_s  # in several holds


def test_a_big_dict_resized_between_holds_is_read_whole_then() -> None:
    grows: dict[int, Any] = {i: None for i in range(2 * BIG)}
    grows[2 * BIG] = Job()  # in its last slice: the dict grows before the sweep gets there
    jobs = [Job() for _ in range(10)]
    walker = Resizing(grows)
    try:
        found, _parents = find_containers(walker, frozenset({Job}))
    finally:
        walker.release()
    assert id(jobs) in found and len(found[id(grows)].works) == 1 and len(grows) > 2 * BIG + 1


def test_a_big_container_that_hits_is_visited_a_slice_a_hold_when_the_sweep_can() -> None:
    """A leaking list of millions of Works, read whole, was one hold of 0.23 s at 3 M: a sweep
    that can take it in slices (visit_part) gets every slice that hits, each in a hold."""
    jobs = [Job() for _ in range(3 * BIG)]
    whole: list[Any] = []
    slices: list[int] = []
    walker = Walker(chunk_s=0.001, rest_s=0.0)
    try:
        walker.sweep(lambda _chunk, refs: any(type(r) is Job for r in refs), whole.append,
                     lambda container, items: slices.append(len(items)) if container is jobs else None)  # fmt: skip
    finally:
        walker.release()
    assert slices == [BIG, BIG, BIG] and not any(v is jobs for v in whole)


def test_works_in_two_holders_are_counted_once_without_a_set_of_them_all() -> None:
    from hicache_cli.attach.census import _distinct

    a, b, c, d = Job(), Job(), Job(), Job()
    big = [Job() for _ in range(2 * BIG)] + [c]
    assert _distinct([big, [c, d], [a, b]]) == len(big) + 3
    assert _distinct([[a, b], [b, a]]) == 2 and _distinct([]) == 0


def test_a_dict_of_works_is_named_by_its_first_work_key_with_no_tuple_an_item() -> None:
    from hicache_cli.attach.naming import work_keys

    jobs = {"config": 1, **{i: Job() for i in range(3)}}
    assert work_keys(jobs, frozenset({Job})) == [0]
    assert work_keys({"a": 1}, frozenset({Job})) == [] and work_keys({}, frozenset({Job})) == []
