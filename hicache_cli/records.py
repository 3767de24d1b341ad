"""Frozen dataclasses that are JSON objects: the one serializer and the one reader.

A record's fields are its JSON object's keys, in order (`key=` names another key, e.g.
`class`). `to_dict()` writes every field (a record may leave some out: `omit()`);
`from_dict()` reads an object back and checks every value against its field's type, so a
bad file is one line naming the first wrong field (`ranks[0].rss.end_bytes: missing`,
`ranks[0].work_list.max: a number, expected an integer`), never a traceback later.

Keys a newer hicache added are kept (`to_dict()` gives them back); a value of an enum that a
newer hicache added stays text. A key may be missing (a report of an older hicache) unless
its field says `required`; the field then has its default. Stdlib only: the config, the
targets and the report are all records.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, TypeVar

R = TypeVar("R", bound="Record")
NONE = type(None)
MAX_DEPTH = 32  # lists and objects in a free-form field (a report nests 6 deep): deeper is not a report


class ShapeError(ValueError):
    """A JSON object whose shape is wrong; the message names the field."""


def spec(
    key: str | None = None, *, required: bool = False, length: int | None = None, **options: Any
) -> dict[str, Any]:
    """A field's metadata: its JSON key, whether a reader needs it, a list's fixed length."""
    return {"key": key, "required": required, "length": length, **options}


@dataclass(frozen=True)
class _Field:
    name: str
    key: str
    hint: Any
    required: bool
    length: int | None


@dataclass(frozen=True)
class Record:
    """Base of every record: generic to_dict()/from_dict() over the dataclass fields."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        left_out = self.omit()
        for f in record_fields(type(self)):
            if f.key not in left_out:
                out[f.key] = dump(getattr(self, f.name))
        out.update(dump(getattr(self, "_extra", {})))
        return out

    def omit(self) -> frozenset[str]:
        """JSON keys this record leaves out (a rank that wrote nothing has no measurements)."""
        return frozenset()

    @classmethod
    def from_dict(cls: type[R], data: Any, where: str = "") -> R:
        obj = _expect_object(data, where)
        values = {}
        for f in record_fields(cls):
            here = join(where, f.key)
            if f.key in obj:
                values[f.name] = parse(obj[f.key], f.hint, here, f.length)
            elif f.required or f.key in cls.required_keys(obj):
                raise ShapeError(f"{here}: missing")
        record = cls(**values)
        known = {f.key for f in record_fields(cls)}
        extra = {k: v for k, v in obj.items() if k not in known}
        if extra:
            object.__setattr__(record, "_extra", extra)
        record.check(where)
        return record

    @classmethod
    def required_keys(cls, data: Mapping[str, Any]) -> frozenset[str]:
        """Fields a reader needs given the rest of the object (measured ranks have more)."""
        return frozenset()

    def check(self, where: str) -> None:
        """What the types alone cannot say (an interval beside no slope); raise ShapeError."""


