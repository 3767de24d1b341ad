"""Run the same seeded workload under each policy and put the results side by side."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer

from cache.policies import POLICIES, not_applicable
from hicache_cli.analysis.compare import bundle, not_applicable_row, summarize
from hicache_cli.cli.commands import common
from hicache_cli.cli.commands.common import StressOptions, config_from_options
from hicache_cli.errors import UsageError
from hicache_cli.lifecycle import STOPS
from hicache_cli.present.github import compare_summary
from hicache_cli.present.plot import output_path, plot_reports
from hicache_cli.present.progress import make_console
from hicache_cli.present.tables import policy_table, to_markdown, to_rich
from hicache_cli.rundir import create_run_dir, write_atomically
from hicache_cli.sglang_target.locate import parse_target
from hicache_cli.targets import ModelTarget


def parse_policies(text: str | None) -> list[str]:
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


def compare_policies(
    ctx: typer.Context,
    policies: str = typer.Option(None, "--policies", help="Comma-separated policies (default: every registered one)."),
    pp: int = common.PP,
    tp: int = common.TP,
    duration: str = typer.Option("30s", "--duration", "-d", help="Workload time per policy."),
    workload: str = common.WORKLOAD,
    seed: int = common.SEED,
    wait_timeout: str = common.WAIT_TIMEOUT,
    warmup: str = common.WARMUP,
    fault: list[str] = common.FAULT,
    stall_timeout: str = common.STALL_TIMEOUT,
    device: str = common.DEVICE,
    pp_backend: str = common.PP_BACKEND,
    target: list[str] = typer.Option(
        [],
        "--target",
        help="Also run SGLang's own code, next to the policies (repeatable): sglang (installed), "
        "sglang==VERSION or sglang:PATH. See docs/sglang.md.",
    ),
    sglang_class: str = common.SGLANG_CLASS,
    output: Path = typer.Option(None, "--output", "-o", help="Also write the JSON bundle of all runs here."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the table as Markdown (for a PR comment)."),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG of RSS and depth per policy (needs the plot extra)."),
    run_dir: Path = typer.Option(None, "--run-dir", help="Parent directory (default ./hicache-runs/<time>-compare/)."),
    no_live: bool = common.NO_LIVE,
    json_output: bool = typer.Option(
        False, "--json", help="Print the JSON bundle on stdout (as --output writes it); everything else goes to stderr."
    ),
) -> None:
    """Run the same seeded workload under each policy and put the results side by side."""
    names = parse_policies(policies)
    common.check_output_paths(output=output, markdown=markdown, plot=None if plot is None else output_path(plot))
    options = StressOptions.given(ctx, policy=names[0], target="model")  # --target adds SGLangs, below
    base = config_from_options(options)
    configs = [replace(base, target=replace(base.target, policy=name)) for name in names]  # checked once
    for spec in target:
        if parse_target(spec) is None:
            raise UsageError("--target: compare-policies runs hicache's model through --policies; name an SGLang")
        configs.append(config_from_options(replace(options, policy=None, target=spec), common.say))
    if len({c.label for c in configs}) != len(configs):
        raise UsageError("--target: the same SGLang is named twice")
    parent = create_run_dir(run_dir, "compare")
    live = common.wants_live(no_live, json_output)
    console = make_console(live, json_output)
    first, shape = configs[0], base.target
    console.print(
        f"hicache compare-policies: {', '.join(c.label for c in configs)}; pp={shape.pp} tp={shape.tp}, "
        f"{first.duration_s:g}s each, workload {shape.workload}, seed {shape.seed} -> {parent}"
    )
    reports, rows = [], []
    for i, config in enumerate(configs, 1):
        name, backend = config.label, shape.pp_backend
        reason = not_applicable(name, backend) if isinstance(config.target, ModelTarget) else None
        if reason is not None:  # it would fail by design: say so instead of listing a failure
            rows.append(not_applicable_row(name, backend, reason))
            console.print(f"[{i}/{len(configs)}] {name}: not applicable on {backend}: {reason}")
            continue
        console.print(f"[{i}/{len(configs)}] {name} ...")
        result = common.run_with_progress(config, create_run_dir(parent / name, name), console, live)
        reports.append(result.report)
        rows.append(row := summarize(result.report))
        console.print(f"[{i}/{len(configs)}] {name}: {row.verdict} ({row.status}), peak depth {row.peak_depth}")
        if result.report.interrupted or STOPS.signal is not None:
            break
    dicts = [{**c.to_dict(), **c.target.to_dict()} for c in configs]  # the target's settings beside the run's
    common_config = {k: v for k, v in dicts[0].items() if k != "target" and all(d.get(k) == v for d in dicts)}
    data = bundle(reports, common_config, rows)
    text = json.dumps(data, indent=2) + "\n"
    write_atomically(parent / "compare.json", text)
    if output is not None:
        write_atomically(output, text)
    console.print(to_rich(policy_table(rows)))
    for row in rows:
        if row.note:
            console.print(row.note)
    title = f"hicache compare-policies: pp={shape.pp} tp={shape.tp}, {first.duration_s:g}s, workload {shape.workload}"
    if markdown is not None:
        write_atomically(markdown, to_markdown(policy_table(rows), title))
    common.append_step_summary(compare_summary(rows, reports, title))
    if plot is not None:
        console.print(f"plot: {plot_reports([(r.config.label, r) for r in reports], plot)}")
    console.print(f"bundle: {parent / 'compare.json'}")
    if json_output:
        common.print_json(data)
    common.exit_if_interrupted(*reports)
