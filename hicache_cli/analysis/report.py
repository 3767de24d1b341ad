"""Build the JSON report of a run from its samples, and write it atomically.

The report's shape is documented in docs/report.md; bump SCHEMA_VERSION on any change
that removes or renames a key.
"""

from __future__ import annotations

import bisect
import json
import math
import os
import platform
import socket
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
from pathlib import Path

from hicache_cli.analysis import progress, stats
from hicache_cli.analysis.causes import Finding, judge
from hicache_cli.analysis.failures import Ending, find_failures, interruption
from hicache_cli.analysis.figures import rounds_per_s
from hicache_cli.analysis.kinds import CauseKind, Status, Verdict
from hicache_cli.analysis.messages import PeerFlow
from hicache_cli.analysis.results import (
    Backlog,
    Cause,
    Environment,
    GpuMemory,
    LoopLatency,
    MemoryKinds,
    Messages,
    PeerMessages,
    PPConsistency,
    RankReport,
    Report,
    Rss,
    Series,
    Shutdown,
    Stuck,
    TargetSection,
    UnwaitedSend,
    WorkList,
)
from hicache_cli.analysis.shutdown import Hazards, hazards
from hicache_cli.analysis.trace_report import site_text, top_site_line, works_summary
from hicache_cli.attached import AttachedPid
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.files import read_bytes
from hicache_cli.histogram import LatencyHistogram
from hicache_cli.outcome import RunOutcome
from hicache_cli.protocol import REPORT_FILE, stacks_file
from hicache_cli.records import ShapeError, replace
from hicache_cli.rundir import read_run_text, write_atomically, write_run_file
from hicache_cli.sample import Sample
from hicache_cli.series import RankSeries, RunSeries, Totals
from hicache_cli.targets import RankedTarget, RunFacts, SGLangTarget, waits_on_next_stage
from hicache_cli.version import hicache_version
from hicache_cli.watchdog import blocked_frame

SCHEMA_VERSION = 1
REQUIRED_KEYS = ("status", "config", "environment", "verdict", "failures", "ranks")
SERIES_POINTS = 200


def environment(config: RunConfig, devices: list[str]) -> Environment:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return Environment(
        hicache_version=hicache_version(),
        torch_version=torch_version,
        backend=ranked.backend if (ranked := config.ranked) else None,
        pp_backend=ranked.pp_backend if ranked else None,
        device=ranked.device if ranked else None,
        host=socket.gethostname(),
        cpu_count=os.cpu_count(),
        python=platform.python_version(),
        platform=platform.platform(),
        devices=devices,
    )


