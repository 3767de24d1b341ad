"""Where developers run linters: `--diff REF` (only findings on lines changed since a git ref)
and the pre-commit hook this repository provides (issue 24, item 7)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.lint.engine import lint
from tests.lint.conftest import line_of
from tests.lint.test_cli import REPO, hicache_lint
from tests.lint.test_kept_never_waited import SGLANG_0_5_14

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")

SECOND = SGLANG_0_5_14.replace("class HiRadixCache", "class Second").replace("_pp_sync", "_pp_sync2")


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A repository whose first commit already holds one leak (old.py)."""
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "old.py").write_text(SGLANG_0_5_14, encoding="utf-8")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-q", "-m", "first")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_only_findings_on_changed_lines(repo: Path) -> None:
    assert [f.file for f in lint(["."], diff="HEAD").findings] == []  # nothing changed yet
    (repo / "new.py").write_text(SECOND, encoding="utf-8")  # untracked: every line is new
    assert [f.file for f in lint(["."], diff="HEAD").findings] == ["new.py"]
    assert [f.file for f in lint(["."]).findings] == ["new.py", "old.py"]  # without --diff: both


def test_a_change_inside_a_finding_s_call_brings_it_back(repo: Path) -> None:
    text = SGLANG_0_5_14.replace("tag=2", "tag=3")  # the isend's last line changes
    (repo / "old.py").write_text(text, encoding="utf-8")
    [finding] = lint(["."], diff="HEAD").findings
    assert finding.line == line_of(SGLANG_0_5_14, "torch.distributed.isend(")
    git(repo, "commit", "-q", "-am", "second")
    assert lint(["."], diff="HEAD").findings == []
    assert len(lint(["."], diff="HEAD~1").findings) == 1


def test_a_bad_ref_is_one_line(repo: Path) -> None:
    with pytest.raises(UsageError) as caught:
        lint(["."], diff="no-such-branch")
    assert str(caught.value) == "--diff: 'no-such-branch' is not a commit in this repository"


def test_outside_a_git_repository_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n", encoding="utf-8")
    done = hicache_lint("a.py", "--diff", "HEAD", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"hicache: error: --diff: {tmp_path} is not in a git repository"]


@pytest.mark.skipif(os.geteuid() != 0, reason="gives the repository to another user")
def test_a_repository_git_refuses_as_another_user_s_is_named_so(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "a.py").write_text("x = 1\n", encoding="utf-8")
    for path in (tmp_path, tmp_path / ".git"):
        os.chown(path, 65534, 65534)  # nobody's: git's safe.directory rule refuses it to root
    done = hicache_lint("a.py", "--diff", "HEAD", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"hicache: error: --diff: git refuses the repository at {tmp_path}: another user owns it")


def test_the_pre_commit_hook_file() -> None:
    """The hook pre-commit reads from this repository: one id, hicache-lint, on the whole repo."""
    text = (REPO / ".pre-commit-hooks.yaml").read_text(encoding="utf-8")
    entries = [line for line in text.splitlines() if line.startswith("- id:")]
    assert entries == ["- id: hicache-lint"]
    fields = dict(line.strip().split(": ", 1) for line in text.splitlines() if line.startswith("  ") and ": " in line)
    assert fields["entry"] == "hicache lint"
    assert fields["language"] == "python"
    assert fields["pass_filenames"] == "false" and fields["args"] == '["."]'
    assert (REPO / "docs" / "lint.md").read_text(encoding="utf-8").count("hicache-lint") >= 1
