"""hicache attach refuses, in one line with exit code 2, the processes it cannot attach to:
real processes of each kind (a missing pid, `sleep`, a Python without torch, a Python with
torch but no process group, something named python without its symbols, an old Python)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hicache_cli.attach import inject, procs, protocol
from hicache_cli.attach.protocol import BootArgs
from hicache_cli.attach.session import ROOT, AttachSession, make_agent_dir
from hicache_cli.errors import AttachRefused, UsageError
from hicache_cli.lifecycle import process_start

PYENV = Path.home() / ".pyenv" / "versions"
needs_gdb = pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (apt-get install gdb)")


def refusal(pid: int, run_dir: Path, answer_s: float = 60) -> str:
    with pytest.raises(AttachRefused) as caught:
        AttachSession([pid], run_dir, answer_s=answer_s).start()
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == UsageError.exit_code == 2
    return message


@pytest.fixture
def running() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait(30)


def start(running: list[subprocess.Popen[bytes]], *command: str, env: dict[str, str] | None = None,
          settle: float = 0.5) -> int:  # fmt: skip
    proc = subprocess.Popen(command, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL)
    running.append(proc)
    time.sleep(settle)
    assert proc.poll() is None
    return proc.pid


def ready(path: Path, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_a_missing_pid(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert refusal(gone.pid, tmp_path) == f"no process with pid {gone.pid}"


def test_a_process_that_is_not_python(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    pid = start(running, "sleep", "60")
    assert refusal(pid, tmp_path) == f"pid {pid} (sleep) is not a Python process"


def test_a_python_without_torch(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    pid = start(running, sys.executable, "-c", "import time; time.sleep(60)")
    assert refusal(pid, tmp_path).endswith(": torch is not imported")


@needs_gdb
@pytest.mark.slow
def test_a_python_with_torch_but_no_process_group(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    flag = tmp_path / "imported"
    code = f"import torch.distributed, time, pathlib\npathlib.Path({str(flag)!r}).touch()\nwhile True: time.sleep(0.05)"
    pid = start(running, sys.executable, "-c", code)
    ready(flag)
    message = refusal(pid, tmp_path)
    assert message.endswith(protocol.NO_GROUP)  # said by the agent inside the process: it was injected
    status = protocol.read_json(protocol.status_file(tmp_path, pid))
    assert status is not None and status["state"] == protocol.REFUSED


def fake_torch(tmp_path: Path) -> dict[str, str]:
    """LD_PRELOAD a library named like torch's: /proc then says torch is loaded."""
    lib = tmp_path / "libc10.so"
    shutil.copy(next(Path("/lib/x86_64-linux-gnu").glob("libm.so.6")), lib)
    return {"LD_PRELOAD": str(lib)}


@needs_gdb
@pytest.mark.slow
@pytest.mark.skipif(not Path("/lib/x86_64-linux-gnu/libm.so.6").exists(), reason="needs x86-64 Debian paths")
def test_a_python_without_the_symbols(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    """Named python3.11 and mapping a torch library, but `sleep` inside: gdb finds no
    Py_AddPendingCall and the target is left as it was."""
    impostor = tmp_path / "python3.11"
    shutil.copy(shutil.which("sleep") or "/bin/sleep", impostor)
    pid = start(running, str(impostor), "60", env=fake_torch(tmp_path))
    message = refusal(pid, tmp_path)
    assert "exposes no Py_AddPendingCall or PyRun_SimpleString" in message
    assert running[0].poll() is None


OLD = sorted(PYENV.glob("3.9.*/bin/python3.9"))


@needs_gdb
@pytest.mark.slow
@pytest.mark.skipif(not OLD or not Path("/lib/x86_64-linux-gnu/libm.so.6").exists(), reason="needs a Python 3.9")
def test_a_python_older_than_the_tracer_runs_in(tmp_path: Path, running: list[subprocess.Popen[bytes]]) -> None:
    """The injected text itself checks the version: the agent is never read by Python 3.9."""
    pid = start(running, str(OLD[-1]), "-c", "import time\nwhile True: time.sleep(0.05)", env=fake_torch(tmp_path))
    assert refusal(pid, tmp_path).endswith("its Python is older than 3.10, the oldest hicache runs in")


@needs_gdb
@pytest.mark.slow
def test_a_python_whose_main_thread_never_returns_to_python(
    tmp_path: Path, running: list[subprocess.Popen[bytes]]
) -> None:
    """The injected text runs between two bytecodes of the main thread: one blocked in a
    single long C call never gets there. hicache says so, and leaves a file so that the
    text, if it ever runs, refuses on its own (a cancel file for that process only)."""
    flag = tmp_path / "imported"
    code = f"import torch.distributed, time, pathlib\npathlib.Path({str(flag)!r}).touch()\ntime.sleep(600)"
    pid = start(running, sys.executable, "-c", code)
    ready(flag)
    message = refusal(pid, tmp_path, answer_s=3)
    assert message.startswith(f"pid {pid} (python) did not answer within 3 s: its main thread has not returned")
    assert protocol.cancel_file(tmp_path, pid).exists() and not (tmp_path / protocol.STOP_FILE).exists()


OTHERS = sorted(p for v in ("3.10", "3.12", "3.13") for p in PYENV.glob(f"{v}.*/bin/python{v}"))
OTHERS += [p for p in (Path("/usr/bin/python3.11"),) if p.exists()]  # Debian's: static, symbols in the executable


@needs_gdb
@pytest.mark.slow
@pytest.mark.skipif(not Path("/lib/x86_64-linux-gnu/libm.so.6").exists(), reason="needs x86-64 Debian paths")
@pytest.mark.parametrize("python", OTHERS, ids=[str(p) for p in OTHERS])
def test_the_injection_reaches_other_pythons(
    tmp_path: Path, running: list[subprocess.Popen[bytes]], python: Path
) -> None:
    """gdb's pending call and boot.py on other CPython versions: the answer comes from boot.py
    inside the process (it looked at sys.modules: no torch there, only a library named so)."""
    pid = start(running, str(python), "-c", "import time\nwhile True: time.sleep(0.05)", env=fake_torch(tmp_path))
    assert refusal(pid, tmp_path).endswith(f"cannot attach to pid {pid} ({python.name}): {protocol.NO_TORCH}")
    status = protocol.read_json(protocol.status_file(tmp_path, pid))
    assert status is not None and status["python"].startswith(python.name.removeprefix("python"))


@needs_gdb
@pytest.mark.slow
def test_a_pid_that_names_another_process_by_then_is_left_untouched(
    tmp_path: Path, running: list[subprocess.Popen[bytes]]
) -> None:
    """The debugger holds the process before it looks: a start time other than the one hicache
    saw means the pid was reused, and nothing is written into that process."""
    pid = start(running, sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)")
    make_agent_dir(tmp_path, os.geteuid())
    with pytest.raises(AttachRefused, match="its pid now names another process .* nothing was injected"):
        inject.inject(procs.inspect(pid), BootArgs(str(tmp_path), ROOT, "0:"), start="1")
    time.sleep(1.0)
    assert not protocol.status_file(tmp_path, pid).exists() and running[0].poll() is None
    assert inject.inject(procs.inspect(pid), BootArgs(str(tmp_path), ROOT, "0:"), start=process_start(pid))
    ready(protocol.status_file(tmp_path, pid), 30)  # its own start time: injected (it refuses: no torch)
