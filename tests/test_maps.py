"""The maps hold: every module docs/architecture.md names exists, and every module of ours is
named there, under its package; a package whose `__init__` docstring maps its modules maps
each one and no other; a module path, a dotted name or a class named in the docs and in our
docstrings and comments is one that exists. Whatever modules exist when the test runs: a
module added (or removed) by anyone is held to the maps the same way."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("hicache_model", "hicache_cli")  # the code the maps describe
FILES = re.compile(r"(?<![\w./-])((?:[A-Za-z_][\w-]*/)*[A-Za-z_][\w-]*\.(?:py|css|js))(?![\w/])")
HEADER = re.compile(r"^( *)([A-Za-z_][\w]*)/(?:\s|$)")
DOTTED = re.compile(r"(?<![\w.])((?:hicache_cli|hicache_model)(?:\.[A-Za-z_]\w*)+)")


def on_disk(root: Path = REPO) -> list[Path]:
    """Every module and package data file of ours (relative to `root`); `__init__.py` of a
    subpackage aside: the package's name (`launch/`) stands for it."""
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix not in (".py", ".css", ".js") or "__pycache__" in path.parts:
                continue
            if path.name == "__init__.py" and path.parent != root / "hicache_cli":
                continue
            found.append(path.relative_to(root))
    return found


# -- docs/architecture.md's tree ----------------------------------------------------------------


@dataclass
class Block:
    """One package in the tree: its directory and the text of its own lines (its entries'
    names and descriptions, not its subpackages')."""

    directory: Path
    header: str = ""  # the package's own line (`commands/  one module per command (stress, ...)`)
    text: list[str] = field(default_factory=list)


def tree_blocks(markdown: str, root: Path = REPO) -> dict[Path, Block]:
    """The first code block of architecture.md as packages -> their lines. A line `name/` opens
    a package one level below the one whose indentation is smaller; a line indented deeper
    than an entry's name continues that entry's description."""
    tree = markdown.split("```", 2)[1]
    blocks: dict[Path, Block] = {}
    stack: list[tuple[int, Path]] = [(-1, Path("."))]
    last_entry_indent, in_header = 0, False
    for line in tree.splitlines()[1:]:
        indent = len(line) - len(line.lstrip(" "))
        if indent <= last_entry_indent + 2:  # an entry: a module (or several), or a package
            last_entry_indent, in_header = indent, False
            while stack[-1][0] >= indent:
                stack.pop()
            if (match := HEADER.match(line)) is not None:
                directory = stack[-1][1] / match.group(2)
                stack.append((indent, directory))
                blocks[directory] = Block(directory, header=line)
                in_header = True
                continue
        owner = blocks.setdefault(stack[-1][1], Block(stack[-1][1]))
        if in_header:
            owner.header += " " + line.strip()  # the package's own description, wrapped
        else:
            owner.text.append(line)
    return {d: b for d, b in blocks.items() if d.parts and d.parts[0] in PACKAGES}


def resolve(name: str, directory: Path, root: Path = REPO) -> Path | None:
    """`name` (`x.py`, `attach/session.py`) from a package's text: in that package or a package
    above it (a sibling package's module is named by its path from their common parent)."""
    for base in (directory, *directory.parents):
        if (root / base / name).exists():
            return base / name
    return None


def named_in_tree(markdown: str, root: Path = REPO) -> tuple[set[Path], list[str]]:
    """The modules the tree names, and what it names that does not exist."""
    named: set[Path] = set()
    missing = []
    for directory, block in tree_blocks(markdown, root).items():
        for line in block.text:
            for name in FILES.findall(line):
                found = resolve(name, directory, root)
                if found is None:
                    missing.append(f"{directory}/{name}")
                else:
                    named.add(found)
        if not any(FILES.search(line) for line in block.text):
            # a package of like modules may name them by their stems: `commands/ ... (stress, trace, ...)`
            words = set(re.findall(r"[A-Za-z_]\w*", block.header))
            named.update(p.relative_to(root) for p in (root / directory).glob("*.py") if p.stem in words)
    return named, missing


