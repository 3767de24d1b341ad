"""The shape a report must have for hicache's readers (report show/diff/plot, watch, the
compare table, the CI gate), checked when a report is read back.

Only what those readers read is checked, not every documented key (docs/report.md): keys
are added within a schema version, and a reader must not refuse a report for a key it never
reads. Pure and stdlib only: a report (parsed JSON) in, the first problem out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class ReportShapeError(ValueError):
    """A report of the right version whose shape is wrong; the message names the field."""


@dataclass(frozen=True)
class Leaf:
    """A JSON scalar of one of these kinds: "int", "number" (int or float), "string", "null"."""

    kinds: tuple[str, ...]


@dataclass(frozen=True)
class ListOf:
    item: Spec
    length: int | None = None  # None: any length
    nullable: bool = False


@dataclass(frozen=True)
class Obj:
    """An object with these keys (others are allowed and not looked at)."""

    required: dict[str, Spec]
    optional: dict[str, Spec] = field(default_factory=dict)
    nullable: bool = False


Spec = Leaf | ListOf | Obj

INT = Leaf(("int",))
NUMBER = Leaf(("number",))
STRING = Leaf(("string",))
MAYBE_INT = Leaf(("int", "null"))
MAYBE_NUMBER = Leaf(("number", "null"))
MAYBE_STRING = Leaf(("string", "null"))

CONFIG = Obj(
    {
        "policy": STRING,
        "pp": INT,
        "tp": INT,
        "duration_s": NUMBER,
        "workload": STRING,
        "seed": INT,
        "leak_threshold_mb_per_h": NUMBER,
    },
    {"warmup_s": MAYBE_NUMBER},
)
FAILURE = Obj({"rank": MAYBE_INT, "kind": STRING, "message": STRING})
# Every rank has these; a rank that wrote nothing has only these (samples 0).
RANK = Obj(
    {"rank": INT, "pp_rank": INT, "tp_rank": INT, "verdict": STRING, "verdict_reason": STRING},
    {"samples": INT},
)
# A rank with samples: what the tables, the diff, the gate and the plot read.
MEASURED_RANK = Obj(
    {
        "rss": Obj(
            {
                "end_bytes": MAYBE_NUMBER,
                "slope_mb_per_h": MAYBE_NUMBER,
                "slope_ci95_mb_per_h": ListOf(NUMBER, length=2, nullable=True),
            }
        ),
        "work_list": Obj({"max": INT, "final": INT}),
        "loop_latency_ms": Obj({"p50": MAYBE_NUMBER, "p99": MAYBE_NUMBER, "max": MAYBE_NUMBER}),
        "rounds_per_s": MAYBE_NUMBER,
        "messages": Obj({"sent": INT}),
        "backlog_at_stop": Obj({"outstanding_sends": INT, "unreceived_messages": INT}),
    },
    {
        "series": Obj(
            {"t": ListOf(NUMBER), "rss_bytes": ListOf(MAYBE_NUMBER), "depth": ListOf(INT)},
            nullable=True,
        )
    },
)
SGLANG_TARGET = Obj(
    {"version": STRING, "class": STRING, "origin": STRING, "location": STRING, "sha256": STRING},
    {"drain_method": MAYBE_STRING, "sends_per_round": MAYBE_NUMBER},
)
REPORT = Obj(
    {
        "status": STRING,
        "verdict": STRING,
        "config": CONFIG,
        "environment": Obj({}),
        "failures": ListOf(FAILURE),
        "ranks": ListOf(RANK),
    },
    {"target": Obj({"kind": STRING}, nullable=True), "wall_s": NUMBER},
)


def check_report(report: dict[str, Any]) -> None:
    """Raise ReportShapeError naming the first field the readers could not use."""
    _check(report, REPORT, "")
    for i, rank in enumerate(report["ranks"]):
        if rank.get("samples", 0) > 0:
            where = f"ranks[{i}]"
            _check(rank, MEASURED_RANK, where)
            _check_rank_consistency(rank, where)
    target = report.get("target")
    if target is not None and target["kind"] == "sglang":
        _check(target, SGLANG_TARGET, "target")


def _check_rank_consistency(rank: dict[str, Any], where: str) -> None:
    rss = rank["rss"]
    if rss["slope_ci95_mb_per_h"] is not None and rss["slope_mb_per_h"] is None:
        raise ReportShapeError(f"{where}.rss.slope_mb_per_h: null beside an interval")
    series = rank.get("series")
    if series and not len(series["t"]) == len(series["rss_bytes"]) == len(series["depth"]):
        raise ReportShapeError(f"{where}.series: t, rss_bytes and depth differ in length")


def _check(value: Any, spec: Spec, where: str) -> None:
    kind = _kind(value)
    if isinstance(spec, Leaf):
        if kind not in spec.kinds and not (kind == "int" and "number" in spec.kinds):
            _wrong(where, kind, " or ".join(_NAMES[k] for k in spec.kinds))
    elif isinstance(spec, ListOf):
        if kind == "null" and spec.nullable:
            return
        if kind != "list":
            _wrong(where, kind, "a list or null" if spec.nullable else "a list")
        if spec.length is not None and len(value) != spec.length:
            raise ReportShapeError(f"{where}: {len(value)} items, expected {spec.length}")
        for i, item in enumerate(value):
            _check(item, spec.item, f"{where}[{i}]")
    else:
        if kind == "null" and spec.nullable:
            return
        if kind != "object":
            _wrong(where, kind, "an object or null" if spec.nullable else "an object")
        for key, inner in spec.required.items():
            if key not in value:
                raise ReportShapeError(f"{_join(where, key)}: missing")
            _check(value[key], inner, _join(where, key))
        for key, inner in spec.optional.items():
            if key in value:
                _check(value[key], inner, _join(where, key))


_NAMES = {
    "int": "an integer",
    "number": "a number",
    "string": "a string",
    "null": "null",
    "list": "a list",
    "object": "an object",
    "boolean": "a boolean",
}


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):  # before int: JSON true is no count
        return "boolean"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def _wrong(where: str, kind: str, expected: str) -> None:
    raise ReportShapeError(f"{where or 'the report'}: {_NAMES[kind]}, expected {expected}")


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key
