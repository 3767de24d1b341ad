"""A marked test's per-rank results and the failure it makes (pure: no I/O, no torch).

Each rank's Works and verdict come from its samples with the code `hicache trace` reports
with (`trace_report.works_summary`, `assess.assess_rank`), so a test and a trace judge alike.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from hicache_cli.analysis import stats
from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.kinds import CauseKind, Verdict
from hicache_cli.analysis.results import Site, Works
from hicache_cli.analysis.shutdown import unwaited_text
from hicache_cli.analysis.trace_report import site_text, works_summary
from hicache_cli.protocol import ErrorKind
from hicache_cli.pytest_ranks.protocol import FAILED, SKIPPED, Outcome
from hicache_cli.pytest_ranks.spec import RanksSpec
from hicache_cli.sample import Sample
from hicache_cli.series import RankSeries, RunSeries

DEFAULT_RSS_THRESHOLD_MB_PER_H = 100.0  # the verdict's threshold when max_rss_slope is not given (trace's default)
STACK_FRAMES = 12  # of a hung rank's stack, innermost first
LOG_TAIL_LINES = 15


class RankOutcome(str, Enum):
    PASSED = "passed"
    FAILED = "failed"  # the body raised (an assert, pytest.fail, any exception)
    SKIPPED = "skipped"  # pytest.skip() in the body
    CRASHED = "crashed"  # the process ended before its body returned (a signal, os._exit)
    TIMED_OUT = "timed out"  # still running at the marker's timeout
    STOPPED = "stopped"  # still running once the test had failed on another count; stopped


@dataclass(frozen=True)
class RankEnd:
    """How one rank process ended, as the launcher saw it."""

    rank: int
    pid: int
    outcome: RankOutcome
    reported: Outcome | None = None  # what the rank wrote, when it got that far
    exit_code: int | None = None  # the process's own (negative: the signal), when it ended by itself
    stack: str | None = None  # its stack dump, when it was stopped
    log_tail: str | None = None  # the end of its output, when it crashed
    in_body: bool = True  # False: it was stopped before it reached the test body (start-up)


@dataclass(frozen=True)
class WorkSite:
    """Where Works were created: `test_reap.py:14 in test_reap (isend to rank 1)`."""

    file: str
    line: int
    function: str
    op: str
    peer: int | None
    created: int
    waited: int
    live: int  # at the rank's last sample
    live_max: int  # the most live at once

    @classmethod
    def of(cls, site: Site) -> WorkSite:
        return cls(site.file, site.line, site.function, site.op, site.peer, site.created, site.waited, site.live,
                   site.live_max)  # fmt: skip

    def where(self) -> str:
        return site_text(Site(file=self.file, line=self.line, function=self.function, op=self.op, peer=self.peer))


@dataclass(frozen=True)
class RankResult:
    rank: int
    pid: int
    outcome: RankOutcome
    error: str | None  # the exception's line, or what ended the process
    traceback: str | None  # the body's traceback (FAILED), or the stack it was stopped in
    created: int  # Works handed to the body
    waited: int
    dropped: int  # let go of without a wait
    live_max: int  # the most Works held and never waited, at any sample or by any site
    live_final: int  # held and never waited at the end
    top_site: WorkSite | None  # the site with the most live Works at once
    sites: tuple[WorkSite, ...]
    verdict: Verdict  # as `hicache trace` would say
    verdict_reason: str
    cause: CauseKind | None  # why memory grows: its Works, a message backlog, or neither (analysis/causes.py)
    rss_slope_mb_per_h: float | None
    rss_slope_ci_mb_per_h: tuple[float, float] | None  # 95%
    samples: int
    body_s: float | None  # how long the body ran (None: it never returned)
    unwaited_sends: tuple[dict[str, Any], ...] = ()  # sends the body returned without waiting, by site
    blocked_on: str | None = None  # at its last sample: the call it was blocked in ("recv from rank 0 at x.py:17")
    blocked_peer: int | None = None  # ... and the rank it waited on
    error_kind: str | None = None  # protocol.ErrorKind of what the body raised


@dataclass(frozen=True)
class RanksResult:
    """What one marked test measured: every rank's result, and why it failed (if it did)."""

    nodeid: str
    spec: RanksSpec
    ranks: tuple[RankResult, ...]
    failures: tuple[str, ...]  # each a short paragraph; empty when the test passed
    skipped: str | None  # the reason, when the body skipped and nothing failed
    run_dir: Path
    wall_s: float  # ranks started to ranks ended, in pytest
    startup_s: float | None  # ranks started to the last rank's body starting
    forked: int = 0  # ranks forked from the fork server; the others were spawned

    @property
    def passed(self) -> bool:
        return not self.failures and self.skipped is None

    def rank(self, rank: int) -> RankResult:
        return next(r for r in self.ranks if r.rank == rank)

    @property
    def message(self) -> str:
        """The test's failure, short: one paragraph per thing that failed, root cause first."""
        return "\n".join([*self.failures, f"run directory: {self.run_dir}"])

    def summary(self) -> dict[str, Any]:
        """Per rank in a few numbers, for JUnit's properties and benchmarks."""
        return {
            "wall_s": round(self.wall_s, 3),
            "startup_s": None if self.startup_s is None else round(self.startup_s, 3),
            "forked": self.forked,
            "ranks": [
                {
                    "rank": r.rank,
                    "outcome": r.outcome.value,
                    "live_max": r.live_max,
                    "live_final": r.live_final,
                    "created": r.created,
                    "waited": r.waited,
                    "top_site": r.top_site.where() if r.top_site else None,
                    "verdict": r.verdict,
                }
                for r in self.ranks
            ],
        }


