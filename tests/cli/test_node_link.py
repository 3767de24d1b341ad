"""nodes.Head and nodes.Feeder over a real torch TCPStore on loopback, in one process.

The head hosts the store on a free port; feeders connect to it as another node's hicache
would. Time is a fake clock (nodes' own `time`), so heartbeats, silence and grace are
decided without sleeping; the store itself runs in real time.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_cli import nodes
from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.nodes import HEARD_EVERY_S, LOST_AFTER_S, Feeder, Head, NodeSpec
from hicache_cli.sample import read_run
from hicache_cli.watchdog import stack_file
from tests.cli.conftest import build_sample

CONFIG = json.dumps(StressConfig(pp=4).to_dict(), sort_keys=True)  # as launcher.open_link writes it


class Clock:
    """Stands in for the `time` module inside hicache_cli.nodes: monotonic() reads `now`,
    sleep() advances it."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds

    def advance(self, seconds: float) -> None:
        self.now += seconds


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(nodes, "time", fake)
    return fake


@pytest.fixture
def spec() -> NodeSpec:
    """Node 0 of two, pp=4: two ranks per node; the sample store on a free loopback port."""
    return NodeSpec(
        nnodes=2,
        node_rank=0,
        nproc_per_node=2,
        rdzv_host="127.0.0.1",
        rdzv_port=free_port(),
        rdzv_id="test",
        sample_port=free_port(),
    )


@pytest.fixture
def head_dir(tmp_path: Path) -> Path:
    path = tmp_path / "node0"
    path.mkdir()
    return path


@pytest.fixture
def node_dir(tmp_path: Path) -> Path:
    path = tmp_path / "node1"
    path.mkdir()
    return path


@pytest.fixture
def head(spec: NodeSpec, head_dir: Path, clock: Clock) -> Iterator[Head]:
    hosted = Head(spec, CONFIG, head_dir)
    yield hosted
    del hosted
    gc.collect()


def make_feeder(spec: NodeSpec, run_dir: Path, node_rank: int = 1, config: str = CONFIG) -> Feeder:
    return Feeder(dataclasses.replace(spec, node_rank=node_rank), config, run_dir, 5.0)


@pytest.fixture
def feeder(spec: NodeSpec, node_dir: Path, head: Head) -> Feeder:
    return make_feeder(spec, node_dir)


def line(rank: int, t: float, **overrides: object) -> str:
    """One rank-file line of a rank on node 1, as its probe writes it."""
    fields = {"node": 1, "host": "node1.cluster", **overrides}
    return build_sample(rank, t, **fields).to_json() + "\n"


def append(run_dir: Path, rank: int, text: str) -> None:
    with (run_dir / f"rank-{rank}.jsonl").open("a", encoding="utf-8") as fh:
        fh.write(text)


def queued(head: Head) -> int:
    """Messages the feeders pushed that the head has not taken yet."""
    return head.store.queue_len(f"{head.spec.prefix}/samples")


def text(path: Path) -> str:
    return path.read_text(encoding="utf-8") if path.exists() else ""


# --- lines -------------------------------------------------------------------------------


def test_complete_lines_reach_the_head(head: Head, feeder: Feeder, head_dir: Path, node_dir: Path) -> None:
    append(node_dir, 2, line(2, 0.1) + line(2, 0.2) + line(2, 0.3))
    append(node_dir, 3, line(3, 0.1))
    assert feeder.pump() is None
    head.pump()

    assert text(head_dir / "rank-2.jsonl") == text(node_dir / "rank-2.jsonl")
    assert text(head_dir / "rank-3.jsonl") == text(node_dir / "rank-3.jsonl")
    samples = read_run(head_dir)
    assert sorted(samples) == [2, 3]
    assert [s.t for s in samples[2]] == [0.1, 0.2, 0.3]
    assert {(s.node, s.host) for s in samples[2] + samples[3]} == {(1, "node1.cluster")}


