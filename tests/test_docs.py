"""The docs and the code agree: every option of every command (as `--help` shows it) is in a
table of docs/commands.md, under that command's heading, and every option there exists; the
fault kinds, the bad-input messages of docs/faults.md, and the report's keys in
docs/report.md are the code's."""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
import typer

from hicache_cli.analysis.report import environment
from hicache_cli.analysis.results import Report
from hicache_cli.cli.conventions import plain_help
from hicache_cli.cli.main import app, main
from hicache_cli.cli.options import FAULT_HELP
from hicache_cli.config import StressConfig
from hicache_cli.records import Record, record_fields
from hicache_cli.sample import Sample
from hicache_model.faults import SHAPES
from tests.conftest import build_pp2_report

DOCS = Path(__file__).resolve().parents[1] / "docs"
OPTIONS_HEADER = "| option | default | meaning |"
OPTION = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)")


def cli_commands() -> dict[tuple[str, ...], set[str]]:
    """Every command (and group) by the words that name it -> its options, as --help lists them."""
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(command: object, path: tuple[str, ...]) -> None:
        params = getattr(command, "params", [])
        found[path] = {o for p in params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(plain_help(typer.main.get_command(app)), ())
    return found


def heading_command(line: str, known: set[tuple[str, ...]]) -> tuple[str, ...] | None:
    """The command a heading names (`## \\`hicache report plot FILE...\\``), or None."""
    match = re.search(r"`hicache((?: [a-z][a-z-]*)*)", line)
    if match is None:
        return None
    words = tuple(match.group(1).split())
    while words not in known:
        words = words[:-1]
    return words


def documented(path: Path, known: set[tuple[str, ...]]) -> tuple[dict[tuple[str, ...], set[str]], set]:
    """Options in the first column of each options table, by the command whose heading it is
    under; and every command that has a heading."""
    options: dict[tuple[str, ...], set[str]] = {}
    headed: set[tuple[str, ...]] = set()
    current, in_table = None, False
    for line in path.read_text().splitlines():
        if line.startswith("#"):
            current = heading_command(line, known)
            if current is not None:
                headed.add(current)
            in_table = False
        elif line.startswith(OPTIONS_HEADER):
            assert current is not None, f"an options table under no command's heading: {line}"
            in_table = True
        elif in_table and line.startswith("|") and not line.startswith("|---"):
            first_cell = line.split("|")[1]
            options.setdefault(current, set()).update(OPTION.findall(first_cell))
        elif not line.startswith("|"):
            in_table = False
    return options, headed


@pytest.fixture(scope="module")
def commands() -> dict[tuple[str, ...], set[str]]:
    return cli_commands()


@pytest.fixture(scope="module")
def in_docs(commands: dict[tuple[str, ...], set[str]]) -> tuple[dict[tuple[str, ...], set[str]], set]:
    return documented(DOCS / "commands.md", set(commands))


def test_every_command_has_a_heading_in_commands_md(commands: dict, in_docs: tuple) -> None:
    _, headed = in_docs
    assert set(commands) - headed == set()


def test_every_option_in_help_is_in_commands_md(commands: dict, in_docs: tuple) -> None:
    options, _ = in_docs
    missing = {
        " ".join(path) or "hicache": sorted(opts - {"--help"} - options.get(path, set()))
        for path, opts in commands.items()
    }
    assert {k: v for k, v in missing.items() if v} == {}


def test_every_option_in_commands_md_exists(commands: dict, in_docs: tuple) -> None:
    options, _ = in_docs
    unknown = {" ".join(path) or "hicache": sorted(opts - commands[path]) for path, opts in options.items()}
    assert {k: v for k, v in unknown.items() if v} == {}


def test_the_fault_help_names_every_kind() -> None:
    for shape in SHAPES.values():
        assert shape in FAULT_HELP


def test_faults_md_lists_every_kind_and_no_other() -> None:
    text = (DOCS / "faults.md").read_text()
    table = text[text.index("## `--fault`") : text.index("\n## ", text.index("## `--fault`") + 1)]
    rows = re.findall(r"^\| `([a-z-]+:[A-Z:]+)` \|", table, re.MULTILINE)
    assert rows == list(SHAPES.values())


def bad_input_rows() -> list[tuple[list[str], str]]:
    """docs/faults.md's bad-input rows whose input is one plain command line (no note, no
    placeholder) and whose message is quoted whole: (argv, message)."""
    text = (DOCS / "faults.md").read_text()
    section = text[text.index("## Bad input") :]
    rows = []
    for line in section.splitlines():
        match = re.fullmatch(r"\| `([^`]+)` \| `([^`]+)` \|", line)
        if match is None:
            continue
        argv = shlex.split(match.group(1))
        if any(a.startswith("sglang") for a in argv):
            continue  # fetching or finding SGLang: the lint and sglang tests run those for real
        if argv[0].startswith("-"):
            argv = ["stress", *argv]  # the table's options are stress's unless it names a command
        rows.append((argv, match.group(2)))
    return rows


@pytest.mark.parametrize(
    ("argv", "message"), bad_input_rows(), ids=lambda x: " ".join(x) if isinstance(x, list) else ""
)
def test_faults_md_bad_input_messages_are_the_real_ones(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)  # nothing may be made, but if it were, here
    if "r.json" in argv:  # the row's report exists: the error is about the other argument
        (tmp_path / "r.json").write_text(json.dumps(build_pp2_report().to_dict()))
    if "notes.txt" in argv:  # the row's file exists and is not Python
        (tmp_path / "notes.txt").write_text("notes\n")
    if "/etc/hostname" in argv and not Path("/etc/hostname").is_file():
        pytest.skip("the row reads /etc/hostname, which this machine lacks")
    assert main(argv) == 2
    err = capsys.readouterr().err
    if argv[0] == "lint":  # lint reports each unreadable target, lints the rest, then sums up
        assert err.splitlines()[0] == f"hicache: error: {message}"
    else:
        assert err == f"hicache: error: {message}\n"


def test_there_are_bad_input_rows_to_check() -> None:
    assert len(bad_input_rows()) >= 10


def report_md_row(key: str) -> str:
    text = (DOCS / "report.md").read_text()
    match = re.search(rf"^\| `{key}` \|(.*)$", text, re.MULTILINE)
    assert match is not None, key
    return match.group(1)


# The report's tables in docs/report.md, by the key path of the records each documents; a
# record below one of these is documented in the rows of its nearest one (`ranks.rss`: the
# per-rank rows that name `rss`).
TABLES = {"": "### Top level", "ranks": "### Per rank", "target.processes": "### The census"}
CODE = re.compile(r"`([^`]+)`")
WORD = re.compile(r"[A-Za-z_][\w.]*")


def record_classes(hint: Any) -> list[type[Record]]:
    """The record types a field's type holds (an optional's, a list's items, a union's), each
    with every subclass (a `TargetSection` is one of its kinds)."""
    found: list[type[Record]] = []
    todo = [hint]
    while todo:
        t = todo.pop()
        todo.extend(typing.get_args(t))
        if isinstance(t, type) and issubclass(t, Record):
            family = [t]
            while family:
                cls = family.pop()
                found.append(cls)
                family.extend(cls.__subclasses__())
    return found


def keys_of(cls: type[Record]) -> list[str]:
    """A record's JSON keys: its fields', and any its to_dict() adds (a target's `kind`)."""
    keys = [f.key for f in record_fields(cls)]
    try:
        keys += [k for k in cls().to_dict() if k not in keys]
    except TypeError:  # a record with a field that has no default
        pass
    return keys


def report_keys(root: type[Record] = Report) -> list[tuple[str, str]]:
    """(the path of a record in the report, one of its keys), for every record a report holds."""
    out: list[tuple[str, str]] = []
    seen: set[tuple[type, str]] = set()

    def walk(cls: type[Record], path: str) -> None:
        if (cls, path) in seen:
            return
        seen.add((cls, path))
        out.extend((path, key) for key in keys_of(cls) if (path, key) not in out)
        for f in record_fields(cls):
            for sub in record_classes(f.hint):
                walk(sub, f"{path}.{f.key}".lstrip("."))

    walk(root, "")
    return out


def report_md_tables(text: str) -> dict[str, list[tuple[set[str], set[str]]]]:
    """Each table of TABLES as rows: (the words of its first cell's code, the words of all its code)."""
    tables: dict[str, list[tuple[set[str], set[str]]]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("#"):
            current = next((path for path, heading in TABLES.items() if line.startswith(heading)), None)
        elif current is not None and line.startswith("| ") and not line.startswith("| key"):
            first = line.split("|")[1]
            words = lambda cell: {w for code in CODE.findall(cell) for w in WORD.findall(code)}  # noqa: E731
            tables.setdefault(current, []).append((words(first), words(line)))
    return tables


def undocumented(text: str, root: type[Record] = Report) -> list[str]:
    """Every key of the report that has no row in docs/report.md (`text`): a key of a table's
    own record is the first cell of one of its rows (`rss.start_bytes` names `rss`); a key of a
    record below is named (`start_bytes`, `rss.start_bytes`) in the rows of its field there."""
    tables = report_md_tables(text)
    missing = []
    for path, key in report_keys(root):
        table = max((t for t in TABLES if path == t or path.startswith(t + ".") or t == ""), key=len)
        relative = path[len(table) :].lstrip(".")
        rows = tables.get(table, [])
        if not relative:
            named = any(any(w == key or w.startswith(key + ".") for w in first) for first, _ in rows)
        else:
            field = relative.split(".")[0]
            under = [
                all_words for first, all_words in rows if any(w == field or w.startswith(field + ".") for w in first)
            ]
            named = any(any(w == key or w.endswith("." + key) for w in words) for words in under)
        if not named:
            missing.append(f"{path}.{key}".lstrip("."))
    return missing


def test_report_md_has_a_row_for_every_key_of_the_report() -> None:
    """Every key a report holds (Report, RankReport and every record below them, the config and
    each kind of target and target section included) is in docs/report.md's tables: a key
    added to a record without its row fails here, by its path."""
    keys = report_keys()
    assert len(keys) > 150 and ("ranks", "rounds_per_s") in keys and ("config.target", "class") in keys
    assert undocumented((DOCS / "report.md").read_text()) == []


def test_a_key_without_a_row_is_named() -> None:
    """The test of the test above: a key added to a record, and a row taken away."""

    @dataclasses.dataclass(frozen=True)
    class Later(Report):
        brand_new_key: int = 0

    text = (DOCS / "report.md").read_text()
    assert undocumented(text, Later) == ["brand_new_key"]
    assert "ranks.rounds_per_s" in undocumented(text.replace("`rounds_per_s`", "`rounds`"))
    assert "ranks.rss.detection_floor_mb_per_h" in undocumented(text.replace("`rss.detection_floor_mb_per_h`", "`x`"))
    assert "config.target.wait_timeout_s" in undocumented(text.replace("`wait_timeout_s`", "`w`"))


def test_report_md_names_every_environment_key() -> None:
    row = report_md_row("environment")
    missing = [k for k in environment(StressConfig(), []).to_dict() if f"`{k}`" not in row]
    assert missing == []


def test_report_md_names_every_sample_key() -> None:
    text = (DOCS / "report.md").read_text()
    table = text[text.index("## Samples") : text.index("## The report")]
    first_cells = " ".join(line.split("|")[1] for line in table.splitlines() if line.startswith("| `"))
    missing = [f.name for f in fields(Sample) if f"`{f.name}`" not in first_cells]
    assert missing == []


def test_security_md_names_every_file_a_run_writes_and_its_modes() -> None:
    """docs/security.md's table is the code's: every name that makes a --run-dir an earlier
    run's (each one a file a run writes), and the modes files and directories are made with."""
    from hicache_cli.files import DIR_MODE, FILE_MODE
    from hicache_cli.pytest_ranks.protocol import ARGS, RELEASE, REQUEST
    from hicache_cli.rundir import EARLIER_RUN, EARLIER_RUN_GLOBS

    text = (DOCS / "security.md").read_text()
    names = [*EARLIER_RUN, *(g.replace("*", "N") for g in EARLIER_RUN_GLOBS), REQUEST, ARGS, RELEASE]
    assert [n for n in names if f"`{n}`" not in text] == []
    assert f"`{FILE_MODE:04o}`" in text and f"`{DIR_MODE:04o}`" in text


def test_report_md_names_every_key_of_a_site() -> None:
    """A traced process's creation sites (`ranks[i].works.sites`, and the samples' `sites`)."""
    from hicache_cli.analysis.results import Poll, Site

    row = report_md_row("sites")
    named = {key.strip() for keys in re.findall(r"`\{([^}]*)\}`", row) for key in keys.split(",")}
    assert [k for k in Site().to_dict() if k not in named] == []
    assert [k for k in Poll().to_dict() if k not in named] == []


def test_report_md_names_every_key_of_an_attached_process() -> None:
    from hicache_cli.attached import AttachedPid, ProcessEnd

    text = (DOCS / "report.md").read_text()
    table = text[text.index("### The census") : text.index("### Per rank")]
    assert [k for k in AttachedPid().to_dict() if f"`{k}`" not in table] == []
    assert [k for k in ProcessEnd().to_dict() if k not in report_md_row("ended")] == []
