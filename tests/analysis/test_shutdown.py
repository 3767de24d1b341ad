"""shutdown: a traced process that ends with sends it never waited, and the peer blocked on
it; on a recorded run (tests/data/traced/drain-at-round-start) and synthetic last lines."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.shutdown import hazards, unwaited_sends, unwaited_text
from hicache_cli.config import RunConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import DETACHED_PREFIX, STOPPED_AT_END
from hicache_cli.series import read_run
from tests.conftest import build_sample

RUN = Path(__file__).resolve().parents[1] / "data" / "traced" / "drain-at-round-start"
ISEND = {"file": "/p/x.py", "line": 32, "function": "main", "op": "isend", "peer": 1, "created": 200, "completed": 199}


def test_a_process_that_ended_with_a_send_never_waited_and_its_blocked_peer_are_named() -> None:
    found = hazards(read_run(RUN))
    assert found[0].lines(0) == ["rank 0 ended with 1 send to rank 1 never waited (drain_at_round_start.py:32)"]
    assert found[1].lines(1) == ["rank 1 was blocked in recv from rank 0 at drain_at_round_start.py:35"]
    report = build_report(RunConfig.load(RUN), read_run(RUN), RunOutcome(), RUN)
    assert [r.shutdown.lines for r in report.ranks if r.shutdown] == [found[0].lines(0), found[1].lines(1)]
    (send,) = report.ranks[0].shutdown.unwaited_sends
    assert (send.count, send.peer, send.line, send.op) == (1, 1, 32, "isend")
    assert report.ranks[1].shutdown.blocked_in == "recv from rank 0 at drain_at_round_start.py:35"
    written = report.to_dict()["ranks"]
    assert [sorted(r["shutdown"]) for r in written] == [["blocked_in", "lines", "unwaited_sends"]] * 2


def final(rank: int, message: str, sites: list | None = None, **fields) -> object:  # noqa: ANN003
    return build_sample(
        rank, 1.0, kind="final", state="done", message=message, works={"live": 0}, sites=sites, **fields
    )


def test_only_a_process_that_ended_by_itself_has_a_hazard() -> None:
    """Stopped by hicache at the end of a trace, its sends in flight are the run's, not a
    shutdown's; an attached process hicache detached from goes on, its sends with it."""
    assert hazards({0: [final(0, STOPPED_AT_END, [ISEND])]}) == {}
    assert hazards({0: [final(0, f"{DETACHED_PREFIX}hicache asked", [ISEND])]}) == {}
    assert hazards({0: [final(0, "the process exited", [ISEND])]})[0].unwaited_sends[0]["count"] == 1


def test_a_peer_blocked_on_another_rank_is_no_hazard_of_this_one() -> None:
    blocked = build_sample(1, 1.0, works={"live": 0}, blocked_on="recv from rank 2 at x.py:9", blocked_peer=2)
    found = hazards({0: [final(0, "the process exited", [ISEND])], 1: [blocked]})
    assert set(found) == {0}
    still = build_sample(1, 1.0, works={"live": 0}, blocked_on="recv from rank 0 at x.py:35", blocked_peer=0)
    assert hazards({0: [final(0, "the process exited", [ISEND])], 1: [still]})[1].lines(1) == [
        "rank 1 is blocked in recv from rank 0 at x.py:35"
    ]


def test_unwaited_sends_are_sends_never_seen_complete() -> None:
    sites = [
        {"file": "/t/test_x.py", "line": 15, "function": "f", "op": "isend", "peer": 1, "created": 5, "completed": 4},
        {"file": "/t/test_x.py", "line": 20, "function": "f", "op": "irecv", "peer": 1, "created": 5, "completed": 0},
        {"file": "/t/test_x.py", "line": 30, "function": "f", "op": "batch_isend_irecv(isend)", "peer": 2,
         "created": 3, "completed": 0},
    ]  # fmt: skip
    sends = unwaited_sends(sites)
    assert [(s["line"], s["count"]) for s in sends] == [(30, 3), (15, 1)]  # never a receive
    assert unwaited_text("rank 0", "returned", sends[1:]) == (
        "rank 0 returned with 1 send to rank 1 never waited (test_x.py:15)"
    )