def build_report(
    config: RunConfig,
    samples: RunSeries | Mapping[int, list[Sample]],
    outcome: RunOutcome,
    run_dir: Path | None = None,
) -> Report:
    """`samples`: as a follower kept them (RunSeries: bounded, with exact totals), or whole."""
    run = samples if isinstance(samples, RunSeries) else RunSeries.of(samples)
    samples = run.samples
    finals = {r: s[-1] for r, s in samples.items() if s and s[-1].kind == "final"}
    tp = config.ranked.tp if config.ranked else 1
    held = {p.pid: p for p in outcome.attached}  # attach: each process's census, for its verdict's reason
    ranks = [
        summarize_rank(rank, run.ranks.get(rank) or RankSeries(), samples, config, held)
        for rank in slots(config, samples)
    ]
    traced = config.ranked is None  # someone else's program (traced or attached): its ends are its own
    ending = Ending(
        interrupted=outcome.interrupted,
        # a traced program stopped at its duration is not a failure; only the watchdog's stop is
        killed_reason=None if outcome.stalls or traced else outcome.stopped,
        stalls=outcome.stalls,
        worker_exits=outcome.worker_exits,
        lost_nodes=outcome.lost_nodes,
        own_ends=traced,
    )
    failures = find_failures(
        slots(config, samples), samples, ending, _stack_reader(run_dir, samples), _waits_on(config), tp
    )
    signal = (outcome.interrupted_by or "SIGINT") if outcome.interrupted else None
    torchrun_exit_code = None if traced else outcome.exit_code
    stopped = interruption(signal, torchrun_exit_code, finals, failures)
    status = Status.INTERRUPTED if stopped else Status.FAILED if failures else Status.COMPLETED
    devices = sorted({s[-1].device_name for s in samples.values() if s and s[-1].device_name})
    return Report(
        schema_version=SCHEMA_VERSION,
        status=status,
        interruption=stopped,
        config=config,
        target=target_summary(config, ranks, outcome.attached),
        environment=environment(config, devices),
        verdict=Verdict.overall(r.verdict for r in ranks),
        failures=failures,
        root_cause=failures[0].rank if failures else None,
        stopped_early=outcome.stopped_early,
        run_s=round(max((s[-1].t for s in samples.values() if s), default=0.0), 3),
        pp_consistency=PPConsistency.from_dict(run.digests.summary()),
        wall_s=round(outcome.wall_s, 2),
        startup_s=_startup_s(samples, outcome.launched_wall),
        torchrun_exit_code=torchrun_exit_code,
        program_exit_code=outcome.exit_code if traced else None,
        program_stopped=outcome.stopped if traced else None,
        launcher_cpu_s=None if outcome.launcher_cpu_s is None else round(outcome.launcher_cpu_s, 3),
        ranks=ranks,
    )


def _stack_reader(
    run_dir: Path | None, samples: Mapping[int, list[Sample]]
) -> Callable[[int], tuple[str | None, str | None]]:
    """A stuck rank's stack file (when it wrote one) and the frame its loop is blocked in (the
    thread its samples name as the loop's)."""

    def read(rank: int) -> tuple[str | None, str | None]:
        stack = stacks_file(run_dir, rank) if run_dir is not None else None
        dump = _stack_dump(stack) if stack else ""
        series = samples.get(rank)
        thread = series[-1].loop_thread if series else None
        return (stack.name if dump and stack else None), blocked_frame(dump, thread)

    return read


def _waits_on(config: RunConfig) -> Callable[[int, str | None], int | None]:
    """SGLang's drain blocked in wait() on a Work waits on the next stage."""
    target = config.target

    def stage(rank: int, frame: str | None) -> int | None:
        if isinstance(target, SGLangTarget) and waits_on_next_stage(frame):
            return rank // target.tp + 1
        return None

    return stage


def target_summary(config: RunConfig, ranks: list[RankReport], attached: tuple[AttachedPid, ...] = ()) -> TargetSection:
    """What ran the PP sync, as its target says it (targets.Target.section): for SGLang, which
    code and how many PP-sync messages rank 0 sent a round; for a traced program, the command
    and how many processes were observed; for attached processes, how each was attached and
    its census."""
    first = ranks[0] if ranks else None
    facts = RunFacts(
        processes=sum(1 for r in ranks if r.measured),
        rounds=first.rounds if first else None,
        sent=first.messages.sent if first and first.messages else None,
        attached=attached,
    )
    return config.target.section(facts)


def slots(config: RunConfig, samples: Mapping[int, list[Sample]]) -> list[int]:
    """The rank files a report covers: every rank of the run, and (`hicache trace`, where
    processes are discovered) every file the run directory holds."""
    return sorted(set(range(config.expected_ranks or 0)) | set(samples))


def summarize_rank(
    slot: int,
    followed: RankSeries,
    samples: Mapping[int, list[Sample]],
    config: RunConfig,
    held: Mapping[int, AttachedPid] | None = None,
) -> RankReport:
    """A rank of hicache's own (its upstream stage's samples say what it left unreceived), or a
    traced process (an attached one: `held`, its census by pid). `samples`, every rank's, give
    the backlogs of its messages."""
    target = config.target
    if isinstance(target, RankedTarget):
        return rank_summary(slot, followed, samples.get(slot - target.tp, []), config, target.tp, run=samples)
    return _traced_summary(slot, followed, config, held or {}, samples)


