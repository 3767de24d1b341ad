"""Every option more than one command takes, declared once, in the group it travels with:
its name, its help and its default, the default taken from the config field it sets
(RunConfig, ModelTarget), so the command line and the library cannot disagree. A command
takes groups (groups.py) and adds only what is its own; configure.py builds every config
from the groups, by keyword.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from hicache_cli.cli.groups import Group, option
from hicache_cli.config import LAUNCHERS, RunConfig
from hicache_cli.protocol import SECRET_ENV
from hicache_cli.sglang_target.resolve import CLASS_CHOICES
from hicache_cli.targets import FollowedProcess, ModelTarget
from hicache_model.faults import SHAPES as FAULT_SHAPES
from hicache_model.policies import POLICIES
from hicache_model.workload import PRESETS

_SHAPE = ModelTarget()  # the model's defaults: a run's shape and workload
_RUN = RunConfig()  # the measurement's defaults
_FOLLOW = FollowedProcess(pids=(1,))  # attach --follow's defaults


def seconds(value: float) -> str:
    """A default in seconds as an option's text: 5.0 -> `5s`."""
    return f"{value:g}s"


POLICY_HELP = "Drain policy: " + ", ".join(POLICIES) + ". See docs/policies.md."
RUN_DURATION = seconds(_RUN.duration_s or 0.0)  # a run of hicache's own ranks, when not given
FAULT_HELP = "Inject a fault (repeatable): " + ", ".join(FAULT_SHAPES.values()) + ". See docs/faults.md."


def policy(default_word: str) -> Any:
    """--policy; None when not given (each command has its own default, and --target sglang none)."""
    return typer.Option(None, "--policy", "-p", help=f"{POLICY_HELP} Default: {default_word}.")


def duration(default: str | None, text: str) -> Any:
    return typer.Option(default, "--duration", "-d", help=text)


def run_dir(default_name: str) -> Any:
    return typer.Option(None, "--run-dir", help=f"Run directory (default ./hicache-runs/<time>-{default_name}/).")


def output(what: str) -> Any:
    return typer.Option(None, "--output", "-o", help=f"Also write {what} here.")


def json_document(what: str) -> Any:
    return typer.Option(False, "--json", help=f"Print {what} on stdout; everything else goes to stderr.")


def html_page(what: str) -> Any:
    return typer.Option(
        None,
        "--html",
        help=f"Also write {what} as one self-contained HTML page here, at the end (docs/report.md).",
    )


@dataclass(frozen=True)
class Ranks(Group):
    """What hicache's own ranks run (its model, or SGLang's code): the target, its shape, its
    workload, the faults injected and the devices. Meaningless for a program traced or a
    process attached to, where the program is the workload."""

    panel = "Workload (hicache's own ranks)"
    policy: str | None = option(None, "--policy", "-p", help=f"{POLICY_HELP} Default: reap.")  # None: the target's
    target: str = option(
        ModelTarget.kind,
        "--target",
        help="What runs the PP sync: model (hicache's cache model, under --policy), sglang (the installed "
        "SGLang's own methods), sglang==VERSION (a release, fetched once) or sglang:PATH (a checkout or file). "
        "See docs/sglang.md.",
    )
    sglang_class: str = option(
        "auto",
        "--sglang-class",
        help="With --target sglang: " + ", ".join(CLASS_CHOICES) + " (auto: the first present).",
    )
    pp: int = option(_SHAPE.pp, "--pp", help="Pipeline-parallel stages (ranks per pipeline).")
    tp: int = option(_SHAPE.tp, "--tp", help="Tensor-parallel ranks per stage; world size is pp x tp.")
    workload: str = option(
        _SHAPE.workload, "--workload", help="Preset: " + ", ".join(PRESETS) + " (idle = the incident's idle server)."
    )
    request_rate: float | None = option(None, "--request-rate", help="Chance a busy round admits a request (0-1).")
    prefix_sharing: float | None = option(
        None, "--prefix-sharing", help="Share of requests with a shared prefix (0-1)."
    )
    idle_fraction: float | None = option(None, "--idle-fraction", help="Share of rounds with nothing to do (0-1).")
    seed: int = option(_SHAPE.seed, "--seed", help="Workload seed; every rank uses the same.")
    wait_timeout: str = option(
        seconds(_SHAPE.wait_timeout_s), "--wait-timeout", help="bounded-drain: longest a round's drain may wait."
    )
    faults: tuple[str, ...] = option((), "--fault", help=FAULT_HELP)
    round_time: str | None = option(
        None,
        "--round-time",
        help="Each round lasts at least this long (e.g. 5ms): the time a GPU server's forward pass takes, waited "
        "out by the CPU. Rates (Works/s, MB/h) then read as on a server that runs so many rounds a second. "
        "Default: as fast as the CPU runs them.",
    )
    device: str = option(_SHAPE.device, "--device", help="auto (a GPU when there is one), cpu or cuda.")
    pp_backend: str = option(
        _SHAPE.pp_backend,
        "--pp-backend",
        help="Backend of the TP and PP-sync groups: gloo (as SGLang) or nccl (CUDA tensors; a GPU for each rank).",
    )
    launcher: str = option(
        _RUN.launcher,
        "--launcher",
        help="How the ranks start: "
        + " or ".join(LAUNCHERS)
        + " (torchrun as a deployment starts them; fork: one process imports torch once and forks every "
        "rank, a second or more of CPU less per rank; one machine only). See docs/commands.md.",
    )


