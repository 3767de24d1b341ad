"""Check what this environment does before trusting a verdict: torch, backends, CUDA, and a
measured two-rank check of whether gloo's send Works complete without wait()."""

from __future__ import annotations

import json

import typer

from hicache_cli.launch.doctor import as_json, examine
from hicache_cli.present.progress import make_console


def doctor(json_output: bool = typer.Option(False, "--json", help="Print the findings as one JSON object.")) -> None:
    """Check torch, backends, CUDA and whether gloo's send Works complete without wait()."""
    findings = examine()
    if json_output:
        print(json.dumps(as_json(findings), indent=2))
        return
    console = make_console(live=False)
    for f in findings:
        console.print(f"{f.name:<42} {f.value!s:<14} {f.meaning}")
