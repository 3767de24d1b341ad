"""hicache as a library: run a stress workload or trace a program, and read reports back,
with no terminal output (docs/api.md).

    import hicache_cli as hc
    report = hc.run(hc.StressConfig(pp=2, policy="reap", duration_s=8.0))
    assert report.verdict == hc.Verdict.LEAK

The commands run the same `execution.execute`; this module adds no behaviour of its own
beyond checking the config first and typing the result.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from hicache_cli.analysis import report as report_file
from hicache_cli.analysis.results import Report
from hicache_cli.config import DEFAULT_PROBE_HZ, RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.execution import execute
from hicache_cli.launch.attach_launcher import attached_config
from hicache_cli.launch.supervisor import EarlyStop
from hicache_cli.launch.trace_launcher import traced_config
from hicache_cli.rundir import create_run_dir
from hicache_cli.sample import Sample
from hicache_cli.targets import RankedTarget, Target

# Called about twice a second while a run goes on: every rank's samples so far (by rank
# file), and the seconds since launch. How the dashboard follows a run.
OnSamples = Callable[[dict[int, list[Sample]], float], None]


def run(
    config: RunConfig,
    *,
    run_dir: str | os.PathLike[str] | None = None,
    on_samples: OnSamples | None = None,
    early_stop: EarlyStop | None = None,
    report_copy: str | os.PathLike[str] | None = None,
) -> Report:
    """Run hicache's workload (or SGLang's code, see `with_sglang`) under torchrun and
    return its report, however the run ended (`report.status` says how).

    `run_dir`: a new or empty directory (default ./hicache-runs/<time>-<policy>/).
    `early_stop(samples)` may return a reason to end the run before its duration, e.g.
    `hicache_cli.analysis.settle.Settler(config)`, as `check --max-duration` does.
    Bad values raise UsageError with the CLI's one-line message.
    """
    if (call := config.target.api_call) != Target.api_call:
        raise UsageError(f"a target of kind {config.target.kind!r} runs with hicache_cli.{call}")
    config.validate()
    directory = create_run_dir(_path(run_dir), config.label)
    result = execute(config, directory, on_samples or _ignore, report_copy=_path(report_copy), early_stop=early_stop)
    assert result.report is not None  # one machine: the report is written here
    return result.report


def trace(
    command: str | Sequence[str | os.PathLike[str]],
    *,
    duration_s: float | None = None,
    loop: str | None = None,
    probe_hz: float = DEFAULT_PROBE_HZ,
    warmup_s: float | None = None,
    leak_threshold_mb_per_h: float = 100.0,
    stall_timeout_s: float = 60.0,
    run_dir: str | os.PathLike[str] | None = None,
    on_samples: OnSamples | None = None,
    early_stop: EarlyStop | None = None,
    capture_output: bool = False,
) -> Report:
    """Run `command` with the Work tracer armed in every Python process below it that
    starts a torch.distributed process group (as `hicache trace -- COMMAND`) and return
    the report: per process, its Works by creation site.

    `command`: the program and its arguments, a list as subprocess takes them, or one
    string split as a POSIX shell splits words (shlex.split: quotes group, nothing else of
    a shell happens), so `"torchrun --nproc-per-node 2 train.py"` is four arguments.
    `duration_s`: stop the program after this long (default: let it run to its end).
    `capture_output`: the program's output goes to program.log in the run directory
    instead of this process's stdout and stderr.
    """
    config = traced_config(
        command=command_argv(command),
        loop=loop,
        duration_s=duration_s,
        probe_hz=probe_hz,
        warmup_s=warmup_s,
        leak_threshold_mb_per_h=leak_threshold_mb_per_h,
        stall_timeout_s=stall_timeout_s,
    )
    directory = create_run_dir(_path(run_dir), "trace")
    result = execute(config, directory, on_samples or _ignore, early_stop=early_stop, passthrough=not capture_output)
    assert result.report is not None
    return result.report


def attach_to(
    pids: int | Sequence[int],
    *,
    duration_s: float | None = 60.0,
    census: bool = True,
    probe_hz: float = DEFAULT_PROBE_HZ,
    warmup_s: float | None = None,
    leak_threshold_mb_per_h: float = 100.0,
    run_dir: str | os.PathLike[str] | None = None,
    on_samples: OnSamples | None = None,
    early_stop: EarlyStop | None = None,
    follow: bool = False,
    census_every_s: float = 15.0,
    window_s: float = 10.0,
) -> Report:
    """Attach to processes already running (as `hicache attach PID...`): the census of the
    Works each holds, by holder, then the tracer until `duration_s` (None: until every
    process has ended), then detach, leaving each as it was; the report. A pid may be a rank
    or a parent (torchrun) of ranks. A process that cannot be attached raises AttachRefused
    (a UsageError) with the command's one line; `report.target.processes` says how each went.
    With `follow` (as `attach --follow`), a census every `census_every_s` and the tracer only
    for `window_s` when a holder grows; ranks started later are attached too.
    """
    config = attached_config(
        pids=[pids] if isinstance(pids, int) else list(pids),
        duration_s=duration_s,
        probe_hz=probe_hz,
        warmup_s=warmup_s,
        leak_threshold_mb_per_h=leak_threshold_mb_per_h,
        census=census,
        follow=(census_every_s, window_s) if follow else None,
    )
    directory = create_run_dir(_path(run_dir), config.label, private=config.target.private_run_dir)
    result = execute(config, directory, on_samples or _ignore, early_stop=early_stop)
    assert result.report is not None
    return result.report


def command_argv(command: str | Sequence[str | os.PathLike[str]]) -> list[str]:
    """trace's `command` as argv: a string split as shell words, a sequence taken as it is.
    Was: a string taken as a sequence of one-character arguments ("cannot run 't'")."""
    if isinstance(command, str):
        try:
            argv = shlex.split(command)
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"command {command!r}: {exc}") from None
    elif isinstance(command, Sequence) and all(isinstance(a, (str, os.PathLike)) for a in command):
        argv = [os.fspath(a) for a in command]
    else:
        raise UsageError(f"command: a string or a list of strings, got {command!r}")
    if not argv:
        raise UsageError("command: no program given")
    return argv


def load_report(path: str | os.PathLike[str]) -> Report:
    """A report written by any hicache command (or its run directory), checked against the
    schema; anything else raises UsageError naming the problem."""
    return report_file.load_report(Path(path))


def with_sglang(
    config: RunConfig,
    target: str = "sglang",
    sglang_class: str = "auto",
    progress: Callable[[str], None] | None = None,
) -> RunConfig:
    """The config with SGLang's own PP-sync methods in place of hicache's model: `target`
    is `sglang` (installed), `sglang==VERSION` (fetched once into the cache) or
    `sglang:PATH`. As `--target`; the workload becomes `idle`, the policy SGLang's.
    `progress` hears of a release being fetched."""
    from hicache_cli.sglang_target.locate import parse_target
    from hicache_cli.sglang_target.resolve import resolve

    spec = parse_target(target)
    if spec is None:
        raise UsageError(f"--target {target!r}: name an SGLang (sglang, sglang==VERSION or sglang:PATH)")
    if not isinstance(config.target, RankedTarget):
        raise UsageError("with_sglang: SGLang's code runs on hicache's ranks; give a config of hicache's model")
    resolved = resolve(spec, sglang_class, progress)
    return replace(config, target=resolved.target(config.target))


def _path(value: str | os.PathLike[str] | None) -> Path | None:
    return None if value is None else Path(value)


def _ignore(samples: dict[int, list[Sample]], elapsed: float) -> None:
    return None