# The model workload's presets, overridden (stress only: check and compare-policies run the presets).
PRESET_OVERRIDES = ("request_rate", "prefix_sharing", "idle_fraction")


@dataclass(frozen=True)
class Measurement(Group):
    """How a run is measured, whatever runs: RunConfig's own settings, as typed (durations as
    text: 30s, 2m)."""

    panel = "Measurement"
    duration: str | None = option(
        RUN_DURATION, "--duration", "-d", help="Workload time per rank: 15s, 2m, or seconds."
    )  # None: until the target ends by itself
    probe_hz: float = option(_RUN.probe_hz, "--probe-hz", help="Samples per second per rank.")
    warmup: str | None = option(
        None, "--warmup", help="Start of the run left out of trends (default: where each rank's RSS settles)."
    )
    leak_threshold: float = option(
        _RUN.leak_threshold_mb_per_h, "--leak-threshold", help="RSS slope in MB/h above which RSS counts as growing."
    )
    stall_timeout: str = option(
        seconds(_RUN.stall_timeout_s),
        "--stall-timeout",
        help="A rank whose round runs longer is stalled: stacks dumped, run ended.",
    )


@dataclass(frozen=True)
class Outputs(Group):
    """What a command writes besides its run directory's files, and where that directory is."""

    panel = "Outputs"
    run_dir: Path | None = option(None, "--run-dir", help="Run directory (default ./hicache-runs/<time>-<policy>/).")
    report: Path | None = option(None, "--report", help="Also write the JSON report here.")
    output: Path | None = option(None, "--output", "-o", help="Also write the JSON bundle of all runs here.")
    markdown: Path | None = option(None, "--markdown", help="Write the table as Markdown (for a PR comment).")
    html: Path | None = option(
        None,
        "--html",
        help="Also write the report as one self-contained HTML page here, at the end (docs/report.md).",
    )
    json_output: bool = option(
        False, "--json", help="Print the report as one JSON document on stdout; everything else goes to stderr."
    )

    def files(self) -> dict[str, Path | None]:
        """The files it names, by option (run_dir aside: a directory of its own)."""
        return {"report": self.report, "output": self.output, "markdown": self.markdown}


def bundle_outputs(series: str, what: str) -> Any:
    """What a series of runs side by side writes (compare-policies, sglang-scan): its bundle
    (--output, --json), its table (--markdown), `what` as a page (--html), and its directory."""
    return Outputs.take(
        "output",
        "markdown",
        run_dir=run_dir(series),
        html=html_page(what),
        json_output=json_document("the JSON bundle (as --output writes it)"),
    )


@dataclass(frozen=True)
class Progress(Group):
    """How a run shows itself while it goes: the live dashboard or plain lines, and the
    Prometheus endpoint."""

    panel = "Progress"
    no_live: bool = option(False, "--no-live", help="Plain progress lines instead of the live dashboard.")
    refresh: float = option(4.0, "--refresh", help="Live dashboard refreshes per second.")
    metrics_port: int | None = option(
        None,
        "--metrics-port",
        help="Serve Prometheus metrics on this port while the run lasts: per rank RSS, work-list depth, loop "
        "latency, rounds (0: a free port). Needs the metrics extra. See docs/dashboard.md.",
    )
    metrics_host: str | None = option(
        None, "--metrics-host", help="Address the metrics endpoint listens on (default 127.0.0.1; 0.0.0.0: every one)."
    )