# -- judging ------------------------------------------------------------------------------


def live_max_of(followed: RankSeries) -> int:
    """The most live Works at any sample, or held at once by any one site (exact over every
    sample the rank wrote, not only the kept history)."""
    return max(followed.totals.live_max, followed.totals.site_live_max)


def over_live_limit(run: RunSeries, max_live_works: int | None) -> bool:
    """Whether some rank has already held more live Works than allowed (the test has failed).
    Cheap enough to ask twenty times a second: the totals are kept as samples arrive."""
    if max_live_works is None:
        return False
    return any(live_max_of(followed) > max_live_works for followed in run.ranks.values())


def assess(
    spec: RanksSpec,
    nodeid: str,
    test_file: str,
    ends: Sequence[RankEnd],
    samples: RunSeries | Mapping[int, list[Sample]],
    run_dir: Path,
    wall_s: float,
    spawned_wall: float,
    forked: int = 0,
) -> RanksResult:
    """`samples`: as the launcher followed them (RunSeries), or whole."""
    run = samples if isinstance(samples, RunSeries) else RunSeries.of(samples)
    ranks = tuple(
        _rank_result(end, run.ranks.get(end.rank) or RankSeries(), spec, run.samples)
        for end in sorted(ends, key=lambda e: e.rank)
    )
    failures = _failures(spec, ranks, ends, test_file)
    skips = [e.reported.error for e in ends if e.reported is not None and e.reported.status == SKIPPED]
    skipped = None
    if skips and not failures:
        skipped = (skips[0] or "skipped").removeprefix("Skipped: ")
    starts = [e.reported.body_started for e in ends if e.reported is not None and e.reported.body_started]
    startup = max(starts) - spawned_wall if len(starts) == len(ends) else None
    return RanksResult(nodeid, spec, ranks, tuple(failures), skipped, run_dir, wall_s, startup, forked)


