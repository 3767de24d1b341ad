"""The attach strategy without a debugger: each process tried read from the agents' files in
the run directory (censuses merged by holder), and a strategy that holds nothing it could
signal. The real attach is tests/integration/test_attach_real.py."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from hicache_cli.attach import protocol
from hicache_cli.attach.exits import Exit
from hicache_cli.attach.inject import Injected
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import AgentStatus, Census, CensusCost, Holder
from hicache_cli.attach.session import AttachSession, Target, make_agent_dir
from hicache_cli.attached import ProcessEnd
from hicache_cli.cli.configure import attach_config
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.attach_launcher import (
    NOT_YET,
    UNANSWERED,
    AttachedProcesses,
    AttachLaunch,
    attached_pid,
    holders,
)
from hicache_cli.targets import AttachedProcess

ME = os.geteuid()  # the agents' files are read only as the targets' user's
RANK0 = ProcessInfo(4242, "python", ME, 4200, "/usr/bin/python3.11", None, (3, 11), True, True, 6)


def census(when: str, *found: Holder, objects: int = 2_000_000) -> Census:
    cost = CensusCost(objects=objects, snapshot_s=0.1, walk_s=2.5, busy_s=1.9, max_hold_s=0.1, chunks=40, passes=3)
    return Census(4242, 0, 1000.6, sum(h.works for h in found), list(found), cost, when)


def test_holders_are_merged_by_path_with_their_growth_most_held_first() -> None:
    start = census("start", Holder("Scheduler.sync_works", "list", 845, 0), Holder("app.QUEUE", "deque", 3, 3))
    end = census("end", Holder("Scheduler.sync_works", "list", 1900, 0), Holder("Syncer.late", "list", 4, 0))
    merged = holders(start, end)
    assert [(h.path, h.works, h.works_end, h.growth) for h in merged] == [
        ("Scheduler.sync_works", 845, 1900, 1055),
        ("Syncer.late", 0, 4, 4),  # appeared while attached
        ("app.QUEUE", 3, 0, -3),  # gone by the detach
    ]
    assert merged[0].line() == "`Scheduler.sync_works` holds 1,900 Works, 0 completed (+1,055 while attached)"


def test_without_a_census_at_detach_the_holders_say_what_they_held_at_attach() -> None:
    (only,) = holders(census("start", Holder("Scheduler.sync_works", "list", 845, 0)), None)
    assert (only.works_end, only.growth) == (None, None)
    assert only.line() == "`Scheduler.sync_works` holds 845 Works, 0 completed (at attach)"


def test_an_unnamed_holder_is_said_as_the_census_says_it() -> None:
    (only,) = holders(census("start", Holder("(a list no Python object refers to)", "list", 7, 0, named=False)), None)
    assert only.line().startswith("(a list no Python object refers to) holds 7 Works")


def test_a_process_tried_is_read_from_its_agent_s_files(tmp_path: Path) -> None:
    make_agent_dir(tmp_path, ME)
    start = census("start", Holder("Scheduler.sync_works", "list", 845, 0, tensor_bytes=None))
    protocol.write_json_atomic(protocol.census_file(tmp_path, 4242), start.to_dict())
    end = census("end", Holder("Scheduler.sync_works", "list", 1900, 0))
    protocol.write_json_atomic(protocol.census_file(tmp_path, 4242, "end"), end.to_dict())
    status = AgentStatus(4242, protocol.DETACHED, rank=0, attached_at=1000.0, detach_reason="hicache asked")
    target = Target(RANK0, "123", status, Injected("gdb", 1.23456, "hicache-x"), attached=True)
    session = AttachSession([4242], tmp_path)

    found = attached_pid(target, status, session.read_census(target, "start"), session.read_census(target, "end"))

    assert (found.pid, found.name, found.rank, found.state) == (4242, "python", 0, "detached")
    assert (found.method, found.inject_s, found.census_s) == ("gdb", 1.235, 0.6)
    assert (found.works, found.works_end, found.detach_reason) == (845, 1900, "hicache asked")
    assert found.cost is not None and found.cost.pause_per_million_s == 1.0  # (0.1 + 1.9) s / 2 M objects
    assert found.top is not None and found.top.growth == 1055


def test_a_refused_process_says_why() -> None:
    agent = ProcessInfo(4200, "pt_elastic", 0, 1, "/usr/bin/python3.11", None, (3, 11), True, True, 3)
    status = AgentStatus(4200, protocol.REFUSED, reason=protocol.NO_GROUP)
    found = attached_pid(Target(agent, "1", status, Injected("gdb", 0.5, "m")), status, None, None)
    assert (found.state, found.reason, found.works, found.holders) == ("refused", protocol.NO_GROUP, None, [])
    silent = Target(agent, "1", refusal="pid 4200 (pt_elastic) did not answer within 30 s")
    assert attached_pid(silent, None, None, None).state == "refused"
    cut_short = attached_pid(Target(agent, "1", injected=Injected("gdb", 0.5, "m")), None, None, None)  # Ctrl-C
    assert (cut_short.state, cut_short.reason) == (UNANSWERED, NOT_YET)


def test_the_strategy_holds_nothing_it_could_signal(tmp_path: Path) -> None:
    config = RunConfig(target=AttachedProcess(pids=(4242,)), duration_s=5.0)
    strategy = AttachedProcesses(AttachLaunch(tmp_path, config))
    assert strategy.watchdog is None  # its SIGUSR1 would kill a program that did not arm it
    assert strategy.pids_of({0: []}) == []  # the samples' pids never reach the tree
    assert strategy.tree.known == {} and strategy.tree.roots == {}
    assert not strategy.exited()  # not started: nothing has ended


def test_the_duration_counts_from_the_end_of_the_attach(tmp_path: Path) -> None:
    config = RunConfig(target=AttachedProcess(pids=(4242,)), duration_s=5.0)
    strategy = AttachedProcesses(AttachLaunch(tmp_path, config))
    now = time.monotonic()
    assert strategy.check({}, now + 100) is None  # still attaching (injection, census): no clock yet
    strategy.started = now
    assert strategy.check({}, now + 4.9) is None
    stop = strategy.check({}, now + 5.0)
    assert stop is not None and stop.reason == "reached the duration (5 s)" and not stop.interrupted


@pytest.mark.parametrize("pids", [[], [0]])
def test_an_attach_config_refuses_no_pid_before_looking(pids: list[int]) -> None:
    with pytest.raises(UsageError):
        attach_config(pids)


def _gone(tmp_path: Path, status: AgentStatus, final: dict | None, kernel: Exit | None) -> ProcessEnd | None:
    """How the strategy says an attached process that is gone (its start time no longer
    matches: `Target.alive` is False) ended, from the kernel's word and its final line."""
    config = RunConfig(target=AttachedProcess(pids=(4242,)), duration_s=5.0)
    strategy = AttachedProcesses(AttachLaunch(tmp_path, config))
    strategy.exits.refusal = "the kernel's process events are not open to hicache (EPERM: they need root)"
    if kernel is not None:
        strategy.exits._note(kernel)
    if final is not None:
        protocol.agent_dir(tmp_path).mkdir(exist_ok=True)  # the agents' directory: where its rank file is
        (protocol.agent_dir(tmp_path) / "rank-0.jsonl").write_text('{"t": 1, "wall": 2}\n' + json.dumps(final) + "\n")
    return strategy.ended(Target(RANK0, "no such start", status, attached=True), status)


