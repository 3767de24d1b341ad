"""Option groups (cli/groups.py): declared once, taken whole or in part by a command, with a
default or help of its own; what the command receives is the group, rebuilt by keyword, and
which options were given. And what holds the commands to it: no command reads an option by
its name from click's context, and each command module stays short."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from hicache_cli.cli import options
from hicache_cli.cli.groups import Group, grouped, option
from hicache_cli.cli.main import app

GROUPS = [options.Ranks, options.Measurement, options.Outputs, options.Progress, options.Rendezvous, options.Gate]
REPO = Path(__file__).resolve().parents[2]
COMMANDS = REPO / "hicache_cli" / "cli" / "commands"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@dataclass(frozen=True)
class Shape(Group):
    panel = "Shape"
    pp: int = option(2, "--pp", help="Stages.")
    name: str | None = option(None, "--name", help="A name.")
    tags: tuple[str, ...] = option((), "--tag", help="Repeatable.")


@dataclass(frozen=True)
class Timing(Group):
    panel = "Timing"
    duration: str = option("15s", "--duration", help="How long.")
    probe_hz: float = option(10.0, "--probe-hz", help="How often.")


@dataclass(frozen=True)
class Secret(Group):
    token: str | None = option(None, "--token", envvar="TEST_GROUP_TOKEN", help="A secret.")


@dataclass(frozen=True)
class Again(Group):
    pp: int = option(1, "--pp", help="Clashes with Shape's.")


# what the commands below take (module-level: a default is evaluated once anyway)
EVERY_SHAPE, EVERY_TIMING, EVERY_SECRET, EVERY_AGAIN = Shape.every(), Timing.every(), Secret.every(), Again.every()
TIMING_30S = Timing.take(duration=typer.Option("30s", "--duration", help="Per policy."))
SHAPE_BUT_TAGS, SHAPE_PP = Shape.but("tags", "name"), Shape.take("pp")


def run(make: Any, *args: str, env: dict[str, str] | None = None) -> tuple[Any, str]:
    """Run the command `make(got)` returns (it appends what it received to `got`) in a typer
    app of its own; returns what it received (None for --help) and its output."""
    got: list[Any] = []
    command = make(got)
    app = typer.Typer()
    app.command()(command)
    app.command("other")(lambda: None)  # two commands: the command is named on the command line
    done = CliRunner().invoke(app, [command.__name__, *args], env=env)
    assert done.exit_code == 0, done.output
    return (got[0] if got else None), ANSI.sub("", done.output)


def everything(got: list[Any]) -> Any:
    @grouped
    def everything(shape: Shape = EVERY_SHAPE, timing: Timing = EVERY_TIMING) -> None:
        got.append((shape, timing))

    return everything


def test_every_option_reaches_its_group_by_keyword() -> None:
    (shape, timing), _ = run(everything, "--pp", "4", "--tag", "a", "--tag", "b", "--probe-hz", "2")
    assert shape == Shape(pp=4, tags=("a", "b"))  # a repeatable option is the field's tuple
    assert timing == Timing(probe_hz=2.0)


def test_given_names_what_was_typed_even_at_its_default_value() -> None:
    (shape, timing), _ = run(everything, "--pp", "2", "--duration", "15s")
    assert shape.given == {"pp"} and timing.given == {"duration"}
    assert shape.given_any() == "--pp" and timing.given_any(("probe_hz",)) is None


def test_an_environment_variable_counts_as_given() -> None:
    def secret(got: list[Any]) -> Any:
        @grouped
        def secret(s: Secret = EVERY_SECRET) -> None:
            got.append(s)

        return secret

    received, _ = run(secret, env={"TEST_GROUP_TOKEN": "xyz"})
    assert received.token == "xyz" and received.given == {"token"}


def test_a_part_of_a_group_with_a_default_of_its_own() -> None:
    def part(got: list[Any]) -> Any:
        @grouped
        def part(
            timing: Timing = TIMING_30S,
            shape: Shape = SHAPE_BUT_TAGS,
        ) -> None:
            got.append((timing, shape))

        return part

    (timing, shape), _ = run(part)
    assert timing == Timing(duration="30s")  # declared the command's way; probe_hz: the group's default
    _, help_text = run(part, "--help")
    assert "Per policy." in help_text and "--probe-hz" not in help_text and "--tag" not in help_text
    assert re.search(r"─ Timing ─", help_text) and re.search(r"─ Shape ─", help_text)  # a panel per group


def test_a_command_keeps_its_own_parameters_and_context() -> None:
    def own(got: list[Any]) -> Any:
        @grouped
        def own(ctx: typer.Context, count: int = typer.Option(1, "--count"), shape: Shape = SHAPE_PP) -> None:
            got.append((ctx.info_name, count, shape))

        return own

    received, _ = run(own, "--count", "3", "--pp", "5")
    assert received == ("own", 3, Shape(pp=5))


def test_two_groups_declaring_one_option_are_refused_at_import() -> None:
    def clash(shape: Shape = EVERY_SHAPE, again: Again = EVERY_AGAIN) -> None: ...

    with pytest.raises(TypeError, match="taken twice: \\['pp'\\]"):
        grouped(clash)


@pytest.mark.parametrize(
    ("take", "says"),
    [
        (lambda: Shape.take("nope"), "Shape has no option nope"),
        (lambda: Shape.but("nope"), "Shape has no option nope"),
        (lambda: Shape.take(), "name the options taken"),
    ],
)
def test_a_wrong_take_is_refused(take: Any, says: str) -> None:
    with pytest.raises(TypeError, match=says):
        take()


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
def test_each_option_defaults_to_its_field_default(group: type[Group]) -> None:
    """The field's default (what a command that does not take the option gets) and the
    option's (what --help shows, what typer passes) are one value."""
    for f in fields(group):
        if "option" in f.metadata:
            default = list(f.default) if isinstance(f.default, tuple) else f.default
            assert f.metadata["option"].default == default, f.name


