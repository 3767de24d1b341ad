"""The shapes real projects keep Works in, each a multi-module program (tests/lint/programs/):
found when nothing waits what is kept, clean when the same program drains it (issues 24 and 39:
the second set reaches one container through a second name - a helper's parameter, a getter, a
constructor's field, a tuple's element, a dict's value, a function chosen into a variable)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hicache_cli.lint.engine import lint
from hicache_cli.lint.findings import Finding

PROGRAMS = Path(__file__).parent / "programs"


def line_in(path: Path, marker: str) -> int:
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if marker in text:
            return number
    raise AssertionError(f"{marker!r} not in {path}")


def findings(name: str, monkeypatch: pytest.MonkeyPatch) -> list[Finding]:
    monkeypatch.chdir(PROGRAMS)
    result = lint([name])
    assert result.problems == [] and result.warnings == []
    return result.findings


def related_at(finding: Finding) -> set[tuple[str, int]]:
    return {(r.file, r.line) for r in finding.related}


def test_a_helper_in_another_module_returns_the_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """comm.py's send_pyobj returns [isend(size), isend(payload)]; scheduler.py keeps them in
    self.pending_sends and only polls them: found at the call that receives them."""
    root = PROGRAMS / "pump_leaky"
    [finding] = findings("pump_leaky", monkeypatch)
    call = line_in(root / "scheduler.py", "self.pending_sends.extend(send_pyobj(")
    poll = line_in(root / "scheduler.py", "not work.is_completed()")
    isend = line_in(root / "comm.py", "return [dist.isend(")
    assert (finding.file, finding.line, finding.rule) == ("pump_leaky/scheduler.py", call, "HC001")
    assert finding.message.startswith(
        f"the Works returned by send_pyobj() (isend at pump_leaky/comm.py:{isend}, send_pyobj) are kept in "
        f"self.pending_sends (line {call}) and never waited: only polled with is_completed() (line {poll}, "
        "PipelineScheduler._reap_finished_sends)"
    )
    assert related_at(finding) == {
        ("pump_leaky/scheduler.py", call),
        ("pump_leaky/scheduler.py", poll),
        ("pump_leaky/comm.py", isend),
    }


def test_a_record_in_a_class_attribute_declared_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    """executor.py wraps an irecv Work in an OngoingRecv dataclass and appends it to
    Backend.ongoing_reqs (declared in backend.py); main_loop.py only polls record.handle.
    Task.attach(handle) stores the same Work (a method named like a wait, but it keeps)."""
    root = PROGRAMS / "records_leaky"
    [finding] = findings("records_leaky", monkeypatch)
    irecv = line_in(root / "executor.py", "dist.irecv(")
    append = line_in(root / "executor.py", "Backend.ongoing_reqs.append(")
    poll = line_in(root / "main_loop.py", "req.handle.is_completed()")
    assert (finding.file, finding.line) == ("records_leaky/executor.py", irecv)
    assert f"kept in OngoingRecv.handle (line {append}), a record kept in Backend.ongoing_reqs" in finding.message
    assert "self.handle (records_leaky/task.py:" in finding.message
    assert f"only polled with is_completed() (records_leaky/main_loop.py:{poll}, update_ongoing)" in finding.message
    assert ("records_leaky/main_loop.py", poll) in related_at(finding)


def test_a_closure_s_list_outlives_its_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """patch.py's send() closes over in_flight and is installed into a namespace another
    module keeps: its list of (buffer, work) is kept, and only filtered by is_completed()."""
    root = PROGRAMS / "closure_leaky"
    [finding] = findings("closure_leaky", monkeypatch)
    assert (finding.file, finding.line) == ("closure_leaky/patch.py", line_in(root / "patch.py", "dist.isend("))
    assert "kept in in_flight, captured by install.send, which outlives install" in finding.message
    assert "only polled with is_completed()" in finding.message


def test_a_dict_of_batch_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    """self.pending[step] = dist.batch_isend_irecv(ops), settled by all(w.is_completed() ...)."""
    root = PROGRAMS / "batches_leaky"
    [finding] = findings("batches_leaky", monkeypatch)
    post = line_in(root / "pipeline.py", "dist.batch_isend_irecv(ops)")
    poll = line_in(root / "pipeline.py", "w.is_completed()")
    assert (finding.file, finding.line) == ("batches_leaky/pipeline.py", post)
    assert finding.message.startswith(f"the Work from batch_isend_irecv is kept in self.pending (line {post})")
    assert f"only polled with is_completed() (line {poll}, Pipeline.settle)" in finding.message


POLLED = ["pump", "records", "closure", "batches", "handoff", "getter", "pairs", "chosen", "pg", "ctor", "steps"]
SHAPES = [*POLLED, "handles"]  # handles_leaky: the wait is missing (a collective completes when polled)


@pytest.mark.parametrize("shape", SHAPES)
def test_each_draining_twin_is_clean(shape: str, monkeypatch: pytest.MonkeyPatch) -> None:
    assert findings(f"{shape}_draining", monkeypatch) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_the_twins_differ_only_where_the_works_are_settled(shape: str) -> None:
    """The same program but for the reaper: what the lint tells apart is the wait."""
    leaky, draining = PROGRAMS / f"{shape}_leaky", PROGRAMS / f"{shape}_draining"
    names = sorted(p.name for p in leaky.glob("*.py"))
    assert names == sorted(p.name for p in draining.glob("*.py"))
    differ = [n for n in names if (leaky / n).read_text() != (draining / n).read_text()]
    assert len(differ) == 1
    for path in (leaky / differ[0], draining / differ[0]):
        ast.parse(path.read_text(encoding="utf-8"))
    assert ("is_completed" in (leaky / differ[0]).read_text()) == (shape in POLLED)
    assert ".wait()" not in (leaky / differ[0]).read_text() or shape in POLLED
    assert ".wait()" in (draining / differ[0]).read_text() and "is_completed" not in (draining / differ[0]).read_text()


def test_the_whole_directory_is_one_finding_per_leaking_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROGRAMS)
    result = lint(["."])
    assert sorted({f.file.split("/")[0] for f in result.findings}) == sorted(
        [f"{shape}_leaky" for shape in SHAPES] + ["incident_leaky.py"]
    )
