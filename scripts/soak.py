"""Soak benchmarks (issue 19): what hicache itself costs over long runs.

    .venv/bin/python scripts/benchmarks.py soak --soak-duration 1h     # a real `stress --pp 2`
    .venv/bin/python scripts/benchmarks.py day-run --day-ranks 8        # a synthetic 24 h run directory

`soak` runs the real CLI and reads the hicache process's own RSS once a second from outside,
then judges it as hicache judges a rank (Theil-Sen slope and its 95% interval, after the
first minute); it also measures disk per rank-hour and the time to build the report from
the run directory. `day-run` writes a run directory as 8 ranks would over 24 hours at
10 Hz (compact lines, as the probe writes them), then times building its report and
`hicache watch --no-live` on it, each in a fresh process whose peak RSS is read.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from hicache_cli.analysis import stats
from hicache_cli.config import StressConfig
from hicache_cli.histogram import LatencyHistogram
from hicache_cli.protocol import CONFIG_FILE, SAMPLES_GLOB, samples_file
from hicache_cli.sample import LineEncoder, Sample
from hicache_cli.units import parse_duration

REPO = Path(__file__).resolve().parent.parent
HICACHE = [sys.executable, "-m", "hicache_cli"]
FIRST_MINUTE_S = 60.0
MB = 1e6

# Built and timed in a fresh interpreter: its peak RSS is the report builder's alone.
BUILD_REPORT = """
import resource, sys, time
from pathlib import Path
started = time.monotonic()
from hicache_cli.analysis.report import RunOutcome, build_report
from hicache_cli.config import StressConfig
from hicache_cli.series import load_run
run_dir = Path(sys.argv[1])
report = build_report(StressConfig.load(run_dir), load_run(run_dir), RunOutcome())
print(time.monotonic() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, report["verdict"])
"""

# Runs a command and prints its wall time and peak RSS (the only child this process waits for).
PEAK_OF = """
import resource, subprocess, sys, time
started = time.monotonic()
code = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
print(time.monotonic() - started, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, code)
"""


def memory_trend(points: list[tuple[float, float]]) -> dict[str, Any]:
    """The hicache process's RSS after the first minute, judged as a rank's: MB/h and 95% interval."""
    after = [(t, rss) for t, rss in points if t >= FIRST_MINUTE_S]
    trend = stats.theil_sen(stats.thin(after), quantum=4096)
    if trend is None:
        return {"points": len(after)}
    return {
        "points": len(after),
        "slope_mb_per_h": round(stats.per_hour_mb(trend.slope), 2),
        "ci95_mb_per_h": [round(stats.per_hour_mb(trend.lo), 2), round(stats.per_hour_mb(trend.hi), 2)],
        "at_1_min_mb": round(after[0][1] / MB, 1) if after else None,
        "end_mb": round(after[-1][1] / MB, 1) if after else None,
        "peak_mb": round(max(r for _, r in points) / MB, 1),
    }


def timed_report(run_dir: Path) -> tuple[float, int, str]:
    out = subprocess.run(
        [sys.executable, "-c", BUILD_REPORT, str(run_dir)], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.split()
    return float(out[0]), int(out[1]), out[2]


def soak(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """A real `hicache stress --pp 2` of --soak-duration; the hicache process's RSS each second.
    The policy is drain by default: reap's leak (~20 GB/h on rank 0) cannot last an hour here."""
    duration = parse_duration(args.soak_duration, "--soak-duration")
    run_dir = Path(args.soak_dir) if args.soak_dir else tmp / "soak"
    cmd = [*HICACHE, "stress", "--pp", "2", "--policy", args.soak_policy, "--duration", args.soak_duration]
    cmd += ["--no-live", "--run-dir", str(run_dir)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO)
    me = psutil.Process(proc.pid)
    started, points, next_at = time.monotonic(), [], time.monotonic()
    while proc.poll() is None:
        try:
            points.append((time.monotonic() - started, float(me.memory_info().rss)))
        except psutil.Error:
            break
        if len(points) % 600 == 0:
            print(f"  {points[-1][0] / 60:.0f} min: hicache {points[-1][1] / MB:.1f} MB", flush=True)
        next_at += 1.0
        time.sleep(max(0.0, next_at - time.monotonic()))
    proc.wait()
    report = json.loads((run_dir / "report.json").read_text())
    files = sorted(run_dir.glob(SAMPLES_GLOB))
    disk = sum(f.stat().st_size for f in files)
    lines = sum(r["samples"] for r in report["ranks"])
    rank_hours = len(files) * report["run_s"] / 3600.0
    build_s, build_peak, _ = timed_report(run_dir)
    result = {
        "duration_s": duration,
        "exit_code": proc.returncode,
        "verdict": report["verdict"],
        "hicache_rss": memory_trend([(t, r) for t, r in points if t <= duration]),
        "launcher_cpu_s": report.get("launcher_cpu_s"),
        "disk_mb_per_rank_hour": round(disk / MB / rank_hours, 2),
        "bytes_per_line": round(disk / lines, 1),
        "report_build_s": round(build_s, 2),
        "report_build_peak_mb": round(build_peak / MB, 1),
    }
    if args.keep_rss:
        Path(args.keep_rss).write_text(json.dumps(points) + "\n")
    mem = result["hicache_rss"]
    print(
        f"hicache process after the first minute: {mem.get('slope_mb_per_h')} MB/h "
        f"[95% {mem.get('ci95_mb_per_h')}], {mem.get('at_1_min_mb')} -> {mem.get('end_mb')} MB "
        f"(peak {mem.get('peak_mb')} MB); disk {result['disk_mb_per_rank_hour']} MB per rank-hour "
        f"({result['bytes_per_line']} B a line); report built from the run directory in "
        f"{result['report_build_s']} s, peak {result['report_build_peak_mb']} MB"
    )
    return result