# -- what holds the commands to it --------------------------------------------------------------


def context_reads(path: Path) -> list[str]:
    """Where a module reads click's context for an option by its name: `ctx.params`,
    `get_parameter_source(...)`, `get_current_context()`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and node.attr in ("params", "get_parameter_source", "get_current_context"):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("command", "param")):  # a click command's
                found.append(f"{path.name}:{node.lineno} .{node.attr}")
    return found


def test_no_command_reads_an_option_from_the_context_by_name() -> None:
    """Options reach a command as parameters or groups, and its config by keyword
    (configure.py): none through ctx.params. groups.py alone asks click which were given."""
    cli = REPO / "hicache_cli" / "cli"
    modules = [p for p in cli.rglob("*.py") if p.name != "groups.py"]
    assert len(modules) > 10
    assert [hit for path in modules for hit in context_reads(path)] == []


def test_context_reads_are_found(tmp_path: Path) -> None:
    """The test of the test above."""
    (tmp_path / "x.py").write_text("def f(ctx):\n    return ctx.params['pp'], ctx.get_parameter_source('tp')\n")
    assert context_reads(tmp_path / "x.py") == ["x.py:2 .params", "x.py:2 .get_parameter_source"]


def test_each_command_module_is_short() -> None:
    """A command turns its options into a config and calls library code (STYLE.md rule 2):
    each module under cli/commands/ is under 80 lines."""
    lengths = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in COMMANDS.glob("*.py")}
    assert len(lengths) >= 10
    assert {name: n for name, n in lengths.items() if n >= 80} == {}


def test_every_command_is_registered_with_its_groups_flat() -> None:
    """typer sees each grouped command's options (no group object leaks into the command line)."""
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        for param in getattr(command, "params", []):
            assert not param.name.startswith("_hicache"), (name, param.name)
            assert "Taken" not in repr(param.default), (name, param.name)
