"""hicache trace on the launcher side: its options, its report and how it reads, its exit
code (synthetic samples of traced processes; the real program runs are in integration/)."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hicache_cli.analysis.results import Poll, Report, Site, Works
from hicache_cli.analysis.trace_report import poll_text, site_text, top_site_line, works_summary
from hicache_cli.cli.commands.trace import trace_exit_code
from hicache_cli.cli.configure import trace_config
from hicache_cli.cli.main import main
from hicache_cli.cli.options import Measurement
from hicache_cli.config import RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.execution import RunResult
from hicache_cli.outcome import RunOutcome
from hicache_cli.present.progress import summary_table, verdict_lines
from hicache_cli.sample import Sample
from hicache_cli.series import Totals
from hicache_cli.targets import TracedCommand
from tests.conftest import report_json

PY = sys.executable
LEAKY_SITE = {"file": "/srv/app/sync.py", "line": 42, "function": "sync_counts", "op": "isend", "peer": 1}


def _traced(series: list[Sample], rank: int, sites: list[dict[str, Any]], *, final: bool = True) -> list[Sample]:
    """A process's samples as the tracer writes them: works on every line, sites now and then."""
    out = []
    for i, s in enumerate(series):
        live = s.depth
        created = live + s.rounds
        works = {"created": created, "waited": created - live, "completed": created - live, "dropped": 0, "live": live}
        extra: dict[str, Any] = {"rank": rank, "works": works, "counters": {"world_size": 2}, "rounds": 0}
        if i % 10 == 9 or i == len(series) - 1:
            extra["sites"] = [{**site, "live": live, "live_max": live, "created": created} for site in sites]
        out.append(Sample(**{**s.as_dict(), **extra}))
    if not final:
        out[-1] = Sample(**{**out[-1].as_dict(), "kind": "sample", "state": "running", "message": None})
    return out


@pytest.fixture
def leak_and_drain(make_series: Callable[..., list[Sample]]) -> dict[int, list[Sample]]:
    leaky = make_series(0, n=150, rss_per_s=200_000, depth_per_s=800)
    drained = make_series(1, n=150, rss_noise=20_000)
    return {
        0: _traced(leaky, 0, [LEAKY_SITE]),
        1: _traced(drained, 1, [{**LEAKY_SITE, "op": "recv", "peer": 0}], final=False),
    }


def _report(samples: dict[int, list[Sample]], **outcome: Any) -> dict[str, Any]:
    config = trace_config([PY, "train.py"])
    return report_json(config, samples, RunOutcome(**{"exit_code": None, **outcome}))


def test_the_report_names_the_leaking_line(leak_and_drain: dict[int, list[Sample]]) -> None:
    report = _report(leak_and_drain, exit_code=0)
    rank0, rank1 = report["ranks"]
    assert report["verdict"] == "LEAK"
    assert rank0["verdict"] == "LEAK"
    assert "live Works grow by" in rank0["verdict_reason"]
    assert "live Works created at sync.py:42 in sync_counts (isend to rank 1), never waited" in rank0["verdict_reason"]
    works = rank0["works"]
    assert works["live_final"] == leak_and_drain[0][-1].depth
    assert works["live_max"] == max(s.depth for s in leak_and_drain[0])
    assert works["sites"][0]["line"] == 42
    assert rank1["verdict"] != "LEAK"
    assert (rank0["rank"], rank0["slot"], rank0["world_size"]) == (0, 0, 2)
    assert report["target"]["kind"] == "trace"
    assert report["target"]["processes"] == 2
    assert report["program_exit_code"] == 0
    assert report["torchrun_exit_code"] is None


def test_a_process_without_a_final_line_is_not_a_failure(leak_and_drain: dict[int, list[Sample]]) -> None:
    report = _report(leak_and_drain)
    assert report["failures"] == []  # rank 1 left by os._exit or a signal: the program's business
    assert report["status"] == "completed"


def test_a_process_that_raised_is_a_failure(make_series: Callable[..., list[Sample]]) -> None:
    broken = _traced(make_series(0, n=40, final_state="error", message="ValueError: boom"), 0, [])
    report = _report({0: broken})
    assert report["status"] == "failed"
    assert report["failures"][0]["message"] == "ValueError: boom"


def test_ranks_are_torch_ranks_and_slots_their_files(make_series: Callable[..., list[Sample]]) -> None:
    """Two process groups with ranks 0 and 1 (one test after another): four files."""
    samples = {slot: _traced(make_series(slot, n=30), slot % 2, []) for slot in range(4)}
    ranks = _report(samples)["ranks"]
    assert [(r["rank"], r["slot"]) for r in ranks] == [(0, 0), (1, 1), (0, 2), (1, 3)]


