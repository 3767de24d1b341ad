"""HTML text from values: every value from a report passes through `esc` (a report is
untrusted input: file names, messages and commands may hold anything), and the small
builders here are the only places markup is joined. Stdlib only."""

from __future__ import annotations

import html
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from hicache_cli.units import format_bytes


def esc(value: object) -> str:
    """Text for an element's content or a quoted attribute: &, <, >, " and ' escaped."""
    return html.escape("" if value is None else str(value), quote=True)


_ID = re.compile(r"[^a-z0-9-]+")


def slug(text: str) -> str:
    """An id made of [a-z0-9-] only, whatever `text` holds."""
    return _ID.sub("-", text.lower()).strip("-") or "x"


def tag(name: str, content: str = "", **attrs: object) -> str:
    """<name attrs>content</name>; `content` is markup (escape text first), attribute
    values are escaped here; `class_` is `class`, a None or False attribute is left out."""
    parts = [name]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        key = key.rstrip("_").replace("_", "-")
        parts.append(key if value is True else f'{key}="{esc(value)}"')
    return f"<{' '.join(parts)}>{content}</{name}>"


@dataclass(frozen=True)
class Cell:
    """A table cell: markup (escape text first), right-aligned for figures, bold when best."""

    markup: str
    figure: bool = False
    best: bool = False


def text_cell(value: object, figure: bool = False, best: bool = False) -> Cell:
    return Cell(esc(value), figure, best)


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Cell]],
    caption: str | None = None,
    class_: str | None = None,
    row_header: bool = True,
) -> str:
    """A semantic table: <caption>, <thead> with scope=col, the first cell of a row a
    <th scope=row> (`row_header`)."""
    figures: set[int] = set()
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            if cell.figure:
                figures.add(i)
            classes = " ".join(c for c in ("num" if cell.figure else "", "best" if cell.best else "") if c)
            content = tag("strong", cell.markup) if cell.best else cell.markup
            if i == 0 and row_header:
                cells.append(tag("th", content, scope="row", class_=classes or None))
            else:
                cells.append(tag("td", content, class_=classes or None))
        body.append(tag("tr", "".join(cells)))
    head = "".join(
        tag("th", esc(h), scope="col", class_="num" if i in figures else None) for i, h in enumerate(headers)
    )
    return tag(
        "table",
        (tag("caption", esc(caption)) if caption else "") + tag("thead", tag("tr", head)) + tag("tbody", "".join(body)),
        class_=class_,
    )


def definitions(items: Iterable[tuple[str, object]]) -> str:
    """A <dl> of name -> value (text), leaving out values that are None or empty."""
    pairs = [(k, v) for k, v in items if v is not None and v != "" and v != []]
    return tag("dl", "".join(tag("dt", esc(k)) + tag("dd", esc(v)) for k, v in pairs))


def readable(data: Mapping[str, object]) -> list[tuple[str, object]]:
    """A record's fields as rows for `definitions`, read as a person reads them: an object one
    level down becomes a row per field (`target kind`, `target pp`), deeper ones and lists
    `name value; name value` text; never raw JSON. Empty values are left out."""
    rows: list[tuple[str, object]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            rows += [(f"{key} {inner}", text) for inner, text in readable(value)]
        elif key == "command" and isinstance(value, (list, tuple)):  # an argv: as a shell would read it
            rows.append((key, shlex.join(map(str, value))))
        elif value is not None and value != [] and value != {}:
            rows.append((key, value if isinstance(value, (str, int, float)) else _text(value)))
    return rows


def _text(value: object) -> str:
    if isinstance(value, Mapping):
        return "; ".join(f"{k} {_text(v)}" for k, v in value.items() if v is not None)
    if isinstance(value, (list, tuple)):
        return (" | " if any(isinstance(v, Mapping) for v in value) else ", ").join(_text(v) for v in value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def number(value: float | int | None, spec: str = "g", sign: bool = False) -> str:
    """A figure, or an en dash for one the report does not have."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "\u2013"
    if spec.endswith("d") and isinstance(value, float):  # a count the report wrote as a float
        spec = spec[:-1] + ("d" if value.is_integer() else "g")
        value = int(value) if value.is_integer() else value
    return format(value, ("+" if sign else "") + spec)


def size(value: float | int | None) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "\u2013"
    return format_bytes(value)


def interval(slope: float | None, ci: Sequence[float] | None) -> str:
    """`+4090 [+2753, +5638]`: a trend in MB/h and its 95% interval."""
    if isinstance(slope, bool) or not isinstance(slope, (int, float)):
        return "\u2013"
    if not isinstance(ci, (list, tuple)) or len(ci) != 2:
        return number(slope, ".0f", sign=True)
    return f"{number(slope, '.0f', sign=True)} [{number(ci[0], '.0f', sign=True)}, {number(ci[1], '.0f', sign=True)}]"
