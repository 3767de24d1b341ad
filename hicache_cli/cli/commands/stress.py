"""Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""

from __future__ import annotations

import typer
from rich.console import Console

from hicache_cli.analysis.kinds import Status
from hicache_cli.cli import configure, options, running
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Measurement, Outputs, Progress, Ranks, Rendezvous
from hicache_cli.cli.output import say
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.execution import RunResult
from hicache_cli.launch.nodes import NodeSpec, link_summary
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.present.progress import make_console
from hicache_cli.protocol import sample_files
from hicache_cli.rundir import create_run_dir


@grouped
def stress(
    ctx: typer.Context,
    ranks: Ranks = Ranks.every(),
    measure: Measurement = Measurement.every(),
    outputs: Outputs = Outputs.take("run_dir", "report", "html", "json_output", run_dir=options.run_dir("<policy>")),
    nodes: Rendezvous = Rendezvous.every(),
    progress: Progress = Progress.every(),
) -> None:
    """Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""
    configure.check_run_options(outputs, progress, nodes)  # cheap, before a release is fetched
    config = configure.ranks_config(ranks, measure, nodes, progress=say)
    spec = configure.nodes_config(nodes, config, outputs)
    metrics = running.serve_metrics(ctx, progress.metrics_port, progress.metrics_host, config)
    directory = create_run_dir(outputs.run_dir, config.label)
    live = running.wants_live(progress.no_live, outputs.json_output) and (spec is None or spec.is_head)  # node 0's
    console = make_console(live, outputs.json_output)
    console.print(f"hicache stress: {config.title(', ')}")
    if spec is not None:
        console.print(
            f"node {spec.node_rank} of {spec.nnodes}, {spec.nproc_per_node} ranks here, "
            f"rendezvous {spec.endpoint}, samples to node 0 on port {spec.sample_port}"
        )
    console.print(f"run directory: {directory}")
    result = running.run_with_progress(
        config, directory, console, live, progress.refresh, nodes.port, outputs.report, nodes=spec, metrics=metrics
    )
    if result.report is None:  # another node: node 0 has the samples and writes the report
        _node_summary(console, result, spec)
        return
    dropped = link_summary(result.run_dir) if spec is not None else None
    running.print_end(result, console, outputs, note=dropped)
    running.exit_if_interrupted(result.report)
    if result.report.status == Status.FAILED:
        raise typer.Exit(EXIT_RUN_FAILED)


def _node_summary(console: Console, result: RunResult, nodes: NodeSpec | None) -> None:
    """What a node other than node 0 says at the end: its ranks, where their samples are."""
    launched = result.outcome
    assert launched is not None and nodes is not None
    ranks = sorted(sample_files(result.run_dir))
    here = f"node {nodes.node_rank}"
    console.print(
        f"{here}: ranks {', '.join(map(str, ranks)) or 'none'} ran here; their samples and logs are in {result.run_dir}"
    )
    if launched.link_error:
        console.print(f"{here}: {launched.link_error}; node 0's report lacks what followed")
    else:
        console.print(f"{here}: the report is written on node 0")
    if launched.interrupted:
        raise typer.Exit(exit_code_for(launched.interrupted_by))
    if launched.killed or launched.exit_code != 0:
        console.print(f"{here}: {launched.stopped or f'torchrun exited with {launched.exit_code}'}")
        raise typer.Exit(EXIT_RUN_FAILED)
