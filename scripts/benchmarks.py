"""The performance and verdict-quality benchmarks. Each prints ratios measured in one run.

    .venv/bin/python scripts/benchmarks.py all --out bench.json
    .venv/bin/python scripts/benchmarks.py time-to-verdict
    .venv/bin/python scripts/benchmarks.py false-alarms --runs 20
    .venv/bin/python scripts/benchmarks.py lint

Sections: time-to-verdict, false-alarms, sensitivity, probe-cost, startup, scale, per-message,
trace-cost, lint, pytest-plugin; soak, day-run (scripts/soak.py; not in `all`: an hour each).
Every run has real ranks, through the library API (hicache_cli.run and trace: the commands'
code), except lint's and pytest-plugin's, which time the real CLI and pytest; results go
to docs/performance.md (and docs/lint.md for lint's per-release findings) by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import hicache_cli as hc
from hicache_cli.units import parse_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))
import soak  # noqa: E402 - scripts/soak.py, beside this file

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"leak_s": 10.0, "bounded_s": 30.0, "probe_cost": 0.03}


def stress(tmp: Path, settle: bool = False, **fields: Any) -> tuple[hc.Report, float]:
    """One run through the library API: (its report, wall seconds). `settle`: stopped once
    the verdict is settled, as `check --max-duration` does."""
    config = hc.StressConfig(**fields)
    started = time.monotonic()
    early_stop = hc.Settler(config) if settle else None
    report = hc.run(config, run_dir=tmp / f"run-{time.monotonic_ns()}", early_stop=early_stop)
    return report, time.monotonic() - started


def time_to_verdict(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for pp in (2, 4):
        for policy, limit in (("reap", 60.0), ("drain", 90.0)):
            rep, wall = stress(tmp, settle=True, policy=policy, pp=pp, duration_s=limit)
            run_s, verdict = rep.run_s, str(rep.verdict)
            rows.append({"pp": pp, "policy": policy, "verdict": verdict, "run_s": run_s, "wall_s": round(wall, 1)})
            target = TARGETS["leak_s"] if policy == "reap" else TARGETS["bounded_s"]
            print(
                f"pp={pp} {policy:<6} {verdict:<12} settled after {run_s} s of workload (target {target:g} s: "
                f"ratio {run_s / target:.2f})  wall {wall:.1f} s"
            )
    return {"rows": rows}


def false_alarms(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    verdicts = []
    for i in range(args.runs):
        rep, _ = stress(tmp, policy="drain", pp=2, duration_s=parse_duration(args.duration), seed=i)
        verdicts.append(str(rep.verdict))
        print(f"drain run {i + 1}/{args.runs}: {verdicts[-1]}")
    leaks = verdicts.count("LEAK")
    print(
        f"false alarms: {leaks} LEAK in {args.runs} drain runs ({leaks / args.runs:.0%}); "
        f"BOUNDED {verdicts.count('BOUNDED')}, INCONCLUSIVE {verdicts.count('INCONCLUSIVE')}"
    )
    return {"runs": args.runs, "duration": args.duration, "verdicts": verdicts, "leaks": leaks}


def sensitivity(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for k in (10, 30, 100, 300, 1000, 10000):
        duration = parse_duration(args.sens_duration)
        rep, _ = stress(tmp, policy="drain", pp=2, duration_s=duration, faults=(f"keep:0:{k}",))
        rank0 = rep.ranks[0]
        rows.append(
            {
                "k": k,
                "verdict": str(rank0.verdict),
                "kept_per_s": round(rank0.work_list.final / rep.run_s, 2),
                "rss_mb_per_h": rank0.rss.slope_mb_per_h,
                "floor_mb_per_h": rank0.rss.detection_floor_mb_per_h,
                "reason": rank0.verdict_reason,
            }
        )
        print(
            f"keep every {k:>5}th Work: {rows[-1]['kept_per_s']} Works/s kept -> rank 0 {rank0.verdict}: "
            f"{rank0.verdict_reason[:110]}"
        )
    return {"duration": args.sens_duration, "rows": rows}


def probe_cost(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rates: dict[str, list[float]] = {"10": [], "1": []}
    for _ in range(3):  # alternate, so that drift in the machine's load hits both
        for hz in ("10", "1"):
            rep, _ = stress(tmp, policy="drain", pp=2, duration_s=10.0, probe_hz=float(hz))
            rates[hz].append(rep.ranks[0].rounds_per_s)
    r10, r1 = sum(rates["10"]) / 3, sum(rates["1"]) / 3
    print(
        f"drain rounds/s: {r10:.0f} at 10 Hz, {r1:.0f} at 1 Hz -> 10 Hz/1 Hz = {r10 / r1:.3f} "
        f"({(1 - r10 / r1):+.1%} lower; target at most {TARGETS['probe_cost']:.0%})"
    )
    return {"rounds_per_s": rates, "ratio": r10 / r1}


def startup(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rows = []
    for pp in (2, 4):
        rep, wall = stress(tmp, policy="drain", pp=pp, duration_s=3.0)
        rows.append({"pp": pp, "startup_s": rep.startup_s, "wall_s": round(wall, 1)})
        print(f"pp={pp}: launch to first sample {rep.startup_s} s; a 3 s run takes {wall:.1f} s in all")
    return {"rows": rows}


def scale(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    rep, wall = stress(tmp, policy="drain", pp=8, tp=2, duration_s=10.0)
    rps = rep.ranks[0].rounds_per_s if rep.ranks else None
    print(
        f"pp=8 x tp=2: status {rep.status}, {len(rep.ranks)} ranks reported, rounds/s {rps}, "
        f"startup {rep.startup_s} s, wall {wall:.1f} s"
    )
    return {
        "status": str(rep.status),
        "ranks": len(rep.ranks),
        "wall_s": round(wall, 1),
        "startup_s": rep.startup_s,
        "rounds_per_s": rps,
    }


BARE_SYNC = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank = dist.get_rank()
per_round, seconds = int(sys.argv[1]), float(sys.argv[2])
t = torch.zeros(per_round, dtype=torch.int32)
pending, sent = [], 0
dist.barrier()
started = time.perf_counter()
while True:  # the PP sync of a policy and nothing else: no cache, no probe, the default group
    if rank == 0:
        for work in pending:
            work.wait()
        pending = [dist.isend(t[i : i + 1].clone(), dst=1) for i in range(per_round)]
        sent += per_round
        if time.perf_counter() - started >= seconds:
            break
    else:
        try:
            for i in range(per_round):
                dist.recv(t[i : i + 1], src=0)
        except RuntimeError:  # rank 0 has left
            break
elapsed = time.perf_counter() - started
if rank == 0:
    print(sent / elapsed, flush=True)
os._exit(0)
"""