EXITED_STATUS = AgentStatus(
    4242, protocol.DETACHED, rank=0, rank_file="rank-0.jsonl", detach_reason="the process exited"
)


def test_the_kernel_s_word_on_how_it_ended_comes_first(tmp_path: Path) -> None:
    final = {"t": 2, "wall": 3, "kind": "final", "message": "the process exited"}
    aborted = _gone(tmp_path, EXITED_STATUS, final, Exit(4242, 6, 0.0))
    assert (aborted.how, aborted.signal, aborted.told_by) == ("killed", "SIGABRT", "kernel")
    assert _gone(tmp_path, EXITED_STATUS, final, Exit(4242, 0, 0.0)).short() == "exited with code 0"


def test_a_process_killed_after_its_exit_hooks_ran_is_told_where_it_died(tmp_path: Path) -> None:
    final = {"t": 2, "wall": 3, "kind": "final", "message": "the process exited", "group_left_up": True}
    aborted = _gone(tmp_path, EXITED_STATUS, final, Exit(4242, 6, 0.0))
    assert aborted.note.startswith("after its exit hooks had run (its last line: the process exited), as its interp")
    assert "its process group left up: torch's exit race" in aborted.note
    assert "(pytorch/pytorch#190489); destroy_process_group() before exit avoids it" in aborted.note
    where = "after its exit hooks had run (its last line: the process exited), as its interpreter finalized"
    torn_down = _gone(tmp_path, EXITED_STATUS, {**final, "group_left_up": False}, Exit(4242, 6, 0.0))
    assert torn_down.note == where  # its group was destroyed: not torch's race
    assert _gone(tmp_path, EXITED_STATUS, final, Exit(4242, 15, 0.0)).note == where  # its launcher's SIGTERM
    midway = {"t": 2, "wall": 3, "kind": "final", "message": "the process left with os._exit(3)", "exit_code": 3}
    assert _gone(tmp_path, EXITED_STATUS, midway, Exit(4242, 6, 0.0)).note is None
    assert _gone(tmp_path, EXITED_STATUS, {"t": 2, "wall": 3}, Exit(4242, 9, 0.0)).note is None  # killed mid-run


def test_without_the_kernel_the_process_s_last_line_says_what_it_knew(tmp_path: Path) -> None:
    said = _gone(tmp_path, EXITED_STATUS, {"t": 2, "wall": 3, "kind": "final", "message": "the process exited"}, None)
    assert (said.how, said.exit_code, said.told_by) == ("exited", None, "process")
    assert said.note.startswith("the process exited: its exit code is its parent's to read (the kernel's")
    left = {"t": 2, "wall": 3, "kind": "final", "message": "the process left with os._exit(3)", "exit_code": 3}
    assert _gone(tmp_path, EXITED_STATUS, left, None).short() == "exited with code 3"


def test_a_process_gone_without_a_word_is_said_to_be_unknown(tmp_path: Path) -> None:
    attached = AgentStatus(4242, protocol.ATTACHED, rank=0, rank_file="rank-0.jsonl")  # cut off: no detach
    silent = _gone(tmp_path, attached, {"t": 2, "wall": 3}, None)
    assert (silent.how, silent.told_by) == ("unknown", "nobody")
    assert "it is not hicache's child" in silent.note
    detached_before = AgentStatus(4242, protocol.DETACHED, rank=0, detach_reason="hicache asked")
    assert _gone(tmp_path, detached_before, None, Exit(4242, 6, 0.0)) is None  # ended after hicache left
