"""`hicache lint` is total on what it reads and writes (issue 30, item 5): a directory entry it
cannot read (a symlink loop, a FIFO, a socket or a device named `*.py`, a broken link, a file
it may not read) is skipped with one warning and everything else is linted; a named target
like that is one error line; stdout that cannot take the findings (a full device, closed) is
one line and exit 2, never 1 (findings) and never a traceback. Each case runs the real CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.lint.test_cli import REPO
from tests.lint.test_kept_never_waited import SGLANG_0_5_14

ENV = dict(os.environ, PYTHONPATH=str(REPO))


def run(args: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """The real CLI; a hang (the old FIFO behaviour) fails the test at the timeout."""
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kwargs}
    return subprocess.run(
        [sys.executable, "-m", "hicache_cli", "lint", *args],
        cwd=cwd,
        env=ENV,
        text=True,
        timeout=60,
        check=False,
        **streams,  # type: ignore[arg-type]
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "leaky.py").write_text(SGLANG_0_5_14, encoding="utf-8")
    return tmp_path


def lines(text: str, prefix: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_a_symlink_loop_is_skipped_and_the_rest_linted(project: Path) -> None:
    os.symlink("loop_b.py", project / "loop_a.py")
    os.symlink("loop_a.py", project / "loop_b.py")
    os.symlink("self.py", project / "self.py")
    done = run(["."], project)
    assert done.returncode == 1, done.stderr  # the finding in leaky.py: nothing was lost
    assert "Traceback" not in done.stderr
    assert lines(done.stdout, "leaky.py:")
    assert lines(done.stderr, "hicache: warning: ") == [
        "hicache: warning: loop_a.py: skipped: a symlink loop",
        "hicache: warning: loop_b.py: skipped: a symlink loop",
        "hicache: warning: self.py: skipped: a symlink loop",
    ]
    assert "3 skipped" in done.stderr.splitlines()[-1]


def test_a_fifo_named_py_never_hangs(project: Path) -> None:
    os.mkfifo(project / "pipe.py")
    done = run(["."], project)
    assert done.returncode == 1, done.stderr
    assert lines(done.stderr, "hicache: warning: ") == [
        "hicache: warning: pipe.py: skipped: a FIFO, not a regular file"
    ]
    named = run(["pipe.py", "leaky.py"], project)
    assert named.returncode == 2
    assert lines(named.stderr, "hicache: error: ") == ["hicache: error: pipe.py: a FIFO, not a regular file"]
    assert lines(named.stdout, "leaky.py:")  # the other target is still linted


def test_a_socket_and_a_device_named_py_are_skipped(project: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(project / "sock.py"))
        os.symlink("/dev/zero", project / "zero.py")
        done = run(["."], project)
    finally:
        server.close()
    assert done.returncode == 1, done.stderr
    assert lines(done.stderr, "hicache: warning: ") == [
        "hicache: warning: sock.py: skipped: a socket, not a regular file",
        "hicache: warning: zero.py: skipped: a device, not a regular file",
    ]


def test_a_file_it_may_not_read_is_skipped(project: Path) -> None:
    secret = project / "secret.py"
    secret.write_text("import torch.distributed as dist\n", encoding="utf-8")
    secret.chmod(0)
    try:
        if os.access(secret, os.R_OK):
            pytest.skip("running as a user who reads any file (root): no permission to refuse")
        done = run(["."], project)
    finally:
        secret.chmod(0o644)
    assert done.returncode == 1, done.stderr
    assert lines(done.stderr, "hicache: warning: ") == [
        "hicache: warning: secret.py: cannot be read: Permission denied"
    ]


def test_a_broken_link_is_skipped(project: Path) -> None:
    os.symlink("gone.py", project / "broken.py")
    done = run(["."], project)
    assert done.returncode == 1, done.stderr
    assert lines(done.stderr, "hicache: warning: ") == ["hicache: warning: broken.py: skipped: a broken symlink"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_stdout_on_a_full_device_is_one_line_and_exit_2(fmt: str, project: Path) -> None:
    with open("/dev/full", "w") as full:
        done = run(["leaky.py", "--format", fmt], project, stdout=full, stderr=subprocess.PIPE)
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["hicache: error: cannot write the findings to stdout: No space left on device"]


def test_closed_stdout_is_one_line_and_exit_2(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys; os.close(1); sys.exit(subprocess.call(sys.argv[1:]))",
         sys.executable, "-m", "hicache_cli", "lint", "leaky.py"],
        cwd=project, env=ENV, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.splitlines() == ["hicache: error: cannot write the findings to stdout: it is closed"]


def test_closed_stdout_with_nothing_to_write_is_fine(project: Path) -> None:
    (project / "clean.py").write_text("x = 1\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", "import os, subprocess, sys; os.close(1); sys.exit(subprocess.call(sys.argv[1:]))",
         sys.executable, "-m", "hicache_cli", "lint", "clean.py"],
        cwd=project, env=ENV, stderr=subprocess.PIPE, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_reader_that_goes_away_is_no_error(project: Path) -> None:
    """`hicache lint | head -0`: the findings were what it wanted; the exit says findings."""
    lint = subprocess.Popen(
        [sys.executable, "-m", "hicache_cli", "lint", "leaky.py", "--format", "json"],
        cwd=project, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert lint.stdout is not None
    lint.stdout.close()
    _, err = lint.communicate(timeout=60)
    assert lint.returncode == 1
    assert "Traceback" not in err and "Exception ignored" not in err
