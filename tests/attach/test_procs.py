"""What /proc says, read from a fake /proc tree (unit tests; the real one in test_refusals)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from hicache_cli.attach import procs
from hicache_cli.errors import AttachRefused

LIBPY = "/opt/py/lib/libpython3.12.so.1.0"


def fake_process(
    proc: Path,
    pid: int,
    ppid: int,
    name: str,
    exe: str,
    maps: list[str],
    uid: int = 0,
    state: str = "S",
    tracer: int = 0,
) -> None:
    base = proc / str(pid)
    base.mkdir(parents=True)
    (base / "stat").write_text(f"{pid} ({name}) {state} {ppid} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 3 0 12345 0 0\n")
    (base / "comm").write_text(f"{name}\n")
    ids = f"Uid:\t{uid}\t{uid}\t{uid}\t{uid}\nGid:\t{uid}\t{uid}\t{uid}\t{uid}\nGroups:\t27 {uid}\n"
    (base / "status").write_text(f"Name:\t{name}\n{ids}TracerPid:\t{tracer}\nThreads:\t3\n")
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


def test_credentials_state_and_tracer_are_read(proc: Path) -> None:
    fake_process(proc, 30, 1, "python", "/usr/bin/python3.12", [LIBPY], uid=1001, state="T", tracer=12)
    info = procs.inspect(30, proc)
    assert (info.uid, info.gid, info.groups, info.state, info.tracer) == (1001, 1001, (27, 1001), "T", 12)


def test_a_stopped_process_is_refused_not_resumed(proc: Path) -> None:
    fake_process(proc, 30, 1, "python", "/usr/bin/python3.12", [LIBPY], state="T")
    said = procs.state_refusal(procs.inspect(30, proc), proc)
    assert said is not None and "is stopped (SIGSTOP or Ctrl-Z)" in said and "kill -CONT" in said


def test_a_process_another_tracer_holds_names_it(proc: Path) -> None:
    fake_process(proc, 30, 1, "python", "/usr/bin/python3.12", [LIBPY], tracer=12)
    said = procs.state_refusal(procs.inspect(30, proc), proc)
    assert said is not None and "already traced by pid 12 (sh)" in said
    assert procs.state_refusal(procs.inspect(11, proc), proc) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="gives a directory to a group the test user may not be in")
def test_reach_is_judged_by_the_other_user_s_modes(proc: Path) -> None:
    other = procs.inspect(20, proc)  # uid 1000, gid 1000, groups (27, 1000)
    top = Path(tempfile.mkdtemp(dir="/tmp"))  # /tmp lets everyone pass; pytest's own tmp_path does not
    try:
        os.chmod(top, 0o711)
        closed, run = top / "closed", top / "closed" / "run"
        run.mkdir(parents=True)
        os.chmod(closed, 0o700)
        os.chmod(run, 0o711)
        assert procs.can_reach(run, other) == f"{closed} (0700, uid {os.geteuid()}) does not let uid 1000 pass"
        os.chmod(closed, 0o710)  # the group's bit: uid 1000 is not in root's group
        assert procs.can_reach(run, other) is not None
        os.chown(closed, os.geteuid(), 27)  # a group uid 1000 has
        assert procs.can_reach(run, other) is None
        (run / "boot.py").write_text("")
        os.chmod(run / "boot.py", 0o600)
        assert "is not readable by uid 1000" in str(procs.can_reach(run / "boot.py", other, read=True))
        os.chmod(run / "boot.py", 0o644)
        assert procs.can_reach(run / "boot.py", other, read=True) is None
        # a directory on sys.path must be listable too: passable alone, its modules are not found
        assert "is not readable by uid 1000" in str(procs.can_reach(run, other, read=True))
        os.chmod(run, 0o755)
        assert procs.can_reach(run, other, read=True) is None
        os.chmod(closed, 0o700)
        assert procs.can_reach(run, procs.inspect(11, proc)) is None  # uid 0 passes everywhere
    finally:
        shutil.rmtree(top)
