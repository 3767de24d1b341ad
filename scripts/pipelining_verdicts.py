"""torch.distributed.pipelining schedules, traced, judged again and again: how often is a
well-behaved trainer called a leak? (issue 25: never, in 10 runs each.)

    flock /tmp/hc-suite.lock python scripts/pipelining_verdicts.py [--runs 10] [--seconds 30]

Each run traces tests/integration/programs/pipeline_train.py (GPipe or 1F1B, 2 or 4 stages,
gloo on CPU, 4 microbatches) for `--seconds` of training (start-up not counted: the program
trains that long, then ends) through the library's `trace()`, and prints every rank's
verdict, cause and warm-up; then one line per schedule and stage count: how many runs had a
LEAK, and the ranks' verdicts counted. About 20-40 minutes at the defaults on a 2-core
machine: run it when the machine is quiet, not in the suite.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROGRAM = REPO / "tests" / "integration" / "programs" / "pipeline_train.py"
CONFIGS = (("gpipe", 2), ("1f1b", 2), ("gpipe", 4), ("1f1b", 4))


def one_run(schedule: str, stages: int, seconds: float, run_dir: Path) -> dict:
    import hicache_cli as hc

    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={stages}"]
    command += [str(PROGRAM), "--schedule", schedule, "--microbatches", "4", "--seconds", f"{seconds:g}"]
    report = hc.trace(command, run_dir=run_dir, capture_output=True).to_dict()
    ranks = [
        {
            "rank": r["rank"],
            "verdict": r["verdict"],
            "cause": (r.get("cause") or {}).get("kind"),
            "warmup_s": r.get("warmup_s"),
            "reason": r["verdict_reason"],
        }
        for r in report["ranks"]
        if r.get("samples")
    ]
    return {"verdict": report["verdict"], "status": report["status"], "run_s": report["run_s"], "ranks": ranks}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--out", type=Path, help="write every run's verdicts here (JSON)")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    results: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for schedule, stages in CONFIGS:
            key = f"{schedule}-{stages}"
            results[key] = []
            for i in range(args.runs):
                run = one_run(schedule, stages, args.seconds, Path(tmp) / f"{key}-{i}")
                results[key].append(run)
                verdicts = " ".join(f"{r['rank']}:{r['verdict']}({r['warmup_s']}s)" for r in run["ranks"])
                head = f"{key} run {i + 1}: {run['verdict']} ({run['status']}, {run['run_s']:.0f} s)"
                print(f"{head} {verdicts}", flush=True)
                for r in run["ranks"]:
                    if r["verdict"] != "BOUNDED":
                        print(f"    rank {r['rank']}: {r['reason']}", flush=True)
    print()
    for key, runs in results.items():
        leaks = sum(run["verdict"] == "LEAK" for run in runs)
        ranks = Counter(r["verdict"] for run in runs for r in run["ranks"])
        print(f"{key}: {leaks} of {len(runs)} runs LEAK; rank verdicts {dict(sorted(ranks.items()))}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