SGLANG_REFERENCE = """
import os, sys, time
from pathlib import Path
import torch, torch.distributed as dist
from hicache_model.pp_sync import Topology, new_groups
from hicache_cli.sglang_target.bind import SGLangHolder, bind, compile_methods
from hicache_cli.sglang_target.extract import extract
# SGLang's own methods on the holder, driven in a bare loop: no counting wrappers, no
# probe, no latency ring. What production's scheduler pays for the same round.
path, cls, tags, seconds = Path(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
dist.init_process_group("gloo")
rank = dist.get_rank()
groups = new_groups(Topology(rank, 2, 1))
holder = SGLangHolder(rank, 2, groups.pp, groups.tp, 1)
bind(holder, compile_methods(extract(path, cls), Path(tags) if tags else None))
round_ = holder.check_hicache_events
dist.barrier()
started = time.perf_counter()
rounds = 0
deadline = started + seconds
while time.perf_counter() < deadline:
    try:
        round_()
    except RuntimeError:  # rank 1: rank 0 has left
        break
    rounds += 1
elapsed = time.perf_counter() - started
if rank == 0:
    print(rounds / elapsed, flush=True)
os._exit(0)
"""


def _torchrun(tmp: Path, name: str, source: str, *argv: str) -> float:
    """Run a two-rank script under torchrun (loopback); rank 0's last line, a rate."""
    script = tmp / name
    script.write_text(source)
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(script), *argv],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO)),
    )
    lines = [x for x in proc.stdout.splitlines() if x.strip()]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{name} failed: {proc.stderr[-2000:]}")
    return float(lines[-1])


