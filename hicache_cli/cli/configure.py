"""From a command's option groups (options.py) to the run's config, checked: the one place
where what was typed becomes a RunConfig, every builder called by keyword (each bad option
one line), and the checks of what a command will write."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hicache_cli.analysis.baseline import Tolerance, parse_tolerance, workload_difference
from hicache_cli.analysis.gate import Thresholds
from hicache_cli.analysis.kinds import Status
from hicache_cli.analysis.report import load_report
from hicache_cli.analysis.results import Report
from hicache_cli.api import with_sglang
from hicache_cli.cli.options import Follow, Gate, Measurement, Outputs, Progress, Ranks, Rendezvous
from hicache_cli.cli.output import say
from hicache_cli.config import DEFAULT_POLICY, RunConfig, StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch.attach_launcher import attached_config
from hicache_cli.launch.launcher import LOOPBACK, pick_port
from hicache_cli.launch.nodes import NodeSpec, node_spec, ranks_per_node
from hicache_cli.launch.trace_launcher import traced_config
from hicache_cli.present.html import check_page_output
from hicache_cli.present.metrics_exporter import check_metrics_options
from hicache_cli.rundir import output_problem
from hicache_cli.sglang_target.locate import parse_target
from hicache_cli.sglang_target.resolve import CLASS_CHOICES
from hicache_cli.targets import MAX_ROUND_TIME_S
from hicache_cli.units import MAX_TIMEOUT_S, parse_duration, parse_rate_mb_per_h
from hicache_model.policies import POLICIES

# Faults that act on hicache's own work list, which SGLang's code does not use.
MODEL_ONLY_FAULTS = ("raise-in-wait", "keep")
CHECK_WARMUP = "3s"  # the cache warm-up already ran; a short trend warm-up settles sooner
CHECK_POLICY = "drain"  # the fix: the gate's question is whether it holds
CHECK_DURATION = "30s"
FOLLOW_HZ = 1.0  # attach --follow's samples a second, unless --probe-hz says otherwise
TRACE_STALL_TIMEOUT = "60s"  # a traced program's step may be slow; still this long to its end, a process is stuck


def measured(measure: Measurement) -> dict[str, Any]:
    """RunConfig's measurement settings from their options (durations parsed), by keyword."""
    return {
        "duration_s": parse_duration(measure.duration, "duration") if measure.duration is not None else None,
        "probe_hz": measure.probe_hz,
        "warmup_s": parse_duration(measure.warmup, "warmup") if measure.warmup is not None else None,
        "leak_threshold_mb_per_h": measure.leak_threshold,
        "stall_timeout_s": parse_duration(measure.stall_timeout, "stall-timeout", MAX_TIMEOUT_S),
    }


def ranks_config(
    ranks: Ranks,
    measure: Measurement,
    nodes: Rendezvous = Rendezvous(),
    progress: Callable[[str], None] | None = None,
) -> RunConfig:
    """A run of hicache's own ranks (its model, or SGLang's code): every option checked; bad
    input raises UsageError.

    With `--target sglang...` the SGLang source is located (a release is fetched into the
    cache, reporting through `progress`) and its methods taken, last, after the cheap checks.
    """
    target = parse_target(ranks.target)
    if target is not None:
        _check_sglang_options(ranks)
    config = StressConfig(
        pp=ranks.pp,
        tp=ranks.tp,
        policy=ranks.policy or DEFAULT_POLICY,
        workload=ranks.workload,
        request_rate=ranks.request_rate,
        prefix_sharing=ranks.prefix_sharing,
        idle_fraction=ranks.idle_fraction,
        seed=ranks.seed,
        wait_timeout_s=parse_duration(ranks.wait_timeout, "wait-timeout", MAX_TIMEOUT_S),
        faults=tuple(ranks.faults),
        round_time_s=parse_duration(ranks.round_time, "round-time", MAX_ROUND_TIME_S) if ranks.round_time else 0.0,
        device=ranks.device,
        pp_backend=ranks.pp_backend,
        launcher=ranks.launcher,
        **measured(measure),
    ).validate()
    if config.launcher == "fork" and nodes.nnodes > 1:
        raise UsageError("--launcher fork starts every rank on this machine; across nodes ranks start with torchrun")
    if ranks.device == "cuda" or ranks.pp_backend == "nccl":
        ranks_here = ranks_per_node(config.target.world_size, nodes.nnodes, nodes.nproc_per_node)
        _require_cuda(ranks.device, ranks.pp_backend, ranks_here)
    if target is None:
        return config
    return with_sglang(config, ranks.target, ranks.sglang_class, progress)


def trace_config(command: list[str], loop: str | None = None, measure: Measurement | None = None) -> RunConfig:
    """A traced program's config (`trace -- COMMAND`, `check -- COMMAND`); its duration None:
    until the program ends. The command must exist."""
    taken = measured(measure or Measurement(duration=None, stall_timeout=TRACE_STALL_TIMEOUT))
    return traced_config(command=command, loop=loop, **taken)


