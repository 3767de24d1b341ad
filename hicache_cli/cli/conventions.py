"""What every hicache command shares as a command line, whoever wrote it: `--version`, and
help that shows each option's value as a word (click's INTEGER, TEXT, PATH) rather than the
Python type typer prints (`<bool>` on a flag, `<list[str]>`, `<path>` beside an argument)."""

from __future__ import annotations

from typing import Any

import typer

from hicache_cli.version import __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"hicache {__version__}")
        raise typer.Exit()


VERSION = typer.Option(
    False, "--version", callback=_print_version, is_eager=True, help="Print hicache's version and exit."
)


def plain_help(command: Any) -> Any:
    """Give every option of `command` (a click command, as typer builds it) and its
    subcommands a click-style metavar (none for a flag), and every argument an upper-case
    name and no type column; returns `command`."""
    # typer bundles its own click: parameters are told apart by click's param_type_name.
    # --help is made on first use and kept (`get_help_option`): make it now, to mark it too.
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, *([help_option] if help_option is not None else [])]:
        if param.param_type_name == "option":
            if param.is_flag or param.count:
                param.metavar = ""  # typer shows the metavar when there is one: here, nothing
            elif param.metavar is None:
                param.metavar = _metavar(param)
        elif param.param_type_name == "argument":
            if param.metavar is None:
                param.metavar = param.name.upper()  # RUN_DIR, as click writes it (typer: {run_dir})
            if hasattr(param, "display_type_rich"):
                # the name says what an argument is; typer's type column would add `<path>`
                # or `<list[str]>` beside it
                param.display_type_rich = _no_type  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        plain_help(sub)
    return command


# typer's name of a parameter's Python type -> click's word for it
_WORDS = {"int": "INTEGER", "float": "FLOAT", "str": "TEXT", "Path": "PATH", "bool": "BOOLEAN"}


def _metavar(param: Any) -> str:
    """INTEGER for an int option, TEXT for str, PATH for Path; a repeatable option's words are
    its items' (`--fault TEXT`, repeatable as its help says)."""
    bare = param.bare_type() if hasattr(param, "bare_type") else "value"
    if bare.startswith("list[") and bare.endswith("]"):
        bare = bare[len("list[") : -1]
    return _WORDS.get(bare, bare.upper())


def _no_type(ctx: typer.Context) -> None:
    return None