def _messages_per_s(rep: hc.Report) -> tuple[float, float]:
    """Rank 0's PP-sync messages per second and its messages per round."""
    rank0 = rep.ranks[0]
    assert rank0.rounds and rank0.rounds_per_s and rank0.messages
    return rank0.messages.sent * rank0.rounds_per_s / rank0.rounds, rank0.messages.sent / rank0.rounds


def per_message(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Issue 19: rank 0's PP-sync messages/s in hicache against the bare loop of the same shape
    (drain: 2 messages a round, batched: 1) and against SGLang's own methods driven with no
    wrapping or counters. Each comparison alternates within this one run (the order flips every
    alternation, so that drift hits both sides); the median of the pairs' ratios is reported."""
    seconds = args.message_seconds
    sglang = hc.with_sglang(hc.StressConfig(duration_s=seconds), args.sglang_target).sglang
    assert sglang is not None
    ratios: dict[str, list[float]] = {"drain": [], "batched": [], "sglang": []}
    rates: dict[str, list[tuple[float, float]]] = {k: [] for k in ratios}
    for i in range(args.alternations):
        for name, per_round in (("drain", 2), ("batched", 1), ("sglang", 0)):
            if name == "sglang":
                hicache_side = lambda: _messages_per_s(  # noqa: E731
                    stress(tmp, **vars(hc.with_sglang(hc.StressConfig(duration_s=seconds), args.sglang_target)))[0]
                )
                sides = [
                    ("hicache", hicache_side),
                    (
                        "reference",
                        lambda: _torchrun(
                            tmp,
                            "sglang_reference.py",
                            SGLANG_REFERENCE,
                            sglang["file"],
                            sglang["class"],
                            sglang["tags_file"],
                            f"{seconds:g}",
                        ),
                    ),
                ]
            else:
                sides = [
                    (
                        "hicache",
                        lambda n=name: _messages_per_s(
                            stress(tmp, policy=n, pp=2, workload="idle", duration_s=seconds)[0]
                        ),
                    ),
                    (
                        "reference",
                        lambda k=per_round: _torchrun(tmp, "bare_sync.py", BARE_SYNC, str(k), f"{seconds:g}"),
                    ),
                ]
            got: dict[str, Any] = {}
            for side, measure in sides if i % 2 == 0 else sides[::-1]:
                got[side] = measure()
            hicache_rate, per_round_seen = got["hicache"]
            # the reference harness counts rounds; SGLang's round sends what hicache saw it send
            reference = got["reference"] * per_round_seen if name == "sglang" else got["reference"]
            ratios[name].append(hicache_rate / reference)
            rates[name].append((hicache_rate, reference))
            print(
                f"alternation {i + 1} {name:<8} hicache {hicache_rate:8.0f} msg/s, "
                f"{'bare loop' if name != 'sglang' else 'SGLang alone'} {reference:8.0f} msg/s -> "
                f"{hicache_rate / reference:.3f}",
                flush=True,
            )
    out: dict[str, Any] = {"seconds": seconds, "sglang": sglang["version"], "rates": rates, "ratios": ratios}
    targets = {"drain": 0.8, "batched": 0.9, "sglang": 0.85}
    for name, values in ratios.items():
        out[f"{name}_median"] = statistics.median(values)
        print(
            f"{name}: median ratio {out[f'{name}_median']:.3f} over {len(values)} alternations "
            f"(range {min(values):.3f}-{max(values):.3f}; target >= {targets[name]})"
        )
    return out


TIGHT = REPO / "scripts" / "tight_p2p.py"
# the loops the tracer's cost is measured on (each prints `progress t=T rounds=N` and takes
# --alternate): the tight loop, and a pipelining trainer's steps; attach_cost.py uses them too
LOOPS = {"tight": TIGHT, "pipeline": REPO / "scripts" / "pipeline_steps.py"}


def _tight_rate(tmp: Path, seconds: float, how: str) -> float:
    """rounds/s of the tight isend/recv loop: untraced, with the tracer armed as `hicache
    trace` arms it (its environment), or under the whole `hicache trace` command."""
    from hicache_cli.lifecycle import owner_token
    from hicache_cli.tracer.protocol import environment

    program = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(TIGHT)]
    program += ["--seconds", f"{seconds:g}"]
    run_dir = tmp / f"trace-{time.monotonic_ns()}"
    run_dir.mkdir()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    if how == "cli":  # the whole of `hicache trace`, through the library
        hc.trace(program, run_dir=run_dir / "r", capture_output=True)
        output = (run_dir / "r" / "program.log").read_text()
    else:
        if how == "tracer":
            env = environment(env, run_dir, 10.0, None, owner_token())
        output = subprocess.run(program, capture_output=True, text=True, check=False, env=env, cwd=tmp).stdout
    line = next(x for x in output.splitlines() if x.startswith("rounds="))
    return float(line.rsplit("rate=", 1)[1])


