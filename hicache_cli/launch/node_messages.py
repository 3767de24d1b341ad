"""What the nodes' hicaches say to node 0, and its answers: each shape, and its check.

Another node opens with a hello (its node index, host, and options with the run id); node 0
answers welcome or refused (why, from the node's side). Then each push (new sample lines
by rank, and at the end: done, the ranks' exits, stack dumps) is answered by an ack that
carries node 0's stop request, if it made one. Node 0 checks every message against its
shape; a sample line must be a JSON object of the Sample shape (hicache_cli.sample: every
key a field, of its type, `t` and `wall` always; compact lines leave the rest out), of a
rank in the run and of the sending node. What fails is dropped and counted, never written.
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from hicache_cli.launch.node_wire import NOT_A_MESSAGE, Dropped, reject_constant
from hicache_cli.sample import LINE_KEYS, Sample

BAD_LINES = "sample lines not of the Sample shape"
FOREIGN_LINES = "sample lines of a rank another node holds"
BAD_PARTS = "exits and stack dumps not of their shape"
MAX_STACK_CHARS = 1 << 20
MAX_TEXT_CHARS = 4096  # host names, refusals, stop reasons

_SAMPLE_TYPES = typing.get_type_hints(Sample)


@dataclass(frozen=True)
class Hello:
    node: int
    host: str | None
    options: dict[str, Any]


@dataclass(frozen=True)
class Push:
    lines: dict[int, list[str]]  # checked sample lines by rank, one JSON object each, no newline
    done: bool
    exits: dict[int, tuple[int | None, str | None]]  # rank -> exit code, signal (from the node's torchrun)
    stacks: dict[int, str]  # rank -> the stack dump its node's watchdog took
    dropped: dict[str, int] = field(default_factory=dict)  # what the check left out, by reason


def hello(node: int, host: str, options: dict[str, Any]) -> dict[str, Any]:
    return {"type": "hello", "node": node, "host": host, "options": options}


def push(
    lines: dict[int, list[str]],
    done: bool = False,
    exits: dict[int, tuple[int | None, str | None]] | None = None,
    stacks: dict[int, str] | None = None,
) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "push", "ranks": {str(r): v for r, v in lines.items()}, "done": done}
    if done:
        message["exits"] = {str(r): list(e) for r, e in (exits or {}).items()}
        message["stacks"] = {str(r): s for r, s in (stacks or {}).items()}
    return message


def check_hello(body: dict[str, Any], nnodes: int) -> Hello:
    node, host, options = body.get("node"), body.get("host"), body.get("options")
    if body.get("type") != "hello" or not isinstance(options, dict):
        raise Dropped(NOT_A_MESSAGE, "not a hello")
    if not _is_int(node) or not 1 <= node < nnodes:
        raise Dropped(NOT_A_MESSAGE, f"node {node!r} is not another node of {nnodes}")
    if host is not None and not _short_text(host):
        raise Dropped(NOT_A_MESSAGE, "a host that is not a name")
    return Hello(node, host, options)


def check_push(body: dict[str, Any], node: int, world_size: int) -> Push:
    """The push's envelope must fit its shape (else Dropped); parts that do not are counted."""
    ranks, done = body.get("ranks"), body.get("done", False)
    exits, stacks = body.get("exits", {}), body.get("stacks", {})
    if body.get("type") != "push" or not isinstance(done, bool):
        raise Dropped(NOT_A_MESSAGE, "not a push")
    if not all(isinstance(part, dict) for part in (ranks, exits, stacks)):
        raise Dropped(NOT_A_MESSAGE, "ranks, exits and stacks must be objects")
    dropped: Counter[str] = Counter()
    lines: dict[int, list[str]] = {}
    for key, texts in ranks.items():
        rank = _rank(key, world_size)
        texts = texts if isinstance(texts, list) else [texts]
        good = [] if rank is None else [line for text in texts if (line := sample_line(text, rank, node))]
        dropped[BAD_LINES] += len(texts) - len(good)
        if rank is not None and good:
            lines[rank] = good
    checked_exits: dict[int, tuple[int | None, str | None]] = {}
    for key, value in exits.items():
        rank, exit_ = _rank(key, world_size), _exit(value)
        if rank is None or exit_ is None:
            dropped[BAD_PARTS] += 1
        else:
            checked_exits[rank] = exit_
    checked_stacks: dict[int, str] = {}
    for key, dump in stacks.items():
        rank = _rank(key, world_size)
        if rank is None or not isinstance(dump, str) or len(dump) > MAX_STACK_CHARS:
            dropped[BAD_PARTS] += 1
        else:
            checked_stacks[rank] = dump
    return Push(lines, done, checked_exits, checked_stacks, {reason: n for reason, n in dropped.items() if n})


def sample_line(text: object, rank: int, node: int) -> str | None:
    """The line as node 0 writes it (one JSON object, no newline), or None if it is not a
    sample of `rank` on `node`."""
    if not isinstance(text, str):
        return None
    try:
        data = json.loads(text, parse_constant=reject_constant)
    except (ValueError, RecursionError):
        return None
    if sample_problem(data) is not None or data.get("rank", rank) != rank or data.get("node", node) != node:
        return None
    return json.dumps(data, separators=(",", ":"))


def sample_problem(data: object) -> str | None:
    """Why `data` is not a Sample as a probe writes it (hicache_cli.sample), or None."""
    if not isinstance(data, dict):
        return "not a JSON object"
    missing = sorted(LINE_KEYS - data.keys())
    if missing:
        return f"no {missing[0]}"
    for key, value in data.items():
        expected = _SAMPLE_TYPES.get(key)
        if expected is None:
            return f"{key!r} is not a field of a sample"
        if not _fits(value, expected):
            return f"{key} is not {expected.__name__ if isinstance(expected, type) else expected}"
    return None


def differences(head: dict[str, Any], node: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """(option, the node's value, node 0's) for every option that differs."""
    return [(k, node.get(k), head.get(k)) for k in sorted(set(head) | set(node)) if head.get(k) != node.get(k)]


def describe(diffs: list[tuple[str, Any, Any]], there: str) -> str:
    return ", ".join(f"{k} {mine!r} {there}, {theirs!r} on node 0" for k, mine, theirs in diffs)


def _fits(value: object, expected: Any) -> bool:
    if isinstance(expected, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if typing.get_origin(expected) is dict:
        _, of = typing.get_args(expected)
        return isinstance(value, dict) and all(isinstance(k, str) and _fits(v, of) for k, v in value.items())
    if expected is float:
        return (_is_int(value) or isinstance(value, float)) and math.isfinite(typing.cast(float, value))
    if expected is int:
        return _is_int(value)
    return expected is str and isinstance(value, str)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _short_text(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_TEXT_CHARS


def _rank(key: str, world_size: int) -> int | None:
    """The rank a key names, or None if it names none of the run's."""
    return int(key) if key.isascii() and key.isdigit() and int(key) < world_size else None


def _exit(value: object) -> tuple[int | None, str | None] | None:
    """[exit code, signal] as the node's torchrun reported them, or None."""
    if not isinstance(value, list) or len(value) != 2:
        return None
    code, sig = value
    return (code, sig) if (code is None or _is_int(code)) and (sig is None or _short_text(sig)) else None
