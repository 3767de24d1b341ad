"""What `hicache attach --follow` costs the service it follows, measured in one run by alternating.

    .venv/bin/python scripts/follow_cost.py --program tight      # 10 minutes: 5 cycles of 60 s + 60 s
    .venv/bin/python scripts/follow_cost.py --program pipeline --cycles 5 --window 60
    .venv/bin/python scripts/follow_cost.py --detect            # how soon a late-onset leak is named
    .venv/bin/python scripts/follow_cost.py --detect trainer    # the same on a user-shaped trainer
    .venv/bin/python scripts/follow_cost.py --program pipeline --paired --cycles 4   # two copies, one followed

A 2-rank service runs under torchrun for the whole measurement: the tight isend/recv loop
(scripts/tight_p2p.py) or a torch.distributed.pipelining trainer (scripts/pipeline_steps.py,
a round is a training step); rank 0 prints its round count twice a second. Each cycle is a
window with nothing attached, then the real sidecar, `hicache attach --follow` on torchrun's
pid (both ranks below it attached by gdb), left for one census interval after its first
census (at least a window; a trainer's census is spaced out to ~2 minutes by its CPU budget),
then stopped with SIGTERM as an operator's service manager stops it. So the attached windows
hold what a follow does in steady state: a census per interval, the probe's
samples, the sidecar's own reading of the files; the attach itself (gdb's stop, the first
census) falls before the window, as it does once in a process's life.

Printed per cycle and as medians over the cycles with a 95% interval (bootstrap), each
attached window against the mean of the unattached windows on both sides (the rate drifts):
- rounds/s, attached / unattached (this VM's wall rate moves with scheduling: read it with
  its interval);
- each rank's main-thread CPU per round (from /proc, the thread whose id is the pid),
  attached / unattached: the figure the issue trusts, what the program's own thread pays;
- each census's own accounting, read from its file as the windows run: the agent thread's
  CPU, the share of the time the censuses held the GIL (the most the program's threads could
  lose to them, were they in Python all the time), and the longest hold after the first
  census, in wall time and in the agent's CPU time (on a loaded machine the OS may preempt
  a hold: its wall time then counts the other process's turn);
- the sidecar's own CPU (the hicache process, outside the target).
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hicache_cli.attach import procs  # noqa: E402
from hicache_cli.attach.follow import census_interval  # noqa: E402
from hicache_cli.units import parse_duration  # noqa: E402
from scripts.benchmarks import LOOPS  # noqa: E402
from scripts.intervals import median_interval  # noqa: E402

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
HICACHE = [sys.executable, "-m", "hicache_cli"]
TICK = os.sysconf("SC_CLK_TCK")
SETTLE_S = 3.0  # after the sidecar's first census, before the attached window
CENSUS_MARGIN_S = 10.0  # an attached window lasts the census interval and this: it holds one census


def main_thread_cpu(pid: int) -> float:
    """The CPU seconds of the process's main thread (the one whose id is the pid), from /proc."""
    text = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def process_cpu(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])) / TICK


