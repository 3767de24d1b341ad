"""progress: a traced process that stopped making progress before its end (issue 38), on
synthetic samples and a recorded run (tests/data/traced/outrunning)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hicache_cli.analysis.gate import Thresholds, evaluate, exit_code
from hicache_cli.analysis.progress import stuck, stuck_processes
from hicache_cli.analysis.report import build_report
from hicache_cli.config import RunConfig
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import DETACHED_PREFIX, STOPPED_AT_END
from hicache_cli.series import read_run
from tests.conftest import build_sample

OUTRUNNING = Path(__file__).resolve().parents[1] / "data" / "traced" / "outrunning"
RECV = "recv from rank 1 at ping_ack.py:31"


def process(progress_until: float, end: float, final: str | None = STOPPED_AT_END, ops_per_s: int = 100) -> list:
    """A traced process sampled at 10 Hz to `end`, whose calls advance until `progress_until`
    (`ops_per_s` ProcessGroup calls a second, blocking ones: no Work reaches the program), then
    blocked in a recv; with a final line saying `final` (None: none)."""
    out = []
    for i in range(int(end * 10) + 1):
        t = i / 10
        ops = int(ops_per_s * min(t, progress_until))
        blocked = {"blocked_on": RECV, "blocked_peer": 1} if t > progress_until else {}
        out.append(build_sample(0, t, works={"created": 0, "waited": 0, "dropped": 0, "ops": ops}, **blocked))
    if final is not None:
        out.append(replace(out[-1], kind="final", state="done", message=final, blocked_on=None))
    return out


def test_a_process_stopped_by_hicache_after_standing_still_longer_than_the_bound_was_stuck() -> None:
    found = stuck(process(3.0, 20.0), bound_s=5.0)
    assert found is not None
    assert (round(found.since_s, 1), round(found.for_s, 1), found.blocked_in) == (3.0, 17.0, RECV)
    assert found.text() == (
        f"no progress for the last 17 s (from t=3.0 s: no Work made, waited or dropped, no message, no round): "
        f"blocked in {RECV}"
    )


def test_blocking_calls_are_progress_though_no_work_reaches_the_program() -> None:
    assert stuck(process(20.0, 20.0), bound_s=5.0) is None


def test_a_quiet_end_shorter_than_the_bound_is_not_stuck() -> None:
    assert stuck(process(16.0, 20.0), bound_s=5.0) is None


def test_a_process_that_ended_by_itself_was_not_stuck() -> None:
    """Whatever it waited for came (or it gave up): it ended."""
    assert stuck(process(3.0, 20.0, final="the process exited"), bound_s=5.0) is None
    assert stuck(process(3.0, 20.0, final=None), bound_s=5.0) is not None  # killed while stuck


def test_a_process_whose_samples_stopped_while_the_run_went_on_was_unresponsive() -> None:
    quiet = process(3.0, 4.0, final=None)
    found = stuck_processes({0: quiet, 1: process(30.0, 30.0)}, bound_s=5.0)
    assert set(found) == {0} and found[0].unresponsive
    assert found[0].text() == "no sample for the last 26 s of the run (from t=4.0 s): unresponsive"


def test_hicache_s_own_ranks_are_never_judged_so() -> None:
    own = [build_sample(0, i / 10) for i in range(200)]  # no Work counts: a stress rank
    assert stuck(own, bound_s=5.0) is None


def test_the_report_and_the_gate_say_so() -> None:
    """The recorded run: rank 1 received one update in its first second, then waited for a lost
    one until hicache stopped it 27 s later. With a bound of 5 s it is stuck, the report says
    where beside its verdict, and `check` cannot pass it; rank 0 kept sending to the end."""
    config = replace(RunConfig.load(OUTRUNNING), stall_timeout_s=5.0)
    report = build_report(config, read_run(OUTRUNNING), RunOutcome(), OUTRUNNING)
    sender, collector = report.ranks
    assert sender.stuck is None
    assert collector.stuck is not None and collector.stuck.for_s > 20
    assert collector.verdict_reason.endswith(collector.stuck.text)
    assert collector.stuck.text.startswith("no progress for the last ")
    progress = [a for a in evaluate(report, Thresholds(rss_slope_given=False)) if a.name == "progress"]
    assert [(a.rank, a.passed) for a in progress] == [(1, None)]
    assert report.to_dict()["ranks"][1]["stuck"]["for_s"] == collector.stuck.for_s
    default = build_report(RunConfig.load(OUTRUNNING), read_run(OUTRUNNING), RunOutcome(), OUTRUNNING)
    assert [r.stuck for r in default.ranks] == [None, None]  # 60 s: longer than it stood still
    assert exit_code(evaluate(report, Thresholds(rss_slope_given=False))) == 1  # the sender's leak still decides


def test_a_leak_that_ran_until_the_process_hung_is_still_a_leak() -> None:
    """tests/data/traced/dropped-then-hung (progress_beacon.py): the trainer dropped each send's
    Work for 12 s, its memory climbing ~200 B a send, then hung in its last blocking send; the
    dashboard waited in recv from the start. Judged over the whole run, the flat 10 s at the end
    made the climb a warm-up and the trainer BOUNDED; judged up to where it stopped, a LEAK."""
    run_dir = OUTRUNNING.parent / "dropped-then-hung"
    config = replace(RunConfig.load(run_dir), stall_timeout_s=3.0)
    trainer, dashboard = build_report(config, read_run(run_dir), RunOutcome(), run_dir).ranks
    assert (trainer.verdict, trainer.cause.kind) == ("LEAK", "dropped"), trainer.verdict_reason
    assert trainer.stuck.blocked_in == "send to rank 1 at progress_beacon.py:36"
    assert trainer.verdict_reason.endswith(trainer.stuck.text)
    assert dashboard.stuck.blocked_in == "recv from rank 0 at progress_beacon.py:44"
    assert dashboard.verdict == "INCONCLUSIVE"  # stuck from its first tenth of a second: nothing to judge
    unstuck = replace(config, stall_timeout_s=60.0)
    whole = build_report(unstuck, read_run(run_dir), RunOutcome(), run_dir).ranks[0]
    assert whole.stuck is None and whole.verdict != "LEAK"  # what the whole run's data says


def test_a_process_hicache_attach_detached_from_is_not_judged_stuck() -> None:
    """It runs on as it was (an idle server); hicache only stopped watching it."""
    assert stuck(process(3.0, 20.0, final=f"{DETACHED_PREFIX}hicache asked"), bound_s=5.0) is None
