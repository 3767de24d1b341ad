"""Thin a run directory into test data: every K-th sample of each rank file (and its final
line), written again in the compact line format, with the run's config.json.

    python scripts/thin_run.py RUN_DIR OUT_DIR [--every K]

Recorded runs kept under tests/data are made this way; the report built from the thinned
directory reads the same trends from fewer points.
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from hicache_cli.protocol import CONFIG_FILE, sample_files, samples_file
from hicache_cli.sample import LineEncoder, decode_lines


def thin(run_dir: Path, out: Path, every: int) -> None:
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / CONFIG_FILE, out / CONFIG_FILE)
    for rank, path in sample_files(run_dir).items():
        samples = decode_lines(path.read_bytes().splitlines())
        kept = [s for i, s in enumerate(samples) if i % every == 0 or s.kind == "final" or i == len(samples) - 1]
        encoder = LineEncoder()
        lines = [encoder.encode(s, s.t) for s in kept]
        samples_file(out, rank).write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--every", type=int, default=2)
    args = parser.parse_args()
    thin(args.run_dir, args.out, max(1, args.every))


if __name__ == "__main__":
    main()
