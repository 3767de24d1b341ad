"""What the commands that run workloads share: their options, checking them, and running
one workload with a progress view."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cache.faults import SHAPES as FAULT_SHAPES
from cache.policies import POLICIES
from cache.workload import PRESETS
from hicache_cli.analysis.results import Report
from hicache_cli.api import with_sglang
from hicache_cli.config import DEFAULT_POLICY, DEFAULT_PROBE_HZ, RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.execution import RunResult, execute
from hicache_cli.launch.launcher import LOOPBACK, pick_port
from hicache_cli.launch.nodes import NodeSpec
from hicache_cli.launch.supervisor import EarlyStop
from hicache_cli.lifecycle import STOPS, exit_code_for
from hicache_cli.present.dashboard import Dashboard
from hicache_cli.present.github import STEP_SUMMARY_ENV
from hicache_cli.present.metrics_exporter import MetricsExporter, check_metrics_options
from hicache_cli.present.progress import LiveView, PlainProgress, ensure_stdout, human_stream
from hicache_cli.rundir import output_problem
from hicache_cli.sglang_target.locate import parse_target
from hicache_cli.sglang_target.resolve import CLASS_CHOICES
from hicache_cli.units import MAX_TIMEOUT_S, parse_duration


@dataclass(frozen=True)
class StressOptions:
    pp: int
    tp: int
    policy: str | None  # None: DEFAULT_POLICY for the model; must stay None for --target sglang
    duration: str
    workload: str
    seed: int
    probe_hz: float = DEFAULT_PROBE_HZ
    wait_timeout: str = "5s"
    request_rate: float | None = None
    prefix_sharing: float | None = None
    idle_fraction: float | None = None
    warmup: str | None = None
    leak_threshold: float = 100.0
    stall_timeout: str = "5s"
    faults: tuple[str, ...] = ()
    device: str = "auto"
    pp_backend: str = "gloo"
    target: str = "model"
    sglang_class: str = "auto"

    @classmethod
    def given(cls, ctx: typer.Context, **decided: Any) -> StressOptions:
        """The options a command was given, by their names (`--fault` is `faults`), and
        what the command decides itself in `decided`: the one way from options to config."""
        params = dict(ctx.params)
        if "fault" in params:
            params["faults"] = tuple(params.pop("fault"))
        return cls(**{f.name: params[f.name] for f in fields(cls) if f.name in params} | decided)


def config_from_options(opts: StressOptions, progress: Callable[[str], None] | None = None) -> RunConfig:
    """Check every option and build the run's config; bad input raises UsageError.

    With `--target sglang...` the SGLang source is located (a release is fetched into the
    cache, reporting through `progress`) and its methods taken, last, after the cheap checks.
    """
    target = parse_target(opts.target)
    if target is not None:
        _check_sglang_options(opts)
    warmup = parse_duration(opts.warmup, "warmup") if opts.warmup is not None else None
    config = StressConfig(
        pp=opts.pp,
        tp=opts.tp,
        policy=opts.policy or DEFAULT_POLICY,
        duration_s=parse_duration(opts.duration, "duration"),
        workload=opts.workload,
        request_rate=opts.request_rate,
        prefix_sharing=opts.prefix_sharing,
        idle_fraction=opts.idle_fraction,
        seed=opts.seed,
        probe_hz=opts.probe_hz,
        wait_timeout_s=parse_duration(opts.wait_timeout, "wait-timeout", MAX_TIMEOUT_S),
        warmup_s=warmup,
        leak_threshold_mb_per_h=opts.leak_threshold,
        stall_timeout_s=parse_duration(opts.stall_timeout, "stall-timeout", MAX_TIMEOUT_S),
        faults=tuple(opts.faults),
        device=opts.device,
        pp_backend=opts.pp_backend,
    ).validate()
    if opts.device == "cuda" or opts.pp_backend == "nccl":
        _require_cuda(opts.device, opts.pp_backend)
    if target is None:
        return config
    return with_sglang(config, opts.target, opts.sglang_class, progress)


def say(message: str) -> None:
    """Progress of work done before a run starts (fetching a release), on stderr."""
    typer.echo(f"hicache: {message}", err=True)


# Faults that act on hicache's own work list, which SGLang's code does not use.
MODEL_ONLY_FAULTS = ("raise-in-wait", "keep")


def _check_sglang_options(opts: StressOptions) -> None:
    """Options that shape hicache's own model mean nothing for SGLang's code: say so."""
    if opts.policy is not None:
        raise UsageError("--policy picks hicache's model policy; with --target sglang SGLang's own code drains")
    if opts.sglang_class not in CLASS_CHOICES:
        raise UsageError(f"--sglang-class: {opts.sglang_class!r}; choose one of: {', '.join(CLASS_CHOICES)}")
    for name, value in (
        ("request-rate", opts.request_rate),
        ("prefix-sharing", opts.prefix_sharing),
        ("idle-fraction", opts.idle_fraction),
    ):
        if value is not None:
            raise UsageError(f"--{name} shapes hicache's model workload; it does not apply to --target sglang")
    if opts.device == "cuda" or opts.pp_backend == "nccl":
        raise UsageError("--target sglang: SGLang's PP sync runs on a gloo CPU group; use --device cpu/auto and gloo")
    for spec in opts.faults:
        if spec.split(":", 1)[0] in MODEL_ONLY_FAULTS:
            raise UsageError(f"--fault {spec}: acts on hicache's own work list; not available with --target sglang")


def _require_cuda(device: str, pp_backend: str) -> None:
    """Asked for a GPU: say so now, in one line, rather than from inside every rank."""
    import torch  # only here: the CLI otherwise never pays for importing torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise UsageError(f"--device {device} / --pp-backend {pp_backend}: no CUDA device is available here")
    if pp_backend == "nccl" and not dist.is_nccl_available():
        raise UsageError("--pp-backend nccl: this torch has no NCCL")


def check_output_paths(**paths: Path | None) -> None:
    """Files a command will write (option name -> path), checked before any work starts:
    each one's directory must exist, and it must be new or a regular file (a device, FIFO
    or directory there is refused, never replaced)."""
    for option, path in paths.items():
        if path is not None and (problem := output_problem(path)) is not None:
            raise UsageError(f"--{option.replace('_', '-')} {path}: {problem}")


def check_run_options(
    refresh: float,
    report: Path | None,
    port: int | None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
) -> None:
    """Options about running rather than the workload; a bad or busy port fails here,
    before anything is created."""
    if not 0.2 <= refresh <= 20:
        raise UsageError(f"--refresh must be between 0.2 and 20 per second, got {refresh}")
    check_output_paths(report=report)
    if port is not None:
        pick_port(LOOPBACK, port)
    check_metrics_options(metrics_port, metrics_host)


def exit_if_interrupted(*reports: Report) -> None:
    """Exit 128 + the signal when a run was stopped from outside, or hicache was asked to
    stop while it wrote its report; otherwise return."""
    for report in reports:
        if report.interrupted:
            raise typer.Exit(exit_code_for(report.stop_signal))
    if STOPS.signal is not None:
        raise typer.Exit(STOPS.exit_code())


def wants_live(no_live: bool, json_output: bool = False) -> bool:
    """The live dashboard, on the terminal human text goes to (stderr under `--json`)."""
    return not no_live and human_stream(json_output).isatty()


def print_json(document: dict[str, Any]) -> None:
    """`--json`: the one JSON document on stdout. A reader that went away (`| head`) is no
    error: the run's files are written anyway."""
    ensure_stdout()
    try:
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's own flush at exit would fail again


