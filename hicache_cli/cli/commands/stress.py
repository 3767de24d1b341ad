"""Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from hicache_cli.analysis.kinds import Status
from hicache_cli.cli import options, running
from hicache_cli.cli.configure import StressOptions, check_run_options, config_from_options
from hicache_cli.cli.output import print_json, say, write_html
from hicache_cli.errors import EXIT_RUN_FAILED, UsageError
from hicache_cli.execution import RunResult
from hicache_cli.launch.nodes import NodeSpec, link_summary, node_spec
from hicache_cli.lifecycle import exit_code_for
from hicache_cli.present.progress import make_console, summary_table, verdict_lines
from hicache_cli.protocol import SECRET_ENV, sample_files
from hicache_cli.rundir import create_run_dir


def stress(
    ctx: typer.Context,
    pp: int = options.PP,
    tp: int = options.TP,
    policy: str = options.policy("reap"),
    target: str = options.TARGET,
    sglang_class: str = options.SGLANG_CLASS,
    duration: str = options.duration(options.RUN_DURATION, "Workload time per rank: 15s, 2m, or seconds."),
    workload: str = options.WORKLOAD,
    request_rate: float = options.REQUEST_RATE,
    prefix_sharing: float = options.PREFIX_SHARING,
    idle_fraction: float = options.IDLE_FRACTION,
    seed: int = options.SEED,
    probe_hz: float = options.PROBE_HZ,
    wait_timeout: str = options.WAIT_TIMEOUT,
    warmup: str = options.WARMUP,
    leak_threshold: float = options.LEAK_THRESHOLD,
    fault: list[str] = options.FAULT,
    stall_timeout: str = options.STALL_TIMEOUT,
    device: str = options.DEVICE,
    pp_backend: str = options.PP_BACKEND,
    run_dir: Path = options.run_dir("<policy>"),
    report: Path = options.REPORT,
    html: Path = options.HTML,
    port: int = options.PORT,
    nnodes: int = typer.Option(1, "--nnodes", help="Nodes the ranks span; run hicache on each (docs/multinode.md)."),
    node_rank: int = typer.Option(None, "--node-rank", help="This node's index; node 0 shows the dashboard."),
    nproc_per_node: int = typer.Option(None, "--nproc-per-node", help="Ranks on this node (default pp x tp / nnodes)."),
    rdzv_endpoint: str = typer.Option(None, "--rdzv-endpoint", help="HOST:PORT of torchrun's c10d rendezvous."),
    rdzv_id: str = typer.Option("hicache", "--rdzv-id", help="Run id, the same on every node."),
    sample_port: int = typer.Option(
        None, "--sample-port", help="Port of node 0's sample store (default: the rendezvous port + 1)."
    ),
    run_secret: str = typer.Option(
        None,
        "--run-secret",
        envvar=SECRET_ENV,
        show_envvar=True,
        show_default=False,
        help="Across machines: the secret every node of the run is given (16+ characters; the environment "
        "variable keeps it out of `ps`). On loopback node 0 makes one for this user.",
    ),
    no_live: bool = options.NO_LIVE,
    refresh: float = options.REFRESH,
    metrics_port: int = options.METRICS_PORT,
    metrics_host: str = options.METRICS_HOST,
    json_output: bool = options.JSON,
) -> None:
    """Run a real multi-rank HiCache PP-sync workload under one drain policy and report on it."""
    check_run_options(refresh, report, port, metrics_port, metrics_host, html)  # cheap, before a release is fetched
    config = config_from_options(
        StressOptions.given(ctx),
        say,
    )
    nodes = node_spec(
        config.expected_ranks or 0, nnodes, node_rank, nproc_per_node, rdzv_endpoint, rdzv_id, sample_port, run_secret
    )
    if nodes is not None and port is not None:
        raise UsageError("--port is for one machine; across nodes the rendezvous is --rdzv-endpoint")
    if nodes is not None and not nodes.is_head:
        for option, wanted in (("--report", report is not None), ("--html", html is not None), ("--json", json_output)):
            if wanted:
                raise UsageError(f"{option}: node 0 writes the report; give it there")
    metrics = running.serve_metrics(ctx, metrics_port, metrics_host, config)
    directory = create_run_dir(run_dir, config.label)
    live = running.wants_live(no_live, json_output) and (nodes is None or nodes.is_head)  # the dashboard is node 0's
    console = make_console(live, json_output)
    console.print(f"hicache stress: {config.title(', ')}")
    if nodes is not None:
        console.print(
            f"node {nodes.node_rank} of {nodes.nnodes}, {nodes.nproc_per_node} ranks here, "
            f"rendezvous {nodes.endpoint}, samples to node 0 on port {nodes.sample_port}"
        )
    console.print(f"run directory: {directory}")
    result = running.run_with_progress(
        config, directory, console, live, refresh, port, report, nodes=nodes, metrics=metrics
    )
    if result.report is None:  # another node: node 0 has the samples and writes the report
        _node_summary(console, result, nodes)
        return
    console.print(summary_table(result.report, console.width))
    for line in verdict_lines(result.report):
        console.print(line)
    if nodes is not None and (dropped := link_summary(result.run_dir)) is not None:
        console.print(dropped)
    console.print(f"report: {result.report_path}")
    write_html(result.report, html, console)
    if json_output:
        print_json(result.report.to_dict())
    running.exit_if_interrupted(result.report)
    if result.report.status == Status.FAILED:
        raise typer.Exit(EXIT_RUN_FAILED)


def _node_summary(console: Console, result: RunResult, nodes: NodeSpec) -> None:
    """What a node other than node 0 says at the end: its ranks, where their samples are."""
    launched = result.outcome
    assert launched is not None
    ranks = sorted(sample_files(result.run_dir))
    console.print(
        f"node {nodes.node_rank}: ranks {', '.join(map(str, ranks)) or 'none'} ran here; "
        f"their samples and logs are in {result.run_dir}"
    )
    if launched.link_error:
        console.print(f"node {nodes.node_rank}: {launched.link_error}; node 0's report lacks what followed")
    else:
        console.print(f"node {nodes.node_rank}: the report is written on node 0")
    if launched.interrupted:
        raise typer.Exit(exit_code_for(launched.interrupted_by))
    if launched.killed or launched.exit_code != 0:
        console.print(f"node {nodes.node_rank}: {launched.stopped or f'torchrun exited with {launched.exit_code}'}")
        raise typer.Exit(EXIT_RUN_FAILED)