def test_later_lines_are_appended_in_order(head: Head, feeder: Feeder, head_dir: Path, node_dir: Path) -> None:
    for t in (0.1, 0.2, 0.3):
        append(node_dir, 2, line(2, t))
        feeder.pump()
    head.pump()
    assert [s.t for s in read_run(head_dir)[2]] == [0.1, 0.2, 0.3]
    assert text(head_dir / "rank-2.jsonl") == text(node_dir / "rank-2.jsonl")


def test_a_torn_line_waits_for_its_newline(head: Head, feeder: Feeder, head_dir: Path, node_dir: Path) -> None:
    first, second = line(2, 0.1), line(2, 0.2)
    append(node_dir, 2, first + second[:25])
    feeder.pump()
    head.pump()
    assert text(head_dir / "rank-2.jsonl") == first

    append(node_dir, 2, second[25:])
    feeder.pump()
    head.pump()
    assert text(head_dir / "rank-2.jsonl") == first + second
    assert [s.t for s in read_run(head_dir)[2]] == [0.1, 0.2]


def test_lines_the_head_already_has_are_not_sent_again(
    head: Head, feeder: Feeder, clock: Clock, head_dir: Path, node_dir: Path
) -> None:
    append(node_dir, 2, line(2, 0.1))
    feeder.pump()
    clock.advance(HEARD_EVERY_S)
    feeder.pump()  # a heartbeat, with no lines
    head.pump()
    assert text(head_dir / "rank-2.jsonl") == line(2, 0.1)


def test_the_head_records_where_the_node_is(head: Head, feeder: Feeder) -> None:
    feeder.pump()
    head.pump()
    assert head.nodes[1].host == socket.gethostname()
    assert feeder.host == socket.gethostname()


# --- heartbeat ---------------------------------------------------------------------------


def test_pump_pushes_a_heartbeat_at_most_every_heard_every_s(head: Head, feeder: Feeder, clock: Clock) -> None:
    feeder.pump()
    assert queued(head) == 1  # the first pump says it is there at once

    clock.advance(HEARD_EVERY_S / 2)
    feeder.pump()
    assert queued(head) == 1  # nothing new, and too soon for a heartbeat

    clock.advance(HEARD_EVERY_S / 2)
    feeder.pump()
    assert queued(head) == 2

    head.pump()
    assert queued(head) == 0
    assert head.nodes[1].heard == clock.now
    assert not head.nodes[1].done


def test_new_lines_are_pushed_without_waiting_for_the_heartbeat(
    head: Head, feeder: Feeder, clock: Clock, node_dir: Path
) -> None:
    feeder.pump()
    clock.advance(HEARD_EVERY_S / 10)
    append(node_dir, 2, line(2, 0.1))
    feeder.pump()
    assert queued(head) == 2


def test_a_heartbeat_is_an_empty_message_from_the_node(head: Head, feeder: Feeder) -> None:
    feeder.pump()
    message = json.loads(head.store.queue_pop(f"{head.spec.prefix}/samples", False))
    assert message == {"node": 1, "host": socket.gethostname(), "ranks": {}}


# --- stop --------------------------------------------------------------------------------


def test_the_heads_stop_reaches_the_feeder(head: Head, feeder: Feeder, clock: Clock) -> None:
    assert feeder.pump() is None
    head.stop("watchdog: rank 0 stalled for 5.0 s")
    clock.advance(HEARD_EVERY_S)
    assert feeder.pump() == "node 0 ended the run: watchdog: rank 0 stalled for 5.0 s"


def test_without_a_stop_pump_returns_none(head: Head, feeder: Feeder, clock: Clock, node_dir: Path) -> None:
    for t in (0.1, 0.2, 0.3):
        append(node_dir, 2, line(2, t))
        assert feeder.pump() is None
        clock.advance(HEARD_EVERY_S)
        assert feeder.pump() is None


# --- the end of a node -------------------------------------------------------------------