def append_step_summary(markdown: str) -> None:
    """On GitHub Actions ($GITHUB_STEP_SUMMARY set): add `markdown` to the step's summary,
    appended to the file GitHub names, never replacing it. A summary that cannot be written
    is a warning: the command's result stands."""
    path = os.environ.get(STEP_SUMMARY_ENV)
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as summary:
            summary.write(markdown + "\n")
    except OSError as exc:
        say(f"warning: cannot add to the step summary {path}: {exc.strerror or exc}")


def serve_metrics(ctx: typer.Context, port: int | None, host: str | None, config: RunConfig) -> MetricsExporter | None:
    """With --metrics-port: the endpoint, bound now (a busy port fails before a run directory
    exists) and closed when the command ends, however it ends."""
    if port is None:
        return None
    exporter = MetricsExporter.start(host, port, config, run_dir="")
    ctx.call_on_close(exporter.close)
    return exporter


def run_with_progress(
    config: RunConfig,
    directory: Path,
    console: Console,
    live: bool,
    refresh: float = 4.0,
    port: int | None = None,
    report_copy: Path | None = None,
    early_stop: EarlyStop | None = None,
    nodes: NodeSpec | None = None,
    metrics: MetricsExporter | None = None,
) -> RunResult:
    """One workload, shown live on a terminal or as plain lines otherwise (and served as
    metrics, with `metrics`)."""
    if metrics is not None:
        metrics.run_dir = str(directory)
        console.print(f"metrics: {metrics.url}")
    if live:
        with LiveView(Dashboard(config, str(directory)), console) as live_view:
            view = live_view if metrics is None else metrics.feeding(live_view)
            return execute(config, directory, view, port, report_copy, 1.0 / refresh, early_stop, nodes)
    plain = PlainProgress(config.duration_s, write=console.print)
    view = plain if metrics is None else metrics.feeding(plain)
    return execute(config, directory, view, port, report_copy, early_stop=early_stop, nodes=nodes)