def rank_summary(
    rank: int,
    followed: RankSeries,
    upstream: list[Sample],
    config: RunConfig,
    tp: int = 1,
    census: AttachedPid | None = None,
    run: Mapping[int, list[Sample]] | None = None,
) -> RankReport:
    """One rank's entry, from its bounded history and exact totals (and `run`, every rank's
    history, for the backlogs of its messages)."""
    pp_rank, tp_rank = divmod(rank, tp)
    series, totals = followed.kept, followed.totals
    if not series:
        return RankReport(
            rank=rank,
            pp_rank=pp_rank,
            tp_rank=tp_rank,
            verdict=Verdict.INCONCLUSIVE,
            verdict_reason="the rank wrote no samples" + _unreadable(totals),
            samples=0,
            unreadable_lines=totals.unreadable,
        )
    last = series[-1]
    # issue 25: the verdict with its cause, and the messages per peer (analysis/causes.py)
    judged = judge(run or {rank: series}, rank, config.warmup_s, config.leak_threshold_mb_per_h, tp=tp)
    assessment, finding = judged.assessment, judged.finding
    verdict, rss_trend, depth_trend, cut = assessment.verdict, assessment.rss, assessment.depth, assessment.cut
    upstream = upstream if tp <= rank else []
    unreceived = _unreceived(upstream[-1], last) if upstream else 0
    reason = verdict.reason
    holder = census.top if census is not None else None
    if holder is not None and holder.held and verdict.verdict is not Verdict.BOUNDED:
        reason += f"; {census.holder_line()}"  # attach: the container the census found holding the Works
    works_cause = finding is None or finding.cause is CauseKind.WORKS  # a backlog's sender site is in its reason
    if (top := top_site_line(works_summary(totals))) is not None and verdict.verdict is Verdict.LEAK and works_cause:
        reason += f"; {top}"
    if unreceived:
        # gloo keeps state per pending message on the receiving side too
        reason += f"; {unreceived} messages from rank {rank - tp} unreceived at the stop"
    reason += _unreadable(totals)
    return RankReport(
        rank=rank,
        pp_rank=pp_rank,
        tp_rank=tp_rank,
        pid=last.pid,
        host=last.host,
        node=last.node,
        verdict=verdict.verdict,
        verdict_reason=reason,
        state=last.state,
        stop=last.message if last.kind == "final" else "no final line: the rank ended abruptly",
        warmup_s=round(assessment.warmup_s, 2),
        rss=Rss(
            start_bytes=totals.rss_first,
            end_bytes=totals.rss_last,
            peak_bytes=totals.rss_peak,
            slope_mb_per_h=_mb_h(rss_trend.slope) if rss_trend else None,
            slope_ci95_mb_per_h=[_mb_h(rss_trend.lo), _mb_h(rss_trend.hi)] if rss_trend else None,
            detection_floor_mb_per_h=_floor(rss_trend),
            trend_p_value=round(rss_trend.p_value, 6) if rss_trend else None,
            autocorrelation=round(rss_trend.autocorrelation, 3) if rss_trend else None,
        ),
        memory_kinds=_memory_kinds(totals, assessment.anon),
        work_list=WorkList(
            max=totals.depth_max,
            final=last.depth,
            growth_per_s=round(depth_trend.slope, 3) if depth_trend else None,
            held_bytes_final=last.held_bytes,
            bytes_per_work=round(assessment.bytes_per_work) if assessment.bytes_per_work is not None else None,
        ),
        loop_latency=_latency(followed, cut),
        rounds=last.rounds,
        rounds_per_s=rounds_per_s(last),
        messages=Messages(sent=last.sent, received=last.received, by_peer=[_peer_messages(f) for f in judged.flows]),
        cause=_cause(finding),
        backlog_at_stop=Backlog(outstanding_sends=last.depth, unreceived_messages=unreceived),
        round_age_at_stop_s=last.round_age_s,
        device=last.device_name,
        gpu_memory=_gpu_memory(totals),
        counters=last.counters,
        samples=totals.samples,
        unreadable_lines=totals.unreadable,
        series=_series(series, upstream),
    )


