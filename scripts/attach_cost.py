"""What `hicache attach` costs the process it attaches to, each figure measured in one run.

    .venv/bin/python scripts/attach_cost.py tracer      # gdb before/after, tracer rounds/s ratio
    .venv/bin/python scripts/attach_cost.py census --millions 1 2 4

`tracer`: the tight isend/recv loop (scripts/tight_p2p.py), or with `--program pipeline` a
torch.distributed.pipelining trainer (scripts/pipeline_steps.py, a round is a training
step), runs under torchrun and prints its round count twice a second. On rank 0, a plain
`gdb -p PID -batch` (every library's symbols read, as gdb does by default) and then
hicache's own injection are timed, each with how long the target was stopped (its /proc
state polled every half millisecond). Then, --cycles times, hicache attaches to both ranks
and detaches: the rate of rounds in the window after its census (tracer hooks and probe
running) is compared with the unattached windows on both sides of it (before the attach,
after the detach), in the same processes seconds apart, so that a rate drifting over the
run is taken out; the ratio to the window before alone is printed too. The median of the
cycles' ratios is the tracer's cost after attach, with its 95% interval (bootstrap over the
cycles): this machine is shared and a single window is noisy, so many short cycles
(`--cycles 40 --window 2`) tell more than a few long ones. With `--in-process`, each cycle
also runs the same tracer without a debugger (the agent started by the program's own thread:
tight_p2p.py --tracer-file) between two unattached windows, and the attached and in-process
ratios are compared cycle by cycle: what attaching adds to the tracer's own cost.

`census`: a one-rank process holding N million objects and 1000 never-waited Works, whose
main thread measures the longest gap in a 1 ms sleep loop (what the program feels); hicache
attaches, and the census's own accounting (snapshot, longest hold, GIL time in total) is
printed beside the program's worst gap, per million tracked objects. With `--freeze` the
process calls gc.freeze() once its heap is built (as SGLang's /freeze_gc does).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hicache_cli.attach import inject, procs  # noqa: E402
from hicache_cli.attach.session import AttachSession  # noqa: E402
from scripts.benchmarks import LOOPS  # noqa: E402
from scripts.intervals import median_interval  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
HEAP = REPO / "scripts" / "attach_heap.py"
UNATTACHED, ATTACHED, IN_PROCESS = "unattached", "attached", "in-process"
SETTLE_S = 0.5


def stopped_while(pid: int, command: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds of `command`, seconds `pid` spent stopped by a tracer meanwhile)."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    began, stopped, last = time.monotonic(), 0.0, None
    while proc.poll() is None:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
        now = time.monotonic()
        if text[text.rindex(")") + 2] == "t":
            stopped += now - last if last is not None else 0.0
            last = now
        else:
            last = None
        time.sleep(0.0005)
    return time.monotonic() - began, stopped


def rate(progress: list[tuple[float, int]], start: float, end: float) -> float:
    inside = [(t, r) for t, r in progress if start <= t <= end]
    (t0, r0), (t1, r1) = inside[0], inside[-1]
    return (r1 - r0) / (t1 - t0)


def tracer(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="attach-cost-"))
    env = dict(os.environ, PYTHONPATH=str(REPO))
    command = [*TORCHRUN, str(LOOPS[args.program]), "--seconds", str(args.seconds), "--progress", "0.5"]
    control = tmp / "in-process"
    if args.in_process:
        control.mkdir()
        command += ["--tracer-file", str(control)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp)
    progress: list[tuple[float, int]] = []

    def read() -> None:
        for line in proc.stdout:
            if line.startswith("progress"):
                fields = dict(part.split("=") for part in line.split()[1:])
                progress.append((float(fields["t"]), int(fields["rounds"])))

    threading.Thread(target=read, daemon=True).start()
    while len(progress) < 4:
        time.sleep(0.2)
    rank0 = min(p for p in procs.descendants(proc.pid) if procs.inspect(p).torch)
    plain = stopped_while(rank0, ["gdb", "-nx", "-batch", "-p", str(rank0)])
    print(f"plain gdb -p -batch (all symbols): {plain[0]:.2f} s, target stopped {plain[1]:.2f} s")
    text = tmp / "text.py"
    text.write_text("pass\n")  # a harmless pending call: only the injection is timed
    gdb_env = dict(os.environ, HICACHE_GDB_ARGS=json.dumps({"pid": rank0, "text_file": str(text)}))
    trimmed = stopped_while(rank0, inject.gdb_command(rank0), gdb_env)
    print(f"hicache's injection (libc + libpython symbols only): {trimmed[0]:.2f} s, target stopped {trimmed[1]:.2f} s")
    holds: list[float] = []
    windows: list[tuple[str, float]] = []  # (UNATTACHED, ATTACHED or IN_PROCESS, rounds/s), in order
    (tmp / "run").mkdir()
    for cycle in range(args.cycles):  # unattached, attached; with --in-process: unattached, in-process
        windows.append((UNATTACHED, window(progress, args.window)))
        run_dir = tmp / "run" / str(cycle)
        run_dir.mkdir()
        session = AttachSession([proc.pid], run_dir)
        session.start()
        holds += [c.cost.max_hold_s for c in session.census().values()]
        windows.append((ATTACHED, window(progress, args.window)))  # from half a second after the census
        session.detach()
        if args.in_process:
            windows.append((UNATTACHED, window(progress, args.window)))
            switch_in_process(control, on=True)
            windows.append((IN_PROCESS, window(progress, args.window)))
            switch_in_process(control, on=False)
    windows.append((UNATTACHED, window(progress, args.window)))
    _end(proc)
    ratios: dict[str, list[float]] = {ATTACHED: [], IN_PROCESS: []}
    centred: dict[str, list[float]] = {ATTACHED: [], IN_PROCESS: []}
    for index, (kind, value) in enumerate(windows):
        if kind == UNATTACHED:
            continue
        # the unattached windows on both sides: a rate that drifts over the run (it does, by
        # several per cent a minute here) is taken out, where before-only would count it
        before, after = windows[index - 1][1], windows[index + 1][1]
        ratios[kind].append(value / before)
        centred[kind].append(value / ((before + after) / 2.0))
        print(f"cycle {len(ratios[kind])}: rounds/s unattached {before:.0f}, {kind} {value:.0f}, "
              f"unattached after {after:.0f}: ratio to before {ratios[kind][-1]:.3f}, "
              f"to both sides {centred[kind][-1]:.3f}")  # fmt: skip
    for kind in (ATTACHED, IN_PROCESS):
        if centred[kind]:
            low, high = median_interval(centred[kind])
            print(f"{kind}: median ratio over {len(centred[kind])} cycles: to before "
                  f"{statistics.median(ratios[kind]):.3f}, to both sides {statistics.median(centred[kind]):.3f} "
                  f"[95% {low:.3f}-{high:.3f}]")  # fmt: skip
    if centred[IN_PROCESS]:
        paired = [a / b for a, b in zip(centred[ATTACHED], centred[IN_PROCESS], strict=True)]
        low, high = median_interval(paired)
        print(
            f"attached / in-process, cycle by cycle: median {statistics.median(paired):.3f} [95% {low:.3f}-{high:.3f}]"
        )
    print(f"census's longest hold of the GIL {max(holds) * 1000:.1f} ms")


def window(progress: list[tuple[float, int]], seconds: float) -> float:
    """rounds/s over the next `seconds`, from half a second from now (what came before settles)."""
    start = time.perf_counter() + SETTLE_S
    time.sleep(seconds + SETTLE_S)
    return rate(progress, start, time.perf_counter())


def switch_in_process(control: Path, on: bool) -> None:
    """The program's own thread installs (or removes) the agent's tracer: tight_p2p.tracer_by_file."""
    if on:
        (control / "on").touch()
    else:
        (control / "on").unlink()
    ready = [control / f"ready-{rank}" for rank in (0, 1)]
    while any(path.exists() != on for path in ready):
        time.sleep(0.05)


def census(args: argparse.Namespace) -> None:
    for millions in args.millions:
        tmp = Path(tempfile.mkdtemp(prefix="attach-heap-"))
        env = dict(os.environ, PYTHONPATH=str(REPO))
        heap = [sys.executable, str(HEAP), str(millions)] + (["freeze"] if args.freeze else [])
        proc = subprocess.Popen(heap, stdout=subprocess.PIPE, text=True, env=env)
        gaps: list[tuple[float, float]] = []  # (when, the worst gap of the 100 sleeps before)
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("ready")
        threading.Thread(target=_collect, args=(proc.stdout, gaps), daemon=True).start()
        time.sleep(2.0)
        quiet = max(g for _, g in gaps[-10:])
        (tmp / "run").mkdir()
        session = AttachSession([proc.pid], tmp / "run")
        began = time.time()
        session.start()  # gdb's stop, the agent's start (imports) in the process
        attached = time.time()
        taken = next(iter(session.census(timeout_s=600).values()))
        time.sleep(1.5)
        session.detach()
        _end(proc)
        injecting = max(g for t, g in gaps if began <= t <= attached + 0.2)
        walking = max(g for t, g in gaps if attached + 0.2 < t <= taken.taken_at + 0.2)
        cost = taken.cost
        per_m = 1e6 / cost.objects
        print(
            f"{cost.objects / 1e6:.2f} M objects ({cost.frozen / 1e6:.2f} M frozen): snapshot "
            f"{cost.snapshot_s * 1000:.0f} ms held, longest hold "
            f"{cost.max_hold_s * 1000:.0f} ms, GIL held {cost.snapshot_s + cost.busy_s:.2f} s in all "
            f"({(cost.snapshot_s + cost.busy_s) * per_m:.2f} s per million) over {cost.walk_s:.1f} s. The "
            f"program's worst 1 ms-sleep gap: quiet {quiet * 1000:.0f} ms, while injected and the agent "
            f"started {injecting * 1000:.0f} ms, during the census {walking * 1000:.0f} ms. "
            f"Top holder {taken.holders[0].path}: {taken.holders[0].works}"
        )
        late = [(round(taken.taken_at - t, 2), round(g * 1000)) for t, g in gaps if attached <= t and g > 0.03]
        print(
            f"  census CPU {cost.cpu_s:.2f} s; the program's gaps over 30 ms after the attach (s before the census "
            f"ended, ms): {[(s, ms) for s, ms in late if s > -0.2]}"
        )


def _end(proc: subprocess.Popen[str]) -> None:
    """The ranks, then torchrun (each rank runs in a session of its own)."""
    for pid in procs.descendants(proc.pid):
        os.kill(pid, signal.SIGKILL)
    proc.kill()
    proc.wait()


def _collect(lines: Any, into: list[tuple[float, float]]) -> None:
    for line in lines:
        when, gap = line.split()
        into.append((float(when), float(gap)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    one = sub.add_parser("tracer")
    one.add_argument("--seconds", type=float, default=600.0, help="the program's longest run")
    one.add_argument("--window", type=float, default=6.0, help="seconds of rounds counted before and after")
    one.add_argument("--cycles", type=int, default=3, help="attach and detach this many times")
    one.add_argument(
        "--program", choices=sorted(LOOPS), default="tight", help="the tight loop, or a pipelining trainer's steps"
    )
    one.add_argument(
        "--in-process",
        action="store_true",
        help="each cycle also runs the same tracer installed by the program's own thread (no debugger)",
    )
    two = sub.add_parser("census")
    two.add_argument("--millions", type=float, nargs="+", default=[1.0, 2.0])
    two.add_argument("--freeze", action="store_true", help="the process freezes its heap (gc.freeze()) once built")
    args = parser.parse_args()
    {"tracer": tracer, "census": census}[args.what](args)


if __name__ == "__main__":
    main()