class Service:
    """The 2-rank program under torchrun, its progress lines read on a thread."""

    def __init__(self, program: str, seconds: float, cwd: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        command = [*TORCHRUN, str(LOOPS[program]), "--seconds", str(seconds), "--progress", "0.5"]
        self.proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                     cwd=cwd, start_new_session=True)  # fmt: skip
        self.progress: list[tuple[float, int]] = []
        threading.Thread(target=self._read, daemon=True).start()
        while len(self.progress) < 4:
            time.sleep(0.2)
        self.ranks = sorted(p for p in procs.descendants(self.proc.pid) if procs.inspect(p).torch)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("progress"):
                fields = dict(part.split("=") for part in line.split()[1:])
                self.progress.append((time.perf_counter(), int(fields["rounds"])))

    def window(self, seconds: float) -> dict[str, float]:
        """rounds/s, and per rank the main thread's CPU per round, over the next `seconds`."""
        cpu0 = {pid: main_thread_cpu(pid) for pid in self.ranks}
        start = time.perf_counter()
        time.sleep(seconds)
        end = time.perf_counter()
        cpu1 = {pid: main_thread_cpu(pid) for pid in self.ranks}
        inside = [(t, r) for t, r in self.progress if start <= t <= end]
        (t0, r0), (t1, r1) = inside[0], inside[-1]
        rounds = r1 - r0
        out = {"rate": rounds / (t1 - t0)}
        for i, pid in enumerate(self.ranks):
            out[f"main_us_{i}"] = (cpu1[pid] - cpu0[pid]) / max(1, rounds) * 1e6
        return out

    def end(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def follow(service: Service, run_dir: Path, census_every: str) -> subprocess.Popen[str]:
    command = [*HICACHE, "attach", "--follow", "--census-every", census_every, "--no-live",
               "--run-dir", str(run_dir), str(service.proc.pid)]  # fmt: skip
    sidecar = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all((run_dir / "agent" / f"census-{pid}.json").exists() for pid in service.ranks):  # the first census
            return sidecar
        if sidecar.poll() is not None:
            raise SystemExit(f"the sidecar ended: {sidecar.stderr.read() if sidecar.stderr else ''}")
        time.sleep(0.2)
    raise SystemExit("the sidecar did not attach to both ranks within 120 s")


def next_census_s(run_dir: Path, ranks: list[int], census_every: str) -> float:
    """When the agents' next census comes after their first (attach/follow.py's interval for
    the dearer of the two): an attached window at least that long holds a census, as the
    follow's steady state does."""
    costs = [json.loads((run_dir / "agent" / f"census-{pid}.json").read_text())["cost"]["cpu_s"] for pid in ranks]
    return census_interval(parse_duration(census_every, "census-every"), max(costs))


def censuses(run_dir: Path, ranks: list[int], stop: threading.Event, into: list[dict[str, float]]) -> None:
    """Each live census's own accounting (its longest hold of the GIL, the agent thread's CPU),
    as its file is rewritten; the first census, at attach, is the `start` file, not among them."""
    seen: dict[int, float] = {}
    while not stop.wait(0.5):
        for pid in ranks:
            path = run_dir / "agent" / f"census-{pid}-live.json"
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if data.get("taken_at") != seen.get(pid):
                seen[pid] = data.get("taken_at")
                into.append({"rank": ranks.index(pid), **data["cost"]})


# --detect's programs (tests/integration/programs/): what starts the leak, and the line each
# prints when it does.
LATE_LEAKS = {
    "relay": ("late_leak.py", "fast path on"),  # a request relay: a config flag turns it on
    "trainer": ("gradnorm_trainer.py", "warm-up done"),  # a user-shaped trainer: after its warm-up
}


def detect(args: argparse.Namespace) -> None:
    """How soon after a leak starts the alert's expression is true: a late-onset leak under
    torchrun (LATE_LEAKS: late_leak.py, whose fast path stops waiting its isend Works after
    --leak-after s, or gradnorm_trainer.py, which keeps them from step 3,000: ~45 s here), the
    sidecar with its defaults (or --census-every) and --metrics-port, scraped every second
    until `hicache_holder_growing == 1`, then until it has a line."""
    import re
    import urllib.request

    tmp = Path(tempfile.mkdtemp(prefix="follow-detect-"))
    name, begins = LATE_LEAKS[args.detect]
    command = [*TORCHRUN, str(REPO / "tests" / "integration" / "programs" / name), "--stop-file", str(tmp / "stop")]
    if args.detect == "relay":
        command += ["--leak-after", str(args.leak_after)]
    service = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp,
                               start_new_session=True)  # fmt: skip
    onset: list[float] = []

    def read() -> None:
        assert service.stdout is not None
        for line in service.stdout:
            if begins in line:
                onset.append(time.monotonic())

    threading.Thread(target=read, daemon=True).start()
    time.sleep(5)
    sidecar = subprocess.Popen([*HICACHE, "attach", "--follow", "--census-every", args.census_every, "--no-live",
                                "--metrics-port", "0", "--run-dir", str(tmp / "run"), str(service.pid)],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    assert sidecar.stdout is not None
    url = next(m[0] for line in sidecar.stdout if (m := re.search(r"http://\S+", line)))
    threading.Thread(target=lambda: sidecar.stdout.read(), daemon=True).start()  # type: ignore[union-attr]
    growing = line = None
    try:
        deadline = time.monotonic() + 600
        while line is None and time.monotonic() < deadline:
            time.sleep(1.0)
            if not onset:
                continue
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            found = re.findall(r"^hicache_holder_growing\{(.*)\} 1\.0$", text, re.M)
            if found and growing is None:
                growing = time.monotonic() - onset[0]
            named = [labels for labels in found if 'site=""' not in labels]
            if named:
                line = time.monotonic() - onset[0]
                print(f"  {named[0]}")
    finally:
        sidecar.send_signal(signal.SIGTERM)
        sidecar.wait(60)
        (tmp / "stop").touch()
        try:
            service.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(service.pid, signal.SIGKILL)
    print(f"late-onset leak ({name}), census every {args.census_every}: the holder growing {growing:.0f} s after "
          f"the leak began, with its line {line:.0f} s after")  # fmt: skip


def paired(args: argparse.Namespace) -> None:
    """--paired: two copies of the service side by side, one followed at a time, the other
    its control in the same window (the same neighbours, the same clock speed), swapped each
    cycle so that a difference between the two copies cancels over a pair of cycles. On a
    machine whose speed drifts more than the effect (this VM: identical unattached windows
    2.5-4.3 ms of CPU a step apart) this is the comparison that can see 1%. Read the CPU a
    round: the two copies share the cores, so what the follow takes slows both copies' rounds
    alike and the rate ratio understates it."""
    tmp = Path(tempfile.mkdtemp(prefix="follow-paired-"))
    total = args.cycles * (args.window + 300) + 300
    services = [Service(args.program, total, tmp), Service(args.program, total, tmp)]
    keys = ("main_us_0", "main_us_1", "rate")
    ratios: dict[str, list[float]] = {key: [] for key in keys}
    began = time.monotonic()
    try:
        for cycle in range(args.cycles):
            followed, control = services[cycle % 2], services[1 - cycle % 2]
            run_dir = tmp / f"run-{cycle}"
            sidecar = follow(followed, run_dir, args.census_every)
            time.sleep(SETTLE_S)
            seconds = max(args.window, next_census_s(run_dir, followed.ranks, args.census_every) + CENSUS_MARGIN_S)
            with ThreadPoolExecutor(2) as pool:  # both windows over the same seconds
                on, off = pool.map(Service.window, (followed, control), (seconds, seconds))
            for key in keys:
                ratios[key].append(on[key] / off[key])
            sidecar.send_signal(signal.SIGTERM)
            sidecar.wait(60)
            print(f"cycle {cycle + 1}/{args.cycles} (copy {'AB'[cycle % 2]} followed, {seconds:.0f} s): main-thread "
                  f"CPU a round, followed / control: rank 0 {ratios['main_us_0'][-1]:.4f}, rank 1 "
                  f"{ratios['main_us_1'][-1]:.4f}; rounds/s {ratios['rate'][-1]:.4f} "
                  f"({time.monotonic() - began:.0f} s)", flush=True)  # fmt: skip
            time.sleep(SETTLE_S)
    finally:
        for service in services:
            service.end()
    print(f"{args.program}, paired: {len(ratios['rate'])} cycles, followed / control in the same window")
    for key, label in (("main_us_0", "rank 0 main-thread CPU a round"), ("main_us_1", "rank 1 main-thread CPU a round"),
                       ("rate", "rounds/s (shared cores: understates)")):  # fmt: skip
        values = ratios[key]
        # a copy's own bias cancels in the geometric mean of a cycle with A followed and one with B
        pairs = [(values[i] * values[i + 1]) ** 0.5 for i in range(0, len(values) - 1, 2)]
        low, high = median_interval(values)
        line = f"  {label}: median {statistics.median(values):.4f} [95% {low:.4f}-{high:.4f}]"
        if pairs:
            line += f"; per A/B pair {', '.join(f'{p:.4f}' for p in pairs)}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--detect", nargs="?", const="relay", choices=sorted(LATE_LEAKS),
                        help="time the alert on a late-onset leak instead (default: the relay)")  # fmt: skip
    parser.add_argument("--paired", action="store_true", help="two copies side by side, one followed at a time")
    parser.add_argument("--leak-after", type=float, default=40.0, help="with --detect relay: when the leak begins (s)")
    parser.add_argument("--program", choices=sorted(LOOPS), default="tight")
    parser.add_argument("--cycles", type=int, default=5)
    parser.add_argument("--window", type=float, default=60.0, help="seconds per window (attached and not)")
    parser.add_argument("--census-every", default="15s", help="the sidecar's --census-every")
    args = parser.parse_args()
    if args.detect:
        detect(args)
        return
    if args.paired:
        paired(args)
        return
    tmp = Path(tempfile.mkdtemp(prefix="follow-cost-"))
    # the service outlives the measurement (ended below): a cycle also waits for the sidecar's
    # attach and first census, which took 64 s beside a 60 s window pair on the trainer
    total = args.cycles * (2 * args.window + 300) + args.window + 300
    service = Service(args.program, total, tmp)
    windows: list[tuple[str, dict[str, float]]] = []
    taken: list[dict[str, float]] = []
    sidecar_cpu: list[float] = []
    agent_cpu: dict[int, list[float]] = {0: [], 1: []}  # % of a core the censuses took, per window
    gil: dict[int, list[float]] = {0: [], 1: []}  # % of the window the censuses held the GIL
    began = time.monotonic()
    try:
        for cycle in range(args.cycles):
            windows.append(("off", service.window(args.window)))
            run_dir = tmp / f"run-{cycle}"
            sidecar = follow(service, run_dir, args.census_every)
            time.sleep(SETTLE_S)
            attached_s = max(args.window, next_census_s(run_dir, service.ranks, args.census_every) + CENSUS_MARGIN_S)
            stop = threading.Event()
            watcher = threading.Thread(target=censuses, args=(run_dir, service.ranks, stop, taken), daemon=True)
            watcher.start()
            cpu0, t0, before = process_cpu(sidecar.pid), time.monotonic(), len(taken)
            windows.append(("on", service.window(attached_s)))
            elapsed = time.monotonic() - t0
            sidecar_cpu.append((process_cpu(sidecar.pid) - cpu0) / elapsed * 100)
            stop.set()
            watcher.join()
            for rank in (0, 1):
                mine = [c for c in taken[before:] if c["rank"] == rank]
                agent_cpu[rank].append(sum(c["cpu_s"] for c in mine) / elapsed * 100)
                gil[rank].append(sum(c["busy_s"] + c["snapshot_s"] for c in mine) / elapsed * 100)
            sidecar.send_signal(signal.SIGTERM)
            sidecar.wait(60)
            time.sleep(SETTLE_S)
            print(f"cycle {cycle + 1}/{args.cycles} done ({time.monotonic() - began:.0f} s)", flush=True)
        windows.append(("off", service.window(args.window)))
    except (OSError, subprocess.SubprocessError) as exc:  # a rank gone, a sidecar that hung: say the cycles done
        print(f"stopped early ({type(exc).__name__}: {exc}); the cycles finished before it:", flush=True)
        if windows and windows[-1][0] == "on":
            windows.pop()  # an attached window with no unattached one after it
    finally:
        service.end()
    if any(kind == "on" for kind, _ in windows):
        report(args, windows, taken, agent_cpu, gil, sidecar_cpu)


