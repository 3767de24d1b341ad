"""Imports flow one way: the cache model never pulls in the CLI's I/O and rendering libraries."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

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
    loaded = modules_loaded_by(
        "import hicache_model.hiradix_cache, hicache_model.scheduler", ["rich", "typer", "psutil", "torch"]
    )
    assert loaded == ["torch"]  # torch is the model's one heavy dependency, and the probe sees it


def test_policy_registry_does_not_import_torch() -> None:
    assert modules_loaded_by("import hicache_model.policies", ["torch", "rich", "typer", "psutil"]) == []


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


def test_the_report_page_is_drawn_without_torch_typer_or_matplotlib() -> None:
    """present/html draws its charts itself (inline SVG): a script or notebook renders a page
    from a report with the standard library and hicache's analysis."""
    statement = "import hicache_cli.present.html, hicache_cli.present.mermaid"
    assert modules_loaded_by(statement, ["torch", "typer", "matplotlib"]) == []


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


# -- which of our own packages may import which -----------------------------------------------
#
# Bottom up: the core modules (hicache_cli/*.py: config, targets, records, sample, series,
# protocol, ...) import only each other and the model's registries; sglang_target (SGLang's
# source) sits on the core; the rank side and the tracer above it; the launcher above the
# tracer; analysis on the core alone (pure), presentation on analysis; the library's entry
# (api.py, execution.py) joins launch and analysis; the command line uses everything; the
# process entry points (__main__, pytest_plugin) start the CLI and the pytest machinery. A
# command never imports another command. docs/architecture.md states the same rule.
LIBRARY = frozenset({"api", "execution"})
ENTRY_POINTS = frozenset({"__main__", "pytest_plugin"})
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset({"core", "cache"}),
    "sglang_target": frozenset({"core"}),
    "rank": frozenset({"core", "cache", "sglang_target"}),
    "tracer": frozenset({"core", "rank"}),
    "attach": frozenset({"core", "rank", "tracer"}),
    "launch": frozenset({"core", "tracer", "attach"}),
    "analysis": frozenset({"core"}),
    "present": frozenset({"core", "analysis"}),
    "lint": frozenset({"core", "sglang_target"}),
    "pytest_ranks": frozenset({"core", "analysis", "launch", "tracer"}),
    "library": frozenset({"core", "analysis", "launch", "sglang_target"}),
    "cli": frozenset({"core", "cache", "library", "analysis", "launch", "present", "sglang_target", "lint", "tracer"}),
    "entry": frozenset({"cli", "pytest_ranks"}),
}


def group(module: str) -> str | None:
    """The layer a module of ours belongs to (None: not ours, or the cache model)."""
    parts = module.split(".")
    if parts[0] == "hicache_model":
        return "cache"
    if parts[0] != "hicache_cli" or len(parts) == 1:
        return "core" if parts == ["hicache_cli"] else None
    name = parts[1]
    if name in LIBRARY:
        return "library"
    if name in ENTRY_POINTS:
        return "entry"
    return name if name in ALLOWED else "core"


# The core's floors, bottom up: a core module imports only core modules on a floor below its
# own. A core module on no floor is named by test_every_core_module_is_on_a_floor.
FLOORS: tuple[frozenset[str], ...] = (
    # what everything names, importing nothing of ours
    frozenset({"errors", "files", "histogram", "protocol", "records", "version", "workflow_commands"}),
    # single facts on those: a sample, a duration, a run directory, an attached pid, a run's end
    frozenset({"attached", "lifecycle", "rundir", "sample", "units"}),
    # what a run is made of: its samples in memory, its target, its stalls, its stacks on request
    frozenset({"series", "stacks", "targets", "watchdog"}),
    # the run as a whole: its config, how it ended
    frozenset({"config", "outcome"}),
)


def floor(module: str) -> int | None:
    """The floor of a core module (`hicache_cli.config`); the package's own names (its
    `__init__`, loaded lazily) stand above them all; None: on no floor."""
    if module == "hicache_cli":
        return len(FLOORS)
    name = module.split(".")[1]
    return next((i for i, names in enumerate(FLOORS) if name in names), None)


