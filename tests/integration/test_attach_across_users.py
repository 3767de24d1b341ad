"""Root's `hicache attach` on a process of a second, unprivileged user (made by the test,
removed after), tried as that user would attack it (docs/security.md, "Attaching"):
links and FIFOs planted under every name hicache or the agent writes or reads, a directory
of that user's as --run-dir, a stopped or already traced target, SIGTERM in each phase of
an attach, a full filesystem. In each case no file of root's outside the run directory
changes, hicache ends within seconds (or says in one line what it refused), and the
target runs on as it was. Real users, real gdb, real gloo."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from hicache_cli.attach import protocol
from hicache_cli.attach.session import AttachSession
from hicache_cli.errors import AttachRefused
from tests.integration.attach_helpers import PROGRAMS, Command, start_hicache, wait_for
from tests.second_user import ATTACKER, LocalUser, second_user, unavailable

pytestmark = [pytest.mark.slow, pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))]
LONE = PROGRAMS / "lone_rank.py"
WITHIN_S = 15.0  # "within seconds": what a loaded 2-core machine needs for hicache to end


@dataclass
class Program:
    """lone_rank.py running as the second user."""

    proc: subprocess.Popen[str]
    stop_file: Path
    lines: list[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def state(self) -> str:
        return psutil.Process(self.pid).status()

    def running(self) -> bool:
        return self.proc.poll() is None and self.state() in (psutil.STATUS_RUNNING, psutil.STATUS_SLEEPING)

    def stop(self) -> str:
        """Ask it to stop as its user would; everything it printed."""
        self.stop_file.touch()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        return "".join(self.lines)


def start_program(user: LocalUser, *args: str) -> Program:
    stop = user.home / f"stop-{time.monotonic_ns()}"
    proc = user.popen(["python", str(LONE), "--stop-file", str(stop), *args],
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    program = Program(proc, stop, [])
    out = proc.stdout
    assert out is not None
    while "serving" not in "".join(program.lines):
        line = out.readline()
        assert line, f"lone_rank.py did not start: {program.lines}"
        program.lines.append(line)
    threading.Thread(target=lambda: program.lines.extend(iter(out.readline, "")), daemon=True).start()
    return program


@pytest.fixture(scope="module")
def user() -> Iterator[LocalUser]:
    with second_user() as made:
        yield made


@pytest.fixture(scope="module")
def service(user: LocalUser) -> Iterator[Program]:
    program = start_program(user)
    yield program
    output = program.stop()
    assert "Traceback" not in output and "hicache" not in output  # nothing of hicache's in its output


@pytest.fixture(scope="module")
def spare(user: LocalUser) -> Iterator[Program]:
    """A second program of the user's, for the cases that leave the first one untouched:
    stopped and continued, held by another tracer and let go, attached and stopped by SIGTERM."""
    program = start_program(user)
    yield program
    output = program.stop()
    assert "Traceback" not in output and "hicache" not in output


@dataclass(frozen=True)
class Roots:
    """Files of root's outside any run directory: links planted by the user point at them."""

    where: Path
    before: tuple[bytes, float, int]

    @property
    def sentinel(self) -> Path:
        return self.where / "sentinel"

    def unchanged(self) -> bool:
        found = self.sentinel.stat()
        return (self.sentinel.read_bytes(), found.st_mtime, found.st_mode) == self.before and not (
            self.where / "created"
        ).exists()


@pytest.fixture
def roots() -> Iterator[Roots]:
    where = Path(tempfile.mkdtemp(prefix="hicache-roots-", dir="/tmp"))
    os.chmod(where, 0o755)  # the user sees the names, as it would see /etc's
    sentinel = where / "sentinel"
    sentinel.write_bytes(b"root's own file\n")
    os.chmod(sentinel, 0o600)
    found = sentinel.stat()
    yield Roots(where, (sentinel.read_bytes(), found.st_mtime, found.st_mode))
    for path in where.iterdir():
        path.unlink()
    where.rmdir()