Windows = list[tuple[str, dict[str, float]]]


def report(
    args: argparse.Namespace,
    windows: Windows,
    taken: list[dict[str, float]],
    agent_cpu: dict[int, list[float]],
    gil: dict[int, list[float]],
    sidecar: list[float],
) -> None:
    keys = [k for k in windows[0][1] if k == "rate" or k.startswith("main_us")]
    ratios: dict[str, list[float]] = {k: [] for k in keys}
    for index, (kind, values) in enumerate(windows):
        if kind != "on":
            continue
        before, after = windows[index - 1][1], windows[index + 1][1]
        for key in keys:
            ratios[key].append(values[key] / ((before[key] + after[key]) / 2.0))
        cycle = len(ratios["rate"])
        print(f"cycle {cycle}: rounds/s off {before['rate']:.0f}, following {values['rate']:.0f}, off after "
              f"{after['rate']:.0f}; main-thread CPU a round, rank 0: {before['main_us_0']:.1f} -> "
              f"{values['main_us_0']:.1f} us, rank 1: {before['main_us_1']:.1f} -> "
              f"{values['main_us_1']:.1f} us")  # fmt: skip
    print(
        f"{args.program}: {len(ratios['rate'])} cycles of {args.window:g} s unattached and one census interval "
        f"(at least {args.window:g} s) attached, --census-every {args.census_every}"
    )
    for key, label in (("rate", "rounds/s, following / not"), ("main_us_0", "rank 0 main-thread CPU a round"),
                       ("main_us_1", "rank 1 main-thread CPU a round")):  # fmt: skip
        low, high = median_interval(ratios[key])
        print(f"  {label}: median {statistics.median(ratios[key]):.4f} [95% {low:.4f}-{high:.4f}]")
    for rank in (0, 1):
        mine = [c for c in taken if c["rank"] == rank]
        if mine:
            each, most = statistics.median(c["cpu_s"] for c in mine) * 1000, max(c["cpu_s"] for c in mine) * 1000
            objects, share = statistics.median(c["objects"] for c in mine) / 1000, statistics.median(agent_cpu[rank])
            print(f"  rank {rank}: {len(mine)} censuses, each {each:.1f} ms of the agent thread's CPU (median; "
                  f"{most:.1f} ms at most), {objects:.0f}k objects; the censuses took {share:.3f}% of a core "
                  "(median of the windows)")  # fmt: skip
            print(f"  rank {rank}: the censuses held the GIL {statistics.median(gil[rank]):.3f}% of the time "
                  f"(median of the windows; at most {max(gil[rank]):.3f}%): the most the program's threads "
                  "could lose, were they in Python all the time")  # fmt: skip
    print(f"  the sidecar (hicache itself): median {statistics.median(sidecar):.2f}% of a core")
    if taken:
        holds = sorted(c["max_hold_s"] * 1000 for c in taken)
        over, cpu = sum(h > 50 for h in holds), max(c["max_hold_cpu_s"] * 1000 for c in taken)
        print(f"  the longest hold of the GIL in a census after the first: {holds[-1]:.1f} ms (median "
              f"{statistics.median(holds):.1f} ms, {over} of {len(holds)} over 50 ms); in the agent's own CPU "
              f"time at most {cpu:.1f} ms (a hold's wall time beyond it: the OS ran something else)")  # fmt: skip


if __name__ == "__main__":
    main()
