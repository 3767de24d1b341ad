"""Input refused before any work starts (output paths, busy ports, SGLang files that are not
Python), and stdouts a run must survive (closed, or unable to spell a character)."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.cli.main import main
from hicache_cli.errors import UsageError
from hicache_cli.launch.launcher import LOOPBACK, pick_port
from hicache_cli.present.progress import ensure_stdout
from tests.conftest import FakeExecute
from tests.sglang_target.families import REAP

# Each command's output options, as argv with OUT where the path goes.
OUTPUT_OPTIONS = {
    "stress --report": ["stress", "--report", "OUT"],
    "check --report": ["check", "--report", "OUT"],
    "check --junit": ["check", "--junit", "OUT"],
    "compare-policies --output": ["compare-policies", "--output", "OUT"],
    "compare-policies --markdown": ["compare-policies", "--markdown", "OUT"],
    "compare-policies --plot": ["compare-policies", "--plot", "OUT"],
    "sglang-scan --output": ["sglang-scan", "--output", "OUT"],
    "sglang-scan --markdown": ["sglang-scan", "--markdown", "OUT"],
    "lint --output": ["lint", "--output", "OUT"],
    "report plot --output": ["report", "plot", "no-such-report.json", "--output", "OUT"],
}


def _symlink_to_a_device(path: Path) -> None:
    path.symlink_to("/dev/null")  # refused before anything is written: /dev/null is only looked at


NOT_REGULAR = {
    "an existing directory": (Path.mkdir, "a directory"),
    "a FIFO": (os.mkfifo, "a FIFO"),
    "a symlink to a device": (_symlink_to_a_device, "a character device"),
}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working directory (default run directories land here); nothing may reach pip."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)

    def refuse(cmd: list[str], *args: Any, **kwargs: Any) -> None:
        pytest.fail(f"work started before the output paths were checked: {cmd}")

    monkeypatch.setattr(subprocess, "run", refuse)
    return work


def refused_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert "Traceback" not in captured.err + captured.out
    return line


@pytest.mark.parametrize("what", NOT_REGULAR)
@pytest.mark.parametrize("command", OUTPUT_OPTIONS)
def test_every_output_that_is_not_a_regular_file_is_refused_before_any_work(
    fake_execute: FakeExecute,
    workdir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    what: str,
) -> None:
    make, kind = NOT_REGULAR[what]
    out = tmp_path / "out.png"
    make(out)
    before = os.lstat(out)
    argv = [str(out) if arg == "OUT" else arg for arg in OUTPUT_OPTIONS[command]]
    option = command.split()[-1]
    line = refused_line(argv, capsys)
    assert line == (
        f"hicache: error: {option} {out}: {kind}, not a regular file (hicache writes files whole, by replacing them)"
    )
    assert fake_execute.calls == []
    assert list(workdir.iterdir()) == []  # no run directory made
    after = os.lstat(out)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)


def test_report_naming_an_existing_directory_fails_before_the_run(
    fake_execute: FakeExecute, workdir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Once the run completed, then a traceback, exit 1 and a temporary file left (issue 13)."""
    (tmp_path / "reports").mkdir()
    line = refused_line(["stress", "--run-dir", str(workdir / "run"), "--report", str(tmp_path / "reports")], capsys)
    assert line.startswith(f"hicache: error: --report {tmp_path / 'reports'}: a directory, not a regular file")
    assert fake_execute.calls == []
    assert not (workdir / "run").exists()
    assert list((tmp_path / "reports").iterdir()) == []


def test_a_run_dir_with_an_earlier_report_and_config_is_refused(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "report.json").write_text('{"earlier": true}')
    (old / "config.json").write_text('{"earlier": true}')
    line = refused_line(["stress", "--run-dir", str(old)], capsys)
    assert (
        line == f"hicache: error: --run-dir {old} already holds a run (config.json); choose an empty or new directory"
    )
    assert fake_execute.calls == []
    assert sorted(p.name for p in old.iterdir()) == ["config.json", "report.json"]
    assert (old / "report.json").read_text() == '{"earlier": true}'


@pytest.fixture
def listening() -> Iterator[Callable[[int, str], int]]:
    """listen(family, address) -> the port something now listens on, there only."""
    sockets: list[socket.socket] = []

    def listen(family: int, address: str) -> int:
        sock = socket.socket(family, socket.SOCK_STREAM)
        sockets.append(sock)
        try:
            sock.bind((address, 0))
        except OSError as exc:
            pytest.skip(f"cannot bind {address} here: {exc}")
        sock.listen()
        return sock.getsockname()[1]

    yield listen
    for sock in sockets:
        sock.close()