@pytest.fixture
def base() -> Iterator[Path]:
    """Where run directories go: a directory of root's that others may pass through."""
    where = Path(tempfile.mkdtemp(prefix="hicache-runs-", dir="/tmp"))
    os.chmod(where, 0o755)
    yield where
    subprocess.run(["rm", "-rf", str(where)], check=False)


def attach(pid: int, run_dir: Path, *extra: str, duration: str = "3s") -> Command:
    return start_hicache("attach", "--duration", duration, "--no-live", "--run-dir", str(run_dir), *extra, str(pid),
                         cwd=run_dir.parent)  # fmt: skip


def one_line(command: Command) -> str:
    """hicache's error output: exactly one line, no traceback."""
    err = command.text("err")
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def test_the_run_directory_is_hicache_s_and_only_the_agents_directory_is_the_user_s(
    service: Program, user: LocalUser, base: Path
) -> None:
    run = base / "run"
    command = attach(service.pid, run)
    assert command.wait(120) == 0, command.text("err")
    mode = os.stat(run)
    assert (mode.st_uid, stat.S_IMODE(mode.st_mode)) == (0, 0o711)  # passable, not readable or writable
    agent = os.stat(protocol.agent_dir(run))
    assert (agent.st_uid, stat.S_IMODE(agent.st_mode)) == (user.uid, 0o700)
    for path in run.iterdir():
        if path.is_file():
            found = path.stat()
            assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (0, 0o600), path
    for path in protocol.agent_dir(run).iterdir():
        found = path.stat()
        assert (found.st_uid, stat.S_IMODE(found.st_mode)) == (user.uid, 0o600), path
    tried = user.run(["python", "-c", f"open({str(run / 'x')!r}, 'w')"])
    assert tried.returncode != 0 and "PermissionError" in tried.stdout
    report = json.loads((run / "report.json").read_text())
    (process,) = report["target"]["processes"]
    assert process["state"] == "detached" and process["holders"][0]["path"] == "__main__.pending"
    assert service.running()


def plant(
    user: LocalUser, mode: str, directory: Path, seconds: float, roots: Roots, *names: str
) -> subprocess.Popen[str]:
    return user.popen(["python", str(ATTACKER), mode, str(directory), str(seconds), str(roots.where), *names],
                      stdout=subprocess.PIPE)  # fmt: skip


def planted(proc: subprocess.Popen[str]) -> dict[str, dict[str, int]]:
    out, _ = proc.communicate(timeout=120)
    return json.loads(out.strip().splitlines()[-1])


def agent_names(pid: int) -> list[str]:
    return [f"attach-{pid}.json", f"census-{pid}.json", f"census-{pid}-end.json", "rank-0.jsonl", "rank-1.jsonl"]


def run_dir_names(pid: int) -> list[str]:
    return ["attach-stop", f"attach-{pid}.cancel", f".attach-{pid}.gdb.log", f".attach-{pid}.py", "report.json",
            "config.json", ".hicache-run", "rank-0.jsonl"]  # fmt: skip


@pytest.mark.parametrize("mode", ["link", "fifo"])
def test_links_and_fifos_under_every_name_lead_nowhere_and_block_nothing(
    service: Program, user: LocalUser, base: Path, roots: Roots, mode: str
) -> None:
    """The user plants (again and again) a symlink to a file of root's, or a FIFO, under each
    name the agents write and hicache reads, and tries the same under every name hicache
    writes in its own directory. hicache never writes through a link, never blocks on a
    FIFO: it ends as usual, or refuses in one line naming what it would not read."""
    run = base / "run"
    into_agent = plant(user, mode, protocol.agent_dir(run), 12, roots, *agent_names(service.pid))
    into_run = plant(user, "link", run, 12, roots, *run_dir_names(service.pid))
    time.sleep(0.5)  # both are watching for the directories
    command = attach(service.pid, run)
    code = command.wait(120)
    ended = time.monotonic() - command.began
    assert code in (0, 2), command.text("err")
    if code == 2:
        said = one_line(command)
        assert "agent" in said or "rank-" in said or "attach-" in said, said
    assert ended < 3 + WITHIN_S + 30  # the attach itself (gdb, the census) and then its duration
    agent_side, run_side = planted(into_agent), planted(into_run)
    assert sum(agent_side["planted"].values()) > 0  # the attack on the agents' directory happened
    assert sum(run_side["planted"].values()) == 0 and sum(run_side["refused"].values()) > 0  # not in hicache's
    assert roots.unchanged()
    assert service.running()


