"""Cross-check: does the RSS slope in the report match RSS read from outside the ranks?

Runs a stress run (the library's `hicache_cli.run`) while this process reads each rank's VmRSS from /proc/<pid>/status
(never through the ranks' own probe), fits the same Theil-Sen trend over the same
post-warm-up window, and prints report/outside ratios per rank.

    .venv/bin/python scripts/rss_crosscheck.py --policy reap --pp 2 --duration 15s
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import hicache_cli as hc  # noqa: E402
from hicache_cli.analysis.stats import per_hour_mb, theil_sen  # noqa: E402
from hicache_cli.units import parse_duration  # noqa: E402


@dataclass
class ExternalRss:
    """RSS of the rank processes read from /proc by another process, not by the ranks."""

    points: dict[int, list[tuple[float, int]]] = field(default_factory=dict)  # pid -> (wall, bytes)

    def slope_mb_per_h(self, pid: int, start_wall: float, warmup_s: float) -> float | None:
        pts = [(w - start_wall, float(b)) for w, b in self.points.get(pid, []) if w - start_wall >= warmup_s]
        trend = theil_sen(pts)
        return None if trend is None else per_hour_mb(trend.slope)


def watch_rss(run_dir: Path, stop: threading.Event, out: ExternalRss, interval_s: float = 0.2) -> None:
    """Until `stop`, read VmRSS of every rank whose pid appears in the run directory."""
    pids: set[int] = set()
    while not stop.is_set():
        for path in run_dir.glob("rank-*.jsonl"):
            with path.open() as fh:
                first = fh.readline()
            if first.endswith("\n"):
                pids.add(json.loads(first)["pid"])
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            rss = [int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")]
            if rss:  # a zombie has no memory lines
                out.points.setdefault(pid, []).append((time.time(), rss[0] * 1024))
        stop.wait(interval_s)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="reap")
    parser.add_argument("--pp", default="2")
    parser.add_argument("--duration", default="15s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        external, stop = ExternalRss(), threading.Event()
        watcher = threading.Thread(target=watch_rss, args=(run_dir, stop, external), daemon=True)
        watcher.start()
        config = hc.StressConfig(policy=args.policy, pp=int(args.pp), duration_s=parse_duration(args.duration))
        report = hc.run(config, run_dir=run_dir).to_dict()
        stop.set()
        watcher.join()
    print(f"policy={args.policy} pp={args.pp} duration={args.duration}")
    print("rank  report MB/h  outside MB/h  ratio")
    for rank in report["ranks"]:
        pid = rank["pid"]
        start_wall = external.points[pid][0][0] if external.points.get(pid) else 0.0
        # The outside watcher starts a little before the rank's clock: skip one more second.
        outside = external.slope_mb_per_h(pid, start_wall, rank["warmup_s"] + 1.0)
        inside = rank["rss"]["slope_mb_per_h"]
        ratio = f"{inside / outside:.3f}" if outside else "n/a"
        print(f"{rank['rank']:>4}  {inside:>11.1f}  {outside if outside is None else round(outside, 1)!s:>12}  {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
