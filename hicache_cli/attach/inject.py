"""Getting a few lines of Python run inside a live process, at a point where it is safe.

With gdb (any CPython 3): gdb stops the process only for as long as it takes to

1. map one fresh page (`mmap`: a system call, safe wherever the process was stopped),
2. write the injected text into it (through ptrace: nothing runs),
3. queue `PyRun_SimpleString(page)` with `Py_AddPendingCall`, called on a thread other than
   the main one (the main thread may hold the pending-call lock where it was stopped),

then it detaches (gdb_inject.py, run by gdb's Python, says how the calls are made). The
interpreter runs pending calls on its main thread between two bytecodes, holding the GIL,
where it runs signal handlers: the text runs at a safe point, not inside whatever C code
gdb happened to interrupt (memray's `_attach.gdb` gets there by breaking on allocator entry
points and calling into a helper library; hicache has no compiled helper, and needs none).
gdb loads only libc's and libpython's symbols (`auto-solib-add off`): reading those of
torch's libraries made a plain `gdb -p` take 10-25 s, with the target stopped all along.

With `sys.remote_exec` (PEP 768, CPython 3.14+): the target's own executable is asked to
do it, which queues the same text for the same kind of safe point; no debugger needed.

The text must never raise: a pending call that fails would surface as an error in the
program's own code. It binds no name in `__main__` (where it runs), and checks the Python
version before it reads anything of hicache.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from hicache_cli.attach.procs import ProcessInfo, inspect, ptrace_refusal, state_refusal
from hicache_cli.attach.protocol import AGENT_NAME, MIN_PYTHON, BootArgs, status_file
from hicache_cli.errors import AttachRefused
from hicache_cli.files import run_file

BOOT = Path(__file__).resolve().parent / "boot.py"
MARK = "HICACHE-STEP"
# each line gdb runs, and what its failure means (a step's marker is printed once it worked)
GDB_STEPS = (
    ("attached", None),
    (
        "symbols",
        "its Python exposes no Py_AddPendingCall or PyRun_SimpleString to the debugger "
        "(not CPython, or a stripped build)",
    ),  # fmt: skip
    ("page", "mmap failed in the process"),
    ("queued", "the interpreter refused the pending call (its queue is full)"),
)
NO_THREAD = "no thread of it is blocked in a system call, where hicache can call into it safely"
THREAD_TRIES, THREAD_RETRY_S = 8, 0.3
STOPPED = "hicache was stopped while its debugger ran (it put the process back as it was and left)"
POLL_S = 0.1  # how often a running debugger is checked on (hicache stopped? past its time?)
GRACE_S = 5.0  # after SIGINT, how long the debugger has to put everything back before SIGKILL
PAGE_SLOT = "hicache-page-slot"  # in ARGS; replaced by page_slot(): (address, size), filled in by gdb
REMOTE_EXEC_FROM = (3, 14)


@dataclass(frozen=True)
class Injected:
    method: str  # "gdb" or "sys.remote_exec"
    seconds: float  # the debugger's whole run: the process is stopped for most of it with gdb
    marker: str


def injected_text(boot: BootArgs, pid: int, marker: str, script: Path = BOOT) -> str:
    """The text the target runs: exec `script` (boot.py) in a fresh namespace with ARGS, or
    refuse an old Python."""
    args = dict(boot.to_dict(), marker=marker, page=PAGE_SLOT)
    namespace = f"{{'__name__':{AGENT_NAME!r},'__file__':{str(script)!r},'ARGS':{args!r}}}"
    floor = ".".join(map(str, MIN_PYTHON))
    refusal = (f'{{"pid": {pid}, "state": "refused", "python": "%s", '
               f'"reason": "its Python is older than {floor}, the oldest hicache runs in"}}')  # fmt: skip
    status = str(status_file(Path(boot.run_dir), pid))
    path = "__import__('pathlib').Path"  # reads and writes that close their file, and bind no name
    old = f"{path}({status!r}).write_text({refusal!r}%__import__('sys').version.split()[0])"
    run = f"exec(compile({path}({str(script)!r}).read_bytes(),{str(script)!r},'exec'),{namespace})"
    text = (
        f"#{marker}\n"
        "try:\n"
        f" {run} if __import__('sys').version_info>={MIN_PYTHON!r} else {old}\n"
        "except BaseException:\n"
        " pass\n"
    )
    # gdb writes the page's address and size over the slot (the same length): boot.py unmaps it
    return text.replace(repr(PAGE_SLOT), page_slot(0, page_size(text)), 1)


def page_size(text: str) -> int:
    """The pages the text and its NUL take (the text's length does not change when gdb fills the slot)."""
    size = len(text.encode()) + 1
    return size + (-size % 4096)


def page_slot(address: int, size: int) -> str:
    return f"(0x{address:016x},0x{size:08x})"


def choose(target: ProcessInfo) -> str:
    """The way in: sys.remote_exec on 3.14+, else gdb; AttachRefused when there is none."""
    if target.python is not None and target.python >= REMOTE_EXEC_FROM and os.path.exists(target.exe):
        return "sys.remote_exec"
    if shutil.which("gdb") is None:
        raise AttachRefused(
            f"cannot attach to {target.label}: gdb is not installed (apt-get install gdb, dnf install gdb)"
        )
    return "gdb"


def inject(
    target: ProcessInfo,
    boot: BootArgs,
    timeout_s: float = 60.0,
    script: Path = BOOT,
    *,
    start: str | None = None,
    cancel: threading.Event | None = None,
) -> Injected:
    """Queue the injected text in `target`; AttachRefused with the reason when it cannot.
    `script` is boot.py but for tests, which look inside a target the same way. `start`:
    the process's start time as first seen (lifecycle.process_start): a pid that names
    another process by the time the debugger holds it is left untouched. `cancel`: set when
    hicache is stopped; the debugger is then asked to put everything back and leave."""
    refusal = ptrace_refusal(target) or state_refusal(target)
    if refusal is not None:
        raise AttachRefused(refusal)
    method = choose(target)
    marker = f"hicache-{secrets.token_hex(8)}"
    text = injected_text(boot, target.pid, marker, script)
    run_dir = Path(boot.run_dir)
    started = time.monotonic()
    if method == "sys.remote_exec":
        # the target reads the file at its next safe point, after remote_exec has returned
        try:
            _remote_exec(target, remote_script(run_dir, target.pid), text, timeout_s, cancel)
        except AttachRefused:  # remote debugging disabled in the target (-X disable_remote_debug)
            if shutil.which("gdb") is None:
                raise
            method = "gdb"
    if method == "gdb":
        with tempfile.TemporaryDirectory(prefix="hicache-attach-") as tmp:
            output = run_gdb(target, Path(tmp), text, timeout_s, start, cancel)
        # what gdb said, kept beside the status: the thread it called on, each step
        _keep_log(run_dir / f".attach-{target.pid}.gdb.log", output)
    return Injected(method, time.monotonic() - started, marker)


def _keep_log(path: Path, output: str) -> None:
    """gdb's output in a file hicache creates itself, exclusively, in its own directory."""
    with contextlib.suppress(OSError), run_file(path, "new") as out:  # a log lost costs nothing measured
        out.write(output)


def remote_script(run_dir: Path, pid: int) -> Path:
    """sys.remote_exec's file (removed by the session once the agent has answered)."""
    return run_dir / f".attach-{pid}.py"


GDB_SCRIPT = Path(__file__).resolve().parent / "gdb_inject.py"


def gdb_command(pid: int) -> list[str]:
    return [
        "gdb", "-nx", "-batch", "-p", str(pid),
        "-iex", "set auto-solib-add off",  # torch's libraries are never read: only libc's and libpython's
        "-iex", "set debuginfod enabled off",
        "-x", str(GDB_SCRIPT),
    ]  # fmt: skip


def run_gdb(
    target: ProcessInfo,
    tmp: Path,
    text: str,
    timeout_s: float,
    start: str | None = None,
    cancel: threading.Event | None = None,
) -> str:
    cancel = cancel or threading.Event()
    text_file = tmp / "text.py"
    text_file.write_text(text)
    args = {"pid": target.pid, "text_file": str(text_file), "start": start}
    env = dict(os.environ, HICACHE_GDB_ARGS=json.dumps(args))
    for _attempt in range(THREAD_TRIES):
        output = _run_interruptibly(gdb_command(target.pid), timeout_s, env, cancel)
        reason = gdb_failure(output, target)
        if reason != NO_THREAD:  # every thread was running Python or C code: a moment later, most sleep
            break
        if cancel.wait(THREAD_RETRY_S):
            reason = STOPPED
            break
    if reason is not None:
        raise AttachRefused(f"cannot attach to {target.label}: {reason}")
    return output


def gdb_failure(output: str, target: ProcessInfo) -> str | None:
    """Why gdb did not queue the text, from what it printed (None when it did)."""
    done = {line.split()[1] for line in output.splitlines() if line.startswith(MARK) and len(line.split()) > 1}
    if "queued" in done:
        return None
    if "reused" in done:
        return "its pid now names another process (the one first seen exited): nothing was injected"
    if "(stopped by hicache)" in output:
        return STOPPED
    if "ptrace: Operation not permitted" in output:
        return "the kernel refused ptrace (EPERM): " + (
            ptrace_refusal(target)
            or _state_now(target)
            or "a security module or seccomp forbids it; run as root or with CAP_SYS_PTRACE"
        )
    if "ptrace: No such process" in output:
        return "it exited"
    if "nothread" in done:
        return NO_THREAD
    if "Python scripting is not supported" in output:
        return "this gdb was built without Python, which hicache drives it with"
    if "timed out" in output:
        return "gdb did not finish in time"
    for step, meaning in GDB_STEPS:
        if step not in done:
            return meaning or ("gdb could not attach: " + _last_line(output))
    return "gdb failed: " + _last_line(output)


def _state_now(target: ProcessInfo) -> str | None:
    """state_refusal as /proc says it now (a tracer may have come since the first look)."""
    try:
        return state_refusal(inspect(target.pid))
    except AttachRefused:
        return None


def _remote_exec(
    target: ProcessInfo, script: Path, text: str, timeout_s: float, cancel: threading.Event | None = None
) -> None:
    """CPython 3.14+: the target's own interpreter (same version, as PEP 768 requires). The
    script is made by hicache, exclusively, in its run directory, and given to the target's
    user, who must read it."""
    with run_file(script, "new") as out:
        out.write(text)
        if target.uid != os.geteuid():
            os.fchown(out.fileno(), target.uid, -1)
    code = f"import sys; sys.remote_exec({target.pid}, {str(script)!r})"
    output = _run_interruptibly([target.exe, "-c", code], timeout_s, cancel=cancel)
    if output.strip():
        script.unlink(missing_ok=True)
        raise AttachRefused(f"cannot attach to {target.label}: sys.remote_exec: {_last_line(output)}")


def _run_interruptibly(
    command: list[str], timeout_s: float, env: dict[str, str] | None = None, cancel: threading.Event | None = None
) -> str:
    """Run a debugger in a session of its own (a Ctrl-C at hicache's terminal is hicache's to
    pass on, not the debugger's to take mid-call); past the timeout, or once `cancel` is set,
    it gets SIGINT (the script puts the registers back and detaches), and only after
    GRACE_S more, SIGKILL."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            out, _ = proc.communicate(timeout=POLL_S)  # output is kept across the retries
            break
        except subprocess.TimeoutExpired:
            stopped = cancel is not None and cancel.is_set()
            if stopped or time.monotonic() >= deadline:
                return _interrupt(proc) + ("\n(stopped by hicache)" if stopped else "\n(timed out)")
    text = out.decode(errors="replace")
    return text if proc.returncode == 0 else text + f"\n(exit {proc.returncode})"


def _interrupt(proc: subprocess.Popen[bytes]) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        out, _ = proc.communicate(timeout=GRACE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out.decode(errors="replace")


def _last_line(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"
