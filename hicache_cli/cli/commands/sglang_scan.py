"""Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""

from __future__ import annotations

from dataclasses import replace

import typer

from hicache_cli.analysis.kinds import Status
from hicache_cli.analysis.results import Report
from hicache_cli.analysis.scan import first_change, not_applicable, row_from_report, scan_bundle
from hicache_cli.cli import configure, options, running, side_by_side
from hicache_cli.cli.groups import grouped
from hicache_cli.cli.options import Measurement, Outputs, Progress, Ranks
from hicache_cli.cli.output import say
from hicache_cli.config import RunConfig
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.present.github import scan_summary
from hicache_cli.present.tables import release_table
from hicache_cli.sglang_target.extract import NotApplicable
from hicache_cli.sglang_target.locate import pick_versions, release_versions
from hicache_cli.targets import SGLangTarget


@grouped
def sglang_scan(
    versions: str = typer.Option(
        "0.5.12..", "--versions", help="Releases: A..B (inclusive; an end may be left open) or A,B,C."
    ),
    ranks: Ranks = Ranks.take("pp", "sglang_class"),
    measure: Measurement = Measurement.take(duration=options.duration("10s", "Workload time per release.")),
    outputs: Outputs = options.bundle_outputs("sglang-scan", "the scan"),
    progress: Progress = Progress.take("no_live"),
) -> None:
    """Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""
    configure.check_html(outputs.html, output=outputs.output, markdown=outputs.markdown)
    ranks = replace(ranks, tp=1, workload="idle", seed=0)
    configure.ranks_config(ranks, measure)  # the shared options, checked before anything is fetched
    chosen = pick_versions(versions, release_versions(say))
    parent, console, live = side_by_side.open_series(outputs, progress, "sglang-scan")
    each = f"pp={ranks.pp}, {measure.duration}"
    console.print(f"hicache sglang-scan: {len(chosen)} releases ({chosen[0]} .. {chosen[-1]}), {each} each")
    notes: dict[str, str] = {}  # why a release is not applicable

    def release(version: str) -> side_by_side.Step:
        def prepare() -> RunConfig | str:
            try:
                return configure.ranks_config(replace(ranks, target=f"sglang=={version}"), measure, progress=say)
            except NotApplicable as exc:
                notes[version] = str(exc)
                return "not applicable (no PP-sync path)"

        return side_by_side.Step(version, prepare)

    def code(config: RunConfig) -> str:
        target = config.target
        return f" ({target.class_name}.{target.drain_method})" if isinstance(target, SGLangTarget) else ""

    def verdict(report: Report) -> str:
        return row_from_report("", report).verdict

    done = side_by_side.run_series([release(v) for v in chosen], parent, console, live, detail=code, summary=verdict)
    reports = {step.name: report for step, _, report in done if report is not None}
    rows = [row_from_report(s.name, r) if r else not_applicable(s.name, notes.get(s.name, "")) for s, _, r in done]
    settings = ranks.values() | measure.values() | {"versions": versions}
    change, title = first_change(rows), f"hicache sglang-scan: {each} per release"
    side_by_side.end_series(
        scan_bundle(rows, settings, reports), parent / "scan.json", release_table(rows), title,
        scan_summary(rows, title, change), outputs, console, [f"verdict changes: {change}"] if change else [],
    )  # fmt: skip
    running.exit_if_interrupted(*reports.values())
    if any(r.status == Status.FAILED for r in rows):
        raise typer.Exit(EXIT_RUN_FAILED)
