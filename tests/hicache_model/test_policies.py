"""Drain policies over fake gloo send Works: the leak, the fix and its risks, the later designs."""

from __future__ import annotations

from datetime import timedelta

import pytest

from hicache_model.policies import (
    POLICIES,
    Adaptive,
    BoundedDrain,
    DrainPolicy,
    PolicyOptions,
    UnknownPolicy,
    describe,
    make_policy,
)
from hicache_model.work_list import WaitTimedOut, WorkList
from tests.fakes import FakeWork, pending_send, work_list_of


def fresh(n: int, received: bool = True) -> list[FakeWork]:
    return [FakeWork(received=received) for _ in range(n)]


# -- registry -------------------------------------------------------------------
def test_registry_lists_exactly_the_six_policies() -> None:
    assert list(POLICIES) == ["reap", "drain", "bounded-drain", "adaptive", "batched", "idle-skip"]


@pytest.mark.parametrize("name", list(POLICIES))
def test_each_policy_is_built_by_name_and_documented(name: str) -> None:
    policy = make_policy(name)
    assert type(policy) is POLICIES[name]
    assert policy.name == name
    assert isinstance(policy, DrainPolicy)
    doc = (type(policy).__doc__ or "").strip()
    assert doc, f"{name} has no docstring"
    assert describe(name) == doc.splitlines()[0]


def test_only_batched_sends_both_counts_in_one_message() -> None:
    assert {name: cls.batched for name, cls in POLICIES.items()} == {
        "reap": False,
        "drain": False,
        "bounded-drain": False,
        "adaptive": False,
        "batched": True,
        "idle-skip": False,
    }


def test_unknown_policy_is_refused_with_the_choices() -> None:
    with pytest.raises(UnknownPolicy, match="unknown policy 'nope'; choose one of: reap, drain") as info:
        make_policy("nope")
    assert isinstance(info.value, ValueError)


def test_make_policy_passes_options_through() -> None:
    options = PolicyOptions(wait_timeout_s=0.5)
    assert make_policy("bounded-drain", options).options is options
    assert make_policy("drain").options == PolicyOptions()


@pytest.mark.parametrize("name", list(POLICIES))
def test_every_policy_handles_an_empty_list(name: str) -> None:
    policy, works = make_policy(name), WorkList()
    policy.at_round_start(works)
    policy.at_round_end(works)
    assert len(works) == 0 and works.waits == 0


# -- reap (the leak) ------------------------------------------------------------
def test_reap_frees_nothing_from_works_never_waited() -> None:
    sends = fresh(5)
    works = work_list_of(*sends)
    policy = make_policy("reap")
    for _ in range(3):  # round after round
        policy.at_round_start(works)
        policy.at_round_end(works)
    assert len(works) == 5
    assert works.held_bytes == 5 * 4
    assert works.released == 0
    assert all(s.wait_calls == 0 for s in sends)  # reap never blocks, so never completes a send


def test_reap_frees_the_completed_prefix_only() -> None:
    sends = fresh(5)
    for i in (0, 1, 3):
        sends[i].wait()
    works = work_list_of(*sends)

    make_policy("reap").at_round_end(works)

    assert len(works) == 3
    assert works.head().work is sends[2]
    assert works.held_bytes == 3 * 4
    assert works.released == 2


# -- drain (the fix) ------------------------------------------------------------
@pytest.mark.parametrize("name", ["drain", "batched"])
def test_drain_waits_on_every_send_then_clears(name: str) -> None:
    sends = fresh(4, received=False)  # a plain wait() blocks until the peer receives
    works = work_list_of(*sends)

    make_policy(name).at_round_start(works)

    assert [s.timeouts for s in sends] == [[None]] * 4
    assert len(works) == 0 and works.held_bytes == 0 and works.released == 4


def test_drain_does_its_work_at_round_start_only() -> None:
    works = work_list_of(*fresh(2))
    make_policy("drain").at_round_end(works)
    assert len(works) == 2 and works.waits == 0


def test_drain_leaves_the_list_uncleared_when_a_wait_raises() -> None:
    """The fix's open risk (no try/finally): the Works and their payloads stay in the list."""
    sends = [FakeWork(), FakeWork(error="Connection closed by peer"), FakeWork()]
    works = work_list_of(*sends)

    with pytest.raises(RuntimeError, match="Connection closed by peer") as info:
        make_policy("drain").at_round_start(works)

    assert not isinstance(info.value, WaitTimedOut)
    assert len(works) == 3
    assert works.held_bytes == 3 * 4
    assert sends[2].wait_calls == 0