def test_nothing_traced_reads_as_such() -> None:
    report = Report.from_dict(_report({}, exit_code=3))
    assert report.ranks == []
    assert verdict_lines(report) == [
        "no process of the program started a torch.distributed process group: nothing to trace"
    ]


def test_the_table_and_lines_show_works_and_sites(leak_and_drain: dict[int, list[Sample]]) -> None:
    report = Report.from_dict(_report(leak_and_drain, exit_code=0))
    out = io.StringIO()
    console = Console(file=out, width=160, force_terminal=True, color_system=None)
    console.print(summary_table(report, 160))
    text = out.getvalue()
    assert "live max/final" in text and "sync.py:42 in sync_counts (isend to rank 1)" in text
    lines = verdict_lines(report)
    assert lines[0].startswith("rank 0 (pid 1000): LEAK")
    assert "sync.py:42 in sync_counts (isend to rank 1)  (/srv/app/sync.py)" in lines[1]


def test_site_text_and_the_top_site_line() -> None:
    assert site_text(Site(**{**LEAKY_SITE, "op": "recv", "peer": 0})) == "sync.py:42 in sync_counts (recv from rank 0)"
    reduce = Site(**{**LEAKY_SITE, "op": "all_reduce", "peer": None})
    assert site_text(reduce) == "sync.py:42 in sync_counts (all_reduce)"
    released = Works(sites=[Site(**{**LEAKY_SITE, "live": 0, "live_max": 900})])
    assert top_site_line(released) == (
        "up to 900 live Works created at sync.py:42 in sync_counts (isend to rank 1), never waited, released at the end"
    )
    assert top_site_line(Works(sites=[Site(**{**LEAKY_SITE, "live": 0, "live_max": 1})])) is None
    assert top_site_line(None) is None
    assert works_summary(Totals()) is None


POLL = {"file": "/srv/app/reaper.py", "line": 31, "function": "reap"}


def test_a_polled_site_says_where_and_why_it_stays_live() -> None:
    polled = Site(**{**LEAKY_SITE, "live": 40, "backend": "gloo"}, polled=Poll(**POLL))
    assert top_site_line(Works(sites=[polled])) == (
        "40 live Works created at sync.py:42 in sync_counts (isend to rank 1), never waited: "
        "polled with is_completed() at reaper.py:31 in reap, which stays False on gloo until wait()"
    )
    seen_true = replace(polled, completed=3)  # the program saw some complete: no claim that they never do
    assert poll_text(seen_true) == "polled with is_completed() at reaper.py:31 in reap"
    nccl = replace(polled, backend="nccl")  # not measured there: the line, no claim
    assert poll_text(nccl) == "polled with is_completed() at reaper.py:31 in reap"
    collective = replace(polled, op="all_gather_into_tensor", peer=None)  # completes by itself on gloo
    assert poll_text(collective) == "polled with is_completed() at reaper.py:31 in reap"
    batched = replace(polled, op="batch_isend_irecv(irecv)")
    assert poll_text(batched).endswith("which stays False on gloo until wait()")
    assert site_text(batched) == "sync.py:42 in sync_counts (batch_isend_irecv(irecv) from rank 1)"
    assert poll_text(Site(**LEAKY_SITE)) is None


@pytest.mark.parametrize(
    ("command", "options", "says"),
    [
        ([], {}, "name the program after --"),
        (["surely-no-such-program-here"], {}, "no such command on PATH"),
        (["/nonexistent/prog"], {}, "not an executable file"),
        ([PY], {"loop": "no-colon"}, "--loop 'no-colon': give MODULE:QUALNAME"),
        ([PY], {"loop": "mod:"}, "give MODULE:QUALNAME"),
        ([PY], {"probe_hz": 0.0}, "--probe-hz"),
        ([PY], {"duration": "-1s"}, "--duration"),
        ([PY], {"duration": "5s", "warmup": "10s"}, "must be shorter than --duration"),
        ([PY], {"stall_timeout": "2h"}, "--stall-timeout"),
        ([PY], {"leak_threshold": float("nan")}, "--leak-threshold"),
    ],
)
def test_bad_trace_options_are_refused(command: list[str], options: dict[str, Any], says: str) -> None:
    with pytest.raises(UsageError) as refused:
        traced(command, **options)
    assert says in str(refused.value)


def traced(command: list[str], loop: str | None = None, **measure: Any) -> RunConfig:
    """A trace's config from its options as typed (trace's defaults: until the program ends, 60s stalls)."""
    return trace_config(command, loop, Measurement(**{"duration": None, "stall_timeout": "60s", **measure}))


