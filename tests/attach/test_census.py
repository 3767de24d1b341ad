"""The census on real Works (a one-rank gloo group in a subprocess, holders.py), in every
shape users keep them: it names each holder by the path that reaches it and counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.attach.protocol import Census

pytestmark = pytest.mark.slow  # a gloo group and torch in a subprocess
REPO = Path(__file__).resolve().parents[2]
HELD = 300  # Works in Syncer.pending


@pytest.fixture(scope="module")
def census() -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("holders.py")), str(HELD)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def holders(census: dict[str, Any]) -> dict[str, tuple[str, int, int, int | None]]:
    taken = Census.from_dict(census["census"])
    return {h.path: (h.container, h.works, h.containers, h.tensor_bytes) for h in taken.holders if h.named}


def test_each_holder_is_named_by_the_path_that_reaches_it(census: dict[str, Any]) -> None:
    assert holders(census) == {
        "Syncer.pending": ("list", HELD, 1, None),  # an instance attribute
        "Scheduler.pending[<int>]": ("dict", 7, 1, None),  # a dict by key pattern (untracked by gc)
        "Backend.ongoing_reqs[*].handle": ("Record", 5, 5, 5 * 256 * 4),  # records in a list, tensors beside
        "__main__.KEEP[*].work": ("Slotted", 1, 1, None),  # a __slots__ record in a module global
        "Registry.in_flight": ("list", 3, 1, None),  # a class attribute
        "make_sender.<locals>.works": ("list", 4, 1, None),  # a closure variable
        "__main__.QUEUE": ("deque", 6, 1, None),  # a module global
        "__main__.INFLIGHT[*]": ("tuple", 2, 2, 2 * 100 * 4),  # (Work, tensor) pairs
        "main.<locals>.pending": ("list", 9, 1, None),  # a local of the running main thread
        "Controller.work_list": ("list", 5, 1, None),  # two holders on one object
        "Controller.ongoing[<int>]": ("dict", 3, 1, None),  # (once was "(a list no Python object refers to)")
    }


def test_counts_and_completion(census: dict[str, Any]) -> None:
    taken = Census.from_dict(census["census"])
    assert taken.works == sum(h.works for h in taken.holders) == HELD + 7 + 5 + 1 + 3 + 4 + 6 + 2 + 9 + 5 + 3
    assert all(h.completed == h.works for h in taken.holders)  # one-rank all_reduces complete at once
    assert [h.works for h in taken.holders] == sorted((h.works for h in taken.holders), reverse=True)


def test_the_walk_lets_the_program_run_between_chunks(census: dict[str, Any]) -> None:
    """The census thread sleeps between chunks: the main thread, spinning in Python, got
    the GIL meanwhile. Its cost is recorded with the census."""
    cost = Census.from_dict(census["census"]).cost
    assert cost.chunks > 1 and cost.passes >= 2 and not cost.truncated
    assert cost.objects > 10_000 and cost.max_hold_s <= cost.snapshot_s + cost.busy_s
    assert census["main_thread_progress"] > 0


def test_a_census_leaves_nothing_of_its_own_and_a_second_one_sees_the_same(census: dict[str, Any]) -> None:
    """Its records hold the program's containers and Works: none outlives the census (with the
    collector off, a reference cycle would keep them), and a second census, as at detach,
    names the program's holders, never the first census's records. (The first census made
    the records' attribute dicts, where 3.11 then keeps their attributes: the second finds
    the Works in those dicts, and still counts each as its record.)"""
    assert census["left_by_census"] == []
    assert holders({"census": census["census_again"]}) == holders(census)


def test_the_lists_walked_in_chunks_and_a_frozen_heap_give_the_same_census(census: dict[str, Any]) -> None:
    """On a big heap the census walks the collector's lists a chunk at a time rather than
    take gc.get_objects() in one hold; after gc.freeze() every holder is in the permanent
    generation, which gc.get_objects() does not list at all. Both name and count the same."""
    for key in ("walked", "frozen"):
        assert holders({"census": census[key]}) == holders(census), key
        assert Census.from_dict(census[key]).works == Census.from_dict(census["census"]).works, key
    assert census["left_by_walk"] == []
    walked, frozen = (Census.from_dict(census[key]).cost for key in ("walked", "frozen"))
    assert walked.frozen == 0 and not walked.truncated and not walked.unseen
    assert frozen.frozen > 10_000 and frozen.frozen >= frozen.objects - 2_000 and not frozen.truncated


REBOUND = 200  # Works per holder in rebinding.py


@pytest.fixture(scope="module")
def rebinding() -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("rebinding.py")), str(REBOUND)], cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_holder_the_program_rebinds_every_round_is_named(rebinding: dict[str, Any]) -> None:
    """The reaper makes a new container every round (`self.pending = [w for w in ...]`,
    `work_list = work_list[c:]`): the one the snapshot held is gone when it is named, so
    the census finds the one holding the same Works now, by what refers to it."""
    for key in ("census", "walked"):  # gc.get_objects() at once, or the lists walked a chunk a hold
        assert rebinding[f"{key}_rounds"] > 100, key  # it rebound its containers all along the census
        rebound(Census.from_dict(rebinding[key]))


def rebound(taken: Census) -> None:
    holders = {h.path: (h.container, h.works, h.named) for h in taken.holders}
    drained = holders.pop("Drainer.pending", None)  # a fresh list and Work each round: found, or gone by then
    assert holders == {
        "Pump.pending": ("list", REBOUND, True),
        "Router.inflight[<int>]": ("dict", REBOUND, True),
        "Trainer.pending_log_sends[*]": ("tuple", REBOUND, True),
        "__main__.work_list": ("list", REBOUND, True),
    }
    assert drained in (None, ("list", 1, True))
    assert taken.works == 4 * REBOUND + (drained[1] if drained else 0)


def test_a_container_the_program_let_go_of_during_the_census_is_no_holder(rebinding: dict[str, Any]) -> None:
    """The drainer's list of the snapshot was replaced, its Work waited and dropped: the
    census alone held it by the time it was named, so it names no unnamed holder."""
    assert all(h.named for key in ("census", "walked") for h in Census.from_dict(rebinding[key]).holders)
