"""The fork server's pieces that need no rank: how pytest reads a forked rank's status, and
the server refusing a request it cannot read (a real server, no torch operation)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from hicache_cli.pytest_ranks import forkserver
from hicache_cli.pytest_ranks.forkserver import UNKNOWN_EXIT, ForkedRank, ForkServer, ForkServerError
from hicache_cli.pytest_ranks.launch import common_environment
from hicache_cli.pytest_ranks.protocol import exit_file


def test_a_forked_ranks_status_comes_from_the_servers_exit_file(tmp_path: Path) -> None:
    running = ForkedRank(os.getpid(), tmp_path, 0)
    assert running.poll() is None
    exit_file(tmp_path, 0).write_text(json.dumps({"returncode": -15}))
    assert running.poll() == -15 and running.returncode == -15


def test_a_rank_gone_without_a_status_is_unknown_after_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    rank = ForkedRank(int(done.stdout), tmp_path, 1)  # a pid that has ended and been reaped
    monkeypatch.setattr(forkserver, "EXIT_FILE_WAIT_S", 0.05)
    assert rank.poll() is None  # the server may be about to write it
    time.sleep(0.1)
    assert rank.poll() == UNKNOWN_EXIT


@pytest.mark.slow
def test_the_server_answers_a_bad_request_and_leaves_when_pytest_closes_it(tmp_path: Path) -> None:
    server = ForkServer(common_environment(dict(os.environ)), tmp_path / "server.log")
    try:
        assert server.alive()
        server.proc.stdin.write(b"not json\n")
        server.proc.stdin.flush()
        assert "bad request" in server._read_line(30).get("error", "")
    finally:
        server.close()
    assert server.proc.returncode == 0
    with pytest.raises(ForkServerError):
        server.fork(tmp_path, 0, {}, str(tmp_path))


def test_a_reply_to_an_abandoned_request_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest was interrupted while asking for a rank (its reply never read): the next
    request must not take that reply, and the rank it names is ended."""
    read_end, write_end = os.pipe()
    with os.fdopen(read_end, "rb") as replies, os.fdopen(write_end, "wb") as server_side:
        server = ForkServer.__new__(ForkServer)
        server.proc = SimpleNamespace(stdin=io.BytesIO(), stdout=replies)  # type: ignore[assignment]
        server._asked, server._pending = 1, b""
        server_side.write(b'{"id": 1, "pid": 4000001}\n{"id": 2, "pid": 4000002}\n')
        server_side.flush()
        ended: list[int] = []
        monkeypatch.setattr(forkserver.os, "killpg", lambda pid, signo: ended.append(pid))
        rank = server.fork(tmp_path, 3, {"A": "1"}, str(tmp_path))
    assert (rank.pid, rank.rank) == (4000002, 3)
    assert ended == [4000001]
    sent = json.loads(server.proc.stdin.getvalue())
    assert (sent["id"], sent["rank"], sent["env"]) == (2, 3, {"A": "1"})