@dataclass(frozen=True)
class Follow(Group):
    """`attach --follow`: stay attached at a cost the process cannot measure (attach/follow.py)."""

    panel = "Following"
    follow: bool = option(
        False,
        "--follow",
        help="Stay until stopped (SIGTERM, Ctrl-C) or the processes are gone, at a cost they cannot measure: a census "
        "every --census-every, the tracer only for a --window when a holder's Works grow; ranks started later "
        "below the pid are attached too. For production: docs/attach.md.",
    )
    census_every: str = option(
        seconds(_FOLLOW.census_every_s),
        "--census-every",
        help="With --follow: how often the Works held are counted, at most: where one census costs more than a "
        "quarter of a percent of a core (a big heap), they are spaced out; a growing holder, or a Python heap "
        "that grows between them, brings the next one sooner.",
    )
    window: str = option(
        seconds(_FOLLOW.window_s),
        "--window",
        help="With --follow: how long the tracer stays on to find the line of a growing holder's Works.",
    )


@dataclass(frozen=True)
class Rendezvous(Group):
    """Where hicache's ranks meet: a port on this machine, or torchrun's c10d rendezvous across
    nodes (docs/multinode.md)."""

    panel = "Rendezvous and nodes"
    port: int | None = option(None, "--port", help="Rendezvous port on 127.0.0.1 (default: a free one).")
    nnodes: int = option(1, "--nnodes", help="Nodes the ranks span; run hicache on each (docs/multinode.md).")
    node_rank: int | None = option(None, "--node-rank", help="This node's index; node 0 shows the dashboard.")
    nproc_per_node: int | None = option(None, "--nproc-per-node", help="Ranks on this node (default pp x tp / nnodes).")
    rdzv_endpoint: str | None = option(None, "--rdzv-endpoint", help="HOST:PORT of torchrun's c10d rendezvous.")
    rdzv_id: str = option("hicache", "--rdzv-id", help="Run id, the same on every node.")
    sample_port: int | None = option(
        None, "--sample-port", help="Port of node 0's sample store (default: the rendezvous port + 1)."
    )
    run_secret: str | None = option(
        None,
        "--run-secret",
        envvar=SECRET_ENV,
        show_envvar=True,
        show_default=False,
        help="Across machines: the secret every node of the run is given (16+ characters; the environment "
        "variable keeps it out of `ps`). On loopback node 0 makes one for this user.",
    )


@dataclass(frozen=True)
class Gate(Group):
    """`check`'s thresholds and what it compares with (docs/ci.md)."""

    panel = "Gate"
    max_duration: str | None = option(
        None, "--max-duration", help="Stop as soon as the verdict is settled, at the latest after this long."
    )
    max_rss_slope: str = option(
        "200MB/h", "--max-rss-slope", help="Fail when RSS grows faster (e.g. 200MB/h, 1GB/h, 50KB/s)."
    )
    max_depth: int | None = option(None, "--max-depth", help="Fail when a work list ever holds more Works.")
    max_p99_ms: float | None = option(None, "--max-p99-ms", help="Fail when a rank's loop p99 exceeds this.")
    baseline: Path | None = option(
        None,
        "--baseline",
        help="Also fail when this run is worse than this report (or run directory) of the same workload: "
        "RSS slope, peak depth, loop p99. See docs/ci.md.",
    )
    tolerance: tuple[str, ...] = option(
        (),
        "--tolerance",
        help="With --baseline, how much worse is still noise (repeatable): slope=RATE beyond the baseline's "
        "interval, depth=FACTOR, p99=FACTOR. Default: slope=50MB/h, depth=1.5x, p99=3x.",
    )
    junit: Path | None = option(None, "--junit", help="Write JUnit XML here (one test case per assertion per rank).")


# A traced program's (`trace -- COMMAND`, `check -- COMMAND`).
COMMAND = typer.Argument(None, metavar="-- COMMAND [ARGS]...", help="The program to run and watch, after --.")
LOOP = typer.Option(
    None,
    "--loop",
    help="MODULE:QUALNAME of a function the program calls once per round (e.g. a scheduler step): "
    "gives rounds/s, loop latency and stall detection.",
)
# A process already running (`attach PID...`, `check --pid PID`).
PIDS = typer.Argument(
    None,
    metavar="PID",
    help="The process to attach to: a rank, or a parent (torchrun, a launcher) whose Python processes "
    "below it with a process group are all attached.",
)
PID = typer.Option(
    [],
    "--pid",
    help="Gate a process already running (repeatable): attach to it, trace it, detach. See docs/attach.md.",
)