@functools.cache
def record_fields(cls: type) -> tuple[_Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in fields(cls):
        meta = f.metadata
        if meta.get("local"):
            continue  # not in the JSON (a report's path)
        out.append(
            _Field(f.name, meta.get("key") or f.name, hints[f.name], meta.get("required", False), meta.get("length"))
        )
    return tuple(out)


def dump(value: Any) -> Any:
    """A record, enum, list or mapping as plain JSON values."""
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (list, tuple)):
        return [dump(v) for v in value]
    if isinstance(value, Mapping):
        return {k: dump(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and hasattr(value, "to_dict"):
        return value.to_dict()
    return value


_NAMES = {
    NONE: "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    str: "a string",
    list: "a list",
    dict: "an object",
}


def kind_of(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: JSON true is no count
        return "a boolean"
    if isinstance(value, int) and not _fits(value):
        return "an integer past 64 bits"
    for t in (int, float, str, list, dict):
        if isinstance(value, t):
            return _NAMES[t]
    return type(value).__name__


def _expected(hint: Any) -> str:
    options = _options(hint)
    words = []
    for option in options:
        origin = typing.get_origin(option) or option
        if isinstance(origin, type) and issubclass(origin, enum.Enum):
            word = "a string"
        elif isinstance(origin, type) and (issubclass(origin, Record) or dataclasses.is_dataclass(origin)):
            word = "an object"
        elif origin in (list, tuple):
            word = "a list"
        elif origin in (dict, Mapping):
            word = "an object"
        else:
            word = _NAMES.get(origin, "a value")
        if word not in words and word != "null":
            words.append(word)
    if NONE in options:
        words.append("null")
    return " or ".join(words)


def _options(hint: Any) -> tuple[Any, ...]:
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def parse(value: Any, hint: Any, where: str, length: int | None = None, depth: int = 0) -> Any:
    """`value` as the type `hint` says, or ShapeError naming `where`."""
    if depth > MAX_DEPTH:
        raise ShapeError(f"{where or 'the object'}: nested too deeply")
    if hint is Any:
        return value
    options = _options(hint)
    if value is None:
        if NONE in options:
            return None
        raise ShapeError(f"{where or 'the object'}: null, expected {_expected(hint)}")
    for option in options:
        if option is NONE:
            continue
        ok, parsed = _try(value, option, where, length, depth)
        if ok:
            return parsed
    raise ShapeError(f"{where or 'the object'}: {kind_of(value)}, expected {_expected(hint)}")


def _try(value: Any, hint: Any, where: str, length: int | None, depth: int) -> tuple[bool, Any]:
    """(True, the value as `hint`) or (False, None) when it is not of that kind; a value of
    the right kind with a wrong part inside raises ShapeError naming the part."""
    origin = typing.get_origin(hint) or hint
    args = typing.get_args(hint)
    if origin is bool:
        return isinstance(value, bool), value
    if origin is int:
        return isinstance(value, int) and not isinstance(value, bool) and _fits(value), value
    if origin is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and _fits(value), value
    if origin is str:
        return isinstance(value, str), value
    if isinstance(origin, type) and issubclass(origin, enum.Enum):
        if not isinstance(value, str):
            return False, None
        try:
            return True, origin(value)
        except ValueError:
            return True, value  # a value a newer hicache added stays text
    if origin in (list, tuple):
        if not isinstance(value, list):
            return False, None
        if length is not None and len(value) != length:
            raise ShapeError(f"{where}: {len(value)} items, expected {length}")
        item = args[0] if args else Any
        if _plain(item) and all(map(matcher(item), value)):  # a series of numbers: as it is
            return True, tuple(value) if origin is tuple else list(value)
        items = [parse(v, item, f"{where}[{i}]", depth=depth + 1) for i, v in enumerate(value)]
        return True, tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        if not isinstance(value, dict):
            return False, None
        item = args[1] if len(args) == 2 else Any
        return True, {str(k): parse(v, item, join(where, str(k)), depth=depth + 1) for k, v in value.items()}
    if isinstance(origin, type) and hasattr(origin, "from_dict"):
        if not isinstance(value, dict):
            return False, None
        return True, origin.from_dict(value, where)
    return False, None


@functools.cache
def _plain(hint: Any) -> bool:
    """Whether values of `hint` are read as they are: numbers, text, booleans or null."""
    return all(option in _PLAIN or option is NONE for option in _options(hint))


@functools.cache
def matcher(hint: Any) -> typing.Callable[[Any], bool]:
    """Whether a JSON value is a measurement of the type `hint`, as a function built once:
    for the rank files' lines, read by the hundred thousand, where `parse`'s walk over the
    hint for every value would cost more than the decoding. As `parse` takes it, and a number
    is finite and under 2**64 in size (a time of 1e308 s or an RSS of NaN is no reading: the
    trends' sums of squares and products would overflow to NaN). Scalars, lists,
    string-keyed objects, unions and Any; a hint it does not know matches nothing."""
    if hint is Any:
        return lambda value: True
    options = _options(hint)
    if len(options) == 2 and NONE in options:  # (the common union, tested without a loop)
        other = matcher(next(option for option in options if option is not NONE))
        return lambda value: value is None or other(value)
    if len(options) > 1:
        tests = tuple(matcher(option) for option in options)
        return lambda value: any(test(value) for test in tests)
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    if origin is NONE:
        return lambda value: value is None
    if origin is str or origin is bool:
        return lambda value: type(value) is origin  # type(), not isinstance: JSON true is no count
    if origin is int:
        return lambda value: type(value) is int and -INT_END < value < INT_END
    if origin is float:  # (False for NaN and the infinities)
        return lambda value: (type(value) is float or type(value) is int) and -INT_END < value < INT_END
    if origin in (list, tuple):
        item = matcher(args[0] if args else Any)
        return lambda value: type(value) is list and all(map(item, value))
    if origin in (dict, Mapping):
        item = matcher(args[1] if len(args) == 2 else Any)
        return lambda value: type(value) is dict and all(map(item, value.values()))
    return lambda value: False


def _fits(number: int | float) -> bool:
    """An integer of at most 64 bits (any float): a count past that is no count hicache wrote,
    and one past a float's range (10**400) fails every division and format that meets it."""
    return type(number) is not int or INT_MIN <= number < INT_END


INT_MIN, INT_END = -(1 << 63), 1 << 64  # what JSON's other readers take as an integer
_PLAIN = frozenset((bool, int, float, str))


def _expect_object(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, dict):
        raise ShapeError(f"{where or 'the object'}: {kind_of(data)}, expected an object")
    return data


def join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def field_spec(key: str | None = None, *, default: Any = None, **options: Any) -> Any:
    """A dataclass field with a JSON key of its own or reader options (`required`, `length`)."""
    return field(default=default, metadata=spec(key, **options))


def replace(record: R, **changes: Any) -> R:
    """dataclasses.replace, keeping the keys a newer hicache added."""
    new = dataclasses.replace(record, **changes)
    extra = getattr(record, "_extra", None)
    if extra:
        object.__setattr__(new, "_extra", extra)
    return new
