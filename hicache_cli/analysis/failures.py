"""Which ranks failed, how, and which failure is the root cause; who interrupted the run.

Pure: a rank's final line, the watchdog's stalls, torchrun's exit codes and the run's
outcome in; `Failure` records out, earliest first, consequences after their causes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hicache_cli.analysis.kinds import FailureKind
from hicache_cli.analysis.results import Failure, Interruption
from hicache_cli.outcome import WorkerExit, signal_name
from hicache_cli.protocol import ErrorKind
from hicache_cli.records import replace
from hicache_cli.sample import Sample
from hicache_cli.watchdog import Stall


@dataclass(frozen=True)
class Found:
    """A failure and what the report does not keep: the stage it waits on, for ordering."""

    failure: Failure
    waiting_on_pp: int | None = None


@dataclass(frozen=True)
class Ending:
    """How the launcher saw the run end, as far as failures go."""

    interrupted: bool = False
    killed_reason: str | None = None  # the launcher stopped the ranks itself, and why
    stalls: tuple[Stall, ...] = ()
    worker_exits: dict[int, WorkerExit] | None = None
    lost_nodes: dict[int, str] | None = None
    own_ends: bool = False  # the processes end as they please (a traced program): no final line is no failure


def find_failures(
    slots: list[int],
    samples: dict[int, list[Sample]],
    ending: Ending,
    stuck_frame: Callable[[int], tuple[str | None, str | None]],
    waits_on: Callable[[int, str | None], int | None],
    tp: int,
) -> list[Failure]:
    """One entry per rank that failed, earliest first (the first is the root cause).

    `stuck_frame(rank)`: (its stack file's name, the frame its loop is blocked in) once the
    watchdog asked for its stacks; `waits_on(rank, frame)`: the pipeline stage that frame
    waits on, when the target knows."""
    stalls = {s.rank: s for s in ending.stalls}
    exits, lost = ending.worker_exits or {}, ending.lost_nodes or {}
    found = []
    for rank in slots:
        series = samples.get(rank, [])
        final = series[-1] if series and series[-1].kind == "final" else None
        exit_ = exits.get(rank)
        code = exit_.exit_code if exit_ else None
        sig = exit_.signal if exit_ else None
        last_t = series[-1].t if series else 0.0
        node = series[-1].node if series else None
        # a rank of a lost node stops sampling here as a hung one does: the watchdog may see
        # that first (it waits seconds less than the link does), but it was the node's loss
        if rank in stalls and not (final is None and node in lost):
            stall = stalls[rank]
            stack, frame = stuck_frame(rank)
            message = stall.message + (f"; stack top: {frame}" if frame else "")
            failure = _failure(rank, FailureKind(stall.kind), message, stall.since_t, stack=stack)
            stage = stall.waiting_on_pp if stall.waiting_on_pp is not None else waits_on(rank, frame)
            found.append(Found(failure, stage))
        elif final is not None and final.state == "error":
            failure = _failure(rank, FailureKind.ERROR, final.message or "", final.t, code, sig)
            found.append(Found(replace(failure, error_kind=final.error_kind, peer=final.error_peer)))
        elif final is None and not ending.interrupted and not ending.own_ends:
            if node in lost:
                kind, message = FailureKind.CRASH, f"{lost[node]}; last sample at {last_t:.1f} s"
            elif sig is not None:
                kind, message = FailureKind.CRASH, f"killed by {sig} (exit code {code}); last sample at {last_t:.1f} s"
            elif code is not None:
                kind = FailureKind.CRASH
                message = f"exited with code {code} without its final line; last sample at {last_t:.1f} s"
            elif ending.killed_reason is not None:
                kind, message = FailureKind.TIMEOUT, f"stopped by the launcher: {ending.killed_reason}"
            elif not series:
                kind, message = FailureKind.CRASH, "the rank never started its workload (see its log)"
            else:
                kind, message = FailureKind.CRASH, "the rank ended without its final line (see its log)"
            if not series and lost:  # which node it was for is torchrun's choice: name them all
                message += "; " + "; ".join(why for _, why in sorted(lost.items()))
            found.append(Found(_failure(rank, kind, message, last_t, code, sig)))
    return root_cause_first(found, tp)


def root_cause_first(found: list[Found], tp: int) -> list[Failure]:
    """Earliest first, except for consequences, which follow with `consequence_of` naming
    their cause: a rank blocked on a stage that itself failed, or a rank whose connection
    broke after another rank had already failed for a reason of its own.

    A rank whose own timed-out wait closed a gloo pair (its final line says
    closed-after-timeout, peer P) reports it only at its next isend, often after P has already
    seen the pair reset: it began no later than P's connection error. What each error was is
    its final line's `error_kind`, decided in the rank, never read back from its text."""
    failures = {f.failure.rank: f.failure for f in found}
    cause_of: dict[int | None, int] = {}
    failed_stages = {f.failure.rank // tp: f.failure.rank for f in found if f.failure.rank is not None}
    for f in found:
        stage, rank = f.waiting_on_pp, f.failure.rank
        if stage is not None and stage in failed_stages and failed_stages[stage] != rank:
            cause_of[rank] = failed_stages[stage]
    broken = {r: f.at_s for r, f in failures.items() if f.error_kind == ErrorKind.CONNECTION}
    began = {r: f.at_s or 0.0 for r, f in failures.items()}
    for r, f in failures.items():
        if f.error_kind == ErrorKind.CLOSED_AFTER_TIMEOUT and f.peer is not None:
            began[r] = min(began[r], broken.get(f.peer, began[r]) or 0.0)
    causes = sorted((r for r in failures if r not in cause_of and r not in broken), key=lambda r: began[r])
    for r, f in failures.items():
        if r in cause_of or not causes or causes[0] == r:
            continue
        if f.kind == FailureKind.ERROR and began[causes[0]] <= (f.at_s or 0.0) and r in broken:
            cause_of[r] = causes[0]
    ordered = sorted(failures, key=lambda r: (r in cause_of, began[r]))
    return [_with_cause(failures[r], cause_of.get(r)) for r in ordered]


def _with_cause(failure: Failure, cause: int | None) -> Failure:
    return failure if cause is None else replace(failure, consequence_of=cause)


def _failure(
    rank: int,
    kind: FailureKind,
    message: str,
    at_s: float,
    exit_code: int | None = None,
    sig: str | None = None,
    stack: str | None = None,
) -> Failure:
    return Failure(
        rank=rank, kind=kind, exit_code=exit_code, signal=sig, message=message, stack_file=stack, at_s=round(at_s, 3)
    )


def interruption(
    interrupted_by: str | None,
    torchrun_exit_code: int | None,
    finals: dict[int, Sample],
    failures: list[Failure],
) -> Interruption | None:
    """Who stopped the run from outside, if anyone: a signal to hicache, to torchrun (which
    nothing of ours ever signals), or to the ranks (their final lines say so). Ranks
    stopped after another rank failed were not interrupted: torchrun stops the rest after
    one fails; but a broken connection is what a rank sees when its peer was stopped."""
    if interrupted_by is not None:
        return Interruption(signal=interrupted_by, to="hicache", message=None)
    code = torchrun_exit_code
    if code is not None and code < 0:
        return Interruption(
            signal=signal_name(code), to="torchrun", message=f"torchrun was killed by {signal_name(code)}"
        )
    stopped = [f for _, f in sorted(finals.items()) if f.state == "interrupted"]
    if stopped and all(f.error_kind == ErrorKind.CONNECTION for f in failures):
        return Interruption(
            signal=stopped[0].signal, to="ranks", message=f"rank {stopped[0].rank}: {stopped[0].message}"
        )
    return None