def _rank_result(end: RankEnd, followed: RankSeries, spec: RanksSpec, run: Mapping[int, list[Sample]]) -> RankResult:
    series = followed.kept
    works = works_summary(followed.totals) or Works()
    sites = tuple(WorkSite.of(s) for s in works.sites)
    top = max(sites, key=lambda s: (s.live_max, s.live, s.created), default=None)
    threshold = spec.max_rss_slope_mb_per_h or DEFAULT_RSS_THRESHOLD_MB_PER_H
    verdict, reason, slope, ci, cause = Verdict.INCONCLUSIVE, "no samples", None, None, None
    if series:
        judged = judge(run, end.rank, None, threshold)
        verdict, reason = judged.verdict.verdict, judged.verdict.reason
        cause = judged.finding.cause if judged.finding is not None else None
        if judged.assessment.rss is not None:
            rss = judged.assessment.rss
            slope = stats.per_hour_mb(rss.slope)
            ci = (stats.per_hour_mb(rss.lo), stats.per_hour_mb(rss.hi))
    reported = end.reported
    body_s = None
    if reported is not None and reported.body_started and reported.body_ended:
        body_s = reported.body_ended - reported.body_started
    error = reported.error if reported is not None else _ended_text(end)
    trace = reported.traceback if reported is not None and reported.status == FAILED else end.stack
    return RankResult(
        rank=end.rank,
        pid=end.pid,
        outcome=end.outcome,
        error=error if end.outcome is not RankOutcome.PASSED else None,
        traceback=trace,
        created=works.created,
        waited=works.waited,
        dropped=works.dropped,
        live_max=live_max_of(followed),
        live_final=works.live_final,
        top_site=top,
        sites=sites,
        verdict=verdict,
        verdict_reason=reason,
        cause=cause,
        rss_slope_mb_per_h=slope,
        rss_slope_ci_mb_per_h=ci,
        samples=followed.totals.samples,
        body_s=body_s,
        unwaited_sends=tuple(reported.unwaited_sends or ()) if reported is not None else (),
        blocked_on=series[-1].blocked_on if series else None,
        blocked_peer=series[-1].blocked_peer if series else None,
        error_kind=reported.error_kind if reported is not None else None,
    )


def _ended_text(end: RankEnd) -> str | None:
    if end.outcome is RankOutcome.CRASHED:
        code = end.exit_code
        if code is not None and code < 0:
            return f"died of {_signal_name(-code)} before its test body returned"
        return f"exited with code {code} before its test body returned"
    if end.outcome is RankOutcome.TIMED_OUT:
        return "did not finish within the timeout"
    if end.outcome is RankOutcome.STOPPED:
        return "stopped once the test had failed"
    return None


def _signal_name(signo: int) -> str:
    import signal

    try:
        return signal.Signals(signo).name
    except ValueError:
        return f"signal {signo}"


def _failures(spec: RanksSpec, ranks: Sequence[RankResult], ends: Sequence[RankEnd], test_file: str) -> list[str]:
    """Root causes first: what a body raised (earliest first), a crash, a connection that broke
    under a body (the consequence of a crash or of another rank's error, so after them), too
    many live Works, an RSS trend over the limit, a hang; ranks stopped because of those last."""
    by_rank = {e.rank: e for e in ends}
    out: list[str] = []
    raised = sorted((r for r in ranks if r.outcome is RankOutcome.FAILED), key=lambda r: _ended_at(by_rank[r.rank]))
    own = [r for r in raised if r.error_kind != ErrorKind.CONNECTION]
    broken = [r for r in raised if r.error_kind == ErrorKind.CONNECTION]
    traced = (own + broken)[:1]  # the first raised is said with its traceback
    for r in own:
        out.append(_raised(r, r in traced))
    for r in ranks:
        if r.outcome is RankOutcome.CRASHED:
            tail = by_rank[r.rank].log_tail
            last = f"; its last output:\n{_indent(tail)}" if tail else ""
            out.append(f"rank {r.rank} (pid {r.pid}) {r.error}{last}")
    for r in broken:
        out.append(_raised(r, r in traced))
    hazards = {r.rank for r in ranks if r.unwaited_sends} if not spec.allow_unwaited_sends else set()
    for r in ranks:
        if r.rank in hazards:  # a shutdown hazard: its peer may wait for these forever
            out.append(unwaited_text(f"rank {r.rank}", "returned", list(r.unwaited_sends)))
    if spec.max_live_works is not None:
        for r in ranks:
            if r.live_max > spec.max_live_works:
                out.append(_live_line(r, spec.max_live_works))
    if spec.max_rss_slope_mb_per_h is not None:
        for r in ranks:
            if r.verdict is Verdict.LEAK or r.cause is CauseKind.MEMORY:  # memory not from Works: failed when asked
                out.append(f"rank {r.rank}: {r.verdict_reason} (max_rss_slope={spec.max_rss_slope_mb_per_h:g} MB/h)")
    for r in ranks:
        if r.outcome is RankOutcome.TIMED_OUT:
            stack = stack_excerpt(r.traceback or "", test_file)
            where = f"; its stack (most recent call first):\n{_indent(stack)}" if stack else "; no stack could be taken"
            what = f"did not finish within the {spec.timeout_s:g} s timeout"
            if not by_rank[r.rank].in_body:
                what = "did not reach its test body (start-up: interpreter, imports, rendezvous) in time"
            out.append(f"rank {r.rank} (pid {r.pid}) {what}{where}")
    if out:
        for r in ranks:
            if r.outcome is RankOutcome.STOPPED and r.blocked_peer in hazards and r.blocked_on:
                out.append(f"rank {r.rank} is blocked in {r.blocked_on}")
            elif r.outcome is RankOutcome.STOPPED:
                at = innermost_test_frame(r.traceback or "", test_file)
                where = f", at {at}" if at else ""
                out.append(f"rank {r.rank} (pid {r.pid}) was stopped once the test had failed{where}")
    return out


