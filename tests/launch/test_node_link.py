"""nodes.Head and nodes.Feeder over a real link on loopback, in one process.

The head listens on a free port; feeders connect to it as another node's hicache would,
with the secret the head left for this user (XDG_RUNTIME_DIR points into tmp_path). Time
is a fake clock (nodes' own `time`), so heartbeats, silence and grace are decided without
sleeping; the link itself runs in real time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from hicache_cli.config import StressConfig
from hicache_cli.errors import UsageError
from hicache_cli.launch import node_server, nodes
from hicache_cli.launch.node_messages import BAD_LINES, FOREIGN_LINES
from hicache_cli.launch.node_server import MAX_UNPROVEN, TOO_MANY, TWICE, Pushed
from hicache_cli.launch.node_wire import NOT_THE_PROTOCOL, REFUSED_PROOF, UNPROVEN, receive_frame
from hicache_cli.launch.nodes import HEARD_EVERY_S, LOST_AFTER_S, Feeder, Head, NodeSpec, link_summary
from hicache_cli.protocol import LINK_FILE
from hicache_cli.protocol import stacks_file as stack_file
from hicache_cli.series import read_run
from tests.conftest import build_sample, free_port
from tests.outsider import forge, send_raw

CONFIG = json.dumps(StressConfig(pp=4).to_dict(), sort_keys=True)  # as launcher.open_link writes it


class Clock:
    """Stands in for the `time` module inside hicache_cli.launch.nodes: monotonic() reads `now`,
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