def _unreadable(totals: Totals) -> str:
    """A verdict reason's note of the lines of the rank's file that were not samples (a line
    torn by a full disk, another program writing there): what the verdict did not see."""
    n = totals.unreadable
    if not n:
        return ""
    return f"; {n} line{'s' if n != 1 else ''} of its file not {'samples' if n != 1 else 'a sample'} (skipped)"


def _memory_kinds(totals: Totals, anon: stats.Trend | None) -> MemoryKinds | None:
    """What RSS was made of, from the readings of smaps_rollup (about once a second); None
    when there were none (a kernel without it, a report's older ranks)."""
    last = totals.last_memory_read
    if last is None:
        return None
    file_backed = None
    if last.rss_bytes is not None and last.anon_bytes is not None:
        file_backed = max(0, last.rss_bytes - last.anon_bytes)
    return MemoryKinds(
        readings=totals.memory_readings,
        anon_start_bytes=totals.anon_first,
        anon_end_bytes=totals.anon_last,
        anon_peak_bytes=totals.anon_peak,
        anon_slope_mb_per_h=_mb_h(anon.slope) if anon else None,
        anon_slope_ci95_mb_per_h=[_mb_h(anon.lo), _mb_h(anon.hi)] if anon else None,
        uss_end_bytes=last.uss_bytes,
        file_backed_end_bytes=file_backed,
    )


def _traced_summary(
    slot: int,
    followed: RankSeries,
    config: RunConfig,
    held: Mapping[int, AttachedPid],
    run: Mapping[int, list[Sample]] | None = None,
) -> RankReport:
    """A traced process: `rank` is its torch.distributed rank, `slot` its rank file's
    number (the same, unless several process groups used the same ranks); `works` says
    what became of the Works it was handed, by creation site; `shutdown`, the sends it
    ended with never waited, or the peer that did and that it is blocked on; `stuck`, how it
    stopped making progress before its end. The verdict of a stuck process is reached on its
    samples up to then: the flat memory of a process that does nothing is no evidence of
    boundedness, and a leak that ran until it hung is still one."""
    last = followed.kept[-1] if followed.kept else None
    run = run or {slot: followed.kept}
    ends = [series[-1].wall for series in run.values() if series]
    stopped = progress.stuck(followed.kept, config.stall_timeout_s, max(ends) if ends else None)
    judged = run if stopped is None else {**run, slot: progress.until_stuck(followed.kept, stopped)}
    summary = rank_summary(slot, followed, [], config, census=held.get(last.pid) if last else None, run=judged)
    if last is None:
        return summary
    hazard = hazards(run).get(slot)
    reason = summary.verdict_reason if stopped is None else f"{summary.verdict_reason}; {stopped.text()}"
    return replace(
        summary,
        rank=last.rank,
        slot=slot,
        verdict_reason=reason,
        world_size=int(last.counters.get("world_size", 0)) or None,
        works=works_summary(followed.totals),
        shutdown=_shutdown(hazard, last.rank),
        stuck=None if stopped is None else _stuck(stopped),
    )


def _peer_messages(flow: PeerFlow) -> PeerMessages:
    return PeerMessages(
        peer=flow.peer,
        group=flow.group,
        sent=flow.sent,
        sent_bytes=flow.sent_bytes,
        received=flow.received,
        received_bytes=flow.received_bytes,
        backlog=flow.backlog,
        backlog_per_s=None if flow.backlog_per_s is None else round(flow.backlog_per_s, 1),
    )