def receiver(*lines: tuple[float, str, str]) -> list:
    """Rank 1's lines: (t, kind, what) with what "recv" (blocked in recv from rank 0), "free",
    or a final line's state ("done": it exited normally, "error": its receive failed)."""
    out = []
    for t, kind, what in lines:
        if kind == "final":
            message = "the process exited" if what == "done" else "RuntimeError: Connection closed by peer"
            out.append(build_sample(1, t, kind="final", state=what, message=message, works={"live": 0}))
        elif what == "recv":
            out.append(build_sample(1, t, works={"live": 0}, blocked_on="recv from rank 0 at x.py:35", blocked_peer=0))
        else:
            out.append(build_sample(1, t, works={"live": 0}))
    return out


def sender_ended_at(t: float) -> list:
    return [build_sample(0, t, kind="final", state="done", message="the process exited", works={"live": 0},
                         sites=[ISEND])]  # fmt: skip


def test_a_receiver_that_ended_normally_is_no_hazard_whatever_its_last_sample_caught() -> None:
    """Issue 38: a receive loop is in recv most of the time; its last sample caught it there,
    then it received the last message and exited normally after the sender did."""
    found = hazards({0: sender_ended_at(5.0), 1: receiver((4.9, "sample", "recv"), (5.05, "final", "done"))})
    assert set(found) == {0}
    found = hazards({0: sender_ended_at(5.0), 1: receiver((5.02, "sample", "recv"), (5.05, "final", "done"))})
    assert set(found) == {0}


def test_a_receiver_that_stayed_blocked_past_the_sender_s_end_is_a_hazard() -> None:
    seen_after = hazards({0: sender_ended_at(5.0), 1: receiver((5.1, "sample", "recv"), (5.2, "sample", "recv"))})
    assert seen_after[1].lines(1) == ["rank 1 is blocked in recv from rank 0 at x.py:35"]
    failed_after = hazards({0: sender_ended_at(5.0), 1: receiver((4.95, "sample", "recv"), (5.01, "final", "error"))})
    assert failed_after[1].lines(1) == ["rank 1 was blocked in recv from rank 0 at x.py:35"]


def test_a_receiver_that_was_done_with_that_peer_before_it_ended_is_no_hazard() -> None:
    """Its receive failed before the sender ended, or it was no longer blocked when it ended."""
    early = hazards({0: sender_ended_at(5.0), 1: receiver((3.9, "sample", "recv"), (4.0, "final", "error"))})
    assert set(early) == {0}
    moved_on = hazards({0: sender_ended_at(5.0), 1: receiver((4.9, "sample", "recv"), (5.1, "sample", "free"))})
    assert set(moved_on) == {0}


def test_a_rank_of_another_world_is_not_the_one_it_waited_for() -> None:
    """A forkserver worker that is rank 0 of its own world ended with a send never waited; the
    torchrun rank 1 blocked on *its* world's rank 0 is no hazard of that worker's."""
    worker = [dataclasses.replace(s, world="tcp://127.0.0.1:41234") for s in sender_ended_at(5.0)]
    blocked = [dataclasses.replace(s, world="tcp://127.0.0.1:29500") for s in receiver((5.1, "sample", "recv"))]
    assert set(hazards({2: worker, 1: blocked})) == {2}
    same = [dataclasses.replace(s, world="tcp://127.0.0.1:41234") for s in blocked]
    assert set(hazards({2: worker, 1: same})) == {1, 2}


def test_a_recorded_receiver_that_ended_normally_has_no_hazard() -> None:
    """tests/data/traced/last-count (last_count.py): rank 1's last sample before its final line
    caught it in recv from rank 0 after 400 rounds spent mostly there; then it received the last
    count, acknowledged it and exited. Only rank 0's unwaited last send is a hazard."""
    run = read_run(RUN.parent / "last-count")
    assert run[1][-2].blocked_on == "recv from rank 0 at last_count.py:40"
    found = hazards(run)
    assert set(found) == {0}
    assert found[0].lines(0) == ["rank 0 ended with 1 send to rank 1 never waited (last_count.py:29)"]