def _write_rank(task: tuple[Path, int, int, float, int]) -> int:
    """One rank's file of `n` samples at `hz`: a bounded drain rank (noise, a busy histogram,
    counters, blocked_on toggling, digests, memory kinds once a second), as the probe writes it."""
    run_dir, rank, n, hz, world = task
    rng = random.Random(rank)
    encoder, hist = LineEncoder(), LatencyHistogram()
    waits, size, every_s = 0, 0, max(1, int(hz))
    counters: dict[str, float] = {}
    hist_json: dict[str, int] = {}
    with samples_file(run_dir, rank).open("w", encoding="utf-8") as out:
        for i in range(n):
            t = i / hz
            rounds = int(t * 700)
            hist.add_all([rng.lognormvariate(-7.0, 0.8) for _ in range(8)])
            waits += 70
            final = i == n - 1
            if i % every_s == 0 or final:  # the probe's encoder writes them once a second anyway
                counters = {"requests": float(rounds), "waits": float(waits), "released": float(waits - 2)}
                hist_json = hist.to_json()
            sample = Sample(
                t=round(t, 4),
                wall=1.7e9 + t,
                rank=rank,
                pp_rank=rank,
                tp_rank=0,
                pid=10_000 + rank,
                state="done" if final else "running",
                rss_bytes=250_000_000 + 4096 * rng.randrange(64),
                depth=rng.randrange(3) if rank < world - 1 else 0,
                held_bytes=8,
                rounds=rounds,
                lat_p50_ms=round(rng.uniform(0.3, 0.8), 4),
                lat_p99_ms=(p99 := round(rng.uniform(5.0, 10.0), 4)),
                lat_max_ms=round(p99 + rng.uniform(0.0, 2.0), 4),  # never below the p99, as in a rank
                lat_count=70,
                round_age_s=round(rng.uniform(0.0, 0.002), 6),
                sent=2 * rounds,
                received=2 * rounds if rank else 0,
                blocked_on="drain, waiting on isend to pp rank 1" if rng.random() < 0.5 else None,
                blocked_peer=1 if rng.random() < 0.5 else None,
                counters=counters,
                lat_hist=hist_json,
                digests={str(1024 * (rounds // 1024)): rounds // 1024} if i % 15 == 0 else {},
                anon_bytes=160_000_000 if i % int(hz) == 0 else None,
                uss_bytes=163_000_000 if i % int(hz) == 0 else None,
                device_name="cpu",
                host="soak",
                kind="final" if final else "sample",
                message="reached the deadline" if final else None,
            )
            line = encoder.encode(sample, t) + "\n"
            size += len(line)
            out.write(line)
    return size


def day_run(tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Report build and `watch` on a synthetic 24-hour run directory (--day-ranks ranks, 10 Hz)."""
    hours, hz, world = args.day_hours, 10.0, args.day_ranks
    run_dir = Path(args.day_dir) if args.day_dir else tmp / "day"
    n = int(hours * 3600 * hz)
    if not (run_dir / CONFIG_FILE).is_file():
        run_dir.mkdir(parents=True, exist_ok=True)
        config = StressConfig(pp=world, duration_s=hours * 3600.0)
        (run_dir / CONFIG_FILE).write_text(json.dumps(config.to_dict()) + "\n")
        started = time.monotonic()
        with multiprocessing.Pool(min(world, os.cpu_count() or 1)) as pool:
            sizes = pool.map(_write_rank, [(run_dir, r, n, hz, world) for r in range(world)])
        print(f"  wrote {world} x {n:,} samples, {sum(sizes) / MB:.0f} MB, in {time.monotonic() - started:.0f} s")
    disk = sum(f.stat().st_size for f in run_dir.glob(SAMPLES_GLOB))
    build_s, build_peak, verdict = timed_report(run_dir)
    watch = [*HICACHE, "watch", "--no-live", "--refresh", "20", str(run_dir)]
    out = subprocess.run([sys.executable, "-c", PEAK_OF, *watch], capture_output=True, text=True, check=True, cwd=REPO)
    watch_s, watch_peak, watch_code = out.stdout.split()
    result = {
        "ranks": world,
        "hours": hours,
        "samples": world * n,
        "disk_mb": round(disk / MB),
        "report_build_s": round(build_s, 1),
        "report_build_peak_mb": round(build_peak / MB, 1),
        "report_verdict": verdict,
        "watch_s": round(float(watch_s), 1),
        "watch_peak_mb": round(int(watch_peak) / MB, 1),
        "watch_exit_code": int(watch_code),
    }
    print(
        f"{world} ranks x {hours:g} h at 10 Hz ({world * n:,} samples, {result['disk_mb']} MB): report built in "
        f"{result['report_build_s']} s, peak {result['report_build_peak_mb']} MB (verdict {verdict}); "
        f"`watch --no-live` read it in {result['watch_s']} s, peak {result['watch_peak_mb']} MB"
    )
    return result