@pytest.mark.parametrize(
    ("family", "address"),
    [(socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.2"), (socket.AF_INET6, "::1"), (socket.AF_INET, LOOPBACK)],
)
def test_a_port_busy_on_any_address_is_refused_before_launching(
    fake_execute: FakeExecute,
    workdir: Path,
    capsys: pytest.CaptureFixture[str],
    listening: Callable[[int, str], int],
    family: int,
    address: str,
) -> None:
    """torchrun's store listens on every address: a port taken on any of them crashed rank 0 (exit 3)."""
    port = listening(family, address)
    line = refused_line(["stress", "--port", str(port)], capsys)
    assert line == (
        f"hicache: error: cannot bind port {port} on every address (torchrun's rendezvous store listens on all "
        f"of them, not only on {LOOPBACK}): Address already in use"
    )
    assert fake_execute.calls == []
    assert list(workdir.iterdir()) == []


def test_a_picked_port_is_free_on_every_address() -> None:
    port = pick_port(LOOPBACK, None)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("0.0.0.0", port))
    assert pick_port(LOOPBACK, port) == port


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x7fELF\x02\x01\x01\x00\x00\x00binary", "is not Python source: it holds NUL bytes (a binary file?)"),
        (b"class HiRadixCache:\n    def broken(self:\n", "does not parse as Python ("),
    ],
)
def test_an_sglang_file_that_is_not_python_is_bad_input(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, reason: str
) -> None:
    """Was exit 1 with 'line None'."""
    path = tmp_path / "hiradix_cache.py"
    path.write_bytes(content)
    line = refused_line(["stress", "--target", f"sglang:{path}", "--run-dir", str(tmp_path / "run")], capsys)
    assert line.startswith(f"hicache: error: {path} {reason}")
    assert "None" not in line
    assert fake_execute.calls == []
    assert not (tmp_path / "run").exists()


def test_a_good_sglang_file_still_resolves(fake_execute: FakeExecute, tmp_path: Path) -> None:
    path = tmp_path / "hiradix_cache.py"
    path.write_text(REAP, encoding="utf-8")
    assert main(["stress", "--target", f"sglang:{path}", "--run-dir", str(tmp_path / "run"), "-d", "1s"]) == 0


def test_a_run_with_stdout_closed_goes_on_and_writes_its_report(
    fake_execute: FakeExecute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`hicache stress >&-`: Python has no sys.stdout at all (was: a traceback, an empty run directory)."""
    monkeypatch.setattr(sys, "stdout", None)
    try:
        assert main(["stress", "--run-dir", str(tmp_path / "run"), "-d", "2s"]) == 0
        assert sys.stdout is not None and sys.stdout.name == os.devnull
    finally:
        if sys.stdout is not None:
            sys.stdout.close()
    assert (tmp_path / "run" / "report.json").is_file()


def test_a_stdout_that_cannot_spell_the_run_directory_escapes_it(
    fake_execute: FakeExecute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PYTHONIOENCODING=ascii (or a C locale) and a non-ASCII --run-dir: was a traceback."""
    raw = io.BytesIO()
    monkeypatch.setattr(sys, "stdout", io.TextIOWrapper(raw, encoding="ascii"))
    run_dir = tmp_path / "run-caf\u00e9"
    assert main(["stress", "--run-dir", str(run_dir), "-d", "2s"]) == 0
    sys.stdout.flush()
    assert f"run directory: {tmp_path}/run-caf\\xe9" in raw.getvalue().decode("ascii")
    assert (run_dir / "report.json").is_file()


@pytest.mark.parametrize(
    ("encoding", "errors", "after"),
    [
        ("ascii", "strict", "backslashreplace"),
        ("ascii", "surrogateescape", "backslashreplace"),  # LC_ALL=C without UTF-8 mode
        ("utf-8", "surrogateescape", "surrogateescape"),  # a C locale in UTF-8 mode: nothing can fail
        ("utf-8", "strict", "backslashreplace"),  # a run directory with undecodable bytes
    ],
)
def test_ensure_stdout_makes_every_write_succeed(
    monkeypatch: pytest.MonkeyPatch, encoding: str, errors: str, after: str
) -> None:
    stream = io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors)
    monkeypatch.setattr(sys, "stdout", stream)
    ensure_stdout()
    assert sys.stdout is stream and stream.errors == after
    print("caf\u00e9 \u2581\u2588", flush=True)


def test_pick_port_refuses_an_invalid_port() -> None:
    with pytest.raises(UsageError, match="not a valid TCP port"):
        pick_port(LOOPBACK, 70000)
