"""Field-by-field mutations of recorded JSON (a report, a run's config.json, a rank file's
line), for the fuzz of the readers (tests/test_fuzz_readers.py). Each mutation changes one
value of one real document in one way a damaged, foreign or hostile file could: the key
deleted, null, another JSON type, a number at or past a limit (huge, past 64 bits, NaN,
infinite), text the terminal renderer reads as markup, nesting past what a reader recurses
into, a list emptied or filled with garbage, an object given a key of garbage. Mutations come
in a fixed order: a count is the same on every run.

`mutations(doc)` is every value in every way (about 6,000 per report). `mutations(doc,
sweep=False)` is the unit tier's share: each schema path once (`ranks[1].rss` as `ranks[0].rss`,
a series' last point as its first) and the ways that fit the value's type (a number is not
emptied; a list is not made NaN), which is where the readers differ.

The recorded runs (this hicache, on this project's 2-core machine; config.json, the rank files
thinned with scripts/thin_run.py, and the run's own report.json):
- stress-run: `hicache stress --pp 2 --policy reap --duration 4s --no-live` (rank 0 LEAK,
  rank 1 LEAK by its RSS and a backlog of 15,220 messages unreceived);
- trace-run: `hicache trace --no-live --duration 12s --loop leaky_p2p:Syncer.sync_counts --
  torchrun --standalone --nproc-per-node 2 tests/integration/programs/leaky_p2p.py --seconds 30`
  (rank 0 LEAK with 8,371 live Works from one site, rank 1 BOUNDED), rank files every 3rd line.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data"
STRESS_RUN = DATA / "stress-run"
TRACE_RUN = DATA / "trace-run"

GIANT = "9" * 5000  # an integer literal past what Python's int() takes from text (4,300 digits)
DEEP = "[" * 3000 + "0" + "]" * 3000  # nested past what json.loads recurses into (about 1,000)
# stand for GIANT and DEEP until the text is written: json.dumps cannot write either
MARKS = {'"__GIANT_INTEGER__"': GIANT, '"__NESTED_3000__"': DEEP}
GARBAGE = [None, "x", -1, 1.5, 1e308, True, {}, [], {"x": [None]}]


def _nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


# name -> the value put in place of the original (a function of it where it depends on it)
REPLACEMENTS: dict[str, Any] = {
    "null": lambda v: None,
    "wrong type": lambda v: (
        {} if isinstance(v, list) else [] if isinstance(v, dict) else 1 if isinstance(v, str) else "x"
    ),
    "boolean": lambda v: True,
    "float": lambda v: 1.5,
    "zero": lambda v: 0,
    "negative": lambda v: -1,
    "huge": lambda v: 10**30,
    "past float": lambda v: 10**400,  # an integer JSON holds and float() cannot convert
    "giant literal": lambda v: "__GIANT_INTEGER__",
    "largest float": lambda v: 1e308,
    "NaN": lambda v: float("nan"),
    "infinity": lambda v: float("inf"),
    "-infinity": lambda v: float("-inf"),
    "empty string": lambda v: "",
    "markup": lambda v: "[/bold] [link=x]",
    "long string": lambda v: "x" * 20_000,
    "nested 40": lambda v: _nested(40),
    "nested 3000": lambda v: "__NESTED_3000__",
    "empty list": lambda v: [],
    "garbage list": lambda v: copy.deepcopy(GARBAGE),
    "empty object": lambda v: {},
    "object of garbage": lambda v: {"x": None, "1": "y", "-5": 1e308, "[/]": [], "n": float("nan")},
    "odd keys": lambda v: {"x": 1, "": 2, "-5": 3, "1e400": 4, "9" * 30: 5, "[/]": 6},  # counts under odd names
}


@dataclass(frozen=True)
class Mutation:
    where: str  # the value's path: ranks[0].rss.end_bytes
    how: str  # "delete", "extra key", or a name in REPLACEMENTS
    document: Any  # the mutated document

    def text(self) -> str:
        """The document as a file holds it (NaN and infinities as Python's json writes them)."""
        return _unmark(json.dumps(self.document))

    def line(self) -> str:
        return _unmark(json.dumps(self.document, separators=(",", ":")))

    def __str__(self) -> str:
        return f"{self.where or '(document)'}: {self.how}"


def _unmark(text: str) -> str:
    for mark, value in MARKS.items():
        text = text.replace(mark, value)
    return text


def paths(document: Any, where: str = "") -> Iterator[tuple[str, tuple[Any, ...]]]:
    """(path text, path keys) of every value in `document`, parents first. Lists of objects
    are walked item by item; of a list of plain values, the first and the last item."""
    yield where, ()
    if isinstance(document, dict):
        for key, value in document.items():
            for text, keys in paths(value, f"{where}.{key}" if where else key):
                yield text, (key, *keys)
    elif isinstance(document, list):
        indices = range(len(document))
        if document and not any(isinstance(v, (dict, list)) for v in document):
            indices = sorted({0, len(document) - 1})
        for i in indices:
            for text, keys in paths(document[i], f"{where}[{i}]"):
                yield text, (i, *keys)


# The unit tier's ways for a value of each JSON type: all of the first, and one of the second
# in turn (a path's index in the document picks it). Every key is also deleted.
FITTING: dict[type, tuple[tuple[str, ...], tuple[str, ...]]] = {
    type(None): (("wrong type",), ("negative", "markup", "garbage list", "object of garbage")),
    bool: (("null", "wrong type"), ()),
    int: (("null", "wrong type"), ("negative", "zero", "past float", "huge", "NaN", "boolean")),
    float: (("null", "wrong type"), ("negative", "largest float", "NaN", "-infinity")),
    str: (("null", "wrong type"), ("markup", "empty string", "long string", "nested 40")),
    list: (("null", "wrong type"), ("garbage list", "empty list", "nested 40")),
    dict: (("null", "wrong type"), ("odd keys", "extra key", "empty object", "object of garbage", "nested 3000")),
}


def schema(where: str) -> str:
    """A value's path without its list indices and numeric keys (a histogram's buckets):
    `ranks[].rss.end_bytes`, `lat_hist.#`."""
    return re.sub(r"\.-?\d+(?=\.|\[|$)", ".#", re.sub(r"\[\d+\]", "[]", where))


def _ways(value: Any, index: int, sweep: bool) -> tuple[str, ...]:
    if sweep:
        return ("extra key", *REPLACEMENTS)
    always, in_turn = FITTING[type(value)]
    return always + (in_turn[index % len(in_turn)],) if in_turn else always


def mutations(document: Any, hows: tuple[str, ...] | None = None, *, sweep: bool = True) -> Iterator[Mutation]:
    """Every value of `document` changed in every way (`hows`: only these), one at a time;
    and every object given an extra key of garbage, and every key deleted. `sweep=False`:
    each schema path once, in the ways FITTING its type (see the module)."""
    seen: set[str] = set()
    for index, (where, keys) in enumerate(paths(document)):
        if not sweep:
            if schema(where) in seen:
                continue
            seen.add(schema(where))
        value = document
        for key in keys:
            value = value[key]
        for how in ("delete", *_ways(value, index, sweep)):
            if hows is not None and how not in hows:
                continue
            if how == "delete" and not (keys and isinstance(keys[-1], str)):
                continue  # a list item or the document itself: nothing to delete
            if how == "extra key" and not isinstance(value, dict):
                continue
            mutated = _copy_path(document, keys)
            *parents, last = (None, *keys)
            node = mutated
            for key in parents[1:]:
                node = node[key]
            if how == "extra key":
                (node[last] if keys else mutated)["zz_unknown"] = copy.deepcopy(GARBAGE)
            elif how == "delete":
                del node[last]
            else:
                new = REPLACEMENTS[how](value)
                if not keys:
                    mutated = new
                else:
                    node[last] = new
            yield Mutation(where, how, mutated)


def _copy_path(document: Any, keys: tuple[Any, ...]) -> Any:
    """`document` with every object and list on the way to `keys` copied, the value there
    too (one level): what a mutation changes is its own, the rest is shared, unchanged."""
    top = copy.copy(document)
    node = top
    for key in keys:
        node[key] = copy.copy(node[key])
        node = node[key]
    return top


def load(path: Path) -> Any:
    return json.loads(path.read_text())
