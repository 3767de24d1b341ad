"""How an attach reads: each process tried as soon as its census is read, and at the end the
holders' growth and the detach under the per-process table."""

from __future__ import annotations

import io

from rich.console import Console

from hicache_cli.attached import AttachedPid, CensusCost, HolderCount
from hicache_cli.present.html import render
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.present.trace_views import HOLDERS_SHOWN, attached_lines
from tests.analysis.test_attach_report import AGENT, RANK0, attach_report


def test_a_refused_process_is_one_line() -> None:
    assert attached_lines(AGENT) == ["pid 900 (pt_elastic): not attached: torch.distributed has no process group"]


def test_an_attached_process_with_its_census_and_its_cost() -> None:
    assert attached_lines(RANK0) == [
        "pid 1000 (python) rank 0: attached by gdb in 1.2 s",
        "    census 0.4 s after attaching: 845 Works held",
        "           845 Works 0 completed  `Scheduler.sync_works` (list)",
        "    census cost: GIL held 0.20 s in all, longest hold 0 ms, 0.17 M objects tracked",
    ]


def test_at_the_end_each_holder_s_growth_and_the_detach() -> None:
    lines = attached_lines(RANK0, end=True)
    assert "           845 -> 1,900 Works (+1,055), 0 completed  `Scheduler.sync_works` (list)" in lines
    assert lines[-1] == "    detached: hicache asked"


def test_a_census_with_many_holders_shows_the_largest() -> None:
    many = [HolderCount(f"Owner.list{i}", "list", 100 - i, 0) for i in range(HOLDERS_SHOWN + 2)]
    process = AttachedPid(pid=7, name="python", rank=0, state="detached", works=500, holders=many,
                          cost=CensusCost(objects=1_000_000, snapshot_s=0.1, busy_s=0.8, max_hold_s=0.12,
                                          pause_per_million_s=0.9, truncated=True))  # fmt: skip
    lines = attached_lines(process)
    assert sum("`Owner.list" in line for line in lines) == HOLDERS_SHOWN
    assert "      ... 2 more holders in the report" in lines
    assert lines[-1] == (
        "    census cost: GIL held 0.90 s in all, longest hold 120 ms, 1.00 M objects tracked, "
        "0.90 s per million objects; cut short (partial)"
    )


def test_a_frozen_heap_is_said_and_what_the_census_could_not_examine_too() -> None:
    frozen = CensusCost(objects=400_000, snapshot_s=0.2, frozen=300_000, busy_s=0.2, max_hold_s=0.005)
    process = AttachedPid(pid=7, name="python", rank=0, state="detached", works=3, holders=[], cost=frozen)
    assert "0.40 M objects tracked (0.30 M of them frozen by gc.freeze())" in attached_lines(process)[-1]
    blind = CensusCost(objects=4_000, unseen="300,000 objects the program froze with gc.freeze(): not walked")
    lines = attached_lines(AttachedPid(pid=7, name="python", rank=0, state="detached", works=0, holders=[],
                                       cost=blind))  # fmt: skip
    assert lines[-1] == "    not examined: 300,000 objects the program froze with gc.freeze(): not walked"


def test_the_end_of_an_attach_titles_the_table_by_the_pids_and_lists_the_census() -> None:
    report = attach_report()
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    console.print(summary_table(report, 160))
    table = console.file.getvalue()  # type: ignore[attr-defined]
    assert table.splitlines()[0].startswith("attach: pid 900  status=completed  verdict=LEAK  (detached: reached")
    lines = verdict_lines(report)
    assert lines[0].startswith("rank 0 (pid 1000): LEAK - ")
    assert "pid 900 (pt_elastic): not attached: torch.distributed has no process group" in lines
    assert "    detached: hicache asked" in lines


def test_the_html_page_of_an_attach_is_titled_by_its_pids_and_names_the_holder() -> None:
    page = render(attach_report())
    assert "hicache: attach: pid 900" in page
    assert "Scheduler.sync_works" in page  # rank 0's reason


def test_how_each_process_ended_is_said_with_who_could_tell() -> None:
    from dataclasses import replace

    from hicache_cli.attached import ProcessEnd

    aborted = replace(RANK0, detach_reason="the process exited", ended=ProcessEnd("killed", signal="SIGABRT",
                                                                                  told_by="kernel"))  # fmt: skip
    assert attached_lines(aborted, end=True)[-1] == "    ended: killed by SIGABRT (the kernel's process events)"
    said = ProcessEnd("exited", told_by="process", note="the process exited: its exit code is its parent's to read")
    assert said.text() == "exited (its own last words; the process exited: its exit code is its parent's to read)"
    assert ProcessEnd("exited", exit_code=0, told_by="kernel").short() == "exited with code 0"
    assert ProcessEnd("unknown", told_by="nobody", note="it left no last line").text() == (
        "ended, how unknown (it left no last line)"
    )
