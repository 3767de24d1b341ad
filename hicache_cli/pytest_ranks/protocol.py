"""What pytest and a marked test's rank processes agree on: the files of the test's run
directory, and the two messages written there (the request, each rank's outcome).

pytest writes `request.json` (and `args.pickle`, the test's other arguments) and starts
`python -m hicache_cli.pytest_ranks.runner RUN_DIR RANK` once per rank. A rank samples into
`rank-N.jsonl` (the tracer's Sample contract), dumps its stack into `rank-N.stacks.txt` on
SIGUSR1, creates `rank-N.started` as it calls the test body, writes `rank-N.outcome.json`
when the body is over, then waits for `release` (so that no rank's exit cuts a peer's
pending receive) and leaves. Its output goes to `rank-N.log`. Stdlib only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from hicache_cli.files import read_bytes

# rank-N.log and rank-N.stacks.txt, named as for hicache's own ranks (re-exported)
from hicache_cli.protocol import log_file  # noqa: F401
from hicache_cli.protocol import stacks_file as stack_file  # noqa: F401
from hicache_cli.rundir import write_run_file  # readers see the whole file or none of it; never through a symlink

REQUEST = "request.json"
ARGS = "args.pickle"
RELEASE = "release"  # pytest creates it once it has every outcome it will wait for
RENDEZVOUS = "rendezvous"  # the FileStore the ranks' process group meets in
RUNNER_MODULE = "hicache_cli.pytest_ranks.runner"

# Outcome statuses a rank writes
PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


def outcome_file(run_dir: Path, rank: int) -> Path:
    return run_dir / f"rank-{rank}.outcome.json"


def started_file(run_dir: Path, rank: int) -> Path:
    """Created by the rank right before it calls the test body: the timeout runs from there."""
    return run_dir / f"rank-{rank}.started"


def exit_file(run_dir: Path, rank: int) -> Path:
    """A forked rank's exit status, written by the fork server that reaped it."""
    return run_dir / f"rank-{rank}.exit"


@dataclass(frozen=True)
class RankRequest:
    """What every rank needs to run the test body as pytest would have."""

    nodeid: str
    module: str  # the test module's name in pytest's sys.modules
    file: str  # and its file
    qualname: tuple[str, ...]  # classes (outermost first), then the function's name
    argnames: tuple[str, ...]  # the function's parameters: rank, world_size, and those in args.pickle
    world_size: int
    backend: str
    timeout_s: float
    probe_hz: float
    sys_path: tuple[str, ...]  # pytest's sys.path when the test ran
    owner: str  # lifecycle.owner_token() of the pytest process: ranks leave if it is gone
    rewrite_asserts: bool  # pytest's assertion rewriting is on: do the same to the module

    def write(self, run_dir: Path) -> None:
        write_run_file(run_dir / REQUEST, json.dumps(asdict(self), indent=1))

    @classmethod
    def read(cls, run_dir: Path) -> RankRequest:
        data = json.loads(read_bytes(run_dir / REQUEST, follow=False))
        for name in ("qualname", "argnames", "sys_path"):
            data[name] = tuple(data[name])
        return cls(**data)


@dataclass(frozen=True)
class Outcome:
    """How a rank's test body went, written by the rank once it is over."""

    rank: int
    pid: int
    status: str  # PASSED | FAILED | SKIPPED
    error: str | None = None  # "AssertionError: assert 1 == 0" (the exception's last line)
    traceback: str | None = None  # formatted, hicache's own frames left out
    body_started: float | None = None  # time.time() when the body was called (None: it never was)
    body_ended: float | None = None
    # sends the body returned without waiting, by site: {peer, count, file, line, function, op}
    # (tracer/hazards.py); a peer may be left waiting for them
    unwaited_sends: list[dict[str, Any]] | None = None
    error_kind: str | None = None  # protocol.ErrorKind of what the body raised: a broken connection is a consequence

    def write(self, run_dir: Path) -> None:
        write_run_file(outcome_file(run_dir, self.rank), json.dumps(asdict(self)))

    @classmethod
    def read(cls, run_dir: Path, rank: int) -> Outcome | None:
        """The rank's outcome, or None while it has not written one."""
        try:
            data: dict[str, Any] = json.loads(read_bytes(outcome_file(run_dir, rank), follow=False))
        except (OSError, ValueError):
            return None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
