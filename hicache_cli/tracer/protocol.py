"""What `hicache trace` and the processes it observes agree on: environment variables and
the files they leave in the run directory. Both sides import this; stdlib only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

RUN_DIR_ENV = "HICACHE_TRACE_DIR"  # the run directory; its presence arms the tracer
ROOT_ENV = "HICACHE_TRACE_ROOT"  # where the hicache_cli package lies (imported from there)
HZ_ENV = "HICACHE_TRACE_HZ"  # samples per second per process
LOOP_ENV = "HICACHE_TRACE_LOOP"  # MODULE:QUALNAME whose calls are rounds, or unset
# "PID:START" of the hicache that traces (lifecycle.owner_token); its own name, so that a
# traced `hicache stress` naming itself owner of its ranks does not hide the tracing one
OWNER_ENV = "HICACHE_TRACE_OWNER"
STOP_FILE = "trace-stop"  # hicache creates it: every process writes its final line and stops sampling
STOPPED_AT_END = "stopped by hicache at the end of the trace"  # that final line's message
PROGRAM_LOG = "program.log"  # the program's stdout and stderr when the dashboard owns the terminal
BOOT_DIR = Path(__file__).resolve().parent / "boot"  # holds only sitecustomize.py


@dataclass(frozen=True)
class TraceEnv:
    """What a traced process reads from its environment; None when not traced."""

    run_dir: Path
    hz: float
    loop: str | None
    owner: str | None

    @classmethod
    def from_environ(cls, environ: os._Environ[str] | dict[str, str] = os.environ) -> TraceEnv | None:
        run_dir = environ.get(RUN_DIR_ENV)
        if not run_dir:
            return None
        try:
            hz = float(environ.get(HZ_ENV, "10"))
        except ValueError:
            hz = 10.0
        return cls(Path(run_dir), min(100.0, max(0.1, hz)), environ.get(LOOP_ENV) or None, environ.get(OWNER_ENV))


def environment(base: dict[str, str], run_dir: Path, hz: float, loop: str | None, owner: str) -> dict[str, str]:
    """`base` with what arms the tracer in every Python process below: our sitecustomize
    first on PYTHONPATH (it chains any other), the run directory, the rate, the loop."""
    env = dict(base)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOT_DIR), env.get("PYTHONPATH")) if p)
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    env[ROOT_ENV] = root
    env[HZ_ENV] = repr(hz)
    env[OWNER_ENV] = owner
    if loop:
        env[LOOP_ENV] = loop
    else:
        env.pop(LOOP_ENV, None)
    return env
