"""Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import typer

from hicache_cli.analysis.bundles import Bundle
from hicache_cli.analysis.kinds import Status
from hicache_cli.analysis.scan import first_change, not_applicable, row_from_report, scan_bundle
from hicache_cli.cli import options, running
from hicache_cli.cli.configure import StressOptions, check_html, config_from_options
from hicache_cli.cli.output import append_step_summary, print_json, say, write_html
from hicache_cli.config import RunConfig
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.present.github import scan_summary
from hicache_cli.present.progress import make_console
from hicache_cli.present.tables import release_table, to_markdown, to_rich
from hicache_cli.rundir import create_run_dir, write_atomically, write_run_file
from hicache_cli.sglang_target.extract import NotApplicable
from hicache_cli.sglang_target.locate import pick_versions, release_versions
from hicache_cli.targets import SGLangTarget


def sglang_scan(
    ctx: typer.Context,
    versions: str = typer.Option(
        "0.5.12..", "--versions", help="Releases: A..B (inclusive; an end may be left open) or A,B,C."
    ),
    pp: int = options.PP,
    duration: str = options.duration("10s", "Workload time per release."),
    sglang_class: str = options.SGLANG_CLASS,
    output: Path = options.output("the JSON bundle of all runs"),
    markdown: Path = options.MARKDOWN,
    html: Path = options.html_page("the scan"),
    run_dir: Path = options.run_dir("sglang-scan"),
    no_live: bool = options.NO_LIVE,
    json_output: bool = options.json_document("the JSON bundle (as --output writes it)"),
) -> None:
    """Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""
    check_html(html, output=output, markdown=markdown)
    base = StressOptions.given(ctx, tp=1, policy=None, workload="idle", seed=0)
    config_from_options(base)  # the shared options, checked before anything is fetched
    chosen = pick_versions(versions, release_versions(say))
    parent = create_run_dir(run_dir, "sglang-scan")
    live = running.wants_live(no_live, json_output)
    console = make_console(live, json_output)
    console.print(
        f"hicache sglang-scan: {len(chosen)} releases ({chosen[0]} .. {chosen[-1]}), pp={pp}, {duration} each"
    )
    notes: dict[str, str] = {}  # why a release is not applicable

    def release(version: str) -> running.Step:
        def prepare() -> RunConfig | str:
            try:
                return config_from_options(replace(base, target=f"sglang=={version}"), say)
            except NotApplicable as exc:
                notes[version] = str(exc)
                return "not applicable (no PP-sync path)"

        return running.Step(version, prepare)

    def code(config: RunConfig) -> str:
        target = config.target
        return f" ({target.class_name}.{target.drain_method})" if isinstance(target, SGLangTarget) else ""

    done = running.run_series(
        [release(v) for v in chosen],
        parent,
        console,
        live,
        detail=code,
        summary=lambda report: row_from_report("", report).verdict,
    )
    reports = {step.name: report for step, _, report in done if report is not None}
    rows = [
        row_from_report(step.name, report) if report else not_applicable(step.name, notes.get(step.name, ""))
        for step, _, report in done
    ]
    data = scan_bundle(rows, asdict(base) | {"versions": versions}, reports)
    text = json.dumps(data, indent=2) + "\n"
    write_run_file(parent / "scan.json", text)
    if output is not None:
        write_atomically(output, text)
    console.print(to_rich(release_table(rows)))
    if (change := first_change(rows)) is not None:
        console.print(f"verdict changes: {change}")
    title = f"hicache sglang-scan: pp={pp}, {duration} per release"
    if markdown is not None:
        write_atomically(markdown, to_markdown(release_table(rows), title))
    append_step_summary(scan_summary(rows, title, change))
    console.print(f"bundle: {parent / 'scan.json'}")
    write_html(Bundle.read(data, parent / "scan.json"), html, console)
    if json_output:
        print_json(data)
    running.exit_if_interrupted(*reports.values())
    if any(r.status == Status.FAILED for r in rows):
        raise typer.Exit(EXIT_RUN_FAILED)