def attach_config(
    pids: list[int], measure: Measurement | None = None, census: bool = True, follow: Follow | None = None
) -> RunConfig:
    """An attach's config (`attach PID`, `check --pid`): what /proc, the debugger and ptrace
    already refuse is refused here. It has no rounds to time: no stall timeout is taken.
    With `follow.follow`, a follow's: until stopped unless a duration is given, 1 sample a second
    unless a rate is."""
    taken = measured(measure or Measurement(duration=None))
    del taken["stall_timeout_s"]  # attached_config's own: the watchdog is off for an attach
    following = None
    if follow is not None and follow.follow:
        following = (parse_duration(follow.census_every, "census-every"), parse_duration(follow.window, "window"))
    if taken["probe_hz"] is None:
        taken["probe_hz"] = FOLLOW_HZ if following else RunConfig.probe_hz
    return attached_config(pids=pids, census=census, follow=following, **taken)


def nodes_config(nodes: Rendezvous, config: RunConfig, outputs: Outputs) -> NodeSpec | None:
    """`stress` across nodes: the node's part (None: one machine), checked with what node 0
    alone does (the report and its copies)."""
    spec = node_spec(
        world_size=config.expected_ranks or 0,
        nnodes=nodes.nnodes,
        node_rank=nodes.node_rank,
        nproc_per_node=nodes.nproc_per_node,
        rdzv_endpoint=nodes.rdzv_endpoint,
        rdzv_id=nodes.rdzv_id,
        sample_port=nodes.sample_port,
        run_secret=nodes.run_secret,
    )
    if spec is not None and nodes.port is not None:
        raise UsageError("--port is for one machine; across nodes the rendezvous is --rdzv-endpoint")
    if spec is not None and not spec.is_head:
        for flag, wanted in (("--report", outputs.report), ("--html", outputs.html), ("--json", outputs.json_output)):
            if wanted:
                raise UsageError(f"{flag}: node 0 writes the report; give it there")
    return spec


def parse_policies(text: str | None) -> list[str]:
    """compare-policies' --policies: registered names, each once (default: every one)."""
    if not text:
        return list(POLICIES)
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [n for n in names if n not in POLICIES]
    if unknown or not names:
        raise UsageError(
            f"--policies: unknown {', '.join(map(repr, unknown)) or 'empty list'}; choose from: {', '.join(POLICIES)}"
        )
    if len(set(names)) != len(names):
        raise UsageError("--policies: a policy is named twice")
    return names


def compare_configs(policies: list[str], targets: list[str], ranks: Ranks, measure: Measurement) -> list[RunConfig]:
    """compare-policies' runs: hicache's model under each policy (checked once), then each
    SGLang named with --target."""
    base = ranks_config(replace(ranks, policy=policies[0]), measure)
    configs = [replace(base, target=replace(base.target, policy=name)) for name in policies]
    for spec in targets:
        if parse_target(spec) is None:
            raise UsageError("--target: compare-policies runs hicache's model through --policies; name an SGLang")
        configs.append(ranks_config(replace(ranks, target=spec), measure, progress=say))
    if len({c.label for c in configs}) != len(configs):
        raise UsageError("--target: the same SGLang is named twice")
    return configs


@dataclass(frozen=True)
class GatePlan:
    """What `check` runs and what it holds the run to."""

    config: RunConfig
    limits: Thresholds
    tolerance: Tolerance
    baseline: Report | None
    max_duration: str | None  # run until settled, at the latest after this long


