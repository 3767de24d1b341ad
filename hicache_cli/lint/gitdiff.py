"""`--diff REF`: the lines changed since a git ref, so a large repository can adopt the lint
gradually (findings only where it is being changed). Read with git itself: `git diff
--unified=0 REF` for tracked files, and every line of untracked ones."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from hicache_cli.errors import UsageError

_HUNK = re.compile(rb"^@@ -\d+(?:,\d+)? \+(\d+)(?:,(\d+))? @@")
WHOLE = None  # a file every line of which is new


def _git(args: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, check=False, timeout=300)


def changed_lines(ref: str, cwd: Path) -> dict[str, set[int] | None]:
    """Real path of each changed file -> its new or changed lines (None: all of them)."""
    if shutil.which("git") is None:
        raise UsageError("--diff: git is not installed")
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if top.returncode != 0:
        raise UsageError(f"--diff: {_not_a_repository(top.stderr, cwd)}")
    root = Path(os.fsdecode(top.stdout.strip()))
    if ref.startswith("-") or _git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], root).returncode != 0:
        raise UsageError(f"--diff: {ref!r} is not a commit in this repository")
    diff = _git(["diff", "--unified=0", "--no-color", "--no-ext-diff", "--no-renames", ref, "--"], root)
    if diff.returncode != 0:
        raise UsageError(f"--diff: git diff failed: {diff.stderr.decode(errors='replace').strip()}")
    changed: dict[str, set[int] | None] = {}
    current: set[int] | None = None
    for line in diff.stdout.splitlines():
        if line.startswith(b"+++ "):
            name = line[4:]
            current = None
            if name.startswith(b"b/"):
                current = changed.setdefault(os.path.realpath(root / os.fsdecode(name[2:])), set())
        elif current is not None and (hunk := _HUNK.match(line)):
            start, count = int(hunk.group(1)), int(hunk.group(2) or 1)
            current.update(range(start, start + count))
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], root)
    for name in untracked.stdout.split(b"\0"):
        if name:
            changed[os.path.realpath(root / os.fsdecode(name))] = WHOLE
    return changed


def _not_a_repository(stderr: bytes, cwd: Path) -> str:
    """Why git would not name the repository: none, or one it refuses to use (another user
    owns it: git's safe.directory rule), said with git's own words for the latter."""
    said = stderr.decode(errors="replace").strip()
    if "dubious ownership" in said:
        where = said.splitlines()[0].split(" at ", 1)[-1].strip("'")
        return (f"git refuses the repository at {where}: another user owns it (git's safe.directory rule; "
                f"`git config --global --add safe.directory {where}` trusts it)")  # fmt: skip
    return f"{cwd} is not in a git repository"


def touches(changed: dict[str, set[int] | None], path: Path, first: int, last: int) -> bool:
    """Whether lines first..last of the file at `path` are new or changed."""
    real = os.path.realpath(path)
    if real not in changed:
        return False
    lines = changed[real]
    return lines is WHOLE or any(line in lines for line in range(first, last + 1))
