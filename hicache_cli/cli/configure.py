"""From a command's options to the run's config, checked: the one way from what was typed
to a RunConfig (each bad option one line), and the checks of what a command will write."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import typer

from hicache_cli.api import with_sglang
from hicache_cli.config import DEFAULT_POLICY, DEFAULT_PROBE_HZ, RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.launcher import LOOPBACK, pick_port
from hicache_cli.launch.nodes import ranks_per_node
from hicache_cli.present.html import check_page_output
from hicache_cli.present.metrics_exporter import check_metrics_options
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
    nnodes: int = 1  # stress across nodes: how many ranks run on this machine (a GPU each under NCCL)
    nproc_per_node: int | None = None

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
        ranks_here = ranks_per_node(config.target.world_size, opts.nnodes, opts.nproc_per_node)
        _require_cuda(opts.device, opts.pp_backend, ranks_here)
    if target is None:
        return config
    return with_sglang(config, opts.target, opts.sglang_class, progress)


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


def _require_cuda(device: str, pp_backend: str, ranks_here: int) -> None:
    """Asked for a GPU: say so now, in one line, rather than from inside every rank."""
    import torch  # only here: the CLI otherwise never pays for importing torch
    import torch.distributed as dist

    if not torch.cuda.is_available():
        raise UsageError(f"--device {device} / --pp-backend {pp_backend}: no CUDA device is available here")
    if pp_backend == "nccl" and not dist.is_nccl_available():
        raise UsageError("--pp-backend nccl: this torch has no NCCL")
    gpus = torch.cuda.device_count()
    if pp_backend == "nccl" and gpus < ranks_here:
        # NCCL stops a communicator whose ranks share a device ("Duplicate GPU detected")
        raise UsageError(
            f"--pp-backend nccl: NCCL needs a GPU of its own for each rank, and the {ranks_here} ranks here "
            f"would share {gpus}; use gloo (the default), or run fewer ranks on this machine"
        )


def check_output_paths(**paths: Path | None) -> None:
    """Files a command will write (option name -> path), checked before any work starts:
    each one's directory must exist, and it must be new or a regular file (a device, FIFO
    or directory there is refused, never replaced); no two options may name one file."""
    named: dict[Path, str] = {}
    for option, path in paths.items():
        if path is None:
            continue
        flag = f"--{option.replace('_', '-')}"
        if (problem := output_problem(path)) is not None:
            raise UsageError(f"{flag} {path}: {problem}")
        same = named.setdefault(Path(os.path.realpath(path)), flag)  # (realpath: never raises, even on a loop)
        if same != flag:
            raise UsageError(f"{same} and {flag} both name {path}: each writes a file of its own")


def check_html(html: Path | None, **others: Path | None) -> None:
    """`--html FILE` and the command's other outputs, before the run: an output like the
    others, and never a file hicache did not write (a page it wrote before is written again)."""
    check_output_paths(**others, html=html)
    if html is not None:
        check_page_output(html, "--html")


def check_run_options(
    refresh: float,
    report: Path | None,
    port: int | None,
    metrics_port: int | None = None,
    metrics_host: str | None = None,
    html: Path | None = None,
    **outputs: Path | None,
) -> None:
    """Options about running rather than the workload, the files the command writes among
    them (`outputs`: its others, such as --junit); a bad or busy port fails here, before
    anything is created."""
    if not 0.2 <= refresh <= 20:
        raise UsageError(f"--refresh must be between 0.2 and 20 per second, got {refresh}")
    check_html(html, report=report, **outputs)
    if port is not None:
        pick_port(LOOPBACK, port)
    check_metrics_options(metrics_port, metrics_host)