def test_an_existing_directory_of_another_user_is_refused_as_run_dir(service: Program, user: LocalUser) -> None:
    shared = user.home / "shared"
    made = user.run(["python", "-c", f"import os; os.mkdir({str(shared)!r}); os.chmod({str(shared)!r}, 0o777)"])
    assert made.returncode == 0, made.stdout
    assert shared.is_dir()
    command = attach(service.pid, shared)
    assert command.wait(60) == 2
    assert "belongs to another user" in one_line(command)
    assert list(shared.iterdir()) == []
    assert service.running()


def test_a_stopped_target_is_refused_and_stays_stopped(spare: Program, base: Path) -> None:
    program = spare
    try:
        os.kill(program.pid, signal.SIGSTOP)
        wait_for(lambda: program.state() == psutil.STATUS_STOPPED, 30, "the stop")
        command = attach(program.pid, base / "run")
        assert command.wait(60) == 2
        assert "is stopped (SIGSTOP or Ctrl-Z)" in one_line(command)
        time.sleep(0.5)
        assert program.state() == psutil.STATUS_STOPPED
    finally:
        os.kill(program.pid, signal.SIGCONT)
    wait_for(program.running, 30, "the program to run on")


SEIZE = """import ctypes, sys, time
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = (ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p)
assert libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0, ctypes.get_errno()  # PTRACE_SEIZE: no stop
print("seized", flush=True)
time.sleep(120)
"""


def test_a_target_another_tracer_holds_is_refused_naming_the_tracer(spare: Program, base: Path) -> None:
    program = spare
    tracer = subprocess.Popen([sys.executable, "-c", SEIZE, str(program.pid)], stdout=subprocess.PIPE, text=True)
    try:
        assert tracer.stdout is not None and tracer.stdout.readline().strip() == "seized"
        command = attach(program.pid, base / "run")
        assert command.wait(60) == 2
        assert f"is already traced by pid {tracer.pid}" in one_line(command)
    finally:
        tracer.kill()
        tracer.wait(30)
    wait_for(program.running, 30, "the program to run on")


def children_named(pid: int, name: str) -> list[psutil.Process]:
    with contextlib.suppress(psutil.Error):
        return [p for p in psutil.Process(pid).children(recursive=True) if p.name() == name]
    return []


@pytest.mark.parametrize("phase", ["debugger", "answer", "census", "attached"])
def test_sigterm_ends_hicache_within_seconds_in_every_phase(
    user: LocalUser, spare: Program, base: Path, phase: str
) -> None:
    args = {"answer": ["--block"], "census": ["--heap", "3000000"]}.get(phase, [])
    program = spare if phase == "attached" else start_program(user, *args)
    run = base / "run"
    try:
        command = attach(program.pid, run, duration="10m")
        status = protocol.status_file(run, program.pid)
        census = protocol.census_file(run, program.pid)
        reached = {
            "debugger": lambda: bool(children_named(command.proc.pid, "gdb")),
            "answer": lambda: (run / f".attach-{program.pid}.gdb.log").exists(),
            "census": lambda: status.exists() and not census.exists(),
            "attached": lambda: command.first("census cost", "out") is not None,
        }[phase]
        wait_for(lambda: reached() or command.proc.poll() is not None, 120, phase)
        assert command.proc.poll() is None, command.text("err")
        debuggers = children_named(command.proc.pid, "gdb")
        command.proc.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        code = command.wait(120)
        assert time.monotonic() - signalled < WITHIN_S, command.text("err")
        assert code in (128 + signal.SIGTERM, 2), command.text("err")  # 2: refused, the attach cut short
        assert "Traceback" not in command.text("err")
        assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in debuggers)
        time.sleep(1.0)
        assert program.running(), program.state()
    finally:
        output = "" if program is spare else program.stop()
    assert "Traceback" not in output and "hicache" not in output


