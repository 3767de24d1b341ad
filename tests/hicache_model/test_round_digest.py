"""idle-skip's skipped rounds, and the per-round digest with its bounded checkpoints (report: pp_consistency)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hicache_model import hiradix_cache
from hicache_model.hiradix_cache import DIGEST_EVERY, HiRadixCache
from hicache_model.policies import POLICIES, IdleSkip, Reap
from tests.fakes import FakePPSync

MakeCache = Callable[..., HiRadixCache]
A = tuple(range(1, 9))


def digest_of(cache: HiRadixCache, rounds: list[tuple[int, int]]) -> int:
    for writes, loads in rounds:
        cache._record_round(writes, loads)
    return cache.digest


# -- idle-skip ---------------------------------------------------------------------


def test_idle_skip_is_the_one_registered_policy_that_skips_idle_rounds() -> None:
    assert POLICIES["idle-skip"] is IdleSkip
    assert issubclass(IdleSkip, Reap)  # busy rounds are reaped, and leak, as under reap
    assert [name for name, cls in POLICIES.items() if cls.skip_sync_when_idle] == ["idle-skip"]


def test_idle_rounds_under_idle_skip_send_nothing_and_still_count(make_cache: MakeCache) -> None:
    sync = FakePPSync(told=0)
    cache = make_cache(policy="idle-skip", sync=sync)
    for _ in range(5):
        cache.check_hicache_events()
    assert sync.asked == []  # not one count agreed on: no message, no Work
    assert len(cache.work_list) == 0
    assert cache.event_rounds == 5


def test_a_round_with_a_write_in_flight_is_synced_under_idle_skip(make_cache: MakeCache) -> None:
    sync = FakePPSync(told=0)
    cache = make_cache(policy="idle-skip", sync=sync)
    for _ in range(3):  # the third hit makes A hot: a write-through is in flight
        node = cache.serve(A)
        assert node is not None
        cache.release(node)
    assert cache.ongoing_write_through
    cache.check_hicache_events()
    assert len(sync.asked) == 2  # writes, then loads, as under reap
    assert cache.event_rounds == 1


def test_a_single_stage_idle_run_records_skipped_rounds(make_cache: MakeCache) -> None:
    skipping, syncing = make_cache(policy="idle-skip"), make_cache(policy="reap")
    for _ in range(4):
        skipping.check_hicache_events()
        syncing.check_hicache_events()
    assert (skipping.sync.sent, skipping.sync.received) == (0, 0)
    assert skipping.event_rounds == syncing.event_rounds == 4
    assert skipping.digest == digest_of(make_cache(), [(-1, -1)] * 4)
    assert syncing.digest == digest_of(make_cache(), [(0, 0)] * 4)
    assert skipping.digest != syncing.digest  # a stage that skipped and one that synced disagree


# -- the digest ----------------------------------------------------------------------

ROUNDS = [(0, 0), (1, 0), (0, 2), (-1, -1), (3, 1)]


def test_equal_count_sequences_give_equal_digests(make_cache: MakeCache) -> None:
    assert digest_of(make_cache(), ROUNDS) == digest_of(make_cache(), ROUNDS)


@pytest.mark.parametrize(
    "other",
    [
        ROUNDS[:-1] + [(3, 2)],  # one load more in the last round
        ROUNDS[:-1] + [(1, 3)],  # writes and loads swapped
        [ROUNDS[1], ROUNDS[0], *ROUNDS[2:]],  # the same counts in another order
        ROUNDS[:-1],  # one round fewer
    ],
)
def test_different_count_sequences_give_different_digests(make_cache: MakeCache, other: list[tuple[int, int]]) -> None:
    assert digest_of(make_cache(), ROUNDS) != digest_of(make_cache(), other)


def test_a_skipped_round_differs_from_a_round_with_nothing_to_apply(make_cache: MakeCache) -> None:
    assert digest_of(make_cache(), [(-1, -1)]) != digest_of(make_cache(), [(0, 0)])
    assert digest_of(make_cache(), [(0, 0), (-1, -1)]) != digest_of(make_cache(), [(0, 0), (0, 0)])


def test_the_digest_is_checkpointed_every_digest_every_rounds(make_cache: MakeCache) -> None:
    cache = make_cache()
    expected = []
    for i in range(2 * DIGEST_EVERY + 5):
        cache._record_round(i % 3, i % 2)
        if i + 1 == DIGEST_EVERY - 1:
            assert list(cache.checkpoints) == []
        if i + 1 in (DIGEST_EVERY, 2 * DIGEST_EVERY):
            expected.append((i + 1, cache.digest))
    assert [r for r, _ in expected] == [DIGEST_EVERY, 2 * DIGEST_EVERY]
    assert list(cache.checkpoints) == expected


def test_checkpoints_are_bounded_when_nobody_takes_them(make_cache: MakeCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hiradix_cache, "DIGEST_EVERY", 1)  # a checkpoint every round
    cache = make_cache()
    bound = cache.checkpoints.maxlen
    assert bound is not None
    for _ in range(bound + 10):
        cache._record_round(0, 0)
    assert len(cache.checkpoints) == bound
    assert cache.checkpoints[-1] == (bound + 10, cache.digest)  # the newest are kept
    assert cache.checkpoints[0][0] == 11
