"""How `hicache lint` scales with the size of one file (issue 30): time and peak memory per MB.

    .venv/bin/python scripts/lint_scaling.py                 # 1, 2, 5, 10, 20 MB, both kinds
    .venv/bin/python scripts/lint_scaling.py --sizes 1 2 4 --kinds isend

Three kinds of generated file: `isend` (a class whose methods each append 500 `isend` Works to
`self.works` and poll the newest, reaped by `is_completed()`: ~70 bytes a site, HC001 at every
site, and every Work can reach every method's `newest`: a search per Work is quadratic),
`dropped` (one function of isends whose Works are dropped and whose tensors are then changed:
HC003 at every site) and `plain` (module-level assignments, no trigger word: linted only
because it is named). Each
size is measured twice, each time in a fresh interpreter: `ast.parse` alone, then the whole
`lint()` (read, parse, analyse, rules). Peak memory is the process's maximum resident set
(`ru_maxrss`), so "ours" is the lint's peak less the parse's peak in the same run. Ratios
(seconds and MB per MB of source) are printed from one run, so a busy machine shows in both.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SITES_PER_METHOD = 500
REPO = Path(__file__).resolve().parent.parent

MEASURE = r"""
import json, resource, sys, time
import hicache_cli
print(hicache_cli.__file__, file=sys.stderr)
path, mode = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if mode == "parse":
    import ast
    tree = ast.parse(open(path, "rb").read(), path)
    extra = {}
else:
    from hicache_cli.lint.engine import lint
    result = lint([path])
    extra = {"findings": len(result.findings), "problems": [str(p) for p in result.problems]}
seconds = time.perf_counter() - started
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_mb": peak_mb, **extra}))
"""


def isend_file(megabytes: float) -> tuple[str, int]:
    """A class with `sites` isend calls kept in self.works: (source, sites)."""
    head = (
        "import torch.distributed as dist\n\n\nclass Pump:\n    def __init__(self):\n        self.works = []\n\n"
        "    def reap(self):\n        self.works = [w for w in self.works if not w.is_completed()]\n"
    )
    parts, size, sites, method = [head], len(head), 0, 0
    while size < megabytes * 1e6:
        lines = [f"\n    def step_{method}(self, t):\n"]
        for _ in range(SITES_PER_METHOD):
            lines.append(f"        self.works.append(dist.isend(t, dst={sites % 7}, tag={sites}))\n")
            sites += 1
        lines.append("        newest = self.works[-1]\n        return newest.is_completed()\n")
        chunk = "".join(lines)
        parts.append(chunk)
        size += len(chunk)
        method += 1
    return "".join(parts), sites


def dropped_file(megabytes: float) -> tuple[str, int]:
    """One function of isends whose Works are thrown away, each tensor changed after its send
    (HC003 at every site): the shape that made every dropped isend walk the whole function."""
    parts = ["import torch.distributed as dist\n\n\ndef pump(t):\n"]
    size, sites = len(parts[0]), 0
    while size < megabytes * 1e6:
        chunk = f"    dist.isend(t, dst=1, tag={sites})\n    t.add_({sites % 97})\n"
        parts.append(chunk)
        size += len(chunk)
        sites += 1
    return "".join(parts), sites


def plain_file(megabytes: float) -> tuple[str, int]:
    """Module-level assignments: (source, statements)."""
    lines, size, n = [], 0, 0
    while size < megabytes * 1e6:
        line = f"value_{n} = {n} * 2 + 1\n"
        lines.append(line)
        size += len(line)
        n += 1
    return "".join(lines), n


KINDS = {"isend": isend_file, "dropped": dropped_file, "plain": plain_file}


def measure(path: Path, mode: str, repo: Path, timeout: float) -> dict[str, float]:
    """One measurement in a fresh interpreter importing hicache_cli from `repo`; a run past
    `timeout` is reported as such (the code before issue 30 took hours on the largest files)."""
    env = dict(os.environ, PYTHONPATH=str(repo))
    try:  # cwd: `python -c` puts it first on sys.path, before any installed (or editable) hicache
        done = subprocess.run(
            [sys.executable, "-c", MEASURE, str(path), mode],
            capture_output=True, text=True, check=True, timeout=timeout, env=env, cwd=repo,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"seconds": float("nan"), "peak_mb": float("nan"), "findings": f"> {timeout:g} s"}
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 2, 5, 10, 20], help="file sizes in MB")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=list(KINDS))
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument("--repo", type=Path, default=REPO, help="the hicache checkout to measure (default: this one)")
    parser.add_argument("--timeout", type=float, default=1800, help="give up on one measurement after this long (s)")
    args = parser.parse_args()
    rows = []
    print(
        f"{'kind':<6} {'MB':>5} {'units':>9} | {'parse s':>8} {'parse MB':>9} | {'lint s':>8} {'lint MB':>8} "
        f"{'ours MB':>8} | {'s/MB':>6} {'MB/MB':>6} {'ours MB/MB':>10} | findings"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds:
            for mb in args.sizes:
                source, units = KINDS[kind](mb)
                path = Path(tmp) / f"{kind}_{mb:g}mb.py"
                path.write_text(source, encoding="utf-8")
                real_mb = len(source) / 1e6
                parse = measure(path, "parse", args.repo, args.timeout)
                whole = measure(path, "lint", args.repo, args.timeout)
                if whole["seconds"] != whole["seconds"]:  # NaN: gave up at --timeout
                    print(f"{kind:<6} {real_mb:>5.1f} {units:>9} | {parse['seconds']:>8.2f} {parse['peak_mb']:>9.0f} | "
                          f"{'> ' + format(args.timeout, 'g') + ' s':>17}", flush=True)  # fmt: skip
                    rows.append(
                        {"kind": kind, "mb": round(real_mb, 2), "units": units, "lint_s": f"> {args.timeout:g}"}
                    )
                    path.unlink()
                    continue
                ours = max(0.0, whole["peak_mb"] - parse["peak_mb"])
                row = {
                    "kind": kind,
                    "mb": round(real_mb, 2),
                    "units": units,
                    "parse_s": round(parse["seconds"], 2),
                    "parse_peak_mb": round(parse["peak_mb"]),
                    "lint_s": round(whole["seconds"], 2),
                    "lint_peak_mb": round(whole["peak_mb"]),
                    "ours_mb": round(ours),
                    "findings": whole.get("findings"),
                }
                rows.append(row)
                print(
                    f"{kind:<6} {real_mb:>5.1f} {units:>9} | {parse['seconds']:>8.2f} {parse['peak_mb']:>9.0f} | "
                    f"{whole['seconds']:>8.2f} {whole['peak_mb']:>8.0f} {ours:>8.0f} | "
                    f"{whole['seconds'] / real_mb:>6.2f} {whole['peak_mb'] / real_mb:>6.0f} {ours / real_mb:>10.1f} | "
                    f"{whole.get('findings')}",
                    flush=True,
                )
                path.unlink()
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
