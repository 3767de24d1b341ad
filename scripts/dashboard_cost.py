"""What the live dashboard costs: CPU of the launching process, live vs plain, in one run each.

The dashboard shares the machine with the ranks, so its cost is measured as CPU seconds
used by the `hicache` process itself (report key `launcher_cpu_s`) per second of run,
under a pseudo-terminal (`script`) so that the live view is really drawn. Also times one
dashboard frame (model + render) in-process on a finished run's samples.

    .venv/bin/python scripts/dashboard_cost.py --pp 4 --duration 15s
"""

from __future__ import annotations

import argparse
import io
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402

from hicache_cli.config import StressConfig  # noqa: E402
from hicache_cli.present.dashboard import Dashboard, render  # noqa: E402
from hicache_cli.series import read_run  # noqa: E402


def run(tmp: Path, name: str, extra: list[str], args: argparse.Namespace) -> dict:
    run_dir = tmp / name
    cmd = [sys.executable, "-m", "hicache_cli", "stress", "--run-dir", str(run_dir)]
    cmd += ["--pp", args.pp, "--policy", args.policy, "--duration", args.duration, *extra]
    # `script` gives the command a pseudo-terminal, so the live view is drawn for real.
    subprocess.run(
        ["script", "-qefc", shlex.join(cmd), "/dev/null"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        env={"COLUMNS": "100", "LINES": "30", "TERM": "xterm-256color", "PATH": "/usr/bin:/bin"},
    )
    return json.loads((run_dir / "report.json").read_text())


def frame_cost(run_dir: Path, frames: int = 200) -> float:
    config = StressConfig.load(run_dir)
    samples = read_run(run_dir)
    dashboard = Dashboard(config, str(run_dir))
    console = Console(file=io.StringIO(), width=100, force_terminal=True)
    started = time.process_time()
    for i in range(frames):
        # a new sample each frame defeats the one-second trend cache, as the worst case
        partial = {r: s[: len(s) - frames + i] for r, s in samples.items()}
        console.print(render(dashboard.model(partial, 20.0), 100))
    return (time.process_time() - started) / frames


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pp", default="4")
    parser.add_argument("--policy", default="drain")
    parser.add_argument("--duration", default="15s")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        live = run(Path(tmp), "live", [], args)
        plain = run(Path(tmp), "plain", ["--no-live"], args)
        frame_s = frame_cost(Path(tmp) / "live")
    print(f"pp={args.pp} policy={args.policy} duration={args.duration}")
    for name, rep in (("live (4 Hz)", live), ("plain", plain)):
        cpu, wall = rep["launcher_cpu_s"], rep["wall_s"]
        print(f"{name:>12}: launcher CPU {cpu:.2f} s over {wall:.1f} s wall = {100 * cpu / wall:.1f}% of one core")
    extra = live["launcher_cpu_s"] - plain["launcher_cpu_s"]
    print(f"live costs {extra:+.2f} CPU s more than plain ({100 * extra / live['wall_s']:+.1f}% of one core)")
    share = 400 * frame_s  # 4 frames a second, in percent of one core
    print(f"one frame (model + render, worst case): {1000 * frame_s:.2f} ms CPU -> {share:.1f}% of a core at 4 Hz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