def trace_cost(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Issues 14 and 25's budget: a traced tight loop keeps >= 95% of its untraced rounds/s,
    with every message counted per peer.

    Three measurements. Switching runs (--alternate-runs): the tight loop switches the
    tracer's hooks (or with --switch agent the agent hicache attach injects, probe included)
    on and off every second, on both ranks at once (scripts/tight_p2p.py
    --alternate; with --switch-program pipeline, a torch.distributed.pipelining trainer's
    steps, scripts/pipeline_steps.py): the hooks' cost free of the run-to-run drift of this
    machine, with each rank's main-thread CPU per round. The hooks alone, without a network
    (scripts/hook_cost.py): CPU nanoseconds they add to each rank's round. Whole runs:
    untraced, with the tracer armed through its environment (the probe thread included), and
    under the whole `hicache trace` command, alternating within each pair; the median of the
    pairs' ratios."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=str(REPO))
    program = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    program.append(str(LOOPS[args.switch_program]))
    switching = []
    for i in range(args.alternate_runs):
        proc = subprocess.run(
            [
                *program,
                "--alternate",
                "--switch",
                args.switch,
                "--seconds",
                f"{args.alternate_seconds:g}",
                "--block",
                "1",
            ],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        )
        fields = {}
        for line in proc.stdout.splitlines():
            if line.startswith(("untraced=", "rank0_cpu", "rank1_cpu")):
                fields.update(part.split("=") for part in line.split())
        switching.append({k: float(v) for k, v in fields.items()})
        print(
            f"switching run {i + 1}, {args.switch} on/off every second: untraced {fields['untraced']} rounds/s, "
            f"traced {fields['traced']}: ratio {fields['ratio']} (median of adjacent blocks "
            f"{fields['median_adjacent_ratio']}, 95% {fields['low']}-{fields['high']}); "
            f"main-thread CPU a round added: rank 0 "
            f"{fields['rank0_cpu_us_added']} us, rank 1 {fields['rank1_cpu_us_added']} us"
        )
    out: dict[str, Any] = {"alternating": switching}
    if switching:
        out["alternating_median_ratio"] = statistics.median(r["ratio"] for r in switching)
        print(f"switching runs, median ratio {out['alternating_median_ratio']:.3f} of {len(switching)}")
    hooks = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "hook_cost.py"), "--torch"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    out["hook_cost"] = hooks.stdout.strip().splitlines()
    print("\n".join(out["hook_cost"]))
    rows = []
    for i in range(args.pairs):
        rates = {how: _tight_rate(tmp, args.tight_seconds, how) for how in ("plain", "tracer", "cli")}
        rows.append(rates)
        print(
            f"pair {i + 1}: untraced {rates['plain']:.0f} rounds/s, tracer {rates['tracer']:.0f} "
            f"({rates['tracer'] / rates['plain']:.3f}), hicache trace {rates['cli']:.0f} "
            f"({rates['cli'] / rates['plain']:.3f})"
        )
    out["runs"] = rows
    if rows:  # (--pairs 0: the switching runs and the hooks alone only)
        out["tracer_median_ratio"] = statistics.median(r["tracer"] / r["plain"] for r in rows)
        out["cli_median_ratio"] = statistics.median(r["cli"] / r["plain"] for r in rows)
        print(
            f"whole runs, median of {len(rows)} pairs: tracer {out['tracer_median_ratio']:.3f}, "
            f"hicache trace {out['cli_median_ratio']:.3f}"
        )
    return out


