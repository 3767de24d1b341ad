"""What the test suite costs: the README's test command in a fresh clone, its wall time and
CPU-seconds (its own and every process below it), and the CPU of each tier and of the
costliest files and tests (tests/cost.py records each test as it runs).

    .venv/bin/python scripts/suite_cost.py                   # a fresh clone of HEAD, set up, run
    .venv/bin/python scripts/suite_cost.py --hog             # the same beside a process that spins a core
    .venv/bin/python scripts/suite_cost.py --here -- -m "not slow"   # this checkout, one tier
    .venv/bin/python scripts/suite_cost.py --processes       # and every process's CPU, by kind (proc_census.py)

Results go to docs/testing.md by hand. A fresh clone sets up its own .venv first (scripts/setup.sh,
not counted); `--here` uses this checkout's.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scripts.proc_census import ProcCensus  # noqa: E402

TEST_COMMAND = [".venv/bin/python", "-m", "pytest", "-q"]  # the README's (after scripts/setup.sh)
COST_ENV = "HICACHE_TEST_COST"  # tests/cost.py


def fresh_clone(where: Path) -> Path:
    clone = where / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["scripts/setup.sh"], cwd=clone, check=True,
                   stdout=subprocess.DEVNULL)  # fmt: skip
    return clone


def hog() -> subprocess.Popen[bytes]:
    """A process that keeps one core busy (the 'beside a CPU hog' condition)."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def run_suite(checkout: Path, extra: list[str], folder: Path) -> dict[str, Any]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([*TEST_COMMAND, *extra], cwd=checkout, env=dict(os.environ, **{COST_ENV: str(folder)}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    summary = next((line for line in reversed(done.stdout.splitlines()) if " in " in line), "")
    return {"exit": done.returncode, "wall_s": round(wall, 1), "cpu_s": round(user + system, 1),
            "user_s": round(user, 1), "sys_s": round(system, 1), "summary": summary}  # fmt: skip


def tests_cost(folder: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for path in folder.glob("cost-*.jsonl") for line in path.read_text().splitlines()]


def cpu(row: dict[str, Any]) -> float:
    return float(row["own_s"]) + float(row["children_s"])


def report(result: dict[str, Any], rows: list[dict[str, Any]], most: int) -> str:
    lines = [f"suite: exit {result['exit']}, {result['wall_s']} s wall, {result['cpu_s']} CPU-s "
             f"(user {result['user_s']} + sys {result['sys_s']}): {result['summary']}"]  # fmt: skip
    for tier, slow in (("slow (real processes)", True), ("unit", False)):
        picked = [r for r in rows if r["slow"] == slow]
        lines.append(f"  {tier}: {len(picked)} tests, {sum(map(cpu, picked)):.0f} CPU-s")
    lines.append(f"  recorded per test: {sum(map(cpu, rows)):.0f} CPU-s; the rest is pytest, xdist and collection")
    by_file: collections.Counter[str] = collections.Counter()
    for row in rows:
        by_file[row["test"].split("::")[0]] += cpu(row)
    failed = sorted(f"{r['outcome']}: {r['test']}" + "".join(f"\n      {why}" for why in r.get("why", "").splitlines())
                    for r in rows if r.get("outcome") in ("failed", "error"))  # fmt: skip
    lines += ["not passed:", *("  " + line for line in failed)] if failed else []
    lines.append("costliest files (CPU-s):")
    lines += [f"  {seconds:7.1f}  {name}" for name, seconds in by_file.most_common(most)]
    lines.append("costliest tests (CPU-s, wall s):")
    for row in sorted(rows, key=cpu, reverse=True)[:most]:
        lines.append(f"  {cpu(row):7.1f} {row['wall_s']:7.1f}  {row['test']}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--here", action="store_true", help="this checkout (its .venv), not a fresh clone")
    parser.add_argument("--hog", action="store_true", help="beside a process that keeps one core busy")
    parser.add_argument("--most", type=int, default=20, help="how many files and tests to list")
    parser.add_argument("--json", type=Path, help="also write the figures and every test's row here")
    parser.add_argument("--processes", action="store_true",
                        help="also read every process's CPU from /proc: by kind, torch's imports")  # fmt: skip
    parser.add_argument("pytest_args", nargs="*", help="after --: more pytest arguments (a tier, a file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hicache-suite-cost-") as tmp:
        # others may enter it (not list it): the cross-user attach tests run a second user's
        # Python on the clone's .venv, which a private (0700) temporary directory hides
        os.chmod(tmp, 0o711)
        checkout = REPO if args.here else fresh_clone(Path(tmp))
        folder = Path(tmp) / "cost"
        folder.mkdir()
        spinner = hog() if args.hog else None
        census = ProcCensus(frozenset([spinner.pid] if spinner else [])).start() if args.processes else None
        try:
            result = run_suite(checkout, args.pytest_args, folder)
        finally:
            if census is not None:
                census.stop()
            if spinner is not None:
                spinner.kill()
                spinner.wait()
        rows = tests_cost(folder)
    print(report(result, rows, args.most))
    if census is not None:
        print(census.report(args.most))
    if args.json is not None:
        args.json.write_text(json.dumps({**result, "tests": rows}, indent=1))
    return 0 if result["exit"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