def test_finish_sends_the_last_lines_and_the_exits(
    head: Head, feeder: Feeder, clock: Clock, head_dir: Path, node_dir: Path
) -> None:
    append(node_dir, 2, line(2, 0.1))
    feeder.pump()
    append(node_dir, 2, line(2, 0.2, kind="final", state="done", message="reached the deadline"))
    feeder.finish({2: (0, None), 3: (-9, "SIGKILL")})
    head.pump()

    assert head.nodes[1].done
    assert head.exits() == {2: (0, None), 3: (-9, "SIGKILL")}
    assert text(head_dir / "rank-2.jsonl") == text(node_dir / "rank-2.jsonl")
    assert read_run(head_dir)[2][-1].kind == "final"
    clock.advance(LOST_AFTER_S * 10)
    assert head.lost() == {}  # done is not lost, however long ago


def test_finish_sends_the_stack_dumps_the_node_took(
    head: Head, feeder: Feeder, head_dir: Path, node_dir: Path, stack_dump: str
) -> None:
    stack_file(node_dir, 2).write_text(stack_dump, encoding="utf-8")
    stack_file(node_dir, 3).write_text("", encoding="utf-8")  # opened by the rank, never written
    feeder.finish({2: (None, None)})
    head.pump()
    assert stack_file(head_dir, 2).read_text(encoding="utf-8") == stack_dump
    assert not stack_file(head_dir, 3).exists()


def test_finish_returns_at_once_when_every_node_is_done(head: Head, feeder: Feeder, clock: Clock) -> None:
    feeder.finish({2: (0, None), 3: (0, None)})
    head.finish(60.0)
    assert clock.slept == 0.0
    assert head.nodes[1].done
    assert head.lost() == {}


def test_finish_waits_for_every_other_node(
    spec: NodeSpec, head_dir: Path, node_dir: Path, tmp_path: Path, clock: Clock
) -> None:
    three = dataclasses.replace(spec, nnodes=3, nproc_per_node=1)
    head = Head(three, CONFIG, head_dir)
    other_dir = tmp_path / "node2"
    other_dir.mkdir()
    one, two = make_feeder(three, node_dir, 1), make_feeder(three, other_dir, 2)
    one.finish({1: (0, None)})
    two.pump()  # node 2 is there, but not done yet: finish waits for it
    head.finish(2.0)
    assert clock.slept == pytest.approx(2.0, abs=0.11)  # the grace, then no longer
    assert head.nodes[1].done
    assert not head.nodes[2].done

    two.finish({2: (0, None)})
    clock.slept = 0.0
    head.finish(2.0)
    assert clock.slept == 0.0
    assert head.exits() == {1: (0, None), 2: (0, None)}


def test_finish_returns_after_the_grace_while_a_node_still_talks(head: Head, feeder: Feeder, clock: Clock) -> None:
    feeder.pump()
    head.finish(1.0)  # LOST_AFTER_S is longer: the node is not silent yet
    assert clock.slept == pytest.approx(1.0, abs=0.11)
    assert head.lost() == {}


def test_finish_returns_once_pending_nodes_are_silent(head: Head, feeder: Feeder, clock: Clock) -> None:
    feeder.pump()
    head.pump()
    head.finish(LOST_AFTER_S * 10)
    assert clock.slept == pytest.approx(LOST_AFTER_S, abs=0.11)  # not the whole grace
    assert list(head.lost()) == [1]


# --- lost nodes --------------------------------------------------------------------------


def test_a_silent_node_is_lost_with_its_host(head: Head, feeder: Feeder, clock: Clock) -> None:
    feeder.pump()
    head.pump()
    clock.advance(LOST_AFTER_S)
    assert head.lost() == {}  # not yet: more than LOST_AFTER_S
    clock.advance(1.0)
    assert head.lost() == {1: f"node 1 ({socket.gethostname()}) lost: no word from its hicache for 6.0 s"}


def test_heartbeats_keep_a_node_from_being_lost(head: Head, feeder: Feeder, clock: Clock) -> None:
    for _ in range(round(3 * LOST_AFTER_S / HEARD_EVERY_S)):
        clock.advance(HEARD_EVERY_S)
        feeder.pump()
        head.pump()
    assert head.lost() == {}
    assert head.silent_nodes() == []


