"""Run the same seeded workload under each policy and put the results side by side."""

from __future__ import annotations

from pathlib import Path

import typer

from hicache_cli.analysis.compare import bundle, not_applicable_row, summarize
from hicache_cli.analysis.results import Report
from hicache_cli.cli import configure, options, running, side_by_side
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Measurement, Outputs, Progress, Ranks
from hicache_cli.present.github import compare_summary
from hicache_cli.present.plot import plot_reports
from hicache_cli.present.tables import policy_table
from hicache_cli.targets import ModelTarget
from hicache_model.policies import not_applicable


@grouped
def compare_policies(
    policies: str = typer.Option(None, "--policies", help="Comma-separated policies (default: every registered one)."),
    target: list[str] = typer.Option(
        [],
        "--target",
        help="Also run SGLang's own code, next to the policies (repeatable): sglang (installed), "
        "sglang==VERSION or sglang:PATH. See docs/sglang.md.",
    ),
    ranks: Ranks = Ranks.but("policy", "target", *options.PRESET_OVERRIDES),  # --policies and --target: its own
    measure: Measurement = Measurement.take(
        "warmup", "stall_timeout", duration=options.duration("30s", "Workload time per policy.")
    ),
    plot: Path = typer.Option(None, "--plot", help="Write a PNG of RSS and depth per policy (needs the plot extra)."),
    outputs: Outputs = options.bundle_outputs("compare", "the comparison"),
    progress: Progress = Progress.take("no_live"),
) -> None:
    """Run the same seeded workload under each policy and put the results side by side."""
    names = configure.parse_policies(policies)
    configure.check_html(outputs.html, output=outputs.output, markdown=outputs.markdown, plot=plot)
    configs = configure.compare_configs(names, target, ranks, measure)
    parent, console, live = side_by_side.open_series(outputs, progress, "compare")
    first, shape = configs[0], configs[0].target
    backend, each = shape.pp_backend, f"pp={shape.pp} tp={shape.tp}, {first.duration_s:g}s"
    console.print(
        f"hicache compare-policies: {', '.join(c.label for c in configs)}; {each} each, workload {shape.workload}, "
        f"seed {shape.seed} -> {parent}"
    )
    # a policy that would fail by design on this backend says so instead of listing a failure
    reasons = {c.label: not_applicable(c.label, backend) for c in configs if isinstance(c.target, ModelTarget)}
    steps = [
        side_by_side.Step.of(c, reasons.get(c.label) and f"not applicable on {backend}: {reasons[c.label]}")
        for c in configs
    ]
    done = side_by_side.run_series(steps, parent, console, live, summary=_said)
    reports = [report for _, _, report in done if report is not None]
    rows = [summarize(r) if r else not_applicable_row(s.name, backend, reasons.get(s.name) or "") for s, _, r in done]
    title = f"hicache compare-policies: {each}, workload {shape.workload}"
    side_by_side.end_series(
        bundle(reports, side_by_side.shared_settings(configs), rows), parent / "compare.json", policy_table(rows),
        title, compare_summary(rows, reports, title), outputs, console, [row.note for row in rows if row.note],
        (lambda: console.print(f"plot: {plot_reports([(r.config.label, r) for r in reports], plot)}"))
        if plot else None,
    )  # fmt: skip
    running.exit_if_interrupted(*reports)


def _said(report: Report) -> str:
    row = summarize(report)
    return f"{row.verdict} ({row.status}), peak depth {row.peak_depth}"
