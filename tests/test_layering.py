"""Imports flow one way: the cache model never pulls in the CLI's I/O and rendering libraries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def modules_loaded_by(statement: str, watched: list[str]) -> list[str]:
    """Run `statement` in a fresh interpreter; return which of `watched` it imported."""
    probe = f"import json, sys\n{statement}\nprint(json.dumps([m for m in {watched!r} if m in sys.modules]))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_cache_model_does_not_import_the_cli_libraries() -> None:
    loaded = modules_loaded_by("import cache.hiradix_cache, cache.scheduler", ["rich", "typer", "psutil", "torch"])
    assert loaded == ["torch"]  # torch is the model's one heavy dependency, and the probe sees it


def test_policy_registry_does_not_import_torch() -> None:
    assert modules_loaded_by("import cache.policies", ["torch", "rich", "typer", "psutil"]) == []


def test_the_tracer_uses_only_the_standard_library() -> None:
    """`hicache trace` imports it into other programs, next to their own packages."""
    statement = "import hicache_cli.tracer.hooks, hicache_cli.tracer.session, hicache_cli.tracer.works"
    watched = ["torch", "numpy", "psutil", "rich", "typer", "matplotlib"]
    assert modules_loaded_by(statement, watched) == []


def test_the_analysis_layer_is_pure() -> None:
    """Statistics, verdicts, the report and the gate: no terminal, no torch."""
    statement = "import " + ", ".join(f"hicache_cli.analysis.{m}" for m in ANALYSIS)
    assert modules_loaded_by(statement, ["torch", "rich", "typer", "matplotlib"]) == []


def test_presentation_imports_no_torch() -> None:
    statement = "import " + ", ".join(f"hicache_cli.present.{m}" for m in PRESENT)
    assert modules_loaded_by(statement, ["torch"]) == []


def test_the_rank_side_renders_nothing() -> None:
    statement = "import hicache_cli.rank.entry, hicache_cli.rank.probe"
    assert modules_loaded_by(statement, ["rich", "typer", "matplotlib"]) == []


def test_the_launch_side_renders_nothing() -> None:
    """The launcher, nodes and run: the CLI and the library API call them alike."""
    statement = "import " + ", ".join(f"hicache_cli.launch.{m}" for m in _modules("launch"))
    assert modules_loaded_by(statement, ["rich", "typer", "torch", "matplotlib"]) == []


def test_the_library_api_loads_no_terminal_and_no_torch() -> None:
    """`import hicache_cli` is what a notebook or a pytest plugin pays."""
    assert modules_loaded_by("import hicache_cli", ["torch", "rich", "typer", "matplotlib"]) == []


def _modules(package: str) -> list[str]:
    return sorted(p.stem for p in (REPO / "hicache_cli" / package).glob("*.py") if p.stem != "__init__")


ANALYSIS = _modules("analysis")
PRESENT = _modules("present")


def test_the_lint_analysis_imports_neither_torch_nor_the_terminal_libraries() -> None:
    """`hicache lint` reads source with `ast`: no torch to import, and a library API (engine,
    rules, formats) that scripts can call without rich or typer."""
    statement = "import hicache_cli.lint.engine, hicache_cli.lint.formats, hicache_cli.lint.rules"
    assert modules_loaded_by(statement, ["torch", "rich", "typer", "psutil", "numpy"]) == []


def test_the_pytest_plugin_imports_no_torch_in_pytest() -> None:
    """pytest loads the plugin in every session (entry point): it must cost nothing to tests
    that do not use it. Torch is imported in the rank processes only."""
    watched = ["torch", "numpy", "psutil", "rich", "typer", "hicache_cli.pytest_ranks.parent", "hicache_cli.tracer"]
    assert modules_loaded_by("import hicache_cli.pytest_plugin", watched) == []
    # what a marked test loads in pytest: the launcher and the judging, still no torch
    parent = modules_loaded_by("import hicache_cli.pytest_ranks.parent", ["torch", "numpy", "rich", "typer"])
    assert parent == []


def test_what_attach_injects_uses_only_the_standard_library() -> None:
    """`hicache attach` imports its agent into a running program, next to its packages (and
    into its sys.modules until it detaches): stdlib only, torch from the program's sys.modules."""
    statement = "import hicache_cli.attach.agent, hicache_cli.attach.census, hicache_cli.attach.protocol"
    watched = ["torch", "numpy", "psutil", "rich", "typer", "matplotlib"]
    assert modules_loaded_by(statement, watched) == []


def test_attach_on_hicache_s_side_loads_no_torch_and_no_terminal() -> None:
    statement = "import hicache_cli.attach.session, hicache_cli.attach.inject, hicache_cli.attach.procs"
    assert modules_loaded_by(statement, ["torch", "rich", "typer", "matplotlib", "psutil"]) == []
