"""The report of processes attached to: the same assessment as a trace, with the census's
holder in a leaking process's reason and the census in the report's `target`; the gate on it."""

from __future__ import annotations

from hicache_cli.analysis.gate import Thresholds, evaluate, exit_code
from hicache_cli.analysis.kinds import Status, Verdict
from hicache_cli.analysis.report import build_report
from hicache_cli.analysis.results import AttachSection, Report
from hicache_cli.attached import AttachedPid, CensusCost, HolderCount
from hicache_cli.config import RunConfig
from hicache_cli.errors import EXIT_FINDING, EXIT_OK
from hicache_cli.outcome import RunOutcome
from hicache_cli.targets import AttachedProcess
from tests.conftest import build_series

CONFIG = RunConfig(target=AttachedProcess(pids=(900,)), duration_s=60.0)
SYNC_WORKS = HolderCount("Scheduler.sync_works", "list", 845, 0, works_end=1900, completed_end=0, growth=1055)
RANK0 = AttachedPid(pid=1000, name="python", rank=0, state="detached", method="gdb", inject_s=1.2, census_s=0.4,
                    works=845, works_end=1900, holders=[SYNC_WORKS], cost=CensusCost(objects=170_000, busy_s=0.2),
                    detach_reason="hicache asked")  # fmt: skip
RANK1 = AttachedPid(pid=1001, name="python", rank=1, state="detached", works=0, works_end=0)
AGENT = AttachedPid(pid=900, name="pt_elastic", state="refused", reason="torch.distributed has no process group")
STOPPED = "reached the duration (60 s)"


def attach_report(leaking: bool = True) -> Report:
    samples = {
        0: build_series(0, rss_per_s=50_000.0 if leaking else 0.0, depth_per_s=300.0 if leaking else 0.0),
        1: build_series(1),
    }
    return build_report(CONFIG, samples, RunOutcome(exit_code=None, stopped=STOPPED, attached=(AGENT, RANK0, RANK1)))


def test_a_leaking_process_s_reason_names_its_holder_then_its_site() -> None:
    report = attach_report()
    rank0, rank1 = report.rank(0), report.rank(1)
    assert rank0.verdict == Verdict.LEAK
    assert "; `Scheduler.sync_works` holds 1,900 Works, 0 completed (+1,055 while attached)" in rank0.verdict_reason
    assert rank1.verdict == Verdict.BOUNDED and "holds" not in rank1.verdict_reason


def test_detaching_at_the_duration_is_a_completed_run_of_processes_hicache_does_not_own() -> None:
    report = attach_report()
    assert report.status == Status.COMPLETED and report.failures == []
    assert (report.program_exit_code, report.program_stopped, report.torchrun_exit_code) == (None, STOPPED, None)
    assert report.traced  # read as a traced program's processes: Works by site, per pid


def test_the_census_is_the_report_s_target_and_reads_back() -> None:
    report = attach_report()
    assert isinstance(report.target, AttachSection)
    assert report.target.pids == [900] and [p.pid for p in report.target.processes] == [900, 1000, 1001]
    assert report.target.process(1000) == RANK0
    again = Report.from_dict(report.to_dict())
    assert again.target == report.target and again.to_dict() == report.to_dict()


def test_the_gate_on_an_attached_process() -> None:
    limits = Thresholds(max_rss_slope_mb_per_h=100.0)
    assert exit_code(evaluate(attach_report(leaking=True), limits)) == EXIT_FINDING
    assert exit_code(evaluate(attach_report(leaking=False), limits)) == EXIT_OK