def gate_plan(
    gate: Gate, ranks: Ranks, measure: Measurement, rendezvous: Rendezvous, command: list[str], loop: str | None,
    pids: list[int], outputs: Outputs,
) -> GatePlan:  # fmt: skip
    """`check`'s options: what runs (hicache's ranks, `-- COMMAND` or `--pid`), for how long,
    and its thresholds; every refusal before anything starts."""
    if pids and command:
        raise UsageError("give --pid (a process already running) or -- COMMAND (a program to start), not both")
    if pids and loop is not None:
        raise UsageError("--loop names a function of a traced program; an attached process takes none")
    warmup = measure.warmup
    if command or pids:
        if (flag := ranks.given_any() or rendezvous.given_any(("port",))) is not None:
            what = "-- COMMAND the program" if command else "--pid the process"
            raise UsageError(f"{flag} shapes hicache's own workload; with {what} is the workload")
    elif loop is not None:
        raise UsageError("--loop names a function of a traced program: give the program after --")
    elif warmup is None:
        warmup = _default_warmup(
            *(("max-duration", gate.max_duration) if gate.max_duration else ("duration", measure.duration))
        )
    if measure.duration is not None and gate.max_duration is not None:
        raise UsageError("give --duration or --max-duration, not both")
    if gate.max_duration is not None:
        longest = parse_duration(gate.max_duration, "max-duration")
        if warmup is not None and parse_duration(warmup, "warmup") >= longest:
            raise UsageError(f"--warmup ({warmup}) must be shorter than --max-duration ({gate.max_duration})")
    limits = Thresholds(
        max_rss_slope_mb_per_h=parse_rate_mb_per_h(gate.max_rss_slope, "max-rss-slope"),
        max_depth=gate.max_depth,
        max_p99_ms=gate.max_p99_ms,
        rss_slope_given="max_rss_slope" in gate.given,
    )
    if gate.max_depth is not None and gate.max_depth < 0:
        raise UsageError(f"--max-depth must be 0 or more, got {gate.max_depth}")
    if gate.max_p99_ms is not None and not (math.isfinite(gate.max_p99_ms) and gate.max_p99_ms > 0):
        raise UsageError(f"--max-p99-ms must be more than zero, got {gate.max_p99_ms}")
    if gate.tolerance and gate.baseline is None:
        raise UsageError("--tolerance applies to --baseline: give the report to compare with")
    allowed = parse_tolerance(list(gate.tolerance))
    check_run_options(outputs, Progress(), rendezvous, junit=gate.junit)
    measure = replace(measure, warmup=warmup, leak_threshold=limits.max_rss_slope_mb_per_h)
    if pids:
        config = attach_config(pids, replace(measure, duration=gate.max_duration or measure.duration or CHECK_DURATION))
    elif command:
        # as `trace` has it (analysis/progress.py): stuck after this long still, unless given
        stall = measure.stall_timeout if "stall_timeout" in measure.given else TRACE_STALL_TIMEOUT
        duration = gate.max_duration or measure.duration
        config = trace_config(command, loop, replace(measure, duration=duration, stall_timeout=stall))
    else:
        given_target = ranks.policy is not None or "target" in ranks.given
        ranks = replace(ranks, policy=ranks.policy if given_target else CHECK_POLICY)
        measure = replace(measure, duration=gate.max_duration or measure.duration or CHECK_DURATION)
        config = ranks_config(ranks, measure, rendezvous, progress=say)
    base = load_baseline(gate.baseline, config) if gate.baseline is not None else None
    return GatePlan(config, limits, allowed, base, gate.max_duration)


def _default_warmup(option: str, duration: str | None) -> str | None:
    """CHECK_WARMUP, unless the run is no longer than that: then each rank's own (where its
    RSS settles), as on stress. A warm-up the user never gave must not refuse their duration."""
    if duration is not None and parse_duration(duration, option) <= parse_duration(CHECK_WARMUP, "warmup"):
        return None
    return CHECK_WARMUP


def load_baseline(path: Path, config: RunConfig) -> Report:
    """`--baseline`: a completed run of the same workload, or one line why not."""
    base = load_report(path)
    if base.status != Status.COMPLETED:
        raise UsageError(f"--baseline {path}: that run {base.status}; a baseline must be a completed run")
    if (difference := workload_difference(base.config, config)) is not None:
        raise UsageError(
            f"--baseline {path}: another workload ({difference}); only the policy and the code under test may differ"
        )
    return base


def _check_sglang_options(ranks: Ranks) -> None:
    """Options that shape hicache's own model mean nothing for SGLang's code: say so."""
    if ranks.policy is not None:
        raise UsageError("--policy picks hicache's model policy; with --target sglang SGLang's own code drains")
    if ranks.sglang_class not in CLASS_CHOICES:
        raise UsageError(f"--sglang-class: {ranks.sglang_class!r}; choose one of: {', '.join(CLASS_CHOICES)}")
    for name, value in (
        ("request-rate", ranks.request_rate),
        ("prefix-sharing", ranks.prefix_sharing),
        ("idle-fraction", ranks.idle_fraction),
    ):
        if value is not None:
            raise UsageError(f"--{name} shapes hicache's model workload; it does not apply to --target sglang")
    if ranks.device == "cuda" or ranks.pp_backend == "nccl":
        raise UsageError("--target sglang: SGLang's PP sync runs on a gloo CPU group; use --device cpu/auto and gloo")
    for spec in ranks.faults:
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
    outputs: Outputs, progress: Progress = Progress(), rendezvous: Rendezvous = Rendezvous(), **others: Path | None
) -> None:
    """Options about running rather than the workload, the files the command writes among
    them (`others`: its own, such as --junit); a bad or busy port fails here, before
    anything is created."""
    if not 0.2 <= progress.refresh <= 20:
        raise UsageError(f"--refresh must be between 0.2 and 20 per second, got {progress.refresh}")
    check_html(outputs.html, **outputs.files(), **others)
    if rendezvous.port is not None:
        pick_port(LOOPBACK, rendezvous.port)
    check_metrics_options(progress.metrics_port, progress.metrics_host)
