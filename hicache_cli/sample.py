"""The one data contract between a rank's probe, the dashboard and the report.

Each rank appends one JSON object per line to `rank-<N>.jsonl` in the run directory.
Lines have a `kind`: "sample" (periodic), or "final" (the last line a rank writes, with
how it stopped). A reading that could not be taken is None, never an exception.

Lines are compact (format 2, docs/report.md#rank-files): a line leaves out a *state*
field whose value has not changed since the rank's previous line, and an *event* field
(EVENT_FIELDS) that is empty; `t` and `wall` are in every line. The latency histogram and
the counters are refreshed at most once a second. Every KEYFRAME_S, and in the final line,
the line is complete, so a reader may start at any complete line. Lines written whole
(format 1) read the same.
"""

from __future__ import annotations

import json
import os
import re
import typing
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from hicache_cli.errors import UsageError
from hicache_cli.files import open_regular
from hicache_cli.protocol import sample_files
from hicache_cli.records import matcher


@dataclass(frozen=True, slots=True)
class Sample:
    t: float  # seconds since the rank's workload started (negative while starting)
    wall: float  # time.time() when taken
    rank: int
    pp_rank: int
    tp_rank: int
    pid: int
    state: str  # "starting" | "running" | "stopping" | "done" | "error"
    rss_bytes: int | None
    depth: int  # outstanding Works in the work list
    held_bytes: int  # payload bytes kept alive by those Works
    rounds: int
    lat_p50_ms: float | None  # loop latency over the rounds since the previous sample
    lat_p99_ms: float | None
    lat_max_ms: float | None
    lat_count: int  # rounds those latencies cover
    round_age_s: float  # time since the current round began
    sent: int  # PP-sync messages sent downstream
    received: int  # PP-sync messages received from upstream
    blocked_on: str | None = None  # while blocked, e.g. "PP sync, waiting in recv from pp rank 0"
    blocked_peer: int | None = None  # the pp rank it is blocked on, when it knows
    loop_thread: int | None = None  # threading.get_ident() of the loop's thread: its block in a stack dump
    counters: dict[str, float] = field(default_factory=dict)
    # Cumulative loop-latency histogram since the start: {bucket: rounds}, sparse;
    # see hicache_cli.histogram for the bucket scale.
    lat_hist: dict[str, int] = field(default_factory=dict)
    # PP consistency: {event round: digest of the counts applied up to it}, new ones only
    digests: dict[str, int] = field(default_factory=dict)
    gpu_bytes: int | None = None  # torch.cuda.memory_allocated on the rank's GPU; None on CPU
    # what RSS is made of (smaps_rollup), read about once a second and in the final line; None between
    anon_bytes: int | None = None  # anonymous memory
    uss_bytes: int | None = None  # unique set size
    device_name: str | None = None  # "cpu" or the GPU model
    # hicache trace: the process's Works (created, waited, completed, dropped, live), and
    # (at most once a second, and in the final line) the top creation sites
    works: dict[str, int] | None = None
    sites: list[dict[str, Any]] | None = None
    # hicache trace: point-to-point messages per peer and process group, blocking calls
    # included: [peer, group, sent, sent_bytes, received, received_bytes] (analysis/messages.py)
    peers: list[list[Any]] | None = None
    # hicache attach --follow: each holder of a new census, with its trend and the lines that made
    # its Works (attach/follow.py): {path, container, works, completed, named, per_hour, growing, sites}
    holders: list[dict[str, Any]] | None = None
    node: int = 0  # the --node-rank of the hicache that launched the rank (0 on one machine)
    host: str | None = None  # the rank's host name
    # hicache trace: the world the process's ranks belong to, its default group's rendezvous
    # (`tcp://127.0.0.1:29500`, `file:///tmp/x`): rank numbers pair processes only within one
    world: str | None = None
    kind: str = "sample"
    message: str | None = None  # final lines: how the rank stopped
    signal: str | None = None  # final lines: the signal that stopped it (e.g. "SIGTERM"), if one did
    exit_code: int | None = None  # final lines of an observed program: the code it said it exits with
    # final lines of an observed program that exited: whether its default process group was still up
    group_left_up: bool | None = None
    # final lines of a rank that raised: what kind of error (protocol.ErrorKind), and the peer it concerns
    error_kind: str | None = None
    error_peer: int | None = None

    def as_dict(self) -> dict[str, Any]:
        # not asdict: it deep-copies every nested dict, and this runs in every rank ten
        # times a second, next to the loop being measured
        return {name: getattr(self, name) for name in FIELD_ORDER}

    def to_json(self) -> str:
        """The whole sample as one line (format 1; a keyframe of format 2)."""
        return json.dumps(self.as_dict(), separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Sample:
        return cls(**{k: v for k, v in data.items() if k in FIELD_NAMES})


FIELD_ORDER = tuple(f.name for f in fields(Sample))
FIELD_NAMES = frozenset(FIELD_ORDER)
REQUIRED_FIELDS = frozenset(f.name for f in fields(Sample) if f.default is MISSING and f.default_factory is MISSING)
# Fields that describe this sample alone: absent from a line, they take these values (not
# the previous line's). Every other field is state, and an absent one keeps its last value.
EVENT_FIELDS: dict[str, Any] = {
    "lat_p50_ms": None,
    "lat_p99_ms": None,
    "lat_max_ms": None,
    "lat_count": 0,
    "digests": {},
    "anon_bytes": None,
    "uss_bytes": None,
    "sites": None,
    "kind": "sample",
    "message": None,
    "signal": None,
    "exit_code": None,
    "group_left_up": None,
    "error_kind": None,
    "error_peer": None,
}
EVENT_KEYS = frozenset(EVENT_FIELDS)
# each field's test of a value read back: a line with a value of another type (a string where
# a count goes, an object where a list goes) is none of ours, and must not reach the analysis
FIELD_TYPES = {name: matcher(hint) for name, hint in typing.get_type_hints(Sample).items()}
# ... and whose keys are integers written as text: {bucket: rounds}, {event round: digest}
INTEGER_KEYED = ("lat_hist", "digests")
_integer_text = re.compile(r"-?\d{1,18}\Z").match
LINE_KEYS = frozenset(("t", "wall"))  # in every line; the rest may be left out (format 2)
THROTTLED_FIELDS = ("lat_hist", "counters")  # cumulative, and the largest: at most once a second
KEYFRAME_S = 10.0  # a complete line at least this often
REFRESH_S = 1.0


class LineEncoder:
    """One rank's lines, format 2: what a reader cannot restore from the lines before.

    A drain rank's line shrinks from ~1.3 kB to ~0.2 kB: the identity, the histogram (~50
    buckets) and the counters are what repeat.
    """

    def __init__(self) -> None:
        self._state: dict[str, Any] = {}  # state fields as the reader has them
        self._keyframe_at = float("-inf")
        self._refresh_at = float("-inf")

    def encode(self, sample: Sample, now: float) -> str:
        """The line for `sample`; `now` a monotonic clock in seconds."""
        data = sample.as_dict()
        if sample.kind != "sample" or now >= self._keyframe_at:
            self._keyframe_at = now + KEYFRAME_S
            self._refresh_at = now + REFRESH_S
            self._state = {k: v for k, v in data.items() if k not in EVENT_FIELDS}
            return json.dumps(data, separators=(",", ":"))
        refresh = now >= self._refresh_at
        if refresh:
            self._refresh_at = now + REFRESH_S
        line: dict[str, Any] = {}
        state = self._state
        for key, value in data.items():
            if key in EVENT_FIELDS:
                if value != EVENT_FIELDS[key]:
                    line[key] = value
            elif (key not in THROTTLED_FIELDS or refresh) and (
                key not in state or (state[key] is not value and state[key] != value)
            ):
                line[key] = state[key] = value
        return json.dumps(line, separators=(",", ":"))


def _default(f: Any) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


_parse = json.JSONDecoder().decode  # json.loads without its per-call options and encoding sniffing


class LineDecoder:
    """One rank file's lines back into samples (either format): state fields carry over."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {}
        self._complete = False  # every field without a default has been given

    def fields(self, line: str | bytes) -> dict[str, Any] | None:
        """The fields of one line's sample (a dict, not yet a Sample: a reader that drops most
        samples builds only the ones it keeps); None for a line that is none (torn, foreign,
        or before the rank's first complete line)."""
        try:
            data = _parse(line.decode() if isinstance(line, bytes) else line)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past what json decodes
            return None
        if not isinstance(data, dict) or not LINE_KEYS <= data.keys():
            return None
        state = self._state
        given = data.keys()
        if not given <= FIELD_NAMES:  # keys of a later version: not ours to pass on
            data = {k: v for k, v in data.items() if k in FIELD_NAMES}
            given = data.keys()
        for key, value in data.items():
            if not FIELD_TYPES[key](value):
                return None  # (the state it would have set keeps its last good value)
        for key in INTEGER_KEYED:
            if key in data and not all(map(_integer_text, data[key])):
                return None
        fields_now = {**EVENT_FIELDS, **state, **data}
        state.update(data)
        for key in given & EVENT_KEYS:  # events never carry over
            del state[key]
        if not self._complete:
            if not REQUIRED_FIELDS <= fields_now.keys():
                return None
            self._complete = True
            # a field with a default that the first complete line left out (a foreign or an
            # older writer's) has it from then on: readers index the fields by name
            missing = {f.name: _default(f) for f in fields(Sample) if f.name not in fields_now}
            fields_now.update(missing)
            state.update((k, v) for k, v in missing.items() if k not in EVENT_KEYS)
        return fields_now

    def decode(self, line: str | bytes) -> Sample | None:
        """The sample of one line; None for a line that is none."""
        fields_now = self.fields(line)
        return None if fields_now is None else Sample(**fields_now)


def decode_lines(lines: Iterable[str | bytes]) -> list[Sample]:
    """The samples of one rank file's lines, in order (lines that are none are skipped)."""
    decoder = LineDecoder()
    return [s for line in lines if (s := decoder.decode(line)) is not None]


def _open_rank_file(path: Path) -> IO[bytes]:
    """A rank file opened for reading: never through a symlink, never a FIFO (whose read
    would block) or a directory, and only a file of this user or of its directory's owner
    (an attached agent's user, in the directory hicache handed it) with one link: a hard
    link put there to someone else's file is not read. Anything else is one line."""
    try:
        return open_regular(path, follow=False, owners={os.geteuid(), os.stat(path.parent).st_uid})
    except OSError as exc:
        raise UsageError(f"{path}: cannot read it as a rank's samples: {exc.strerror or exc}") from None


class LineTail:
    """New complete lines of the rank files of a run directory, as they grow.

    A line a rank is still writing (or that a killed rank left torn) waits for its newline.
    Files are read a chunk at a time, so a day-long run's file never sits in memory whole,
    and each byte is looked at once: a line longer than MAX_LINE (no sample is; a file
    someone else wrote may hold one with no newline at all) is skipped to its end, given as
    TOO_LONG, which no decoder reads (counted unreadable), never gathered in memory.
    """

    CHUNK = 1 << 20
    MAX_LINE = 8 << 20
    TOO_LONG = b"(a line longer than the longest sample)"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._offsets: dict[Path, int] = {}
        self._skipping: set[Path] = set()  # inside an over-long line: its rest is dropped
        self.caught_up = True  # the last call read every file to its end

    def lines(self, max_bytes: int | None = None) -> Iterator[tuple[int, bytes]]:
        """(rank, line) for every complete line written since the last call, file by file.
        With `max_bytes`, about that many bytes in all, shared between the files (a reader
        catching up on a long run stays responsive); `caught_up` says whether that was all."""
        files = sample_files(self.run_dir)
        budget = None if max_bytes is None else max(self.CHUNK, max_bytes // max(1, len(files)))
        caught_up = True
        for rank, path in files.items():
            with _open_rank_file(path) as fh:
                fh.seek(self._offsets.get(path, 0))
                pending: list[bytes] = []  # the line under way, in pieces (joined once it ends)
                held = read = 0
                while chunk := fh.read(self.CHUNK):
                    read += len(chunk)
                    end = chunk.rfind(b"\n") + 1
                    if end:
                        data = b"".join([*pending, chunk[:end]])
                        self._offsets[path] = self._offsets.get(path, 0) + held + end
                        pending, held = [], 0
                        lines = data.splitlines()
                        if path in self._skipping:  # the first one is an over-long line's end
                            self._skipping.discard(path)
                            lines[0] = self.TOO_LONG
                        for line in lines:
                            yield rank, line
                    rest = chunk[end:]
                    if path in self._skipping:
                        self._offsets[path] = self._offsets.get(path, 0) + len(rest)
                    elif held + len(rest) > self.MAX_LINE:
                        self._skipping.add(path)
                        self._offsets[path] = self._offsets.get(path, 0) + held + len(rest)
                        pending, held = [], 0
                    elif rest:
                        pending.append(rest)
                        held += len(rest)
                    if budget is not None and read >= budget and end:  # (a line longer than the budget is read whole)
                        caught_up = caught_up and not fh.read(1)
                        break
        self.caught_up = caught_up

    def poll(self) -> dict[int, list[bytes]]:
        new: dict[int, list[bytes]] = {rank: [] for rank in sample_files(self.run_dir)}
        for rank, line in self.lines():
            new.setdefault(rank, []).append(line)
        return new

    def backlog(self) -> int:
        """Bytes written to the rank files and not read yet (a line being written included)."""
        return sum(
            max(0, path.stat().st_size - self._offsets.get(path, 0)) for path in sample_files(self.run_dir).values()
        )
