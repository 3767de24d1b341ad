"""Every option more than one command takes, declared once: its name, its help and its
default, the default taken from the config field it sets (RunConfig, ModelTarget), so the
command line and the library cannot disagree. A command adds only what is its own.

`given(ctx, name)` says whether the user gave an option (click's ParameterSource), never by
comparing a value with its default.
"""

from __future__ import annotations

from typing import Any

import typer

from cache.faults import SHAPES as FAULT_SHAPES
from cache.policies import POLICIES
from cache.workload import PRESETS
from hicache_cli.config import RunConfig
from hicache_cli.sglang_target.resolve import CLASS_CHOICES
from hicache_cli.targets import ModelTarget

_SHAPE = ModelTarget()  # the model's defaults: a run's shape and workload
_RUN = RunConfig()  # the measurement's defaults


def seconds(value: float) -> str:
    """A default in seconds as an option's text: 5.0 -> `5s`."""
    return f"{value:g}s"


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the option `name` (the parameter's name) was given on the command line or by
    its environment variable, rather than left at its default."""
    source = ctx.get_parameter_source(name)  # click's ParameterSource (typer carries its own click)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")


def given_any(ctx: typer.Context, names: tuple[str, ...]) -> str | None:
    """The first of `names` that was given, as its option (`--pp-backend`), or None."""
    return next(("--" + name.replace("_", "-") for name in names if given(ctx, name)), None)


POLICY_HELP = "Drain policy: " + ", ".join(POLICIES) + ". See docs/policies.md."


def policy(default_word: str) -> Any:
    """--policy; None when not given (each command has its own default, and --target sglang none)."""
    return typer.Option(None, "--policy", "-p", help=f"{POLICY_HELP} Default: {default_word}.")


RUN_DURATION = seconds(_RUN.duration_s or 0.0)  # a run of hicache's own ranks, when not given


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


REPORT = typer.Option(None, "--report", help="Also write the JSON report here.")
HTML = html_page("the report")
MARKDOWN = typer.Option(None, "--markdown", help="Write the table as Markdown (for a PR comment).")
PP = typer.Option(_SHAPE.pp, "--pp", help="Pipeline-parallel stages (ranks per pipeline).")
TP = typer.Option(_SHAPE.tp, "--tp", help="Tensor-parallel ranks per stage; world size is pp x tp.")
WORKLOAD = typer.Option(
    _SHAPE.workload, "--workload", help="Preset: " + ", ".join(PRESETS) + " (idle = the incident's idle server)."
)
REQUEST_RATE = typer.Option(None, "--request-rate", help="Chance a busy round admits a request (0-1).")
PREFIX_SHARING = typer.Option(None, "--prefix-sharing", help="Share of requests with a shared prefix (0-1).")
IDLE_FRACTION = typer.Option(None, "--idle-fraction", help="Share of rounds with nothing to do (0-1).")
SEED = typer.Option(_SHAPE.seed, "--seed", help="Workload seed; every rank uses the same.")
PROBE_HZ = typer.Option(_RUN.probe_hz, "--probe-hz", help="Samples per second per rank.")
WAIT_TIMEOUT = typer.Option(
    seconds(_SHAPE.wait_timeout_s), "--wait-timeout", help="bounded-drain: longest a round's drain may wait."
)
WARMUP = typer.Option(
    None, "--warmup", help="Start of the run left out of trends (default: where each rank's RSS settles)."
)
LEAK_THRESHOLD = typer.Option(
    _RUN.leak_threshold_mb_per_h, "--leak-threshold", help="RSS slope in MB/h above which RSS counts as growing."
)
FAULT = typer.Option(
    [],
    "--fault",
    help="Inject a fault (repeatable): " + ", ".join(FAULT_SHAPES.values()) + ". See docs/faults.md.",
)
STALL_TIMEOUT = typer.Option(
    seconds(_RUN.stall_timeout_s),
    "--stall-timeout",
    help="A rank whose round runs longer is stalled: stacks dumped, run ended.",
)
TARGET = typer.Option(
    ModelTarget.kind,
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
JSON = json_document("the report as one JSON document")
DEVICE = typer.Option(_SHAPE.device, "--device", help="auto (a GPU when there is one), cpu or cuda.")
PP_BACKEND = typer.Option(
    _SHAPE.pp_backend,
    "--pp-backend",
    help="Backend of the TP and PP-sync groups: gloo (as SGLang) or nccl (CUDA tensors; a GPU for each rank).",
)

# A traced program's (`trace -- COMMAND`, `check -- COMMAND`).
COMMAND = typer.Argument(None, metavar="-- COMMAND [ARGS]...", help="The program to run and watch, after --.")
LOOP = typer.Option(
    None,
    "--loop",
    help="MODULE:QUALNAME of a function the program calls once per round (e.g. a scheduler step): "
    "gives rounds/s, loop latency and stall detection.",
)
TRACE_STALL_TIMEOUT_DEFAULT = "60s"  # a traced program's step may be slow
TRACE_STALL_TIMEOUT = typer.Option(
    TRACE_STALL_TIMEOUT_DEFAULT,
    "--stall-timeout",
    help="With --loop: a call running longer is a stall: stacks dumped, program stopped. Any process "
    "that makes no progress for longer, to its end, is said to be stuck.",
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
NO_CENSUS = typer.Option(
    False, "--no-census", help="Skip the census of the Works already held (it holds the GIL: docs/attach.md)."
)

# The options that shape hicache's own workload (meaningless for a traced program's).
MODEL_OPTIONS = (
    "policy",
    "target",
    "pp",
    "tp",
    "workload",
    "seed",
    "wait_timeout",
    "fault",
    "device",
    "pp_backend",
    "port",
)