def test_every_module_architecture_md_names_exists() -> None:
    _, missing = named_in_tree((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert missing == []


def test_every_module_is_in_architecture_md_under_its_package() -> None:
    named, _ = named_in_tree((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert [str(p) for p in on_disk() if p not in named] == []


# -- each package's own map: its __init__ docstring -----------------------------------------------


def package_map(init: Path) -> set[str] | None:
    """The modules a package's `__init__` docstring names (`x.py`, `boot/sitecustomize.py`);
    None when it names none of the package's own (it is no map: `train.py` in an example)."""
    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    names = set(FILES.findall(doc))
    return names if any((init.parent / n).exists() for n in names) else None


def map_problems(package: Path, root: Path = REPO) -> list[str]:
    """What a package's map names that is not there, and what is there that it does not name."""
    names = package_map(root / package / "__init__.py")
    if names is None:
        return []
    problems = [
        f"{package}/__init__.py names {n}: no such module" for n in sorted(names) if not (root / package / n).exists()
    ]
    there = {
        str(p.relative_to(root / package))
        for p in (root / package).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    }
    # a subpackage is mapped by its directory (`formats/`), the modules inside it by its own map
    doc = ast.get_docstring(ast.parse((root / package / "__init__.py").read_text(encoding="utf-8"))) or ""
    subpackages = {d for d in re.findall(r"([A-Za-z_]\w*)/", doc) if (root / package / d / "__init__.py").exists()}
    for module in sorted(there - names):
        if module.split("/")[0] not in subpackages:
            problems.append(f"{package}/__init__.py does not name {module}")
    return problems


PACKAGE_DIRS = sorted(p.parent.relative_to(REPO) for pkg in PACKAGES for p in (REPO / pkg).rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGE_DIRS, ids=str)
def test_a_package_map_names_each_of_its_modules_and_no_other(package: Path) -> None:
    assert map_problems(package) == []


def test_some_packages_have_maps() -> None:
    assert sum(package_map(REPO / p / "__init__.py") is not None for p in PACKAGE_DIRS) >= 4


# -- module paths, dotted names and classes mentioned anywhere --------------------------------------


def prose(path: Path) -> str:
    """What a file says in words: a Markdown file whole; a Python file's docstrings and
    comments (its string literals are data: a test's scratch module names)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".md":
        return text
    parts = []
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            parts.append(ast.get_docstring(node) or "")
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            parts.append(tok.string)
    return "\n".join(parts)


@functools.cache
def _tree(root: Path) -> tuple[frozenset[str], tuple[str, ...]]:
    """Our package directories' names, and every file's path below the tops (`/hicache_cli/x.py`)."""
    tops = (*PACKAGES, "tests", "scripts")
    packages = {d.name for pkg in PACKAGES for d in (root / pkg).rglob("*") if d.is_dir()} | set(PACKAGES)
    files = tuple("/" + str(p.relative_to(root)) for top in tops for p in (root / top).rglob("*"))
    return frozenset(packages - {"__pycache__"}), files


def ours(name: str, root: Path = REPO) -> bool:
    """Whether a path names a file of this repository rather than one of a user's (a program
    `tests/dist/p2p_loop.py` in an example): it starts with one of our packages, or with
    tests/ or scripts/ and one of their directories (or a file directly in them)."""
    parts = name.split("/")
    if parts[0] in _tree(root)[0]:
        return True
    return parts[0] in ("tests", "scripts") and (len(parts) == 2 or (root / parts[0] / parts[1]).is_dir())


def missing_paths(text: str, root: Path = REPO) -> list[str]:
    """Paths of ours in `text` (`launch/rebuild.py`, `hicache_cli/lint/flow.py`,
    `commands/stress.py`) that are no file's: a path is read from any directory of ours, so a
    path names a file when some file's path ends with it."""
    files = _tree(root)[1]
    return [
        name
        for name in FILES.findall(text)
        if "/" in name and ours(name, root) and not any(f.endswith("/" + name) for f in files)
    ]


def missing_dotted(text: str, root: Path = REPO) -> list[str]:
    """Dotted names of ours (`hicache_cli.analysis.settle.Settler`) in `text` that name no
    module, or no top-level name of the module they reach."""
    out = []
    for dotted in DOTTED.findall(text):
        parts = dotted.split(".")
        if parts[-1] in ("py", "md", "json", "toml"):
            continue  # a file's name (`cache.py`), not a module's
        module = root / parts[0]
        at = 1
        while at < len(parts) and ((module / parts[at]).is_dir() or (module / f"{parts[at]}.py").exists()):
            module = module / parts[at]
            at += 1
        if at == len(parts):
            continue
        source = module / "__init__.py" if module.is_dir() else module.with_suffix(".py")
        if not source.exists() or parts[at] not in top_level_names(source):
            out.append(dotted)
    return out


def top_level_names(source: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(source.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    if "_EXPORTS" in names:  # hicache_cli/__init__.py: the library's names, loaded on first use
        names |= set(re.findall(r'"(\w+)": "hicache_cli', source.read_text(encoding="utf-8")))
    return names


def documents(root: Path = REPO) -> list[Path]:
    """The docs and every Python file of ours, tests and scripts included (not the programs
    tests lint and trace, which are users' code, nor this file: it names missing ones)."""
    docs = [*sorted((root / "docs").glob("*.md")), root / "README.md"]
    code = [p for top in (*PACKAGES, "tests", "scripts") for p in sorted((root / top).rglob("*.py"))]
    here = Path(__file__).resolve()
    return [p for p in docs + code if p.exists() and "programs" not in p.relative_to(root).parts and p != here]


def test_every_module_path_in_the_docs_and_docstrings_exists() -> None:
    found = []
    for path in documents():
        text = prose(path)
        found += [f"{path.relative_to(REPO)}: {n}" for n in missing_paths(text) + missing_dotted(text)]
    assert found == []


CLASS_NAME = re.compile(r"`([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+)`")


def defined_classes(root: Path = REPO) -> set[str]:
    names = set()
    for package in PACKAGES:
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    names.add(node.name)
                elif isinstance(node, ast.Assign):  # AnyTarget = ModelTarget | ...
                    names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def test_every_class_architecture_md_names_exists() -> None:
    """`RunFollower`, `TracedProgram`, ...: a CamelCase name in backticks is a class of ours
    (torch's and the standard library's are named with their module: `dist.Work`)."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    named = set(CLASS_NAME.findall(text))
    assert len(named) > 10
    assert sorted(named - defined_classes() - FOREIGN) == []


FOREIGN = {"HiRadixCache", "UnifiedRadixCache", "ProcessGroup", "KeyboardInterrupt"}  # SGLang's, torch's, Python's


# -- the tests of the tests above -----------------------------------------------------------------


def scratch_tree(tmp_path: Path) -> Path:
    """A small repository: a package with two modules and a subpackage, and its map."""
    (tmp_path / "hicache_cli" / "launch").mkdir(parents=True)
    (tmp_path / "hicache_model").mkdir()
    (tmp_path / "hicache_cli" / "__init__.py").write_text('"""The tool."""\n')
    (tmp_path / "hicache_cli" / "config.py").write_text('"""RunConfig."""\nclass RunConfig: ...\n')
    (tmp_path / "hicache_cli" / "launch" / "__init__.py").write_text('"""Launch.\n\n  nodes.py  the nodes\n"""\n')
    (tmp_path / "hicache_cli" / "launch" / "nodes.py").write_text("")
    return tmp_path


TREE = """# A
```
hicache_model/            the model
hicache_cli/      the tool
  __init__.py       the API
  config.py         RunConfig
  launch/           the launcher
    nodes.py          across nodes; see config.py
```
"""


def test_the_tree_checks_find_a_missing_and_an_unnamed_module(tmp_path: Path) -> None:
    root = scratch_tree(tmp_path)
    named, missing = named_in_tree(TREE, root)
    assert missing == [] and {p for p in on_disk(root) if p not in named} == set()
    named, missing = named_in_tree(TREE.replace("nodes.py ", "rebuild.py"), root)
    assert missing == ["hicache_cli/launch/rebuild.py"]
    assert [p for p in on_disk(root) if p not in named] == [Path("hicache_cli/launch/nodes.py")]
    (root / "hicache_cli" / "launch" / "late.py").write_text("")  # added by someone, in no map
    named, _ = named_in_tree(TREE, root)
    assert [p for p in on_disk(root) if p not in named] == [Path("hicache_cli/launch/late.py")]


def test_the_package_map_check_finds_both_ways(tmp_path: Path) -> None:
    root = scratch_tree(tmp_path)
    assert map_problems(Path("hicache_cli/launch"), root) == []
    (root / "hicache_cli" / "launch" / "late.py").write_text("")
    (root / "hicache_cli" / "launch" / "__init__.py").write_text('"""Launch.\n\n  nodes.py  flow.py\n"""\n')
    assert map_problems(Path("hicache_cli/launch"), root) == [
        "hicache_cli/launch/__init__.py names flow.py: no such module",
        "hicache_cli/launch/__init__.py does not name late.py",
    ]


def test_the_mention_checks_find_a_missing_path_and_name(tmp_path: Path) -> None:
    root = scratch_tree(tmp_path)
    text = "see launch/nodes.py, launch/rebuild.py, `hicache_cli.config.RunConfig`, hicache_cli.config.RawFinding"
    assert missing_paths(text, root) == ["launch/rebuild.py"]
    examples = "hicache_cli/launch/nodes.py tests/x/test_y.py and train.py"  # the last two: not ours
    assert missing_paths(examples, root) == []
    assert missing_paths("tests/test_gone.py, see cache.py", root) == ["tests/test_gone.py"]
    assert missing_dotted(text, root) == ["hicache_cli.config.RawFinding"]
    assert missing_dotted("hicache_cli.launch.rebuild", root) == ["hicache_cli.launch.rebuild"]
