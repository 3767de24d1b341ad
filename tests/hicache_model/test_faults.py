"""Fault specs (--fault) read into Faults, a rank's FaultPlan firing them, and raise-in-wait in WorkList."""

from __future__ import annotations

import pytest

from hicache_model.faults import KINDS, FaultPlan, FaultSpecError, parse_fault
from hicache_model.policies import make_policy
from hicache_model.work_list import InjectedWaitError, PendingSend, WaitTimedOut, WorkList
from tests.fakes import FakeWork, pending_send, work_list_of

# -- parse_fault: good specs ------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "kind", "rank", "at_s", "for_s", "lag_s"),
    [
        ("lag:1:5", "lag", 1, 0.0, None, 0.005),  # MS: a bare number is milliseconds
        ("lag:1:5ms", "lag", 1, 0.0, None, 0.005),
        ("lag:0:1.5s", "lag", 0, 0.0, None, 1.5),
        ("stall:1:4s:2s", "stall", 1, 4.0, 2.0, 0.0),
        ("stall:0:500ms:1m", "stall", 0, 0.5, 60.0, 0.0),
        ("hang:0:1.5s", "hang", 0, 1.5, None, 0.0),
        ("hang:1:1m", "hang", 1, 60.0, None, 0.0),
        ("kill:2:4s", "kill", 2, 4.0, None, 0.0),
        ("kill:1:3", "kill", 1, 3.0, None, 0.0),  # AT: a bare number is seconds
        ("raise-in-wait:0:3s", "raise-in-wait", 0, 3.0, None, 0.0),
        ("raise-in-wait:0:.5s", "raise-in-wait", 0, 0.5, None, 0.0),
    ],
)
def test_a_good_spec_is_read_into_a_fault(
    spec: str, kind: str, rank: int, at_s: float, for_s: float | None, lag_s: float
) -> None:
    fault = parse_fault(spec, world_size=4)
    assert (fault.kind, fault.rank) == (kind, rank)
    assert fault.at_s == pytest.approx(at_s)
    assert fault.lag_s == pytest.approx(lag_s)
    if for_s is None:
        assert fault.for_s is None
    else:
        assert fault.for_s == pytest.approx(for_s)
    assert fault.spec == spec
    assert str(fault) == spec  # reports and blocked_on name the fault as the user wrote it


def test_every_kind_has_a_spec_that_parses() -> None:
    specs = {"lag": "lag:0:5", "stall": "stall:0:1s:1s", "keep": "keep:0:100"}
    for kind in KINDS:
        assert parse_fault(specs.get(kind, f"{kind}:0:1s"), world_size=1).kind == kind


def test_the_last_rank_is_a_rank() -> None:
    assert parse_fault("kill:3:1s", world_size=4).rank == 3


# -- parse_fault: bad specs -------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("boom:1:4s", "unknown kind 'boom'; choose one of: lag, stall, hang, kill, raise-in-wait"),
        ("", "unknown kind ''"),
        ("kill:1", "expected kill:RANK:AT"),
        ("kill:1:4s:2s", "expected kill:RANK:AT"),
        ("raise-in-wait:0", "expected raise-in-wait:RANK:AT"),
        ("stall:1:4s", "expected stall:RANK:AT:FOR"),
        ("lag:1:5:6", "expected lag:RANK:MS"),
        ("kill:x:4s", "rank 'x' is not a number"),
        ("kill:-1:4s", "rank '-1' is not a number"),
        ("kill::4s", "rank '' is not a number"),
        ("kill:2:4s", "there is no rank 2 (ranks are 0-1)"),
        ("lag:7:5", "there is no rank 7 (ranks are 0-1)"),
        ("kill:1:soon", "cannot read 'soon' as a time"),
        ("kill:1:4h", "cannot read '4h' as a time"),
        ("kill:1:-4s", "cannot read '-4s' as a time"),
        ("stall:1:4s:forever", "cannot read 'forever' as a time"),
        ("lag:1:fast", "cannot read 'fast' as a time"),
    ],
)
def test_a_bad_spec_is_refused_in_one_line_naming_it(spec: str, says: str) -> None:
    with pytest.raises(FaultSpecError) as info:
        parse_fault(spec, world_size=2)
    message = str(info.value)
    assert message.startswith(f"fault {spec!r}: ")
    assert says in message
    assert "\n" not in message


def test_fault_spec_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        parse_fault("boom:0:1s", world_size=1)


def test_a_rank_that_only_looks_like_a_digit_is_refused_as_a_spec_error() -> None:
    with pytest.raises(FaultSpecError, match="is not a number"):
        parse_fault("kill:²:4s", world_size=4)


# -- FaultPlan ---------------------------------------------------------------------

SPECS = ["lag:0:100", "lag:1:5", "stall:1:1s:2s", "kill:1:4s", "raise-in-wait:1:1s", "lag:1:2ms", "hang:0:9s"]


def test_for_rank_keeps_only_that_ranks_faults_in_order() -> None:
    plan = FaultPlan.for_rank(SPECS, rank=1, world_size=2)
    assert [f.spec for f in plan.faults] == ["lag:1:5", "stall:1:1s:2s", "kill:1:4s", "raise-in-wait:1:1s", "lag:1:2ms"]
    assert [f.spec for f in FaultPlan.for_rank(SPECS, rank=0, world_size=2).faults] == ["lag:0:100", "hang:0:9s"]


