"""hicache attach on live processes: a 2-rank gloo server under torchrun, written the way users
write one (programs/serving_p2p.py), attached by the torchrun agent's pid while it runs, then
detached while it keeps running; then attached again; then attached by a hicache that is
killed. Real gdb, real ptrace, real gloo.

Each scenario runs once (module fixtures) and the tests read what it recorded."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.attach import protocol
from hicache_cli.attach.protocol import AgentStatus, Census
from hicache_cli.attach.session import AttachSession, Target
from tests.integration.attach_helpers import (
    PROGRAMS,
    Server,
    injected_pages,
    leftovers,
    rank_lines,
    serve_beside_reference,
    start_program,
    start_server,
    wait_for,
)
from tests.integration.helpers import REPO

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (apt-get install gdb)"),
]
DRIVER = REPO / "tests" / "attach" / "attach_driver.py"


@dataclass
class Attached:
    """One attach, from start to detach, as recorded."""

    run_dir: Path
    targets: list[Target]
    refused: dict[int, str]
    census: dict[int, Census]
    census_s: float  # from start() to every census read
    detached: dict[int, AgentStatus] = field(default_factory=dict)
    end_census: dict[int, Census] = field(default_factory=dict)
    running_after_detach: bool = False

    def rank_of(self, pid: int) -> int | None:
        return next(t.status.rank for t in self.targets if t.pid == pid and t.status is not None)

    def census_of_rank(self, rank: int, when: str = "start") -> Census:
        found = self.census if when == "start" else self.end_census
        return next(c for c in found.values() if c.rank == rank)


def attach(pid: int, run_dir: Path, trace_s: float, server: Server) -> Attached:
    run_dir.mkdir(parents=True, exist_ok=True)
    session = AttachSession([pid], run_dir)
    began = time.monotonic()
    targets = session.start()
    census = session.census(timeout_s=180)  # a census on this loaded 2-core VM can take a while
    refused = {t.pid: t.refusal or "" for t in session.targets if not t.attached}
    record = Attached(run_dir, targets, refused, census, time.monotonic() - began)
    statuses = [session.status(t.pid) for t in targets]
    wait_for(lambda: any(line.get("sites") for line in rank_lines(run_dir, 0)), 120, f"rank 0's sites ({statuses})")
    time.sleep(trace_s)
    record.detached = session.detach()
    record.end_census = session.census_end()
    record.running_after_detach = server.running()
    return record


@dataclass
class Scenario:
    reference: tuple[int, list[str]]
    first: Attached
    leftovers: dict[int, dict[str, Any]]
    pages_left: dict[int, int]
    second: Attached
    orphaned: dict[int, AgentStatus]
    orphan_leftovers: dict[int, dict[str, Any]]
    exit_code: int
    lines: list[str]
    run_dir: Path


@pytest.fixture(scope="module")
def leaky(tmp_path_factory: pytest.TempPathFactory, attached_references: dict[str, tuple[int, list[str]]]) -> Scenario:
    tmp = tmp_path_factory.mktemp("attach-leaky")
    # it has been leaking for 2 s before anyone looks
    server, reference = serve_beside_reference(tmp, "reap", attached_references)
    try:
        first = attach(server.pid, tmp / "first", 1.5, server)
        ranks = server.ranks()
        pages = {pid: injected_pages(pid) for pid in ranks}  # before the checker's own page
        left = {pid: leftovers(pid, tmp / "first") for pid in ranks}
        second = attach(ranks[0], tmp / "second", 0.5, server)
        orphaned, orphan_left = attach_then_kill_hicache(server, tmp / "killed")
        code = server.stop()
        lines = sorted(server.lines)
        return Scenario(reference, first, left, pages, second, orphaned, orphan_left, code, lines, tmp / "first")
    finally:
        server.kill()


def attach_then_kill_hicache(server: Server, run_dir: Path) -> tuple[dict[int, AgentStatus], dict[int, Any]]:
    """A hicache (tests/attach/attach_driver.py) attaches, then is killed with SIGKILL."""
    run_dir.mkdir()
    driver = subprocess.Popen([sys.executable, str(DRIVER), str(server.pid), str(run_dir)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    pids = json.loads(driver.stdout.readline())
    driver.send_signal(signal.SIGKILL)
    driver.wait(30)

    def statuses() -> dict[int, AgentStatus]:
        found = {p: protocol.read_json(protocol.status_file(run_dir, p)) for p in pids}
        return {p: AgentStatus.from_dict(d) for p, d in found.items() if d and d["state"] == protocol.DETACHED}

    wait_for(lambda: len(statuses()) == len(pids), 60, "the agents to detach on their own")
    return statuses(), {pid: leftovers(pid, run_dir) for pid in pids}


def test_attaching_by_the_torchrun_agent_covers_both_ranks(leaky: Scenario) -> None:
    first = leaky.first
    assert sorted(t.status.rank for t in first.targets) == [0, 1]
    # torchrun's own agent is Python with torch loaded, but has no process group: left alone
    assert list(first.refused.values()) == [protocol.NO_GROUP]


def test_the_census_names_the_attribute_holding_the_works_with_their_count(leaky: Scenario) -> None:
    rank0 = leaky.first.census_of_rank(0)
    top = rank0.holders[0]
    assert (top.path, top.container, top.named) == ("Scheduler.sync_works", "list", True)
    assert top.works > 100 and top.completed == 0  # gloo: never complete without wait()
    assert rank0.works == top.works
    assert leaky.first.census_of_rank(1).holders == []  # the last stage keeps no sends
    print(f"census of {top.works} Works read {leaky.first.census_s:.1f} s after start()")


def test_new_works_are_named_by_their_creation_line(leaky: Scenario) -> None:
    final = rank_lines(leaky.run_dir, 0)[-1]
    assert final["kind"] == "final" and final["message"].startswith("detached")
    site = final["sites"][0]
    source = (PROGRAMS / "serving_p2p.py").read_text().splitlines()
    where = (Path(site["file"]).name, site["function"], site["op"], site["peer"])
    assert where == ("serving_p2p.py", "sync_counts", "isend", 1)
    assert "dist.isend" in source[site["line"] - 1]
    assert site["created"] > 0 and site["waited"] == 0


def test_detach_leaves_nothing_of_hicache_in_the_process(leaky: Scenario) -> None:
    assert {s.state for s in leaky.first.detached.values()} == {protocol.DETACHED}
    assert all(s.leftovers == [] for s in leaky.first.detached.values())
    for pid, found in leaky.leftovers.items():
        assert found["modules"] == [] and found["threads"] == [] and found["hooks"] == [], (pid, found)
        assert found["files"] == [], (pid, found)
        assert found["functions"] == [] and found["classes"] == [] and found["instances"] == [], (pid, found)
        assert not found["wait_hooked"] and found["os_exit_builtin"]
        assert not found["excepthook"].startswith("hicache")  # the program's (torch's) is back
        assert found["sys_path"] == [] and found["importer_cache"] == []
        assert found["works_with_weakrefs"] == 0
    assert set(leaky.pages_left.values()) == {0}  # the page gdb wrote the text into is unmapped


def test_the_program_keeps_running_after_detach_and_ends_as_it_would_have(leaky: Scenario) -> None:
    assert leaky.first.running_after_detach and leaky.second.running_after_detach
    reference_code, reference_lines = leaky.reference
    assert (leaky.exit_code, leaky.lines) == (reference_code, reference_lines)
    assert leaky.exit_code == 0 and any("sends kept as expected: True" in line for line in leaky.lines)


def test_a_second_attach_finds_the_holder_grown(leaky: Scenario) -> None:
    first, second = leaky.first.census_of_rank(0).holders[0], leaky.second.census_of_rank(0).holders[0]
    assert second.path == first.path and second.works > first.works
    assert [t.status.rank for t in leaky.second.targets] == [0]


def test_a_killed_hicache_is_noticed_and_the_agents_detach_on_their_own(leaky: Scenario) -> None:
    assert leaky.orphaned, "no agent detached"
    for status in leaky.orphaned.values():
        assert status.detach_reason is not None and "is gone" in status.detach_reason
    for pid, found in leaky.orphan_leftovers.items():
        assert found["modules"] == [] and found["threads"] == [] and found["hooks"] == [], (pid, found)
        assert found["files"] == [], (pid, found)


@dataclass
class Draining:
    attached: Attached
    exit_code: int


@pytest.fixture(scope="module")
def draining(tmp_path_factory: pytest.TempPathFactory) -> Draining:
    tmp = tmp_path_factory.mktemp("attach-drain")
    server = start_server(tmp, "drain")
    try:
        time.sleep(1.0)
        attached = attach(server.pid, tmp / "run", 2.0, server)
        return Draining(attached, server.stop())
    finally:
        server.kill()


def test_a_draining_program_shows_no_growing_holder(draining: Draining) -> None:
    attached = draining.attached
    for rank in (0, 1):
        start = {h.path: h.works for h in attached.census_of_rank(rank).holders}
        end = {h.path: h.works for h in attached.census_of_rank(rank, "end").holders}
        assert all(count <= 1 for count in start.values()) and all(count <= 1 for count in end.values())
    final = rank_lines(attached.run_dir, 0)[-1]
    assert final["works"]["waited"] > 0 and final["works"]["live"] <= 1
    assert draining.exit_code == 0


@pytest.fixture(scope="module")
def sglang(tmp_path_factory: pytest.TempPathFactory) -> Attached:
    """SGLang 0.5.14's own `_pp_sync` (the release that leaked), hosted by programs/sglang_host.py,
    its heap frozen a second in (gc.freeze(), as SGLang's /freeze_gc does once warm)."""
    tmp = tmp_path_factory.mktemp("attach-sglang")
    args = ["--sglang", "0.5.14", "--freeze-gc-after", "1"]
    server = start_program(tmp, "sglang_host.py", args, "sglang", path=str(REPO))
    try:
        deadline = time.monotonic() + 60
        while sum("heap frozen" in line for line in server.lines) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.0)  # (frozen with a second of Works in the list)
        return attach(server.pid, tmp / "run", 1.0, server)
    finally:
        server.kill()


def test_sglang_s_own_pp_sync_holder_is_named(sglang: Attached) -> None:
    census = sglang.census_of_rank(0)
    top = census.holders[0]
    assert (top.path, top.container, top.completed) == ("SGLangHolder.work_list", "list", 0) and top.works > 100
    assert census.cost.frozen > 10_000  # the list among them: gc.get_objects() would not have listed it
    site = rank_lines(sglang.run_dir, 0)[-1]["sites"][0]
    assert (Path(site["file"]).name, site["function"], site["op"], site["peer"]) == (
        "hiradix_cache.py",
        "_pp_sync",
        "isend",
        1,
    )
