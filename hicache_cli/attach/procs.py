"""What /proc says about a process before anything touches it: does it exist, whose is it,
is it Python (which), has it loaded torch, may this process trace it, what runs below it.

Read from /proc only (no psutil: the launcher side stays light), with `proc` as a parameter
so tests can lay out a fake tree. Nothing here stops, signals or traces anything.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from hicache_cli.errors import AttachRefused

PROC = Path("/proc")
YAMA = "sys/kernel/yama/ptrace_scope"
CAP_SYS_PTRACE = 19
# a CPython executable or library names its version: python3.11, libpython3.11.so.1.0
PYTHON_NAME = re.compile(r"(?:^|/)(?:lib)?python(\d)\.(\d+)[^/]*$")
TORCH_LIBS = ("/libtorch_python.so", "/libtorch_cpu.so", "/libc10.so")


@dataclass(frozen=True)
class ProcessInfo:
    pid: int
    name: str  # comm
    uid: int
    ppid: int
    exe: str  # resolved, "" when unreadable
    libpython: str | None  # the mapped libpython, None for a static build (symbols in exe)
    python: tuple[int, int] | None  # from exe or library name; None when not told
    is_python: bool
    torch: bool  # a torch library is mapped: torch is imported
    threads: int
    gid: int = 0  # effective
    groups: tuple[int, ...] = ()  # supplementary
    state: str = "S"  # /proc's one letter: R, S, D, T (stopped), t (traced)...
    tracer: int = 0  # the pid of the process tracing it (strace, gdb), 0 for none

    @property
    def label(self) -> str:
        return f"pid {self.pid} ({self.name})"


def inspect(pid: int, proc: Path = PROC) -> ProcessInfo:
    """The facts about `pid`; AttachRefused when there is no such process (or it is a zombie)."""
    base = proc / str(pid)
    try:
        stat = (base / "stat").read_text()
        status = (base / "status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        raise AttachRefused(f"no process with pid {pid}") from None
    except PermissionError:
        raise AttachRefused(f"pid {pid}: cannot read /proc/{pid} (another user's process?)") from None
    name = stat[stat.index("(") + 1 : stat.rindex(")")]
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        raise AttachRefused(f"pid {pid} ({name}) has exited (a zombie)")
    uid = int(_status_field(status, "Uid").split()[1])  # effective uid
    exe = _readlink(base / "exe")
    maps = _mapped_paths(base / "maps")
    libpython = next((p for p in maps if re.search(r"/libpython\d\.\d+", p)), None)
    named = PYTHON_NAME.search(libpython or "") or PYTHON_NAME.search(exe)
    python = (int(named.group(1)), int(named.group(2))) if named else None
    is_python = python is not None or os.path.basename(exe).startswith("python")
    torch = any(p.endswith(TORCH_LIBS) or any(lib + "." in p for lib in TORCH_LIBS) for p in maps)
    threads = int(_status_field(status, "Threads") or 1)
    gid = int((_status_field(status, "Gid").split() or ["0", "0"])[1])
    groups = tuple(int(g) for g in _status_field(status, "Groups").split())
    tracer = int(_status_field(status, "TracerPid") or 0)
    return ProcessInfo(
        pid, name, uid, int(fields[1]), exe, libpython, python, is_python, torch, threads,
        gid=gid, groups=groups, state=fields[0], tracer=tracer,
    )  # fmt: skip


def state_refusal(target: ProcessInfo, proc: Path = PROC) -> str | None:
    """Why a process that ptrace would allow still cannot be injected into, in words: it is
    stopped (a SIGSTOP or Ctrl-Z: it cannot run the text, and a debugger's calls would resume
    it), or another tracer (strace, a debugger) holds it (a process has one tracer)."""
    if target.state == "T":
        return (f"{target.label} is stopped (SIGSTOP or Ctrl-Z): it cannot run the injected code, and hicache "
                "will not resume it; continue it (kill -CONT) and attach again")  # fmt: skip
    if target.tracer:
        tracer = _comm(proc, target.tracer)
        return (f"{target.label} is already traced by pid {target.tracer}{f' ({tracer})' if tracer else ''}: "
                "a process has one tracer at a time; detach that one first")  # fmt: skip
    return None


def can_reach(path: Path, who: ProcessInfo, *, read: bool = False) -> str | None:
    """Why the user of `who` could not reach `path` (each directory on the way searchable by
    it; with `read`, the file itself readable, or a directory listable - Python's import lists
    each directory on sys.path), in words; None when it could. Judged from the modes as the
    kernel would for that uid and its groups (root passes everywhere)."""
    if who.uid == 0:
        return None
    resolved = path.resolve()
    for directory in [*reversed(resolved.parents), resolved] if not read else reversed(resolved.parents):
        if not _allows(directory, who, 0o1):
            return f"{directory} ({_mode_text(directory)}) does not let uid {who.uid} pass"
    if read and not _allows(resolved, who, 0o4 | (0o1 if resolved.is_dir() else 0)):
        return f"{resolved} ({_mode_text(resolved)}) is not readable by uid {who.uid}"
    return None


def _allows(path: Path, who: ProcessInfo, bits: int) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    if found.st_uid == who.uid:
        return found.st_mode & (bits << 6) == bits << 6
    if found.st_gid == who.gid or found.st_gid in who.groups:
        return found.st_mode & (bits << 3) == bits << 3
    return found.st_mode & bits == bits


def _mode_text(path: Path) -> str:
    try:
        found = os.stat(path)
    except OSError as exc:
        return exc.strerror or "unreadable"
    return f"{found.st_mode & 0o7777:04o}, uid {found.st_uid}"


def _comm(proc: Path, pid: int) -> str:
    try:
        return (proc / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def age_s(pid: int, proc: Path = PROC) -> float:
    """How long the process has run, in seconds (inf when it cannot be read)."""
    try:
        stat = (proc / str(pid) / "stat").read_text()
        uptime = float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("inf")
    started = int(stat[stat.rindex(")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
    return max(0.0, uptime - started)


def descendants(pid: int, proc: Path = PROC) -> list[int]:
    """Every process below `pid` (children, theirs...), in pid order."""
    children: dict[int, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return sorted(found)


def ptrace_refusal(target: ProcessInfo, proc: Path = PROC, euid: int | None = None) -> str | None:
    """Why the kernel will not let this process trace `target`, in words; None when it will."""
    euid = os.geteuid() if euid is None else euid
    capable = has_cap_sys_ptrace(proc)
    scope = yama_scope(proc)
    fix = "run hicache as root or with CAP_SYS_PTRACE (containers: --cap-add SYS_PTRACE)"
    if scope == 3:
        return f"kernel.yama.ptrace_scope is 3: no process may be traced on this machine until reboot ({target.label})"
    if scope == 2 and not capable:
        return f"kernel.yama.ptrace_scope is 2: only CAP_SYS_PTRACE may trace {target.label}; {fix}"
    if target.uid != euid and not capable:
        return f"{target.label} belongs to uid {target.uid}, not to you (uid {euid}); {fix}, or attach as that user"
    if scope == 1 and not capable:
        return (f"kernel.yama.ptrace_scope is 1: only its parent may trace {target.label}; {fix}, "
                "or set kernel.yama.ptrace_scope=0")  # fmt: skip
    return None


def yama_scope(proc: Path = PROC) -> int:
    """0 without the Yama module (classic ptrace permissions)."""
    try:
        return int((proc / YAMA).read_text().strip())
    except (OSError, ValueError):
        return 0


def has_cap_sys_ptrace(proc: Path = PROC) -> bool:
    try:
        caps = int(_status_field((proc / "self" / "status").read_text(), "CapEff"), 16)
    except (OSError, ValueError):
        return False
    return bool(caps >> CAP_SYS_PTRACE & 1)


def _status_field(status: str, key: str) -> str:
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def _readlink(path: Path) -> str:
    try:
        return os.readlink(path).removesuffix(" (deleted)")
    except OSError:
        return ""


def _mapped_paths(maps: Path) -> list[str]:
    try:
        text = maps.read_text()
    except OSError:
        return []
    return sorted({line.split(None, 5)[5] for line in text.splitlines() if line.count(" ") >= 5 and "/" in line})
