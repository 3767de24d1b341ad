"""Options that travel together, declared once as a group: a frozen dataclass whose fields are
the options (each field's default is the config's, its declaration the command line's), and
whose instance is what a command receives, by keyword, instead of a dozen loose parameters.

    @grouped
    def stress(ranks: Ranks = Ranks.every(), measure: Measurement = Measurement.every()) -> None:

A command takes the whole group (`every()`) or some of its options (`Measurement.take("duration",
"warmup")`), and may declare one of them its own way (`duration=typer.Option("30s", ...)`,
another default or help); an option it does not take keeps the group's default. `@grouped`
gives typer one flat signature (each group's options under a panel of its own in `--help`)
and rebuilds the groups from what was parsed. Each group also knows which of its options were
given on the command line rather than left at their default (`given`: click's parameter
source, never a comparison with the default).
"""

from __future__ import annotations

import copy
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])
_CONTEXT = "_hicache_context"  # the wrapper's own typer.Context, for `given`


def option(default: Any, *decls: str, help: str, **settings: Any) -> Any:
    """A group's field: its default (a tuple for a repeatable option) and its declaration
    (`--name`, `-n`, its help and typer's other settings)."""
    shown = list(default) if isinstance(default, tuple) else default  # click's multiple option
    return field(default=default, metadata={"option": typer.Option(shown, *decls, help=help, **settings)})


@dataclass(frozen=True)
class Group:
    """Base of the option groups. `panel` is the heading its options stand under in --help."""

    panel: ClassVar[str] = "Options"
    given: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @classmethod
    def take(cls, *names: str, **declared: Any) -> Any:
        """The options of this group a command takes: `names`, and `declared` ones declared the
        command's own way (a typer.Option: another default or help)."""
        if not names and not declared:
            raise TypeError(f"{cls.__name__}.take(): name the options taken, or take every() one")
        options = _options(cls)
        unknown = [n for n in (*names, *declared) if n not in options]
        if unknown:
            raise TypeError(f"{cls.__name__} has no option {', '.join(unknown)}")
        return Taken(cls, tuple(n for n in options if n in names or n in declared), declared)

    @classmethod
    def every(cls, **declared: Any) -> Any:
        """Every option of this group, `declared` ones the command's own way."""
        return cls.take(*_options(cls), **declared)

    @classmethod
    def but(cls, *left: str, **declared: Any) -> Any:
        """Every option of this group but those `left` (they keep the group's default)."""
        unknown = [n for n in left if n not in _options(cls)]
        if unknown:
            raise TypeError(f"{cls.__name__} has no option {', '.join(unknown)}")
        return cls.take(*(n for n in _options(cls) if n not in left), **declared)

    def values(self) -> dict[str, Any]:
        """The options' values by name (what a bundle records of the command line)."""
        return {name: getattr(self, name) for name in _options(type(self))}

    def given_any(self, names: tuple[str, ...] | None = None) -> str | None:
        """The first of `names` (default: every option of the group) that was given, as its
        flag (`--pp-backend`); None when none was."""
        for name in names if names is not None else tuple(_options(type(self))):
            if name in self.given:
                return _options(type(self))[name].param_decls[0]
        return None


@dataclass(frozen=True)
class Taken:
    """What a command takes of a group: a parameter's default, expanded by @grouped."""

    group: type[Group]
    names: tuple[str, ...]
    declared: dict[str, Any]

    def parameters(self) -> list[inspect.Parameter]:
        hints = typing.get_type_hints(self.group)
        declared = _options(self.group)
        out = []
        for name in self.names:
            info = copy.copy(self.declared.get(name, declared[name]))
            info.rich_help_panel = self.group.panel
            out.append(
                inspect.Parameter(
                    name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=_typer_type(hints[name])
                )
            )
        return out

    def build(self, parsed: dict[str, Any], context: typer.Context) -> Group:
        values = {name: tuple(v) if isinstance(v, list) else v for name, v in parsed.items()}
        return replace(self.group(**values), given=frozenset(n for n in parsed if _given(context, n)))


def grouped(command: F) -> F:
    """`command` as typer should see it: each parameter whose default is what it takes of a
    group (`take`, `every`, `but`) replaced by those options, and a typer.Context of its own;
    the command is called with the groups rebuilt (and its own context, if it takes one). Two
    groups that declare one option name are refused here, when the module is imported."""
    signature = inspect.signature(command)
    hints = typing.get_type_hints(command)
    taken: dict[str, Taken] = {}
    flat: list[inspect.Parameter] = []
    for param in signature.parameters.values():
        if isinstance(param.default, Taken):
            taken[param.name] = param.default
            flat.extend(param.default.parameters())
        elif hints.get(param.name) is not typer.Context:
            flat.append(param.replace(annotation=hints.get(param.name, param.annotation), kind=param.KEYWORD_ONLY))
    names = [p.name for p in flat]
    if len(set(names)) != len(names):
        raise TypeError(
            f"{command.__name__}: an option is taken twice: {sorted({n for n in names if names.count(n) > 1})}"
        )
    context = inspect.Parameter(_CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    context_name = next((p for p in signature.parameters if hints.get(p) is typer.Context), None)

    @functools.wraps(command)
    def run(**parsed: Any) -> Any:
        ctx = parsed.pop(_CONTEXT)
        for name, group in taken.items():
            parsed[name] = group.build({n: parsed.pop(n) for n in group.names}, ctx)
        if context_name is not None:  # the command's own typer.Context, when it takes one
            parsed[context_name] = ctx
        return command(**parsed)

    run.__signature__ = signature.replace(parameters=[context, *flat])  # type: ignore[attr-defined]
    run.__annotations__ = {p.name: p.annotation for p in (context, *flat)}
    return typing.cast(F, run)


@functools.cache
def _options(group: type[Group]) -> dict[str, Any]:
    """The group's options by field name -> typer's OptionInfo, in declaration order."""
    return {f.name: f.metadata["option"] for f in fields(group) if "option" in f.metadata}


def _typer_type(hint: Any) -> Any:
    """The type typer parses an option as: a tuple field is a repeatable option (a list)."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return list[args[0]]  # type: ignore[valid-type]
    return hint


def _given(context: typer.Context, name: str) -> bool:
    """Whether the option was given on the command line or by its environment variable."""
    source = context.get_parameter_source(name)  # click's ParameterSource (typer carries its own click)
    return source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT")
