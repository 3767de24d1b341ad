"""Build the JSON report of a run from its samples, and write it atomically.

The report's shape is documented in docs/report.md; bump SCHEMA_VERSION on any change
that removes or renames a key.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from hicache_cli.analysis import stats
from hicache_cli.analysis.causes import Cause, judge
from hicache_cli.analysis.histogram import LatencyHistogram
from hicache_cli.analysis.report_schema import ReportShapeError, check_report
from hicache_cli.analysis.shutdown import hazards
from hicache_cli.analysis.torchrun_log import WorkerExit, signal_name
from hicache_cli.analysis.trace_report import top_site_line, works_summary
from hicache_cli.analysis.watchdog import Stall, blocked_frame
from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.protocol import REPORT_FILE, stacks_file
from hicache_cli.rundir import write_atomically
from hicache_cli.sample import Sample
from hicache_cli.series import RankSeries, RunSeries, Totals
from hicache_cli.sglang_target.extract import waits_on_next_stage
from hicache_cli.version import hicache_version

SCHEMA_VERSION = 1
REQUIRED_KEYS = ("status", "config", "environment", "verdict", "failures", "ranks")
SERIES_POINTS = 200


@dataclass(frozen=True)
class RunOutcome:
    """How the run ended, as the launcher saw it."""

    interrupted: bool = False  # hicache itself was asked to stop
    interrupted_by: str | None = None  # the signal it got (SIGINT, SIGTERM, SIGHUP)
    killed_reason: str | None = None  # the launcher stopped the ranks itself, and why
    torchrun_exit_code: int | None = 0
    program_exit_code: int | None = None  # hicache trace: the traced command's exit status
    program_stopped: str | None = None  # hicache trace: why hicache stopped the program, if it did
    wall_s: float = 0.0
    launcher_cpu_s: float | None = None  # CPU the launching process used (follower, views)
    stalls: tuple[Stall, ...] = ()  # what the watchdog found
    stopped_early: str | None = None  # why the launcher ended the run before its duration
    launched_wall: float | None = None  # time.time() when torchrun was started
    worker_exits: dict[int, WorkerExit] = field(default_factory=dict)  # from torchrun's log(s)
    lost_nodes: dict[int, str] = field(default_factory=dict)  # across nodes: node -> how it was lost


def environment(config: StressConfig) -> dict[str, Any]:
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {
        "hicache_version": hicache_version(),
        "torch_version": torch_version,
        "backend": config.backend,
        "pp_backend": config.pp_backend,
        "device": config.device,
        "host": socket.gethostname(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


def build_report(
    config: StressConfig,
    samples: RunSeries | Mapping[int, list[Sample]],
    outcome: RunOutcome,
    run_dir: Path | None = None,
) -> dict[str, Any]:
    """`samples`: as a follower kept them (RunSeries: bounded, with exact totals), or whole."""
    run = samples if isinstance(samples, RunSeries) else RunSeries.of(samples)
    samples = run.samples
    finals = {r: s[-1] for r, s in samples.items() if s and s[-1].kind == "final"}
    ranks = [
        rank_summary(
            rank,
            run.ranks.get(rank) or RankSeries(),
            [] if config.traced else samples.get(rank - config.tp, []),
            config,
            samples,
        )
        for rank in slots(config, samples)
    ]
    failures = _failures(config, samples, finals, outcome, run_dir)
    stopped = interruption(outcome, finals, failures)
    status = "interrupted" if stopped else "failed" if failures else "completed"
    return {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "interruption": stopped,
        "config": config.to_dict(),
        "target": target_summary(config, ranks),
        "environment": {
            **environment(config),
            "devices": sorted({s[-1].device_name for s in samples.values() if s and s[-1].device_name}),
        },
        "verdict": stats.overall([r["verdict"] for r in ranks]),
        "failures": failures,
        "root_cause": failures[0]["rank"] if failures else None,
        "stopped_early": outcome.stopped_early,
        "run_s": round(max((s[-1].t for s in samples.values() if s), default=0.0), 3),
        "pp_consistency": run.digests.summary(),
        "wall_s": round(outcome.wall_s, 2),
        "startup_s": _startup_s(samples, outcome.launched_wall),
        "torchrun_exit_code": outcome.torchrun_exit_code,
        "program_exit_code": outcome.program_exit_code,
        "program_stopped": outcome.program_stopped,
        "launcher_cpu_s": None if outcome.launcher_cpu_s is None else round(outcome.launcher_cpu_s, 3),
        "ranks": ranks,
    }


def interruption(
    outcome: RunOutcome, finals: dict[int, Sample], failures: list[dict[str, Any]]
) -> dict[str, Any] | None:
    """Who stopped the run from outside, if anyone: a signal to hicache, to torchrun (which
    nothing of ours ever signals), or to the ranks (their final lines say so). Ranks
    stopped after another rank failed were not interrupted: torchrun stops the rest after
    one fails; but a broken connection is what a rank sees when its peer was stopped."""
    if outcome.interrupted:
        return {"signal": outcome.interrupted_by or "SIGINT", "to": "hicache", "message": None}
    code = outcome.torchrun_exit_code
    if code is not None and code < 0:
        return {"signal": signal_name(code), "to": "torchrun", "message": f"torchrun was killed by {signal_name(code)}"}
    stopped = [f for _, f in sorted(finals.items()) if f.state == "interrupted"]
    if stopped and all(_is_connection_error(f["message"]) for f in failures):
        return {"signal": stopped[0].signal, "to": "ranks", "message": f"rank {stopped[0].rank}: {stopped[0].message}"}
    return None


def target_summary(config: StressConfig, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """What ran the PP sync. For SGLang: which code (version, file, hash, drain method) and
    how many PP-sync messages a round sends, measured on rank 0. For a traced program: the
    command, the --loop function, and how many processes were observed."""
    if config.traced and config.trace is not None:
        return {
            "kind": "trace",
            "command": config.trace["command"],
            "cwd": config.trace.get("cwd"),
            "loop": config.trace.get("loop"),
            "processes": sum(1 for r in ranks if r.get("samples")),
        }
    if config.target != "sglang" or config.sglang is None:
        return {"kind": "model", "policy": config.policy}
    first = ranks[0] if ranks else {}
    rounds, sent = first.get("rounds"), first.get("messages", {}).get("sent")
    return {
        "kind": "sglang",
        **config.sglang,
        "sends_per_round": round(sent / rounds, 3) if rounds and sent is not None else None,
    }


def slots(config: StressConfig, samples: dict[int, list[Sample]]) -> list[int]:
    """The rank files a report covers: every rank of the run, and (`hicache trace`, where
    processes are discovered) every file the run directory holds."""
    return sorted(set(range(config.world_size)) | set(samples))


def rank_summary(
    rank: int,
    followed: RankSeries,
    upstream: list[Sample],
    config: StressConfig,
    run: Mapping[int, list[Sample]] | None = None,
) -> dict[str, Any]:
    """One rank's entry, from its bounded history and exact totals (and `run`, every rank's
    history, for the backlogs of its messages)."""
    pp_rank, tp_rank = divmod(rank, config.tp)
    series, totals = followed.kept, followed.totals
    if config.traced and series:
        return _traced_summary(rank, followed, config, run)
    if not series:
        return {
            "rank": rank,
            "pp_rank": pp_rank,
            "tp_rank": tp_rank,
            "verdict": "INCONCLUSIVE",
            "verdict_reason": "the rank wrote no samples",
            "samples": 0,
        }
    last = series[-1]
    # issue 25: the verdict with its cause, and the messages per peer (analysis/causes.py)
    judged = judge(run or {rank: series}, rank, config.warmup_s, config.leak_threshold_mb_per_h, tp=config.tp)
    assessment, finding = judged.assessment, judged.finding
    verdict, rss_trend, depth_trend, cut = assessment.verdict, assessment.rss, assessment.depth, assessment.cut
    latency = _latency(followed, cut)
    up_final = upstream[-1] if upstream and config.tp <= rank else None
    unreceived = max(0, up_final.sent - last.received) if up_final else 0
    reason = verdict.reason
    works_cause = finding is None or finding.cause is Cause.WORKS  # a backlog's sender site is in its reason
    if (top := top_site_line(works_summary(totals))) is not None and verdict.verdict == "LEAK" and works_cause:
        reason += f"; {top}"
    if unreceived:
        # gloo keeps state per pending message on the receiving side too
        reason += f"; {unreceived} messages from rank {rank - config.tp} unreceived at the stop"
    return {
        "rank": rank,
        "pp_rank": pp_rank,
        "tp_rank": tp_rank,
        "pid": last.pid,
        "host": last.host,
        "node": last.node,
        "verdict": verdict.verdict,
        "verdict_reason": reason,
        "state": last.state,
        "stop": last.message if last.kind == "final" else "no final line: the rank ended abruptly",
        "warmup_s": round(assessment.warmup_s, 2),
        "rss": {
            "start_bytes": totals.rss_first,
            "end_bytes": totals.rss_last,
            "peak_bytes": totals.rss_peak,
            "slope_mb_per_h": _mb_h(rss_trend.slope) if rss_trend else None,
            "slope_ci95_mb_per_h": [_mb_h(rss_trend.lo), _mb_h(rss_trend.hi)] if rss_trend else None,
            "detection_floor_mb_per_h": _floor(rss_trend),
            "trend_p_value": round(rss_trend.p_value, 6) if rss_trend else None,
            "autocorrelation": round(rss_trend.autocorrelation, 3) if rss_trend else None,
        },
        "memory_kinds": _memory_kinds(totals, assessment.anon),
        "work_list": {
            "max": totals.depth_max,
            "final": last.depth,
            "growth_per_s": round(depth_trend.slope, 3) if depth_trend else None,
            "held_bytes_final": last.held_bytes,
            "bytes_per_work": round(assessment.bytes_per_work) if assessment.bytes_per_work is not None else None,
        },
        "loop_latency_ms": latency,
        "rounds": last.rounds,
        "rounds_per_s": round(last.rounds / last.t, 1) if last.t > 0 else None,
        "messages": {
            "sent": last.sent,
            "received": last.received,
            "by_peer": [flow.to_json() for flow in judged.flows],
        },
        "cause": finding.to_json() if finding is not None else None,
        "backlog_at_stop": {
            "outstanding_sends": last.depth,
            "unreceived_messages": unreceived,
        },
        "round_age_at_stop_s": last.round_age_s,
        "device": last.device_name,
        "gpu_memory": _gpu_memory(totals),
        "counters": last.counters,
        "samples": totals.samples,
        "series": _series(series),
    }


def _memory_kinds(totals: Totals, anon: stats.Trend | None) -> dict[str, Any] | None:
    """What RSS was made of, from the readings of smaps_rollup (about once a second); None
    when there were none (a kernel without it, a report's older ranks)."""
    last = totals.last_memory_read
    if last is None:
        return None
    file_backed = None
    if last.rss_bytes is not None and last.anon_bytes is not None:
        file_backed = max(0, last.rss_bytes - last.anon_bytes)
    return {
        "readings": totals.memory_readings,
        "anon_start_bytes": totals.anon_first,
        "anon_end_bytes": totals.anon_last,
        "anon_peak_bytes": totals.anon_peak,
        "anon_slope_mb_per_h": _mb_h(anon.slope) if anon else None,
        "anon_slope_ci95_mb_per_h": [_mb_h(anon.lo), _mb_h(anon.hi)] if anon else None,
        "uss_end_bytes": last.uss_bytes,
        "file_backed_end_bytes": file_backed,
    }


def _traced_summary(
    slot: int, followed: RankSeries, config: StressConfig, run: Mapping[int, list[Sample]] | None
) -> dict[str, Any]:
    """A traced process: `rank` is its torch.distributed rank, `slot` its rank file's
    number (the same, unless several process groups used the same ranks); `works` says
    what became of the Works it was handed, by creation site."""
    summary = rank_summary(slot, followed, [], replace(config, target="model"), run)
    summary.pop("series", None)
    last = followed.kept[-1]
    works = works_summary(followed.totals)
    hazard = hazards(run or {slot: followed.kept}).get(slot)  # issue 25: analysis/shutdown.py
    return {
        **summary,
        "rank": last.rank,
        "slot": slot,
        "world_size": int(last.counters.get("world_size", 0)) or None,
        "works": works,
        "shutdown": None
        if hazard is None
        else {
            "unwaited_sends": list(hazard.unwaited_sends),
            "blocked_in": hazard.blocked_in,
            "lines": hazard.lines(last.rank),
        },
        "series": _series(followed.kept),
    }


def _latency(followed: RankSeries, cut: int) -> dict[str, float | None]:
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
    return {
        "p50": _round(min(p50, worst) if p50 is not None and worst is not None else p50),
        "p99": _round(min(p99, worst) if p99 is not None and worst is not None else p99),
        "max": _round(worst),
        "rounds_measured": window.total,
    }


def _series(series: list[Sample]) -> dict[str, list[Any]]:
    """A downsampled time series: parallel lists, at most SERIES_POINTS long."""
    picked = stats.thin(series, SERIES_POINTS)
    return {
        "t": [s.t for s in picked],
        "rss_bytes": [s.rss_bytes for s in picked],
        "depth": [s.depth for s in picked],
        "rounds": [s.rounds for s in picked],
        "lat_p99_ms": [_round(s.lat_p99_ms) for s in picked],
        "round_age_s": [s.round_age_s for s in picked],
    }


def _failures(
    config: StressConfig,
    samples: dict[int, list[Sample]],
    finals: dict[int, Sample],
    outcome: RunOutcome,
    run_dir: Path | None,
) -> list[dict[str, Any]]:
    """One entry per rank that failed, earliest first (the first is the root cause)."""
    stalls = {s.rank: s for s in outcome.stalls}
    failures = []
    for rank in slots(config, samples):
        final, series = finals.get(rank), samples.get(rank, [])
        exit_ = outcome.worker_exits.get(rank)
        code = exit_.exit_code if exit_ else None
        sig = exit_.signal if exit_ else None
        last_t = series[-1].t if series else 0.0
        if rank in stalls:
            stall = stalls[rank]
            stack = stacks_file(run_dir, rank) if run_dir is not None else None
            dump = stack.read_text(encoding="utf-8", errors="replace") if stack and stack.is_file() else ""
            frame = blocked_frame(dump)
            message = stall.message + (f"; stack top: {frame}" if frame else "")
            failure = _failure(rank, stall.kind, message, stall.since_t, None, None, stack.name if dump else None)
            if stall.waiting_on_pp is not None:
                failure["waiting_on_pp"] = stall.waiting_on_pp
            elif config.target == "sglang" and waits_on_next_stage(frame):
                failure["waiting_on_pp"] = rank // config.tp + 1  # SGLang's drain, in wait() on a Work
            failures.append(failure)
        elif final is not None and final.state == "error":
            failures.append(_failure(rank, "error", final.message, final.t, code, sig))
        elif final is None and not outcome.interrupted and not config.traced:
            # (a traced program's process may leave without a final line, by a signal or an
            # os._exit from a forked child: not a failure of the run)
            node = series[-1].node if series else None
            if node in outcome.lost_nodes:
                kind, message = "crash", f"{outcome.lost_nodes[node]}; last sample at {last_t:.1f} s"
            elif sig is not None:
                kind, message = "crash", f"killed by {sig} (exit code {code}); last sample at {last_t:.1f} s"
            elif code is not None:
                kind, message = (
                    "crash",
                    f"exited with code {code} without its final line; last sample at {last_t:.1f} s",
                )
            elif outcome.killed_reason is not None:
                kind, message = "timeout", f"stopped by the launcher: {outcome.killed_reason}"
            elif not series:
                kind, message = "crash", "the rank never started its workload (see its log)"
            else:
                kind, message = "crash", "the rank ended without its final line (see its log)"
            if not series and outcome.lost_nodes:  # which node it was for is torchrun's choice: name them all
                message += "; " + "; ".join(why for _, why in sorted(outcome.lost_nodes.items()))
            failures.append(_failure(rank, kind, message, last_t, code, sig))
    return _root_cause_first(failures, config.tp)


def _root_cause_first(failures: list[dict[str, Any]], tp: int) -> list[dict[str, Any]]:
    """Earliest first, except for consequences, which follow with `consequence_of` naming
    their cause: a rank blocked on a stage that itself failed, or a rank whose connection
    broke after another rank had already failed for a reason of its own.

    A rank whose own timed-out wait closed a gloo pair (ClosedAfterTimeout, "isend to rank
    P failed: an earlier timed-out wait ...") reports it only at its next isend, often after
    P has already seen the pair reset: it began no later than P's connection error."""
    failed_stages = {f["rank"] // tp: f["rank"] for f in failures}
    for f in failures:
        stage = f.pop("waiting_on_pp", None)
        if stage is not None and stage in failed_stages and failed_stages[stage] != f["rank"]:
            f["consequence_of"] = failed_stages[stage]
    broken = {f["rank"]: f["at_s"] for f in failures if _is_connection_error(f["message"])}
    began = {f["rank"]: f["at_s"] for f in failures}
    for f in failures:
        head, marker, rest = (f["message"] or "").partition(" isend to rank ")
        if head.startswith("ClosedAfterTimeout:") and marker and rest.split(" ")[0].isdigit():
            peer = int(rest.split(" ")[0])
            began[f["rank"]] = min(f["at_s"], broken.get(peer, f["at_s"]))
    causes = sorted(
        (f for f in failures if "consequence_of" not in f and f["rank"] not in broken),
        key=lambda f: began[f["rank"]],
    )
    for f in failures:
        if "consequence_of" in f or not causes or causes[0] is f:
            continue
        if f["kind"] == "error" and began[causes[0]["rank"]] <= f["at_s"] and f["rank"] in broken:
            f["consequence_of"] = causes[0]["rank"]
    return sorted(failures, key=lambda f: ("consequence_of" in f, began[f["rank"]]))


def _is_connection_error(message: str | None) -> bool:
    """A connection that broke under the rank; not a rank whose own timeout closed it."""
    text = (message or "").lower()
    if text.startswith("closedaftertimeout:"):  # cache.pp_sync: this rank's timed-out wait closed the pair
        return False
    return any(word in text for word in ("connection", "closed by peer", "pair closure", "reset by peer"))


def _failure(
    rank: int,
    kind: str,
    message: str | None,
    at_s: float,
    exit_code: int | None = None,
    sig: str | None = None,
    stack: str | None = None,
) -> dict[str, Any]:
    return {
        "rank": rank,
        "kind": kind,
        "exit_code": exit_code,
        "signal": sig,
        "message": message,
        "stack_file": stack,
        "at_s": round(at_s, 3),
    }


def _startup_s(samples: dict[int, list[Sample]], launched_wall: float | None) -> float | None:
    """Launch to the first sample of any rank (torch import, rendezvous, cache warm-up)."""
    firsts = [s[0].wall for s in samples.values() if s]
    if launched_wall is None or not firsts:
        return None
    return round(min(firsts) - launched_wall, 2)


def _gpu_memory(totals: Totals) -> dict[str, int] | None:
    if totals.gpu_last is None or totals.gpu_peak is None:
        return None
    return {"end_bytes": totals.gpu_last, "peak_bytes": totals.gpu_peak}


def _floor(trend: stats.Trend | None) -> float | None:
    return _mb_h(trend.floor) if trend is not None and math.isfinite(trend.floor) else None


def _mb_h(bytes_per_s: float) -> float:
    return round(stats.per_hour_mb(bytes_per_s), 1)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def write_report(report: dict[str, Any], run_dir: Path, extra_path: Path | None = None) -> Path:
    text = json.dumps(report, indent=2) + "\n"
    path = run_dir / REPORT_FILE
    write_atomically(path, text)
    if extra_path is not None:
        write_atomically(extra_path, text)
    return path


def load_report(path: Path) -> dict[str, Any]:
    """Read a report back; anything that is not a report of a known schema is a UsageError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such report") from None
    except IsADirectoryError:
        candidate = path / REPORT_FILE
        if candidate.is_file():
            return load_report(candidate)
        raise UsageError(f"{path}: a directory without a {REPORT_FILE}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it ({exc})") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as exc:
        body = text.strip()
        cut = body.startswith("{") and (not body.endswith("}") or exc.pos >= len(text.rstrip()))
        raise UsageError(f"{path}: {'truncated' if cut else 'not JSON'} ({exc.msg}, line {exc.lineno})") from None
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
        check_report(report)
    except ReportShapeError as exc:
        raise UsageError(f"{path}: not a valid hicache report: {exc}") from None
    return report
