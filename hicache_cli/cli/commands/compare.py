"""Run the same seeded workload under each policy and put the results side by side."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import typer

from cache.policies import POLICIES, not_applicable
from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.compare import bundle, not_applicable_row, summarize
from hicache_cli.analysis.results import Report
from hicache_cli.cli import options, running
from hicache_cli.cli.configure import StressOptions, check_html, config_from_options
from hicache_cli.cli.output import append_step_summary, print_json, say, write_html
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.present.github import compare_summary
from hicache_cli.present.plot import plot_reports
from hicache_cli.present.progress import make_console
from hicache_cli.present.tables import policy_table, to_markdown, to_rich
from hicache_cli.rundir import create_run_dir, write_atomically, write_run_file
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
    pp: int = options.PP,
    tp: int = options.TP,
    duration: str = options.duration("30s", "Workload time per policy."),
    workload: str = options.WORKLOAD,
    seed: int = options.SEED,
    wait_timeout: str = options.WAIT_TIMEOUT,
    warmup: str = options.WARMUP,
    fault: list[str] = options.FAULT,
    stall_timeout: str = options.STALL_TIMEOUT,
    device: str = options.DEVICE,
    pp_backend: str = options.PP_BACKEND,
    target: list[str] = typer.Option(
        [],
        "--target",
        help="Also run SGLang's own code, next to the policies (repeatable): sglang (installed), "
        "sglang==VERSION or sglang:PATH. See docs/sglang.md.",
    ),
    sglang_class: str = options.SGLANG_CLASS,
    output: Path = options.output("the JSON bundle of all runs"),
    markdown: Path = options.MARKDOWN,
    plot: Path = typer.Option(None, "--plot", help="Write a PNG of RSS and depth per policy (needs the plot extra)."),
    html: Path = options.html_page("the comparison"),
    run_dir: Path = options.run_dir("compare"),
    no_live: bool = options.NO_LIVE,
    json_output: bool = options.json_document("the JSON bundle (as --output writes it)"),
) -> None:
    """Run the same seeded workload under each policy and put the results side by side."""
    names = parse_policies(policies)
    check_html(html, output=output, markdown=markdown, plot=plot)
    opts = StressOptions.given(ctx, policy=names[0], target="model")  # --target adds SGLangs, below
    base = config_from_options(opts)
    configs = [replace(base, target=replace(base.target, policy=name)) for name in names]  # checked once
    for spec in target:
        if parse_target(spec) is None:
            raise UsageError("--target: compare-policies runs hicache's model through --policies; name an SGLang")
        configs.append(config_from_options(replace(opts, policy=None, target=spec), say))
    if len({c.label for c in configs}) != len(configs):
        raise UsageError("--target: the same SGLang is named twice")
    parent = create_run_dir(run_dir, "compare")
    live = running.wants_live(no_live, json_output)
    console = make_console(live, json_output)
    first, shape = configs[0], base.target
    console.print(
        f"hicache compare-policies: {', '.join(c.label for c in configs)}; pp={shape.pp} tp={shape.tp}, "
        f"{first.duration_s:g}s each, workload {shape.workload}, seed {shape.seed} -> {parent}"
    )
    backend = shape.pp_backend

    # a policy that would fail by design on this backend says so instead of listing a failure
    reasons = {c.label: not_applicable(c.label, backend) for c in configs if isinstance(c.target, ModelTarget)}

    def step(config: RunConfig) -> running.Step:
        reason = reasons.get(config.label)
        why = None if reason is None else f"not applicable on {backend}: {reason}"
        return running.Step(config.label, lambda: why or config)

    def said(report: Report) -> str:
        row = summarize(report)
        return f"{row.verdict} ({row.status}), peak depth {row.peak_depth}"

    done = running.run_series([step(c) for c in configs], parent, console, live, summary=said)
    reports = [report for _, _, report in done if report is not None]
    rows = [
        summarize(report) if report else not_applicable_row(ran.name, backend, reasons.get(ran.name) or "")
        for ran, _, report in done
    ]
    dicts = [{**c.to_dict(), **c.target.to_dict()} for c in configs]  # the target's settings beside the run's
    common_config = {k: v for k, v in dicts[0].items() if k != "target" and all(d.get(k) == v for d in dicts)}
    data = bundle(reports, common_config, rows)
    text = json.dumps(data, indent=2) + "\n"
    write_run_file(parent / "compare.json", text)
    if output is not None:
        write_atomically(output, text)
    console.print(to_rich(policy_table(rows)))
    for row in rows:
        if row.note:
            console.print(row.note)
    title = f"hicache compare-policies: pp={shape.pp} tp={shape.tp}, {first.duration_s:g}s, workload {shape.workload}"
    if markdown is not None:
        write_atomically(markdown, to_markdown(policy_table(rows), title))
    append_step_summary(compare_summary(rows, reports, title))
    if plot is not None:
        console.print(f"plot: {plot_reports([(r.config.label, r) for r in reports], plot)}")
    console.print(f"bundle: {parent / 'compare.json'}")
    write_html(Bundle.read(data, parent / "compare.json"), html, console)
    if json_output:
        print_json(data)
    running.exit_if_interrupted(*reports)