def _cause(finding: Finding | None) -> Cause | None:
    if finding is None:
        return None
    backlog = finding.cause is CauseKind.BACKLOG
    return Cause(
        kind=finding.cause,
        text=finding.text,
        site=site_text(finding.site) if finding.site is not None else None,
        peer=finding.peer if backlog else None,
        group=finding.group if backlog else None,
        backlog=finding.backlog if backlog else None,
        per_s=None if finding.per_s is None else round(finding.per_s, 1),
        dropped=finding.dropped,
    )


def _stuck(found: progress.Stuck) -> Stuck:
    return Stuck(
        since_s=round(found.since_s, 2),
        for_s=round(found.for_s, 1),
        blocked_in=found.blocked_in,
        unresponsive=found.unresponsive,
        text=found.text(),
    )


def _shutdown(hazard: Hazards | None, rank: int) -> Shutdown | None:
    if hazard is None:
        return None
    sends = []
    for raw in hazard.unwaited_sends:
        try:
            sends.append(UnwaitedSend.from_dict(raw))
        except ShapeError:
            continue  # a site a foreign program's tracer mangled (as trace_report reads sites)
    return Shutdown(unwaited_sends=sends, blocked_in=hazard.blocked_in, lines=hazard.lines(rank))


def _latency(followed: RankSeries, cut: int) -> LoopLatency:
    """Loop latency after warm-up (kept samples from `cut` on): histogram quantiles, exact max.
    The window starts at the last histogram taken by the sample before the cut (the same
    sample in a run of a minute or so; up to a thinned mark's spacing before it after that)."""
    series = followed.kept
    window = LatencyHistogram.from_json(series[-1].lat_hist)
    if cut > 0:
        window = window.minus(LatencyHistogram.from_json(followed.histogram_before(series[cut - 1].t)))
    maxima = [s.lat_max_ms for s in series[cut:] if s.lat_max_ms is not None]
    if followed.carry_max is not None and cut < len(series):  # samples dropped just before the latest
        maxima.append(followed.carry_max)
    worst = max(maxima) if maxima else None
    # A bucket's upper edge can lie above every round in it; no quantile exceeds the max.
    p50, p99 = window.quantile_ms(0.50), window.quantile_ms(0.99)
    return LoopLatency(
        p50=_round(min(p50, worst) if p50 is not None and worst is not None else p50),
        p99=_round(min(p99, worst) if p99 is not None and worst is not None else p99),
        max=_round(worst),
        rounds_measured=window.total,
    )


def _unreceived(up: Sample, last: Sample) -> int:
    """Messages the upstream rank had sent by its sample `up` that `last` had not received."""
    return max(0, up.sent - last.received)


def _series(series: list[Sample], upstream: Sequence[Sample] = ()) -> Series:
    """A downsampled time series: parallel lists, at most SERIES_POINTS long. `anon_bytes` is
    the latest reading of anonymous memory at each point (it is read about once a second, so
    a point between readings carries the last one; null before the first); `unreceived`, for
    a rank with an upstream, the messages that rank had sent by then and this one had not
    received (its latest sample at or before the point)."""
    picked = stats.thin(list(range(len(series))), SERIES_POINTS)
    anon, last_anon = [], None
    for s in series:
        last_anon = s.anon_bytes if s.anon_bytes is not None else last_anon
        anon.append(last_anon)
    unreceived = None
    if upstream:
        times = [u.t for u in upstream]
        before = [(i, bisect.bisect_right(times, series[i].t) - 1) for i in picked]
        unreceived = [None if j < 0 else _unreceived(upstream[j], series[i]) for i, j in before]
    return Series(
        t=[series[i].t for i in picked],
        rss_bytes=[series[i].rss_bytes for i in picked],
        anon_bytes=[anon[i] for i in picked],
        depth=[series[i].depth for i in picked],
        rounds=[series[i].rounds for i in picked],
        lat_p99_ms=[_round(series[i].lat_p99_ms) for i in picked],
        round_age_s=[series[i].round_age_s for i in picked],
        unreceived=unreceived,
    )