@pytest.fixture(autouse=True)
def private_runtime_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where a loopback run's head leaves its secret: here, not in the user's own."""
    path = tmp_path / "runtime"
    path.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(path))
    return path


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
    """Pushes the feeders made that the head has not taken yet."""
    return sum(isinstance(event, Pushed) for event in list(head.server.events.queue))


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


def test_a_heartbeat_is_an_empty_push_from_the_node(head: Head, feeder: Feeder) -> None:
    feeder.pump()
    (pushed,) = [event for event in head.server.take() if isinstance(event, Pushed)]
    assert (pushed.node, pushed.host) == (1, socket.gethostname())
    assert (pushed.push.lines, pushed.push.dropped, pushed.push.done) == ({}, {}, False)


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


def test_node_0_learns_of_a_refusal_at_once_and_names_the_difference(
    head: Head, spec: NodeSpec, node_dir: Path, clock: Clock
) -> None:
    mine = json.dumps(StressConfig(pp=4, duration_s=20.0).to_dict(), sort_keys=True)
    with pytest.raises(UsageError):
        make_feeder(spec, node_dir, config=mine)
    assert head.pump() == (
        "node 1 refused to start: its options differ from node 0's: duration_s 20.0 on node 1, 15.0 on node 0"
    )
    head.finish(60.0)  # nothing to wait for: the node that refused will send nothing
    assert clock.slept == 0.0
    assert head.lost() == {}  # refused, not lost
    link = json.loads((head.run_dir / LINK_FILE).read_text())
    assert link["refused"] == {"1": "its options differ from node 0's: duration_s 20.0 on node 1, 15.0 on node 0"}


def test_a_second_node_with_the_same_index_is_refused_and_the_run_goes_on(
    head: Head, feeder: Feeder, spec: NodeSpec, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match="^node 1 is already connected to node 0, from 127.0.0.1: give each node"):
        make_feeder(spec, tmp_path)
    assert head.pump() is None
    assert head.dropped == {TWICE: 1}
    assert feeder.pump() is None and feeder.link_error is None


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
    assert str(caught.value).startswith(f"cannot host the sample store on 127.0.0.1:{taken.sample_port}: ")


def test_a_node_of_another_run_is_refused(head: Head, spec: NodeSpec, node_dir: Path) -> None:
    other = dataclasses.replace(spec, node_rank=1, rdzv_id="other", run_secret=head.server.secret)
    with pytest.raises(UsageError, match="^this node's options differ from node 0's: rdzv_id 'other' here, 'test'"):
        Feeder(other, CONFIG, node_dir, 1.0)


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


# --- strangers: who cannot prove the run secret ---------------------------------------------


def test_the_link_listens_on_the_rendezvous_address_only(head: Head, spec: NodeSpec) -> None:
    assert head.server.address[0] == "127.0.0.1"
    elsewhere = [a.address for addrs in psutil.net_if_addrs().values() for a in addrs if a.family == socket.AF_INET]
    for address in [a for a in elsewhere if not a.startswith("127.")]:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, spec.sample_port), timeout=2.0).close()


def test_a_loopback_head_leaves_its_secret_to_this_user_only(spec: NodeSpec, head_dir: Path) -> None:
    hosted = Head(spec, CONFIG, head_dir)
    (secret,) = (Path(os.environ["XDG_RUNTIME_DIR"]) / "hicache-run-secrets").glob("*.secret")
    assert secret.stat().st_mode & 0o777 == 0o600
    assert secret.parent.stat().st_mode & 0o777 == 0o700
    assert secret.read_text() == hosted.server.secret
    del hosted
    gc.collect()
    assert not secret.exists()  # gone with the head


def test_a_line_that_is_not_the_protocol_is_dropped_and_counted(
    head: Head, feeder: Feeder, spec: NodeSpec, head_dir: Path
) -> None:
    answer = send_raw("127.0.0.1", spec.sample_port, b"this is not JSON\n")
    assert REFUSED_PROOF not in answer  # only node 0's greeting, then it closed
    assert head.pump() is None
    assert head.dropped == {NOT_THE_PROTOCOL: 1}
    assert feeder.pump() is None and feeder.link_error is None  # the run's own link is untouched


def test_a_stranger_that_trickles_its_greeting_is_cut_off(
    head: Head, spec: NodeSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(node_server, "HANDSHAKE_S", 0.5)
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", spec.sample_port), timeout=5.0) as sock:
        receive_frame(sock)  # node 0's greeting
        with contextlib.suppress(OSError):
            for byte in (b"\x00", b"\x00", b"\x00", b"\x1e", b"h", b"i"):
                sock.sendall(byte)  # each within the socket's timeout, the whole never done
                time.sleep(0.2)
        assert sock.recv(1) == b""  # closed by node 0
    assert time.monotonic() - started < 3.0
    head.pump()
    assert head.dropped == {NOT_THE_PROTOCOL: 1}


def test_strangers_holding_connections_cannot_crowd_out_a_node_that_joined(
    head: Head, feeder: Feeder, spec: NodeSpec, clock: Clock
) -> None:
    held = [socket.create_connection(("127.0.0.1", spec.sample_port)) for _ in range(MAX_UNPROVEN + 1)]
    try:
        assert held[-1].recv(4096) == b""  # the one over the limit: closed at once
        clock.advance(HEARD_EVERY_S)
        assert feeder.pump() is None and feeder.link_error is None
    finally:
        for sock in held:
            sock.close()
    head.pump()
    assert head.dropped[TOO_MANY] == 1


def test_an_outsider_cannot_forge_samples_or_stop_the_run(
    head: Head, feeder: Feeder, spec: NodeSpec, clock: Clock, head_dir: Path, node_dir: Path
) -> None:
    options = {**json.loads(CONFIG), "nnodes": 2, "rdzv_id": "test"}
    assert forge("127.0.0.1", spec.sample_port, node=1, rank=3, options=options) == REFUSED_PROOF
    assert head.pump() is None  # no refusal, no stop
    assert head.dropped == {UNPROVEN: 1}
    assert not list(head_dir.glob("rank-*"))  # nothing written for the outsider
    assert head.nodes[1].host == socket.gethostname()  # the real node 1, not "outsider"
    assert not head.nodes[1].done
    clock.advance(HEARD_EVERY_S)
    assert feeder.pump() is None


def test_a_feeder_with_another_secret_is_refused_and_node_0_says_why_it_never_came(
    head: Head, spec: NodeSpec, node_dir: Path, clock: Clock
) -> None:
    other = dataclasses.replace(spec, node_rank=1, run_secret="another-secret-of-16+")
    with pytest.raises(UsageError, match="^the link to node 0 failed the run secret's check: give every node the same"):
        Feeder(other, CONFIG, node_dir, 2.0)
    head.pump()
    clock.advance(LOST_AFTER_S + 0.5)
    assert head.lost() == {
        1: "node 1 never reached node 0 (its hicache did not connect to the sample store; 1 messages without the "
        "run secret's proof were refused: is the run secret the same on every node?)"
    }


# --- what a node sends is checked ------------------------------------------------------------


def test_lines_that_are_not_samples_of_the_node_are_dropped_and_counted(
    head: Head, feeder: Feeder, head_dir: Path, node_dir: Path
) -> None:
    good = line(2, 0.1)
    bad = [
        "this line is not JSON\n",
        '{"t": NaN}\n',
        line(2, 0.2, rss_bytes="99 GB"),  # wrong type
        line(2, 0.3, node=0),  # claims a rank on node 0
        line(3, 0.4),  # in rank 2's file
        json.dumps({**json.loads(line(2, 0.5)), "extra": 1}) + "\n",
    ]
    append(node_dir, 2, good + "".join(bad))
    append(node_dir, 7, line(7, 0.1))  # no such rank in a run of 4
    feeder.pump()
    head.pump()
    assert text(head_dir / "rank-2.jsonl") == good
    assert not (head_dir / "rank-7.jsonl").exists()
    assert head.dropped == {BAD_LINES: len(bad) + 1}
    head.finish(0.0)
    assert link_summary(head_dir) == f"node 0's link dropped 7 {BAD_LINES} (see {LINK_FILE})"


def test_a_rank_another_node_holds_is_not_written_over(
    spec: NodeSpec, head_dir: Path, node_dir: Path, tmp_path: Path, clock: Clock
) -> None:
    three = dataclasses.replace(spec, nnodes=3, nproc_per_node=1)
    config = json.dumps(StressConfig(pp=3).to_dict(), sort_keys=True)
    head = Head(three, config, head_dir)
    other_dir = tmp_path / "node2"
    other_dir.mkdir()
    one = make_feeder(three, node_dir, 1, config)
    two = make_feeder(three, other_dir, 2, config)
    append(node_dir, 1, line(1, 0.1))
    one.pump()
    head.pump()
    append(other_dir, 1, line(1, 0.2, node=2))
    two.pump()
    head.pump()
    assert text(head_dir / "rank-1.jsonl") == line(1, 0.1)
    assert head.dropped == {FOREIGN_LINES: 1}


def test_a_link_without_drops_has_no_summary(head: Head, feeder: Feeder, head_dir: Path) -> None:
    feeder.finish({})
    head.finish(1.0)
    assert json.loads((head_dir / LINK_FILE).read_text()) == {"dropped": {}, "refused": {}}
    assert link_summary(head_dir) is None


def test_node_0s_launcher_hosts_the_link_for_its_run(spec: NodeSpec, head_dir: Path) -> None:
    """What the torchrun strategy opens before its ranks start: the head, for the run's config."""
    from hicache_cli.launch.launcher import LaunchConfig, open_link

    link = open_link(LaunchConfig(run_dir=head_dir, config=StressConfig(pp=4), nodes=spec))
    try:
        assert isinstance(link, Head)
        assert link.pump() is None  # nobody refused: the run goes on
    finally:
        del link
        gc.collect()