def module_name(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def imports_of(path: Path, root: Path, typing_only: bool = True) -> set[str]:
    """Every module a file imports, at any depth of its code (lazy imports included):
    `from package import module` names the module, `from module import name` the module; a
    relative import as the absolute one it is; `importlib.import_module("...")` and
    `__import__("...")` of a literal name as an import. `typing_only=False` leaves out what is
    imported only for type checking (`if TYPE_CHECKING:`)."""
    package = module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    names = set()
    for level, module_text, imported, for_typing in _import_statements(path.read_text(encoding="utf-8")):
        if for_typing and not typing_only:
            continue
        if level is None:  # `import a.b`, import_module("a.b"), __import__("a.b")
            names.update(imported)
            continue
        base = package[: len(package) - level + 1] if level else []
        module = ".".join([*base, *([module_text] if module_text else [])])
        if not module:
            continue
        where = root.joinpath(*module.split("."))
        for alias in imported:
            is_module = (where / f"{alias}.py").exists() or (where / alias).is_dir()
            names.add(f"{module}.{alias}" if is_module else module)
    return names


@functools.cache
def _import_statements(source: str) -> tuple[tuple[int | None, str | None, tuple[str, ...], bool], ...]:
    """Each import in `source` as (level, module, names, only for type checking): a
    `from` import's level (0: absolute), None for `import x` and an import by name. Parsed
    once per text (the upward-import tests copy the tree; most files are the same text),
    resolved against the tree by imports_of."""
    tree = ast.parse(source)
    typing = {id(n) for block in _type_checking_blocks(tree) for n in ast.walk(block)}
    found: list[tuple[int | None, str | None, tuple[str, ...], bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            found.append((node.level, node.module, tuple(a.name for a in node.names), id(node) in typing))
        elif isinstance(node, ast.Import):
            found.append((None, None, tuple(a.name for a in node.names), id(node) in typing))
        elif isinstance(node, ast.Call) and _imports_by_name(node.func) and node.args:
            if isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                found.append((None, None, (node.args[0].value,), id(node) in typing))
    return tuple(found)


def _imports_by_name(func: ast.expr) -> bool:
    """`importlib.import_module`, `import_module`, `__import__`."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def _type_checking_blocks(tree: ast.AST) -> list[ast.If]:
    def is_flag(test: ast.expr) -> bool:
        return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )

    return [n for n in ast.walk(tree) if isinstance(n, ast.If) and is_flag(n.test)]


def our_modules(root: Path) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted((root / "hicache_cli").rglob("*.py"))}


def upward_imports(root: Path) -> list[tuple[str, str]]:
    """(module, what it imports) for each import between our packages that the layering does
    not allow, or from one command into another; inside the core, each import of a module on
    the same floor or above; inside a package, each import on a cycle (a module importing
    one that imports it back, directly or through others) - in the tree under `root`."""
    found = []
    modules = our_modules(root)
    for module, path in modules.items():
        src = group(module)
        assert src is not None
        for name in sorted(imports_of(path, root)):
            dst = group(name)
            if dst is None:
                continue
            command = ".cli.commands."
            if command in module and command in name and name.split(".")[3] != module.split(".")[3]:
                found.append((module, name))
            elif dst != src and dst not in ALLOWED[src]:
                found.append((module, name))
            elif src == dst == "core" and name in modules:
                below, above = floor(module), floor(name)
                if below is not None and above is not None and above >= below and name != module:
                    found.append((module, name))
    return found + package_cycles(root, modules)


def package_cycles(root: Path, modules: dict[str, Path]) -> list[tuple[str, str]]:
    """Each import (module, what it imports) on a cycle among the modules of one package:
    inside a package imports flow one way too. What is imported only for type checking is no
    dependency at run time and is left out (lint's walker mixins name the walker for `self`:
    issue 40, item 4)."""
    edges = {
        m: {n for n in imports_of(p, root, typing_only=False) if n in modules and n != m and _same_package(m, n)}
        for m, p in modules.items()
        if m.count(".") >= 2
    }
    reach: dict[str, set[str]] = {}

    def reachable(start: str) -> set[str]:
        if start not in reach:
            seen, todo = set(), [start]
            while todo:
                for nxt in edges.get(todo.pop(), ()):
                    if nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            reach[start] = seen
        return reach[start]

    return sorted((m, n) for m, targets in edges.items() for n in targets if m in reachable(n))


def _same_package(a: str, b: str) -> bool:
    return a.rsplit(".", 1)[0] == b.rsplit(".", 1)[0]


def test_our_packages_import_only_downwards() -> None:
    assert upward_imports(REPO) == []


def test_every_core_module_is_on_a_floor() -> None:
    core = [m for m in our_modules(REPO) if group(m) == "core"]
    assert len(core) > 15
    assert [m for m in core if floor(m) is None] == []


@pytest.mark.parametrize(
    ("module", "source", "upward"),
    [
        ("analysis/verdicts.py", "from hicache_cli.present import progress\n", "hicache_cli.present"),
        (
            "launch/late.py",
            "def f():\n    from hicache_cli.analysis.report import build_report\n",
            "hicache_cli.analysis.report",
        ),
        ("rank/probe2.py", "import hicache_cli.launch.supervisor\n", "hicache_cli.launch.supervisor"),
        ("targets2.py", "from hicache_cli.analysis import results\n", "hicache_cli.analysis"),
        ("cli/commands/stress2.py", "from hicache_cli.cli.commands import trace\n", "hicache_cli.cli.commands.trace"),
        # inside the core: a floor-1 module importing one of floor 3
        ("units.py", "from hicache_cli.config import RunConfig\n", "hicache_cli.config"),
        # inside the core: two modules of one floor
        ("series.py", "from hicache_cli import targets\n", "hicache_cli.targets"),
        # inside a package: the report's records importing what builds them (which imports them)
        (
            "analysis/results.py",
            "from hicache_cli.analysis.report import build_report\n",
            "hicache_cli.analysis.report",
        ),
        # a relative import, as the absolute one it is
        ("analysis/verdicts.py", "from ..present import progress\n", "hicache_cli.present.progress"),
        ("present/late.py", "from ..cli import running\n", "hicache_cli.cli.running"),
        # importlib, with a literal name; and __import__
        (
            "rank/probe2.py",
            "import importlib\n\ndef f():\n    return importlib.import_module('hicache_cli.launch.supervisor')\n",
            "hicache_cli.launch.supervisor",
        ),
        ("tracer/late.py", "present = __import__('hicache_cli.present.dashboard')\n", "hicache_cli.present.dashboard"),
    ],
)
def test_an_upward_import_is_found(tmp_path: Path, module: str, source: str, upward: str) -> None:
    """The test of the test: the same check on a tree with one upward import added (a new
    module, or an existing one rewritten)."""
    tree = tmp_path / "hicache_cli"
    for path in (REPO / "hicache_cli").rglob("*.py"):
        copy = tree / path.relative_to(REPO / "hicache_cli")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    (tree / module).write_text(source, encoding="utf-8")
    found = upward_imports(tmp_path)
    assert [m for m, name in found if name == upward or name.startswith(upward + ".")] == [
        "hicache_cli." + module.removesuffix(".py").replace("/", ".")
    ]


def test_a_cycle_only_for_type_checking_is_allowed_and_a_core_module_off_the_floors_is_named(tmp_path: Path) -> None:
    """What the checks above let through: an import for type checking only (no dependency at
    run time); and what they ask: a new core module is put on a floor."""
    tree = tmp_path / "hicache_cli"
    for path in (REPO / "hicache_cli").rglob("*.py"):
        copy = tree / path.relative_to(REPO / "hicache_cli")
        copy.parent.mkdir(parents=True, exist_ok=True)
        copy.write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    typed = "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from hicache_cli.analysis.report import Run\n"
    (tree / "analysis" / "results.py").write_text(typed, encoding="utf-8")
    assert upward_imports(tmp_path) == []
    (tree / "late_core.py").write_text("", encoding="utf-8")
    assert [m for m in our_modules(tmp_path) if group(m) == "core" and floor(m) is None] == ["hicache_cli.late_core"]


def test_what_attach_injects_uses_only_the_standard_library() -> None:
    """`hicache attach` imports its agent into a running program, next to its packages (and
    into its sys.modules until it detaches): stdlib only, torch from the program's sys.modules."""
    statement = "import hicache_cli.attach.agent, hicache_cli.attach.census, hicache_cli.attach.protocol"
    watched = ["torch", "numpy", "psutil", "rich", "typer", "matplotlib"]
    assert modules_loaded_by(statement, watched) == []


def test_attach_on_hicache_s_side_loads_no_torch_and_no_terminal() -> None:
    statement = "import hicache_cli.attach.session, hicache_cli.attach.inject, hicache_cli.attach.procs"
    assert modules_loaded_by(statement, ["torch", "rich", "typer", "matplotlib", "psutil"]) == []
