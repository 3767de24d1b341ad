"""Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""

from __future__ import annotations

import json
from dataclasses import asdict, replace
from pathlib import Path

import typer

from hicache_cli.cli.commands import common
from hicache_cli.cli.commands.common import StressOptions, config_from_options
from hicache_cli.errors import EXIT_RUN_FAILED
from hicache_cli.lifecycle import STOPS
from hicache_cli.present.progress import make_console
from hicache_cli.present.tables import release_table, to_markdown, to_rich
from hicache_cli.rundir import create_run_dir, write_atomically
from hicache_cli.sglang_target.extract import NotApplicable
from hicache_cli.sglang_target.locate import release_versions
from hicache_cli.sglang_target.scan import (
    first_change,
    not_applicable,
    pick_versions,
    row_from_report,
    scan_bundle,
)
from hicache_cli.targets import SGLangTarget


def sglang_scan(
    ctx: typer.Context,
    versions: str = typer.Option(
        "0.5.12..", "--versions", help="Releases: A..B (inclusive; an end may be left open) or A,B,C."
    ),
    pp: int = common.PP,
    duration: str = typer.Option("10s", "--duration", "-d", help="Workload time per release."),
    sglang_class: str = common.SGLANG_CLASS,
    output: Path = typer.Option(None, "--output", "-o", help="Also write the JSON bundle of all runs here."),
    markdown: Path = typer.Option(None, "--markdown", help="Write the table as Markdown."),
    run_dir: Path = typer.Option(
        None, "--run-dir", help="Parent directory (default ./hicache-runs/<time>-sglang-scan/)."
    ),
    no_live: bool = common.NO_LIVE,
    json_output: bool = typer.Option(
        False, "--json", help="Print the JSON bundle on stdout (as --output writes it); everything else goes to stderr."
    ),
) -> None:
    """Run SGLang's own PP-sync code from each release in a range: where the leak came and went."""
    common.check_output_paths(output=output, markdown=markdown)
    base = StressOptions.given(ctx, tp=1, policy=None, workload="idle", seed=0)
    config_from_options(base)  # the shared options, checked before anything is fetched
    chosen = pick_versions(versions, release_versions(common.say))
    parent = create_run_dir(run_dir, "sglang-scan")
    live = common.wants_live(no_live, json_output)
    console = make_console(live, json_output)
    console.print(
        f"hicache sglang-scan: {len(chosen)} releases ({chosen[0]} .. {chosen[-1]}), pp={pp}, {duration} each"
    )
    rows, reports = [], {}
    for i, version in enumerate(chosen, 1):
        try:
            config = config_from_options(replace(base, target=f"sglang=={version}"), common.say)
        except NotApplicable as exc:
            rows.append(not_applicable(version, str(exc)))
            console.print(f"[{i}/{len(chosen)}] {version}: not applicable (no PP-sync path)")
            continue
        target = config.target
        assert isinstance(target, SGLangTarget)
        console.print(f"[{i}/{len(chosen)}] {version} ({target.class_name}.{target.drain_method}) ...")
        result = common.run_with_progress(config, create_run_dir(parent / version, config.label), console, live)
        reports[version] = result.report
        rows.append(row_from_report(version, result.report))
        console.print(f"[{i}/{len(chosen)}] {version}: {rows[-1].verdict}")
        if result.report.interrupted or STOPS.signal is not None:
            break
    data = scan_bundle(rows, asdict(base) | {"versions": versions}, reports)
    text = json.dumps(data, indent=2) + "\n"
    write_atomically(parent / "scan.json", text)
    if output is not None:
        write_atomically(output, text)
    console.print(to_rich(release_table(rows)))
    if (change := first_change(rows)) is not None:
        console.print(f"verdict changes: {change}")
    if markdown is not None:
        write_atomically(
            markdown, to_markdown(release_table(rows), f"hicache sglang-scan: pp={pp}, {duration} per release")
        )
    console.print(f"bundle: {parent / 'scan.json'}")
    if json_output:
        common.print_json(data)
    common.exit_if_interrupted(*reports.values())
    if any(r.status == "failed" for r in rows):
        raise typer.Exit(EXIT_RUN_FAILED)
