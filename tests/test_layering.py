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


def test_the_pytest_plugin_imports_no_torch_in_pytest() -> None:
    """pytest loads the plugin in every session (entry point): it must cost nothing to tests
    that do not use it. Torch is imported in the rank processes only."""
    watched = ["torch", "numpy", "psutil", "rich", "typer", "hicache_cli.pytest_ranks.parent", "hicache_cli.tracer"]
    assert modules_loaded_by("import hicache_cli.pytest_plugin", watched) == []
    # what a marked test loads in pytest: the launcher and the judging, still no torch
    parent = modules_loaded_by("import hicache_cli.pytest_ranks.parent", ["torch", "numpy", "rich", "typer"])
    assert parent == []
