"""Where a test suite's CPU goes, by process: every process on the machine read from /proc
five times a second while the suite runs (its CPU, its command line, the test it was started
under - the `PYTEST_CURRENT_TEST` it inherited - and whether it mapped libtorch), then put in
kinds and counted. A process that mapped libtorch imported torch unless its parent had, with
the same command line (a forked rank). A process that lived under 0.2 s may be missed; one
that imports torch lives longer. Used by scripts/suite_cost.py --processes.
"""

from __future__ import annotations

import collections
import os
import re
import threading
from dataclasses import dataclass

TICK = os.sysconf("SC_CLK_TCK")
PERIOD_S = 0.2
TORCH_AFTER_S = 0.6  # of CPU, before /proc/PID/maps is read once (an import takes ~1.6 s here)
# (kind, pattern of the command line), the first that matches
KINDS = [
    ("the xdist workers (the unit tier, fixtures)", r"exec\(eval\(sys\.stdin"),
    ("hicache lint", r"-m hicache_cli lint\b"),
    ("hicache's CLI commands", r"-m hicache_cli [a-z]|bin/hicache "),
    ("torchrun's agents", r"torch\.distributed\.run|bin/torchrun"),
    ("gdb", r"^\S*gdb "),
    ("hicache's ranks, probes, fork servers", r"hicache_cli\.(rank|pytest_ranks)\."),
    ("programs (user-shaped, scripts)", r"\.py\b"),
]


@dataclass
class Process:
    pid: int
    ppid: int
    command: str
    test: str | None  # the test it was started under
    cpu_at_start: float  # CPU it had when first seen (subtracted for those already running)
    cpu: float
    torch: bool | None = None  # mapped libtorch (None: not looked at yet)
    before: bool = False  # running when the census began

    @property
    def spent(self) -> float:
        return self.cpu - self.cpu_at_start if self.before else self.cpu

    def kind(self) -> str:
        return next((name for name, pattern in KINDS if re.search(pattern, self.command)), "the rest")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _maps_torch(pid: int) -> bool | None:
    maps = _read(f"/proc/{pid}/maps")
    return None if maps is None else b"libtorch_cpu" in maps


class ProcCensus:
    """Started before the suite, stopped after: `processes` then holds each one seen."""

    def __init__(self, ignore: frozenset[int] = frozenset()) -> None:
        self.ignore = ignore | {os.getpid()}  # not the suite's (a hog, this process)
        self.processes: dict[tuple[int, str], Process] = {}  # (pid, start time) -> its record
        self._stop = threading.Event()
        self._walk(before=True)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ProcCensus:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(PERIOD_S):
            self._walk()

    def _walk(self, before: bool = False) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit() or (stat := _read(f"/proc/{name}/stat")) is None:
                continue
            fields = stat[stat.rfind(b")") + 2 :].split()
            cpu = (int(fields[11]) + int(fields[12])) / TICK
            key, pid = (name, fields[19].decode()), int(name)
            seen = self.processes.get(key)
            if seen is None:
                seen = self.processes[key] = self._new(pid, int(fields[1]), cpu, before)
            seen.cpu = max(seen.cpu, cpu)
            if seen.torch is None and seen.cpu - seen.cpu_at_start > TORCH_AFTER_S:
                seen.torch = _maps_torch(pid)

    @staticmethod
    def _new(pid: int, ppid: int, cpu: float, before: bool) -> Process:
        command = (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace").strip()
        test = None
        for entry in (_read(f"/proc/{pid}/environ") or b"").split(b"\0"):
            if entry.startswith(b"PYTEST_CURRENT_TEST="):
                test = entry.split(b"=", 1)[1].decode(errors="replace").rsplit(" (", 1)[0]
        return Process(pid, ppid, command, test, cpu, cpu, before=before)

    def report(self, most: int = 10) -> str:
        rows = [p for p in self.processes.values() if p.spent > 0.02 and p.pid not in self.ignore]
        by_pid = {p.pid: p for p in self.processes.values()}  # (a pid reused: the later one)

        def imported_torch(process: Process) -> bool:
            parent = by_pid.get(process.ppid)
            forked = parent is not None and parent.torch and parent.command == process.command
            return bool(process.torch) and not forked

        imports = [p for p in rows if imported_torch(p)]
        kinds: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0, 0])
        for p in rows:
            kind = kinds[p.kind()]
            kind[0] += p.spent
            kind[1] += 1
            kind[2] += p in imports
        lines = [f"processes: {sum(p.spent for p in rows):.0f} CPU-s in {len(rows)} processes; "
                 f"{sum(1 for p in rows if p.torch)} mapped torch, {len(imports)} imported it"]  # fmt: skip
        lines.append("  CPU-s  processes  torch imports  kind")
        for name, (spent, count, imported) in sorted(kinds.items(), key=lambda item: -item[1][0]):
            lines.append(f"  {spent:6.1f}  {count:9d}  {imported:13d}  {name}")
        by_file = collections.Counter((p.test or "(none: pytest itself)").split("::")[0] for p in imports)
        lines.append("torch imports per test file:")
        lines += [f"  {count:4d}  {name}" for name, count in by_file.most_common(most)]
        return "\n".join(lines)