# -- bounded-drain --------------------------------------------------------------
def test_bounded_drain_waits_with_a_deadline_and_clears() -> None:
    sends = fresh(3)
    works = work_list_of(*sends)

    BoundedDrain(PolicyOptions(wait_timeout_s=2.0)).at_round_start(works)

    for s in sends:
        (timeout,) = s.timeouts
        assert timeout is not None and timedelta(0) < timeout <= timedelta(seconds=2.0)
    assert len(works) == 0 and works.held_bytes == 0


def test_bounded_drain_names_the_stuck_peer_and_still_clears() -> None:
    works = WorkList()
    works.append(pending_send(FakeWork(), peer=1))
    works.append(pending_send(FakeWork(received=False), peer=3))
    works.append(pending_send(FakeWork(), peer=1))

    with pytest.raises(WaitTimedOut, match="rank 3") as info:
        make_policy("bounded-drain").at_round_start(works)

    assert info.value.peer == 3
    assert len(works) == 0 and works.held_bytes == 0 and works.released == 3


def test_bounded_drain_clears_even_on_a_non_timeout_error() -> None:
    works = work_list_of(FakeWork(error="Connection closed by peer"), FakeWork())
    with pytest.raises(RuntimeError, match="Connection closed"):
        make_policy("bounded-drain").at_round_start(works)
    assert len(works) == 0 and works.held_bytes == 0


# -- adaptive -------------------------------------------------------------------
def adaptive(watermark: int = 4, cap: int = 64, per_call: int = 2) -> Adaptive:
    policy = make_policy("adaptive", PolicyOptions(watermark=watermark, watermark_cap=cap, max_reap_per_call=per_call))
    assert isinstance(policy, Adaptive)
    return policy


def test_adaptive_does_nothing_up_to_the_watermark() -> None:
    policy = adaptive(watermark=4)
    works = work_list_of(*fresh(4))
    policy.at_round_end(works)
    assert len(works) == 4 and works.waits == 0
    assert policy.counters() == {"watermark": 4, "stuck_heads": 0}


def test_adaptive_reaps_at_most_max_per_call_above_the_watermark() -> None:
    policy = adaptive(watermark=4, per_call=2)
    sends = fresh(7)
    works = work_list_of(*sends)

    policy.at_round_end(works)

    assert len(works) == 5
    assert works.head().work is sends[2]
    assert [s.timeouts for s in sends[:2]] == [[timedelta(seconds=0.001)]] * 2  # the probe timeout
    assert all(s.wait_calls == 0 for s in sends[2:])
    assert policy.watermark == 4  # a clean pass never goes below the start


def test_adaptive_does_its_work_at_round_end_only() -> None:
    policy = adaptive(watermark=1)
    works = work_list_of(*fresh(3))
    policy.at_round_start(works)
    assert len(works) == 3 and works.waits == 0


def test_adaptive_doubles_the_watermark_when_the_head_is_stuck() -> None:
    policy = adaptive(watermark=4, cap=64)
    sends = [FakeWork(received=False)] + fresh(5)
    works = work_list_of(*sends)

    policy.at_round_end(works)

    assert len(works) == 6  # nothing behind a stuck head is reaped
    assert sum(s.wait_calls for s in sends) == 1
    assert policy.counters() == {"watermark": 8, "stuck_heads": 1}
    policy.at_round_end(works)  # 6 <= 8: below the new watermark
    assert works.waits == 1


def test_adaptive_watermark_is_capped() -> None:
    policy = adaptive(watermark=4, cap=16)
    works = work_list_of(FakeWork(received=False), *fresh(30))
    marks = []
    for _ in range(4):
        policy.at_round_end(works)
        marks.append(policy.watermark)
    assert marks == [8, 16, 16, 16]
    assert policy.stuck_heads == 4


def test_adaptive_halves_after_a_clean_pass_but_not_below_the_start() -> None:
    policy = adaptive(watermark=4, cap=64, per_call=2)
    head = FakeWork(received=False)
    works = work_list_of(head, *fresh(30))
    policy.at_round_end(works)
    policy.at_round_end(works)
    assert policy.watermark == 16

    head.received = True
    marks = []
    for _ in range(4):
        policy.at_round_end(works)
        marks.append(policy.watermark)

    assert marks == [8, 4, 4, 4]
    assert len(works) == 31 - 4 * 2
    assert policy.stuck_heads == 2