LINT_RELEASES = (
    "0.5.12 0.5.12.post1 0.5.13 0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 "
    "0.5.22 0.5.23"
).split()


LINT_PEAK = (
    "import resource, subprocess, sys; subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, "
    "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
)


def _lint_cli(*args: str) -> tuple[int, str, float]:
    """`hicache lint ...` in a process of its own: (exit code, stdout, wall seconds)."""
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "hicache_cli", "lint", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=False,
    )
    return proc.returncode, proc.stdout, time.monotonic() - started


def _lint_cli_peak_mb(*args: str) -> float:
    """The peak resident set of one `hicache lint ...` process (its own, from a parent that
    starts nothing else), in MB."""
    cmd = [sys.executable, "-m", "hicache_cli", "lint", *args]
    proc = subprocess.run(
        [sys.executable, "-c", LINT_PEAK, *cmd],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        check=True,
    )
    return int(proc.stdout.strip()) / 1024


def lint(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """hicache lint: findings per SGLang release (every rule) through the wheel cache, and how
    long the whole srt/ tree and torch/distributed take: the CLI end to end (median of
    --lint-runs), the library alone, and parsing every file (what the text pre-filter saves)."""
    import ast

    import torch.distributed

    from hicache_cli.lint.engine import lint as lint_api
    from hicache_cli.sglang_target.locate import release_sources

    out: dict[str, Any] = {"releases": {}}
    for version in LINT_RELEASES:
        result = lint_api([f"sglang=={version}"], ["all"])
        counts = {rule: sum(f.rule == rule for f in result.findings) for rule in result.rules}
        files = sorted({f.file for f in result.findings})
        out["releases"][version] = {"counts": counts, "files": files, "problems": [str(p) for p in result.problems]}
        print(f"sglang {version}: " + ", ".join(f"{r} {n}" for r, n in counts.items()) + f"  {', '.join(files)}")
    trees = {
        "sglang 0.5.23 srt/": ("sglang==0.5.23", release_sources("0.5.23") / "sglang" / "srt"),
        "torch/distributed": (str(Path(torch.distributed.__file__).parent),) * 2,
    }
    for name, (target, root) in trees.items():
        walls = sorted(_lint_cli(target, "--select", "all")[2] for _ in range(args.lint_runs))
        result = lint_api([target], ["all"])
        started = time.monotonic()
        for path in sorted(Path(root).rglob("*.py")):
            ast.parse(path.read_bytes(), str(path))
        parse_all = time.monotonic() - started
        row = {
            "files": result.files,
            "analysed": result.parsed,
            "findings": len(result.findings),
            "cli_wall_s": [round(w, 2) for w in walls],
            "cli_median_s": round(statistics.median(walls), 2),
            "cli_peak_mb": round(_lint_cli_peak_mb(target, "--select", "all")),
            "library_s": round(result.seconds, 2),
            "parse_every_file_s": round(parse_all, 2),
        }
        out[name] = row
        print(
            f"{name}: {row['files']} files, {row['analysed']} analysed, {row['findings']} findings; CLI "
            f"{row['cli_median_s']} s (median of {args.lint_runs}), peak {row['cli_peak_mb']} MB; library "
            f"{row['library_s']} s; parsing every file would take {row['parse_every_file_s']} s"
        )
    return out


MARKED_TESTS = """
import pytest
import torch.distributed as dist


@pytest.mark.hicache_ranks(2)
def test_marked_1(rank, world_size):
    dist.barrier()


@pytest.mark.hicache_ranks(2)
def test_marked_2(rank, world_size):
    dist.barrier()


@pytest.mark.hicache_ranks(2)
def test_marked_3(rank, world_size):
    dist.barrier()


def test_unmarked():
    pass
"""

BARE_RANK = """
import sys, torch.distributed as dist
dist.init_process_group("gloo", init_method=sys.argv[1], rank=int(sys.argv[2]), world_size=2)
dist.barrier()
"""


def _pytest_session(tmp: Path, start: str) -> dict[str, float]:
    """One pytest session of MARKED_TESTS: each test's time as JUnit records it (setup, call
    and teardown: a fork server started by a test counts in that test), and the session's wall."""
    import xml.etree.ElementTree as ET

    junit = tmp / f"junit-{time.monotonic_ns()}.xml"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
         f"--hicache-ranks-start={start}", f"--junitxml={junit}", "test_bench.py"],
        cwd=tmp, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"pytest exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    times = {case.get("name", ""): float(case.get("time", "nan")) for case in ET.parse(junit).iter("testcase")}
    return {**times, "session_s": wall}


