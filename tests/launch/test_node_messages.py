"""node_messages: every message node 0 takes is checked against its shape; sample lines
against the Sample contract. Pure: no sockets."""

from __future__ import annotations

import json
from typing import Any

import pytest

from hicache_cli.launch.node_messages import (
    BAD_LINES,
    BAD_PARTS,
    check_hello,
    check_push,
    describe,
    differences,
    hello,
    push,
    sample_line,
    sample_problem,
)
from hicache_cli.launch.node_wire import Dropped
from tests.conftest import build_sample

WORLD = 4


def sample(rank: int = 2, **overrides: Any) -> dict[str, Any]:
    """A sample of a rank on node 1, as its probe writes it."""
    return json.loads(build_sample(rank, 0.5, node=1, host="node1", **overrides).to_json())


def test_a_probes_sample_fits() -> None:
    assert sample_problem(sample()) is None
    final = sample(kind="final", state="done", message="reached the deadline", counters={"requests": 3.0})
    assert sample_problem(final) is None


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"rss_bytes": "99 GB"}, "rss_bytes is not int | None"),
        ({"rank": True}, "rank is not int"),
        ({"t": "1.0"}, "t is not float"),
        ({"t": float("inf")}, "t is not float"),
        ({"counters": {"requests": "many"}}, "counters is not dict[str, float]"),
        ({"lat_hist": []}, "lat_hist is not dict[str, int]"),
        ({"host": 7}, "host is not str | None"),
        ({"extra": 1}, "'extra' is not a field of a sample"),
    ],
)
def test_a_field_of_the_wrong_type_is_named(change: dict[str, Any], problem: str) -> None:
    assert sample_problem({**sample(), **change}) == problem


def test_a_missing_field_is_named() -> None:
    data = sample()
    del data["wall"]
    assert sample_problem(data) == "no wall"
    assert sample_problem([1, 2]) == "not a JSON object"


def test_a_line_is_written_back_on_one_line_exactly_as_a_probe_writes_it() -> None:
    probe_line = build_sample(2, 0.5, node=1).to_json()
    spread = json.dumps(json.loads(probe_line), indent=1)  # valid JSON over many lines
    assert sample_line(spread, 2, 1) == probe_line
    assert sample_line(probe_line, 2, 1) == probe_line


@pytest.mark.parametrize(
    ("text", "rank", "node"),
    [
        ("not JSON", 2, 1),
        ('{"t": NaN}', 2, 1),
        ("[" * 100_000, 2, 1),  # deeper than the parser goes
        (json.dumps(sample(rank=3)), 2, 1),  # another rank's line
        (json.dumps(sample()), 2, 0),  # from a node it does not run on
        (7, 2, 1),
    ],
)
def test_lines_that_are_not_samples_of_the_rank_and_node_are_refused(text: Any, rank: int, node: int) -> None:
    assert sample_line(text, rank, node) is None


def test_a_compact_line_fits_when_what_it_gives_fits() -> None:
    """Format 2: a line between whole ones gives `t`, `wall` and what changed."""
    compact = {"t": 3.1, "wall": 1_700_000_003.1, "rounds": 310, "blocked_on": None}
    assert sample_problem(compact) is None
    assert sample_line(json.dumps(compact), 2, 1) == json.dumps(compact, separators=(",", ":"))
    assert sample_problem({"t": 3.1, "rounds": 310}) == "no wall"
    assert sample_problem({**compact, "rounds": "many"}) == "rounds is not int"
    assert sample_line(json.dumps({**compact, "rank": 3}), 2, 1) is None  # says another rank
    assert sample_line(json.dumps({**compact, "node": 0}), 2, 1) is None  # ... or another node


def test_a_push_keeps_good_lines_and_counts_the_rest() -> None:
    good = build_sample(2, 0.5, node=1).to_json()
    message = push({2: [good, "not JSON"], 3: ["{}"], 9: [good]}, done=True, exits={2: (0, None)}, stacks={2: "x"})
    message["exits"]["3"] = ["zero", None]
    message["stacks"]["-1"] = "y"
    checked = check_push(message, node=1, world_size=WORLD)
    assert checked.lines == {2: [good]}
    assert checked.exits == {2: (0, None)}
    assert checked.stacks == {2: "x"}
    assert checked.done
    assert checked.dropped == {BAD_LINES: 3, BAD_PARTS: 2}


@pytest.mark.parametrize(
    "body",
    [
        {"type": "hello"},
        {"type": "push", "ranks": []},
        {"type": "push", "ranks": {}, "done": "yes"},
        {"type": "push", "ranks": {}, "exits": "none"},
    ],
)
def test_a_message_that_is_not_a_push_is_dropped(body: dict[str, Any]) -> None:
    with pytest.raises(Dropped):
        check_push(body, node=1, world_size=WORLD)


def test_a_hello_is_checked() -> None:
    said = check_hello(hello(1, "node1", {"pp": 4}), nnodes=2)
    assert (said.node, said.host, said.options) == (1, "node1", {"pp": 4})
    for bad in (hello(0, "h", {}), hello(2, "h", {}), {**hello(1, "h", {}), "options": []}, {"type": "push"}):
        with pytest.raises(Dropped):
            check_hello(bad, nnodes=2)


def test_differences_are_said_from_either_side() -> None:
    diffs = differences({"seed": 0, "pp": 4}, {"seed": 3, "pp": 4, "tp": 2})
    assert diffs == [("seed", 3, 0), ("tp", 2, None)]
    assert describe(diffs, "here") == "seed 3 here, 0 on node 0, tp 2 here, None on node 0"
