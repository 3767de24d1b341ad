"""Issue 39's shapes as programs (tests/lint/programs/): one container reached through a second
name is the same container, holding the same Works. Each is found at the line that makes the
Work, naming the place that keeps it; each draining twin is clean (test_programs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_cli.lint.engine import lint
from hicache_cli.lint.findings import Finding
from tests.lint.test_programs import PROGRAMS, findings, line_in


def one(name: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Finding, Path]:
    [finding] = findings(name, monkeypatch)
    assert finding.rule == "HC001"
    return finding, PROGRAMS / name


def test_a_list_passed_to_a_helper_that_appends_to_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """comm.start_send(t, dst, pending) appends the isend's Work to the caller's self.pending_sends."""
    finding, root = one("handoff_leaky", monkeypatch)
    isend = line_in(root / "comm.py", "pending.append(dist.isend(")
    init = line_in(root / "stage.py", "self.pending_sends = []")
    poll = line_in(root / "stage.py", "is_completed()")
    assert (finding.file, finding.line) == ("handoff_leaky/comm.py", isend)
    assert finding.message.startswith(
        f"the Work from isend is kept in self.pending_sends (handoff_leaky/stage.py:{init}, Stage.__init__), "
        f"put there through pending (line {isend}) and never waited: only polled with is_completed() "
        f"(handoff_leaky/stage.py:{poll}, Stage.settle)"
    )
    assert {(r.file, r.line) for r in finding.related} >= {("handoff_leaky/comm.py", isend)}


def test_a_getter_returns_one_of_the_object_s_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """self.bufs.send_queue(chunk).append(([t], [req])): the list is Buffers.send_forward's."""
    finding, root = one("getter_leaky", monkeypatch)
    isend = line_in(root / "schedule.py", "dist.isend(")
    assert (finding.file, finding.line) == ("getter_leaky/schedule.py", isend)
    assert "kept in self.send_forward (getter_leaky/buffers.py:" in finding.message
    assert "put there through self.bufs.send_queue(chunk)" in finding.message
    assert "only polled with is_completed()" in finding.message


def test_tensor_work_pairs_keep_their_elements_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    """`activation, work = self.in_flight[0]` and `return activation`: the tensor goes on to a layer
    outside the program, the Work does not go with it."""
    finding, root = one("pairs_leaky", monkeypatch)
    assert (finding.file, finding.line) == ("pairs_leaky/stream.py", line_in(root / "stream.py", "dist.isend("))
    append = line_in(root / "stream.py", "self.in_flight.append(")
    poll = line_in(root / "stream.py", "work.is_completed()")
    assert finding.message.startswith(f"the Work from isend is kept in self.in_flight (line {append})")
    assert f"only polled with is_completed() (line {poll}, ActivationStream.pop_sent)" in finding.message


def test_a_helper_chosen_into_a_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """`p2p_func = _batched_ops if batch_p2p else _plain_ops; return p2p_func(...)`: the call of
    communicate() whose requests are kept is found; the one whose requests are waited is not."""
    finding, root = one("chosen_leaky", monkeypatch)
    call = line_in(root / "schedule.py", "self.outstanding.extend(communicate(")
    assert (finding.file, finding.line) == ("chosen_leaky/schedule.py", call)
    assert finding.message.startswith("the Works returned by communicate() (")
    assert f"kept in self.outstanding (line {call})" in finding.message


def test_a_dict_handed_down_through_autograd_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    """SeqAllToAll.apply(x, group, self.handles, "q") runs forward(ctx, ...), which puts the Work
    under `kind + "_work"`; `kind + "_output"` is read back (and returned) without it."""
    finding, root = one("handles_leaky", monkeypatch)
    collective = line_in(root / "all_to_all.py", "dist.all_to_all_single(")
    put = line_in(root / "all_to_all.py", 'handles[kind + "_work"] = work')
    assert (finding.file, finding.line) == ("handles_leaky/all_to_all.py", collective)
    assert finding.message.startswith("the Work from all_to_all_single(async_op=True) is kept in self.handles (")
    assert f"put there through handles (line {put})" in finding.message
    assert finding.message.endswith("nothing in the program waits it")


def test_a_process_group_s_own_methods_make_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """self._pg.send([t], dst, tag) on a `pg: ProcessGroup`: three sends kept, only polled; the
    recvs and the allreduce, waited where they are made, are not found."""
    monkeypatch.chdir(PROGRAMS)
    result = lint(["pg_leaky"])
    root = PROGRAMS / "pg_leaky"
    sends = [n for n, text in enumerate((root / "transport.py").read_text().splitlines(), 1) if "._pg.send(" in text]
    assert [(f.file, f.line, f.rule) for f in result.findings] == [("pg_leaky/transport.py", n, "HC001") for n in sends]
    assert all(
        f.message.startswith("the Work from ProcessGroup.send is kept in self._outstanding") for f in result.findings
    )


def test_a_list_lent_to_a_helper_s_constructor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipeline builds ActivationSender(self.in_flight, peer); the sender appends, the pipeline
    only polls: the Work is kept in both names of the one list. (ctor_draining waits it: clean.)"""
    finding, root = one("ctor_leaky", monkeypatch)
    assert (finding.file, finding.line) == ("ctor_leaky/sender.py", line_in(root / "sender.py", "dist.isend("))
    init = line_in(root / "pipeline.py", "self.in_flight = []")
    assert f"and self.in_flight (ctor_leaky/pipeline.py:{init}, Pipeline.__init__)" in finding.message


def test_a_local_dict_keyed_by_step_in_a_while_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """`in_flight[step] = dist.batch_isend_irecv(...)` in the driver's while loop, retired by
    `all(w.is_completed() for w in works)` and `del`: `ghosts[step] = ...` does not start it afresh."""
    finding, root = one("steps_leaky", monkeypatch)
    post = line_in(root / "driver.py", "dist.batch_isend_irecv(")
    loop = line_in(root / "driver.py", "while step < steps")
    assert (finding.file, finding.line) == ("steps_leaky/driver.py", post)
    assert f"kept in in_flight, a local that grows on every pass of the while loop at line {loop}" in finding.message


def test_the_incident_as_a_25_line_script(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROGRAMS)
    [finding] = lint(["incident_leaky.py"]).findings
    path = PROGRAMS / "incident_leaky.py"
    assert len(path.read_text().splitlines()) <= 25
    assert (finding.file, finding.line, finding.rule) == ("incident_leaky.py", line_in(path, "dist.isend("), "HC001")
    assert finding.message.startswith(
        f"the Work from isend is kept in work_list (line {line_in(path, 'work_list.append(')})"
    )
    assert lint(["incident_draining.py"]).findings == []