POLICY_HELP = "Drain policy: " + ", ".join(POLICIES) + ". See docs/policies.md."

# Options shared by stress, check and compare-policies (typer reads these, never changes them).
PP = typer.Option(2, "--pp", help="Pipeline-parallel stages (ranks per pipeline).")
TP = typer.Option(1, "--tp", help="Tensor-parallel ranks per stage; world size is pp x tp.")
WORKLOAD = typer.Option(
    "mixed", "--workload", help="Preset: " + ", ".join(PRESETS) + " (idle = the incident's idle server)."
)
REQUEST_RATE = typer.Option(None, "--request-rate", help="Chance a busy round admits a request (0-1).")
PREFIX_SHARING = typer.Option(None, "--prefix-sharing", help="Share of requests with a shared prefix (0-1).")
IDLE_FRACTION = typer.Option(None, "--idle-fraction", help="Share of rounds with nothing to do (0-1).")
SEED = typer.Option(0, "--seed", help="Workload seed; every rank uses the same.")
PROBE_HZ = typer.Option(DEFAULT_PROBE_HZ, "--probe-hz", help="Samples per second per rank.")
WAIT_TIMEOUT = typer.Option("5s", "--wait-timeout", help="bounded-drain: longest a round's drain may wait.")
WARMUP = typer.Option(
    None, "--warmup", help="Start of the run left out of trends (default: where each rank's RSS settles)."
)
FAULT = typer.Option(
    [],
    "--fault",
    help="Inject a fault (repeatable): " + ", ".join(FAULT_SHAPES.values()) + ". See docs/faults.md.",
)
STALL_TIMEOUT = typer.Option(
    "5s", "--stall-timeout", help="A rank whose round runs longer is stalled: stacks dumped, run ended."
)
TARGET = typer.Option(
    "model",
    "--target",
    help="What runs the PP sync: model (hicache's cache model, under --policy), sglang (the installed "
    "SGLang's own methods), sglang==VERSION (a release, fetched once) or sglang:PATH (a checkout or file). "
    "See docs/sglang.md.",
)
SGLANG_CLASS = typer.Option(
    "auto", "--sglang-class", help="With --target sglang: " + ", ".join(CLASS_CHOICES) + " (auto: the first present)."
)
PORT = typer.Option(None, "--port", help="Rendezvous port on 127.0.0.1 (default: a free one).")
NO_LIVE = typer.Option(False, "--no-live", help="Plain progress lines instead of the live dashboard.")
REFRESH = typer.Option(4.0, "--refresh", help="Live dashboard refreshes per second.")
METRICS_PORT = typer.Option(
    None,
    "--metrics-port",
    help="Serve Prometheus metrics on this port while the run lasts: per rank RSS, work-list depth, loop "
    "latency, rounds (0: a free port). Needs the metrics extra. See docs/dashboard.md.",
)
METRICS_HOST = typer.Option(
    None, "--metrics-host", help="Address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0: every one)."
)
JSON = typer.Option(
    False, "--json", help="Print the report as one JSON document on stdout; everything else goes to stderr."
)
DEVICE = typer.Option("auto", "--device", help="auto (a GPU when there is one), cpu or cuda.")
PP_BACKEND = typer.Option(
    "gloo", "--pp-backend", help="Backend of the TP and PP-sync groups: gloo (as SGLang) or nccl (CUDA tensors)."
)