def test_a_trace_config_records_the_command_and_where_it_ran() -> None:
    config = traced([PY, "-m", "pytest"], loop="app.server:Scheduler.step", duration="30s")
    assert config.target == TracedCommand(
        command=(PY, "-m", "pytest"), loop="app.server:Scheduler.step", cwd=str(Path.cwd())
    )
    assert (config.duration_s, config.expected_ranks) == (30.0, None)  # ranks: found as the program starts them
    assert trace_config([PY]).duration_s is None  # no --duration: until the program ends


def _result(report: dict[str, Any], **launch: Any) -> RunResult:
    typed = Report.from_dict({**report_json(StressConfig(), {}, RunOutcome()), **report})
    return RunResult(Path("."), None, typed, RunOutcome(**{"exit_code": 0, "wall_s": 1.0, **launch}))


@pytest.mark.parametrize(
    ("report", "launch", "code"),
    [
        ({"status": "completed", "program_exit_code": 0}, {}, 0),
        ({"status": "completed", "program_exit_code": 5}, {}, 5),
        ({"status": "completed", "program_exit_code": -15}, {}, 143),
        ({"status": "completed", "program_exit_code": -2}, {"stopped": "reached the duration"}, 0),
        ({"status": "interrupted", "interruption": {"signal": "SIGTERM"}}, {"interrupted": True}, 143),
        ({"status": "failed", "program_exit_code": None}, {"stopped": "watchdog: ...", "stalls": ("x",)}, 3),
    ],
)
def test_the_exit_code_is_the_programs_unless_hicache_ended_it(
    report: dict[str, Any], launch: dict[str, Any], code: int
) -> None:
    assert trace_exit_code(_result(report, **launch)) == code


def test_watch_waits_for_a_traced_process_before_calling_the_run_over(make_series: Callable[..., list[Sample]]) -> None:
    from hicache_cli.cli.running import _all_final

    assert not _all_final({}, 0)  # nothing started yet: a trace is not over
    assert _all_final({3: _traced(make_series(1, n=5), 1, [])}, 0)
    assert not _all_final({0: _traced(make_series(0, n=5), 0, [], final=False)}, 0)


def test_the_dashboard_of_a_trace_shows_the_command_and_live_works(leak_and_drain: dict[int, list[Sample]]) -> None:
    from hicache_cli.present.dashboard import Dashboard, render

    config = trace_config([PY, "train.py"])
    model = Dashboard(config, "hicache-runs/x-trace").model(leak_and_drain, 20.0)
    assert [r.rank for r in model.rows] == [0, 1]
    out = io.StringIO()
    Console(file=out, width=120, force_terminal=True, color_system=None).print(render(model, 120))
    text = out.getvalue()
    assert f"hicache trace: {PY} train.py" in text
    assert "until the program ends" in text
    assert " live " in text.splitlines()[3] and "depth" not in text


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["python", "-I", "train.py"], "-I, which ignores PYTHONPATH"),
        (["/usr/bin/python3.11", "-S", "-c", "pass"], "-S, which skips the site module"),
        (["python3", "-E", "-m", "torch.distributed.run"], "-E, which ignores PYTHONPATH"),
        (["python", "-uIs", "x.py"], "-I, which ignores PYTHONPATH"),  # a cluster of flags
        (["python", "-W", "ignore", "-I", "x.py"], "-I, which ignores PYTHONPATH"),  # -W's value apart
        (["python", "-Wignore", "-S", "x.py"], "-S, which skips the site module"),
        (["python", "train.py", "-I"], None),  # the script's own argument
        (["python", "-c", "import sys", "-I"], None),
        (["python", "-m", "pkg", "-S"], None),
        (["python", "-XI", "x.py"], None),  # -X's value, not -I
        (["torchrun", "-I"], None),  # not an interpreter hicache can read the flags of
        ([], None),
    ],
)
def test_interpreter_flags_that_keep_the_tracer_out(command: list[str], why: str | None) -> None:
    from hicache_cli.analysis.trace_report import untraceable_flag

    assert untraceable_flag(command) == why


def test_nothing_traced_under_python_dash_i_names_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: "no process of the program started a process group", for a program the tracer
    could never enter. A real `python -I` run, by trace and by check."""
    program = [sys.executable, "-I", "-c", "pass"]
    assert main(["trace", "--no-live", "--run-dir", str(tmp_path / "t"), "--", *program]) == 0
    limit = "the program runs python -I, which ignores PYTHONPATH, so hicache's tracer never loads"
    traced = capsys.readouterr()
    assert f"no process of the program started a torch.distributed process group: {limit}" in traced.out + traced.err
    assert main(["check", "--no-live", "--run-dir", str(tmp_path / "c"), "--", *program]) == 3
    checked = capsys.readouterr()
    lines = (checked.out + checked.err).splitlines()
    assert any("UNDECIDED" in line and limit in line for line in lines), lines