def _startup_s(samples: Mapping[int, list[Sample]], launched_wall: float | None) -> float | None:
    """Launch to the first sample of any rank (torch import, rendezvous, cache warm-up)."""
    firsts = [s[0].wall for s in samples.values() if s]
    if launched_wall is None or not firsts:
        return None
    return round(min(firsts) - launched_wall, 2)


def _gpu_memory(totals: Totals) -> GpuMemory | None:
    if totals.gpu_last is None or totals.gpu_peak is None:
        return None
    return GpuMemory(end_bytes=totals.gpu_last, peak_bytes=totals.gpu_peak)


def _floor(trend: stats.Trend | None) -> float | None:
    return _mb_h(trend.floor) if trend is not None and math.isfinite(trend.floor) else None


def _mb_h(bytes_per_s: float) -> float:
    return round(stats.per_hour_mb(bytes_per_s), 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _stack_dump(path: Path) -> str:
    try:
        return read_run_text(path)
    except OSError:  # none was dumped (or what is there is not a file hicache wrote)
        return ""


def report_text(report: Report) -> str:
    """The report as it is written: the one JSON serialization (Report.to_dict())."""
    return json.dumps(report.to_dict(), indent=2) + "\n"


def write_report(report: Report, run_dir: Path, extra_path: Path | None = None) -> Path:
    """report.json in the run directory (never through a symlink there) and, with
    `extra_path`, the user's --report (an output: see rundir.write_atomically)."""
    text = report_text(report)
    path = run_dir / REPORT_FILE
    write_run_file(path, text)
    if extra_path is not None:
        write_atomically(extra_path, text)
    return path


REPORT_LIMIT = 512 << 20  # a day-long run's report is a few MB; past this, not a report


def load_report(path: Path) -> Report:
    """Read a report back; anything that is not a report of a known schema is a UsageError.
    Total over its input: a FIFO or a device is refused before anything is read (no read
    hangs), and JSON nested past what the decoder takes is one line, not a RecursionError."""
    if path.is_dir():
        if os.path.lexists(path / REPORT_FILE):
            return load_report(path / REPORT_FILE)
        raise UsageError(f"{path}: a directory without a {REPORT_FILE}")
    try:
        text = read_bytes(path, limit=REPORT_LIMIT).decode("utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such report") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = (exc.strerror or exc) if isinstance(exc, OSError) else exc
        raise UsageError(f"{path}: cannot read it ({why})") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.strip()
        cut = body.startswith("{") and (not body.endswith("}") or exc.pos >= len(text.rstrip()))
        raise UsageError(f"{path}: {'truncated' if cut else 'not JSON'} ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:  # nested deeper than json decodes ("[" x 200,000)
        raise UsageError(f"{path}: not a hicache report (JSON nested too deeply to read)") from None
    except ValueError as exc:  # JSON, but not a value Python takes (an integer of 5,000 digits)
        raise UsageError(f"{path}: not a hicache report ({str(exc)[:200]})") from None
    if not isinstance(report, dict) or "schema_version" not in report:
        raise UsageError(f"{path}: not a hicache report (no schema_version)")
    missing = [key for key in REQUIRED_KEYS if key not in report]
    if missing and report["schema_version"] == SCHEMA_VERSION:
        raise UsageError(f"{path}: not a complete hicache report (missing {', '.join(missing)})")
    if report["schema_version"] != SCHEMA_VERSION:
        raise UsageError(
            f"{path}: report schema version {report['schema_version']!r}; this hicache reads version {SCHEMA_VERSION}"
        )
    try:
        return Report.read(report, path)
    except ShapeError as exc:
        raise UsageError(f"{path}: not a valid hicache report: {exc}") from None