@contextlib.contextmanager
def full_filesystem(size: str = "64k") -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="hicache-full-", dir="/tmp"))
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                      capture_output=True).returncode != 0:  # fmt: skip
        where.rmdir()
        pytest.skip("cannot mount a tmpfs here")
    try:
        os.chmod(where, 0o755)
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=False)
        where.rmdir()


def fill(where: Path) -> None:
    with contextlib.suppress(OSError), open(where / "filler", "wb") as out:
        while True:
            out.write(b"\0" * 4096)
            out.flush()


@pytest.mark.parametrize("command", ["stress", "trace", "attach"])
def test_a_full_filesystem_is_one_line_and_leaves_nothing(service: Program, command: str) -> None:
    with full_filesystem() as where:
        fill(where)
        run = where / "run"
        args = {
            "stress": ["stress", "--pp", "2", "--duration", "3s", "--no-live", "--run-dir", str(run)],
            "trace": ["trace", "--duration", "3s", "--no-live", "--run-dir", str(run), "--", sys.executable, "-c", "0"],
            "attach": ["attach", "--duration", "3s", "--no-live", "--run-dir", str(run), str(service.pid)],
        }[command]
        started = start_hicache(*args, cwd=Path(tempfile.gettempdir()))
        assert started.wait(120) == 2
        assert "No space left on device" in one_line(started)
        assert sorted(p.name for p in where.iterdir()) == ["filler"]
    assert service.running()


def test_a_disk_that_fills_mid_run_still_prints_the_verdict() -> None:
    """A one-rank program traced (the report's path is the same for every command: execute)."""
    with full_filesystem("4m") as where:
        run, stop = where / "run", Path(tempfile.gettempdir()) / f"stop-{time.monotonic_ns()}"
        command = start_hicache("trace", "--duration", "60s", "--no-live", "--run-dir", str(run), "--",
                                sys.executable, str(LONE), "--stop-file", str(stop),
                                cwd=Path(tempfile.gettempdir()))  # fmt: skip
        samples = run / "rank-0.jsonl"
        wait_for(lambda: samples.exists() and samples.read_text().count("\n") >= 25 or command.proc.poll() is not None,
                 120, "2.5 s of samples")  # fmt: skip
        assert command.proc.poll() is None, command.text("err")
        fill(where)
        stop.touch()  # the program ends by itself; its report then finds the disk full
        assert command.wait(180) == 2
        err = command.text("err")  # the traced program's output too
        assert err.strip().splitlines()[-1].startswith("hicache: error: cannot write") and "No space left" in err
        assert "hicache_cli" not in err  # no traceback of hicache's, in hicache or in the program
        verdict = re.search(r"^rank 0 \(pid \d+\): (LEAK|BOUNDED|INCONCLUSIVE) - ", command.text("out"), re.M)
        assert verdict is not None, command.text("out")  # the verdict, though report.json could not be written


LOCK = """import os, sys, time
agent = sys.argv[1]
while not os.path.isdir(agent):
    time.sleep(0.002)
os.chmod(agent, 0o500)
"""


def test_an_agent_that_cannot_answer_says_nothing_in_the_program_s_output(
    user: LocalUser, spare: Program, base: Path
) -> None:
    """The user takes the write bit off its agents' directory as soon as hicache made it: the
    agent cannot write its status. Nothing of that appears in the program's output (the
    injected code never raises into it), and hicache says why it heard nothing."""
    program = spare
    run = base / "run"
    run.mkdir(mode=0o700)
    locker = user.popen(["python", "-c", LOCK, str(protocol.agent_dir(run))])
    try:
        with pytest.raises(AttachRefused) as refused:
            AttachSession([program.pid], run, answer_s=5).start()
        assert "the agents' directory was made unwritable (0500) by its owner" in str(refused.value)
        time.sleep(1.0)
        assert program.running()
    finally:
        locker.wait(30)
    output = "".join(program.lines)
    assert "Traceback" not in output and "hicache" not in output and "Error" not in output