def _raised(r: RankResult, with_traceback: bool) -> str:
    head = f"rank {r.rank} raised {r.error}"
    return f"{head}\n{_indent(r.traceback or '')}" if with_traceback else head


def _ended_at(end: RankEnd) -> float:
    reported = end.reported
    return (reported.body_ended or 0.0) if reported is not None else 0.0


def _live_line(r: RankResult, limit: int) -> str:
    """`rank 0 held 200 Works it had not waited (max_live_works=4), 200 of them from
    test_pp.py:29 in sync (isend to rank 1); at the end: 200 created, 0 waited, 200 dropped
    without a wait, 0 still held`."""
    line = f"rank {r.rank} held {r.live_max} Works it had not waited (max_live_works={limit})"
    top = r.top_site
    if top is not None and top.live_max > 0:
        line += f", {top.live_max} of them from {top.where()}"
    counts = [f"{r.created} created", f"{r.waited} waited"]
    if r.dropped:
        counts.append(f"{r.dropped} dropped without a wait")
    counts.append(f"{r.live_final} still held")
    return f"{line}; at the end: {', '.join(counts)}"


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" if line else line for line in text.rstrip().splitlines())


# -- reading a faulthandler dump -----------------------------------------------------------

_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+", re.MULTILINE)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')
_RUNNER = os.path.join("pytest_ranks", "runner.py")
_TRACER = os.path.join("hicache_cli", "tracer") + os.sep  # its wrappers around wait() and send/recv


def _thread_blocks(dump: str) -> list[list[str]]:
    starts = [m.start() for m in _THREAD.finditer(dump)] or [0]
    blocks = [dump[a:b] for a, b in zip(starts, [*starts[1:], len(dump)], strict=True)]
    return [[line.strip() for line in block.splitlines() if _FRAME.match(line)] for block in blocks]


def stack_excerpt(dump: str, test_file: str) -> str:
    """The stack of the thread running the test body, innermost first, without hicache's
    runner below it; the thread whose frames reach the test file if no runner frame shows."""
    blocks = [b for b in _thread_blocks(dump) if b]
    main = next((b for b in blocks if any(_RUNNER in line for line in b)), None)
    if main is None:
        main = next((b for b in blocks if any(test_file in line for line in b)), blocks[-1] if blocks else [])
    body = []
    for line in main:
        if _TRACER in line:
            continue
        if _RUNNER in line:
            if not any(test_file in frame for frame in body):  # not in the body yet: the runner's step says where
                body.append(line)
            break
        body.append(line)
    return "\n".join(body[:STACK_FRAMES])


def innermost_test_frame(dump: str, test_file: str) -> str | None:
    """`test_x.py:12 in test_y`: where in the test file the body was when stopped."""
    for line in stack_excerpt(dump, test_file).splitlines():
        match = _FRAME.match(line)
        if match and os.path.normcase(match["file"]) == os.path.normcase(test_file):
            return f"{Path(match['file']).name}:{match['line']} in {match['func']}"
    return None
