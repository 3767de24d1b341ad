"""A second, unprivileged local user for the tests of what one user can make another's
hicache do (docs/security.md): made by the test with useradd, its processes ended by pid
and the user removed after. Root only (useradd, and attaching to another user's process).

Its programs run with a Python it can execute: this one's when the user can reach it,
else the system's of the same version (pyenv's lies under root's 0700 home), with this
environment's site-packages on PYTHONPATH for torch."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil

from hicache_cli.attach import procs
from hicache_cli.attach.session import out_of_reach

HERE = Path(__file__).resolve().parent
ATTACKER = HERE / "attach" / "attacker.py"
NOBODY = procs.ProcessInfo(0, "", 65534, 0, "", None, None, True, False, 1, gid=65534)


def unavailable() -> str | None:
    """Why these tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "makes a second local user (useradd): needs root"
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        return "needs useradd and userdel"
    if shutil.which("gdb") is None:
        return "needs gdb (apt-get install gdb)"
    if _python() is None:
        return f"no Python {sys.version_info.major}.{sys.version_info.minor} another user can run"
    if (why := out_of_reach(NOBODY)) is not None:
        return f"another user cannot import hicache from this checkout: {why}"
    return None


@dataclass(frozen=True)
class LocalUser:
    name: str
    uid: int
    gid: int
    home: Path  # a directory of its own under /tmp

    def env(self) -> dict[str, str]:
        site = sysconfig.get_paths()["purelib"]
        return {"PATH": "/usr/bin:/bin", "HOME": str(self.home), "PYTHONPATH": site, "PYTHONFAULTHANDLER": "1"}

    def popen(self, argv: list[str], **kwargs: object) -> subprocess.Popen[str]:
        """`argv` run as this user, in its home, with a Python of its reach as `python`."""
        python = _python()
        assert python is not None
        argv = [python if a == "python" else a for a in argv]
        return subprocess.Popen(  # type: ignore[call-overload]
            argv, user=self.uid, group=self.gid, extra_groups=[], cwd=self.home, env=self.env(), text=True, **kwargs
        )

    def run(self, argv: list[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
        proc = self.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out, _ = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(argv, proc.returncode, out, None)

    def end_processes(self) -> None:
        """Every process of this user, by pid (SIGKILL): nothing of the test outlives it."""
        for _ in range(50):
            mine = [p for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == self.uid]
            if not mine:
                return
            for proc in mine:
                with contextlib.suppress(psutil.Error):
                    proc.send_signal(signal.SIGKILL)
            time.sleep(0.1)


@contextlib.contextmanager
def second_user() -> Iterator[LocalUser]:
    name = f"hct{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name], check=True)
    home = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/tmp"))
    try:
        info = procs_user(name)
        os.chown(home, info[0], info[1])
        user = LocalUser(name, info[0], info[1], home)
        try:
            yield user
        finally:
            user.end_processes()
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def procs_user(name: str) -> tuple[int, int]:
    import pwd

    entry = pwd.getpwnam(name)
    return entry.pw_uid, entry.pw_gid


def _python() -> str | None:
    """A Python of this version that a user other than root can execute."""
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"):
        if os.path.exists(candidate) and procs.can_reach(Path(candidate), NOBODY, read=True) is None:
            return candidate
    return None