def test_a_rank_named_by_no_fault_has_an_empty_plan() -> None:
    plan = FaultPlan.for_rank(["kill:1:4s"], rank=0, world_size=4)
    assert plan.faults == []
    assert plan.lag_s == 0.0
    assert plan.due(1e9) == []


def test_lag_s_is_the_sum_of_the_ranks_lags() -> None:
    assert FaultPlan.for_rank(SPECS, rank=1, world_size=2).lag_s == pytest.approx(0.007)
    assert FaultPlan.for_rank(SPECS, rank=0, world_size=2).lag_s == pytest.approx(0.1)
    assert FaultPlan.for_rank(["kill:0:1s"], rank=0, world_size=1).lag_s == 0.0


def test_due_returns_each_timed_fault_once_when_its_time_has_come_and_never_a_lag() -> None:
    plan = FaultPlan.for_rank(SPECS, rank=1, world_size=2)
    assert plan.due(0.0) == []
    assert plan.due(0.999) == []
    assert [f.spec for f in plan.due(1.0)] == ["stall:1:1s:2s", "raise-in-wait:1:1s"]
    assert plan.due(1.0) == []
    assert plan.due(3.9) == []
    assert [f.spec for f in plan.due(10.0)] == ["kill:1:4s"]
    assert plan.due(1e9) == []
    assert [f.kind for f in plan.faults] == ["lag", "lag"]  # lags stay: they act every round
    assert plan.lag_s == pytest.approx(0.007)


def test_a_late_first_look_returns_every_fault_already_due() -> None:
    plan = FaultPlan.for_rank(["kill:0:4s", "hang:0:2s", "stall:0:9s:1s"], rank=0, world_size=1)
    assert [f.spec for f in plan.due(5.0)] == ["kill:0:4s", "hang:0:2s"]
    assert [f.spec for f in plan.due(9.0)] == ["stall:0:9s:1s"]


def test_for_rank_refuses_a_bad_spec() -> None:
    with pytest.raises(FaultSpecError, match="there is no rank 5"):
        FaultPlan.for_rank(["kill:5:1s"], rank=0, world_size=2)


# -- WorkList: the raise-in-wait fault and who it waits on -----------------------------


def test_fail_next_wait_fails_exactly_one_wait_without_touching_the_work() -> None:
    work = FakeWork()
    works = work_list_of(work, peer=1)
    works.fail_next_wait = True

    with pytest.raises(InjectedWaitError, match=r"injected fault: wait\(\) on isend to rank 1 raised"):
        works.wait(works.head(), where="drain")
    assert work.wait_calls == 0
    assert works.fail_next_wait is False
    assert works.blocked_on is None
    assert len(works) == 1  # the send stays outstanding

    works.wait(works.head(), where="drain")
    assert work.wait_calls == 1
    assert work.is_completed()


def test_an_injected_wait_error_is_not_a_timeout() -> None:
    works = work_list_of(FakeWork())
    works.fail_next_wait = True
    with pytest.raises(RuntimeError) as info:
        works.wait(works.head(), timeout_s=1.0)
    assert not isinstance(info.value, WaitTimedOut)
    assert works.timed_out_peers == set()


@pytest.mark.parametrize(("policy", "left"), [("drain", 2), ("bounded-drain", 0)])
def test_an_injected_wait_error_leaves_the_list_as_the_policy_does(policy: str, left: int) -> None:
    works = work_list_of(FakeWork(), FakeWork())
    works.fail_next_wait = True
    with pytest.raises(InjectedWaitError):
        make_policy(policy).at_round_start(works)
    assert len(works) == left  # drain has no try/finally; bounded-drain clears the list whatever happens


def test_blocked_on_during_a_wait_names_the_caller_and_the_receivers_pp_rank() -> None:
    work = FakeWork()
    works = WorkList()
    # tp=2: global rank 5 is pp rank 2, and the stage is what a stall report needs
    works.append(PendingSend(work, pending_send(work).data, peer=5, sent_at=0.0, peer_pp=2))
    seen: list[str | None] = []
    work.on_wait = lambda: seen.append(works.blocked_on)

    works.wait(works.head(), timeout_s=1.0, where="bounded-drain")

    assert seen == ["bounded-drain, waiting on isend to pp rank 2"]
    assert works.blocked_on is None


def test_wait_timed_out_names_the_global_rank_and_the_pp_rank() -> None:
    work = FakeWork(received=False)
    works = WorkList()
    works.append(PendingSend(work, pending_send(work).data, peer=5, sent_at=0.0, peer_pp=2))
    with pytest.raises(WaitTimedOut, match=r"isend to rank 5 \(pp rank 2\) not received after") as info:
        works.wait(works.head(), timeout_s=0.001)
    assert (info.value.peer, info.value.peer_pp) == (5, 2)
    assert works.timed_out_peers == {5}


def test_keep_parses_its_period_and_refuses_a_bad_one() -> None:
    assert parse_fault("keep:1:100", world_size=2).every == 100
    for bad in ("keep:1:0", "keep:1:x", "keep:1:1.5"):
        with pytest.raises(FaultSpecError):
            parse_fault(bad, world_size=2)
    plan = FaultPlan.for_rank(["keep:0:100", "hang:0:1s"], 0, 1)
    assert plan.keep_every == 100
    assert [f.kind for f in plan.timed] == ["hang"]