def test_a_node_that_never_connected_never_reached_node_0(head: Head, clock: Clock) -> None:
    assert head.lost() == {}  # it has LOST_AFTER_S from the head's start
    clock.advance(LOST_AFTER_S + 0.5)
    assert head.lost() == {1: "node 1 never reached node 0 (its hicache did not connect to the sample store)"}


def test_finish_does_not_wait_the_grace_for_a_node_that_never_connected(head: Head, clock: Clock) -> None:
    head.finish(60.0)
    assert clock.slept <= LOST_AFTER_S + 0.11
    assert list(head.lost()) == [1]


# --- connecting --------------------------------------------------------------------------


def test_a_feeder_whose_options_differ_is_refused(head: Head, spec: NodeSpec, node_dir: Path) -> None:
    mine = json.dumps(StressConfig(pp=4, duration_s=20.0, seed=3).to_dict(), sort_keys=True)
    with pytest.raises(UsageError) as caught:
        make_feeder(spec, node_dir, config=mine)
    message = str(caught.value)
    assert message == (
        "this node's options differ from node 0's: duration_s 20.0 here, 15.0 on node 0, seed 3 here, 0 on node 0"
    )


def test_a_feeder_without_a_head_is_refused_quickly(spec: NodeSpec, node_dir: Path) -> None:
    started = time.monotonic()
    with pytest.raises(UsageError) as caught:
        Feeder(dataclasses.replace(spec, node_rank=1), CONFIG, node_dir, 1.0)
    assert time.monotonic() - started < 10.0
    message = str(caught.value)
    assert message.startswith(f"node 0's sample store at 127.0.0.1:{spec.sample_port} is not reachable: ")
    assert "\n" not in message


def test_a_head_on_a_busy_port_is_refused(spec: NodeSpec, head_dir: Path) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        taken = dataclasses.replace(spec, sample_port=busy.getsockname()[1])
        with pytest.raises(UsageError) as caught:
            Head(taken, CONFIG, head_dir)
    assert str(caught.value).startswith(f"cannot host the sample store on port {taken.sample_port}: ")


def test_two_runs_with_different_ids_share_nothing(head: Head, spec: NodeSpec, node_dir: Path) -> None:
    with pytest.raises(UsageError, match="is not reachable"):
        # the other run's config key is never set: the feeder's wait for it times out
        Feeder(dataclasses.replace(spec, node_rank=1, rdzv_id="other"), CONFIG, node_dir, 1.0)


# --- a link that drops -------------------------------------------------------------------


def test_when_the_head_is_gone_the_feeder_stops_pushing_without_raising(
    spec: NodeSpec, head_dir: Path, node_dir: Path, clock: Clock
) -> None:
    head = Head(spec, CONFIG, head_dir)
    feeder = make_feeder(spec, node_dir)
    assert feeder.pump() is None
    del head
    gc.collect()  # the master store closes its socket

    for i in range(20):
        append(node_dir, 2, line(2, 0.1 * (i + 1)))
        clock.advance(HEARD_EVERY_S)
        assert feeder.pump() is None
        if feeder.link_error is not None:
            break
    assert feeder.link_error is not None
    assert feeder.link_error.startswith("lost the link to node 0: ")

    pushes: list[object] = []
    feeder._push = pushes.append  # type: ignore[method-assign]
    append(node_dir, 2, line(2, 9.0))
    clock.advance(HEARD_EVERY_S)
    assert feeder.pump() is None
    feeder.finish({2: (0, None)})
    assert pushes == []  # once the link is gone, nothing more is tried


def test_a_feeder_without_a_head_prints_no_cpp_stack(
    spec: NodeSpec, node_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(UsageError):
        Feeder(dataclasses.replace(spec, node_rank=1), CONFIG, node_dir, 1.0)
    err = capfd.readouterr().err
    assert "Exception raised from" not in err
    assert "frame #0" not in err
