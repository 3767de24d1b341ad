"""A long-running 2-rank gloo server to attach to, and looking inside it after a detach."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hicache_cli.attach import inject, procs
from hicache_cli.attach.protocol import BootArgs
from hicache_cli.attach.session import ROOT
from hicache_cli.protocol import sample_files
from tests.integration.helpers import REPO

PROGRAMS = Path(__file__).resolve().parent / "programs"
LEFTOVERS = REPO / "tests" / "attach" / "leftovers.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
# the ranks forked from one process that imported torch once (torch.multiprocessing, as users
# write single-node launchers): no agent's interpreter, no import a rank
FORK_LAUNCH = [sys.executable, str(PROGRAMS / "fork_launch.py")]


@dataclass
class Server:
    """A program under torchrun or the fork launcher: runs until its stop file appears."""

    proc: subprocess.Popen[str]
    stop_file: Path
    lines: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ranks(self) -> list[int]:
        """The rank processes below the launcher (Python with torch loaded)."""
        return [p for p in procs.descendants(self.pid) if procs.inspect(p).torch]

    def running(self) -> bool:
        return self.proc.poll() is None and all(_alive(p) for p in self.ranks())

    def stop(self, timeout: float = 120) -> int:
        self.stop_file.touch()
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """Every rank, then the launcher: torchrun starts each rank in a session of its own,
        and ranks left behind would go on leaking."""
        for pid in procs.descendants(self.pid) if self.proc.poll() is None else []:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


def start_server(tmp: Path, policy: str, timeout: float = 180, launcher: list[str] = TORCHRUN) -> Server:
    """programs/serving_p2p.py under torchrun (or `launcher`), once every rank says it is serving."""
    return start_program(tmp, "serving_p2p.py", ["--policy", policy], policy, 2, timeout, launcher=launcher)


def start_program(
    tmp: Path, program: str, args: list[str], label: str, world: int = 2, timeout: float = 180, path: str = "",
    launcher: list[str] = TORCHRUN,
) -> Server:  # fmt: skip
    """A program of programs/ that takes --stop-file and prints "serving" per rank, under
    `launcher` (torchrun, or FORK_LAUNCH); `path`: its PYTHONPATH (none by default: then
    nothing of hicache is importable by it)."""
    stop = tmp / f"stop-{label}-{time.monotonic_ns()}"
    command = [*launcher, "--nproc-per-node", str(world), str(PROGRAMS / program), *args, "--stop-file", str(stop)]
    errors = (tmp / f"{stop.name}.stderr").open("w")  # torchrun's and the ranks' (an agent's failure too)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYTHONFAULTHANDLER": "1"}, **({"PYTHONPATH": path} if path else {}))  # a crash says where
    proc = subprocess.Popen(command, cwd=tmp, stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
    server = Server(proc, stop)
    threading.Thread(target=lambda: server.lines.extend(iter(proc.stdout.readline, "")), daemon=True).start()
    deadline = time.monotonic() + timeout
    while sum("serving" in line for line in server.lines) < world:
        if proc.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"{program} did not start: {server.lines}")
        time.sleep(0.1)
    return server


def reference_output(tmp: Path, policy: str, serve_s: float = 2.0) -> tuple[int, list[str]]:
    """The program's output and exit code without hicache."""
    server = start_server(tmp, policy)
    time.sleep(serve_s)
    code = server.stop()
    return code, sorted(server.lines)


def serve_beside_reference(
    tmp: Path, policy: str, known: dict[str, tuple[int, list[str]]], serve_s: float = 2.0
) -> tuple[Server, tuple[int, list[str]]]:
    """start_server, and at the same time the same program without hicache (reference_output):
    the two start together instead of one after the other. The server has served for at
    least `serve_s` when this returns. `known`: references made before, by policy (the
    program's output does not depend on the run: one reference serves every server)."""
    if policy in known:
        server = start_server(tmp, policy)
        time.sleep(serve_s)
        return server, known[policy]
    with ThreadPoolExecutor(1) as pool:
        reference = pool.submit(reference_output, tmp, policy, serve_s)
        server = start_server(tmp, policy)
        started = time.monotonic()
        try:
            found = reference.result(timeout=300)
        except BaseException:
            server.kill()
            raise
    time.sleep(max(0.0, serve_s - (time.monotonic() - started)))
    known[policy] = found
    return server, found


def leftovers(pid: int, run_dir: Path, timeout: float = 60) -> dict[str, Any]:
    """What of hicache is still inside `pid` (tests/attach/leftovers.py, injected)."""
    out = run_dir / f"leftovers-{pid}.json"
    inject.inject(procs.inspect(pid), BootArgs(str(run_dir), ROOT, "0:"), script=LEFTOVERS)
    deadline = time.monotonic() + timeout
    while not out.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return json.loads(out.read_text())


def injected_pages(pid: int) -> int:
    """Anonymous mappings of `pid` that still begin with an injected text's marker line."""
    count = 0
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            fields = line.split()
            if len(fields) != 5 or fields[1] != "rw-p":
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if end - start > 1 << 16:
                continue
            try:
                mem.seek(start)
                count += mem.read(9) == b"#hicache-"
            except OSError:  # unmapped since maps was read
                continue
    return count


def rank_lines(run_dir: Path, rank: int) -> list[dict[str, Any]]:
    path = sample_files(run_dir).get(rank, run_dir / f"rank-{rank}.jsonl")  # an attach's: in its agents' directory
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class Command:
    """`hicache ...` run in a subprocess; each line it wrote, with when it came (seconds after start)."""

    proc: subprocess.Popen[str]
    began: float
    out: list[tuple[float, str]] = field(default_factory=list)
    err: list[tuple[float, str]] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    def wait(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout)
        for reader in self.readers:
            reader.join(10)
        return code

    def first(self, text: str, stream: str = "err") -> float | None:
        """When the first line containing `text` came."""
        return next((t for t, line in getattr(self, stream) if text in line), None)

    def text(self, stream: str = "out") -> str:
        return "".join(line for _, line in getattr(self, stream))

    def wait_for_census(self, timeout: float = 180) -> None:
        """Until an attach has printed its census (it is attached), or has ended."""
        wait_for(
            lambda: self.first("census cost", "out") is not None or self.proc.poll() is not None, timeout, "census"
        )


def start_hicache(*args: str, cwd: Path, sigint_default: bool = False) -> Command:
    """The real CLI; with `sigint_default`, SIGINT reaches it as a terminal's Ctrl-C would."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "hicache_cli", *args],
        cwd=cwd,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)) if sigint_default else None,
    )
    command = Command(proc, time.monotonic())

    def read(stream: Any, lines: list[tuple[float, str]]) -> None:
        for line in iter(stream.readline, ""):
            lines.append((time.monotonic() - command.began, line))

    for stream, lines in ((proc.stdout, command.out), (proc.stderr, command.err)):
        reader = threading.Thread(target=read, args=(stream, lines), daemon=True)
        reader.start()
        command.readers.append(reader)
    return command


def hicache_run(*args: str, cwd: Path, timeout: float = 300) -> Command:
    command = start_hicache(*args, cwd=cwd)
    command.wait(timeout)
    return command
