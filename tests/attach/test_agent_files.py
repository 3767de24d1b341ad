"""What an attached process's agent leaves in the agents' directory is read as another
user's files (attach/session.py, attach/protocol.py): a link, a FIFO, a hard link, a file
of someone else's, an oversized or malformed file is refused at once, named, and never
looked at again; nothing blocks. Unit tests on real files (no debugger)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hicache_cli.attach import protocol
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import AgentStatus
from hicache_cli.attach.session import AttachSession, Target, make_agent_dir
from hicache_cli.errors import UsageError
from hicache_cli.sample import LineTail

ME = os.geteuid()
PID = 4242


def target() -> Target:
    return Target(ProcessInfo(PID, "python", ME, 1, "/usr/bin/python3", None, (3, 11), True, True, 4), "1")


@pytest.fixture
def run(tmp_path: Path) -> Path:
    make_agent_dir(tmp_path, ME)
    return tmp_path


def good_status() -> bytes:
    return json.dumps(AgentStatus(PID, protocol.ATTACHED, rank=0).to_dict()).encode()


def test_a_status_the_agent_wrote_is_read(run: Path) -> None:
    protocol.status_file(run, PID).write_bytes(good_status())
    found = target()
    status = AttachSession([PID], run)._status(found)
    assert status is not None and status.state == protocol.ATTACHED and found.attached and found.unreadable is None


def plant_link(path: Path, elsewhere: Path) -> None:
    elsewhere.write_bytes(good_status())
    path.symlink_to(elsewhere)


def plant_fifo(path: Path, elsewhere: Path) -> None:
    os.mkfifo(path)


def plant_hard_link(path: Path, elsewhere: Path) -> None:
    elsewhere.write_bytes(good_status())
    os.link(elsewhere, path)


def plant_huge(path: Path, elsewhere: Path) -> None:
    with open(path, "wb") as out:
        out.truncate(protocol.JSON_LIMIT + 1)  # sparse: refused from its size, never read


def plant_wrong_type(path: Path, elsewhere: Path) -> None:
    path.write_text(json.dumps({"pid": PID, "state": "attached", "rank": "zero"}))


@pytest.mark.parametrize(
    ("plant", "said"),
    [
        (plant_link, "a symlink"),
        (plant_fifo, "a FIFO, not a regular file"),
        (plant_hard_link, "a file with 2 hard links"),
        (plant_huge, "larger than"),
        (plant_wrong_type, "status.rank: a string, expected an integer"),
    ],
)
@pytest.mark.parametrize("which", ["status", "census"])
def test_what_is_not_an_agent_s_file_is_refused_and_named(run: Path, plant, said: str, which: str) -> None:  # type: ignore[no-untyped-def]
    session, found = AttachSession([PID], run), target()
    path = protocol.status_file(run, PID) if which == "status" else protocol.census_file(run, PID)
    if which == "census" and plant is plant_wrong_type:
        path.write_text(json.dumps({"pid": PID, "rank": None, "taken_at": 1.0, "works": "many"}))
        said = "census.works: a string, expected an integer"
    else:
        plant(path, run / "elsewhere")
    read = session._status(found) if which == "status" else session.read_census(found, "start")
    assert read is None
    assert found.unreadable is not None and said in found.unreadable and found.unreadable.startswith("pid 4242")
    assert session.read_census(found, "end") is None and session._status(found) is None  # never looked at again


@pytest.mark.skipif(ME != 0, reason="gives a file to another user")
def test_a_file_of_another_user_is_refused(run: Path) -> None:
    path = protocol.status_file(run, PID)
    path.write_bytes(good_status())
    os.chown(path, 1, 1)
    found = target()
    assert AttachSession([PID], run)._status(found) is None
    assert found.unreadable is not None and "a file of uid 1" in found.unreadable


def test_the_agents_directory_is_made_never_taken(tmp_path: Path) -> None:
    protocol.agent_dir(tmp_path).mkdir()
    with pytest.raises(FileExistsError):
        make_agent_dir(tmp_path, ME)
    other, elsewhere = tmp_path / "other", tmp_path / "elsewhere"
    other.mkdir()
    elsewhere.mkdir()
    protocol.agent_dir(other).symlink_to(elsewhere)
    with pytest.raises(FileExistsError):
        make_agent_dir(other, ME)  # a link in its place is not followed either
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize(("plant", "said"), [(plant_fifo, "a FIFO"), (plant_hard_link, "2 hard links")])
def test_a_rank_file_in_the_agents_directory_that_is_not_one_is_one_line(run: Path, plant, said: str) -> None:  # type: ignore[no-untyped-def]
    plant(protocol.agent_dir(run) / "rank-0.jsonl", run / "elsewhere")
    with pytest.raises(UsageError, match=said):
        list(LineTail(run).lines())
