"""What /proc says, read from a fake /proc tree (unit tests; the real one in test_refusals)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hicache_cli.attach import procs
from hicache_cli.errors import AttachRefused

LIBPY = "/opt/py/lib/libpython3.12.so.1.0"


def fake_process(proc: Path, pid: int, ppid: int, name: str, exe: str, maps: list[str], uid: int = 0) -> None:
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} ({name}) S {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 12345 0 0\n")
    (base / "status").write_text(f"Name:\t{name}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\nThreads:\t3\n")
    os.symlink(exe, base / "exe")
    lines = [f"7f00000{i}000-7f00000{i + 1}000 r-xp 00000000 08:01 1 {path}" for i, path in enumerate(maps)]
    (base / "maps").write_text("\n".join(lines + ["7f0000f000-7f0000f100 rw-p 00000000 00:00 0"]) + "\n")


@pytest.fixture
def proc(tmp_path: Path) -> Path:
    root = tmp_path / "proc"
    fake_process(root, 10, 1, "pt_elastic", "/usr/bin/python3.12", [LIBPY, "/site/torch/lib/libtorch_cpu.so"])
    fake_process(root, 11, 10, "python", "/usr/bin/python3.12", [LIBPY, "/site/torch/lib/libc10.so"])
    fake_process(root, 12, 11, "sh", "/bin/sh", ["/lib/libc.so.6"])
    fake_process(root, 20, 1, "python3.11", "/usr/bin/python3.11", ["/lib/libc.so.6"], uid=1000)
    (root / "self").mkdir()
    (root / "self" / "status").write_text("CapEff:\t0000000000000000\n")
    return root


def test_a_python_with_torch(proc: Path) -> None:
    info = procs.inspect(11, proc)
    assert (info.python, info.libpython, info.is_python, info.torch, info.ppid) == ((3, 12), LIBPY, True, True, 10)


def test_a_static_python_without_torch(proc: Path) -> None:
    info = procs.inspect(20, proc)
    assert (info.python, info.libpython, info.is_python, info.torch, info.uid) == ((3, 11), None, True, False, 1000)


def test_not_python(proc: Path) -> None:
    assert not procs.inspect(12, proc).is_python


def test_missing_pid(proc: Path) -> None:
    with pytest.raises(AttachRefused, match="^no process with pid 99$"):
        procs.inspect(99, proc)


def test_descendants(proc: Path) -> None:
    assert procs.descendants(10, proc) == [11, 12]
    assert procs.descendants(12, proc) == []


@pytest.mark.parametrize(
    ("scope", "capable", "pid", "refused"),
    [
        (None, False, 11, None),  # no Yama: same user may trace
        (0, False, 20, "belongs to uid 1000, not to you (uid 0)"),
        (0, True, 20, None),
        (1, False, 11, "kernel.yama.ptrace_scope is 1: only its parent may trace pid 11 (python)"),
        (1, True, 11, None),
        (2, False, 11, "kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may trace pid 11 (python)"),
        (2, True, 11, None),
        (3, True, 11, "kernel.yama.ptrace_scope is 3: no process may be traced on this machine"),
    ],
)
def test_ptrace_rules(proc: Path, scope: int | None, capable: bool, pid: int, refused: str | None) -> None:
    if scope is not None:
        (proc / "sys" / "kernel" / "yama").mkdir(parents=True)
        (proc / procs.YAMA).write_text(f"{scope}\n")
    (proc / "self" / "status").write_text(f"CapEff:\t{(1 << 19) if capable else 0:016x}\n")
    said = procs.ptrace_refusal(procs.inspect(pid, proc), proc, euid=0)
    assert (said is None) == (refused is None) and (refused is None or refused in said)