def _bare_two_ranks(tmp: Path) -> float:
    """Two processes that import torch, meet in a gloo group and leave: any 2-rank test's floor."""
    script = tmp / "bare_rank.py"
    script.write_text(BARE_RANK)
    store = tmp / f"store-{time.monotonic_ns()}"
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    started = time.monotonic()
    procs = [
        subprocess.Popen([sys.executable, str(script), store.as_uri(), str(r)], env=env, cwd=tmp) for r in range(2)
    ]
    codes = [p.wait() for p in procs]
    if codes != [0, 0]:
        raise RuntimeError(f"bare ranks exited {codes}")
    return time.monotonic() - started


def pytest_plugin(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Issue 16: what a marked 2-rank test (body: one barrier) costs, start-up included.

    Alternated within each repetition: a pytest session of three marked tests and an unmarked
    one with ranks forked from the fork server (the default), the same session with ranks
    spawned, and the floor: two bare processes that import torch, meet in a gloo group and
    leave, as any 2-rank test must. A test's time is JUnit's (setup + call + teardown), so the
    first forked test carries the fork server's start."""
    folder = tmp / "pytest-plugin"
    folder.mkdir()
    (folder / "test_bench.py").write_text(MARKED_TESTS)
    rows = []
    for i in range(args.pytest_runs):
        row: dict[str, Any] = {"bare_s": _bare_two_ranks(folder)}
        for start in ("fork", "spawn"):
            times = _pytest_session(folder, start)
            row[start] = {
                "first_s": times["test_marked_1"],
                "further_s": (times["test_marked_2"] + times["test_marked_3"]) / 2,
                "unmarked_s": times["test_unmarked"],
                "session_s": times["session_s"],
            }
        rows.append(row)
        print(
            f"run {i + 1}: bare 2 ranks {row['bare_s']:.2f} s; "
            + "; ".join(
                f"{start}: first marked test {row[start]['first_s']:.2f} s, further ones {row[start]['further_s']:.2f}"
                f" s, unmarked {row[start]['unmarked_s']:.3f} s (session {row[start]['session_s']:.1f} s)"
                for start in ("fork", "spawn")
            )
        )
    out: dict[str, Any] = {"runs": rows, "median_bare_s": statistics.median(r["bare_s"] for r in rows)}
    for start in ("fork", "spawn"):
        out[start] = {
            key: statistics.median(r[start][key] for r in rows)
            for key in ("first_s", "further_s", "unmarked_s", "session_s")
        }
        first, further, floor = out[start]["first_s"], out[start]["further_s"], out["median_bare_s"]
        print(
            f"median of {len(rows)}, {start}: the first marked 2-rank test {first:.2f} s, each further one "
            f"{further:.2f} s (floor {floor:.2f} s: ratios {first / floor:.2f} and {further / floor:.2f})"
        )
    return out


SECTIONS = {
    "time-to-verdict": time_to_verdict,
    "false-alarms": false_alarms,
    "sensitivity": sensitivity,
    "probe-cost": probe_cost,
    "startup": startup,
    "scale": scale,
    "per-message": per_message,
    "trace-cost": trace_cost,
    "lint": lint,
    "pytest-plugin": pytest_plugin,
}
LONG_SECTIONS = {"soak": soak.soak, "day-run": soak.day_run}  # run one at a time, never in `all`


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("section", choices=[*SECTIONS, *LONG_SECTIONS, "all"])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--duration", default="15s")
    parser.add_argument("--sens-duration", default="30s")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pairs", type=int, default=3, help="trace-cost: alternations of untraced and traced")
    parser.add_argument("--tight-seconds", type=float, default=5.0, help="trace-cost: each run's loop time")
    parser.add_argument("--alternate-seconds", type=float, default=60.0, help="trace-cost: the switching run")
    parser.add_argument("--alternate-runs", type=int, default=1, help="trace-cost: how many switching runs")
    parser.add_argument(
        "--switch-program",
        choices=sorted(LOOPS),
        default="tight",
        help="trace-cost: the switching runs' program (the tight loop, or a pipelining trainer's steps)",
    )
    parser.add_argument(
        "--switch",
        choices=("hooks", "agent", "probe"),
        default="hooks",
        help="trace-cost: what the switching runs switch (the Work hooks, the attach agent, or its probe alone)",
    )
    parser.add_argument("--alternations", type=int, default=5, help="per-message: alternations per comparison")
    parser.add_argument("--message-seconds", type=float, default=6.0, help="per-message: each run's loop time")
    parser.add_argument("--sglang-target", default="sglang==0.5.14", help="per-message: the SGLang compared")
    parser.add_argument("--lint-runs", type=int, default=5, help="lint: CLI runs per tree (the median is reported)")
    parser.add_argument("--pytest-runs", type=int, default=5, help="pytest-plugin: repetitions")
    parser.add_argument("--soak-duration", default="1h", help="soak: the real run's duration")
    parser.add_argument("--keep-rss", help="soak: write the hicache process's RSS readings to this JSON file")
    parser.add_argument("--soak-dir", help="soak: the run directory to use and keep (a new one)")
    parser.add_argument("--soak-policy", default="drain", help="soak: the drain policy of the real run")
    parser.add_argument("--day-ranks", type=int, default=8, help="day-run: ranks of the synthetic run")
    parser.add_argument("--day-hours", type=float, default=24.0, help="day-run: its hours of samples at 10 Hz")
    parser.add_argument("--day-dir", help="day-run: keep (or reuse) the synthetic run directory here")
    args = parser.parse_args()
    chosen = list(SECTIONS) if args.section == "all" else [args.section]
    results = {"machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in chosen:
            print(f"== {name}")
            results[name] = {**SECTIONS, **LONG_SECTIONS}[name](Path(tmp), args)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
