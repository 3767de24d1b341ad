"""Check what this environment does before trusting a verdict: torch, backends, CUDA, a
measured two-rank check of whether gloo's send Works complete without wait(), and what a
gloo Work costs kept, dropped unwaited or waited."""

from __future__ import annotations

import json

import typer

from hicache_cli.errors import UsageError
from hicache_cli.launch.doctor import DEFAULT_WORKS, as_json, examine
from hicache_cli.present.progress import make_console


def doctor(
    json_output: bool = typer.Option(False, "--json", help="Print the findings as one JSON object."),
    works: int = typer.Option(
        DEFAULT_WORKS,
        "--works",
        help="Works per case of the gloo Work-cost measurement (0: skip it).",
    ),
) -> None:
    """Check torch, backends, CUDA, gloo's send-Work completion and what a gloo Work costs."""
    if works < 0:
        raise UsageError(f"--works must be 0 or more, not {works}")
    findings = examine(works)
    if json_output:
        print(json.dumps(as_json(findings), indent=2))
        return
    console = make_console(live=False)
    for f in findings:
        console.print(f"{f.name:<42} {f.value!s:<14} {f.meaning}", soft_wrap=True)
