"""The CI gate: run one policy (or, after --, any program, traced; or, with --pid, a process
already running, attached to) and exit 0 when RSS is bounded and every threshold holds.

Exit codes: 0 bounded and within every threshold; 1 a leak or a threshold exceeded (the
message says which and by how much); 2 bad input; 3 the run failed or no verdict could be
reached.
"""

from __future__ import annotations

import typer

from hicache_cli.cli import configure, gating, options
from hicache_cli.cli.configure import CHECK_DURATION, CHECK_POLICY, CHECK_WARMUP
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Gate, Measurement, Outputs, Progress, Ranks, Rendezvous


@grouped
def check(
    ranks: Ranks = Ranks.but(*options.PRESET_OVERRIDES, policy=options.policy(CHECK_POLICY)),
    measure: Measurement = Measurement.take(
        "stall_timeout",
        duration=options.duration(None, f"Run exactly this long (default {CHECK_DURATION})."),
        warmup=typer.Option(
            None,
            "--warmup",
            help=f"Start of the run left out of trends (default {CHECK_WARMUP}; a traced program's: auto).",
        ),
    ),
    gate: Gate = Gate.every(),
    outputs: Outputs = Outputs.take(
        "report",
        "html",
        run_dir=options.run_dir("<policy>"),
        json_output=options.json_document("the gate's result, its assertions and the report as one JSON document"),
    ),
    rendezvous: Rendezvous = Rendezvous.take("port"),
    progress: Progress = Progress.take("no_live"),
    loop: str = options.LOOP,
    pid: list[int] = options.PID,
    command: list[str] = options.COMMAND,
) -> None:
    """The CI gate: exit 0 when RSS stays bounded and within every threshold, 1 when not."""
    plan = configure.gate_plan(gate, ranks, measure, rendezvous, command or [], loop, pid or [], outputs)
    result, console, what = gating.run(plan, outputs, progress, rendezvous.port, pid, command or [])
    raise typer.Exit(gating.judge(result, plan, what, outputs, gate, console))
