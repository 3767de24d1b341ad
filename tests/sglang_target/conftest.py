"""Fixtures for the sglang_target tests: a fake checkout, a private cache dir, fakes of the
two commands locate.py runs (pip and git), and torch.distributed's collectives put back
after CountingCollectives replaced them."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as dist

from tests.sglang_target.families import make_checkout, make_wheel


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A fake checkout: REAP in hiradix_cache.py, UNIFIED, the tags file and version 9.9.9."""
    return make_checkout(tmp_path / "sglang-checkout")


@pytest.fixture
def cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """HICACHE_CACHE_DIR pointed at an empty directory of this test's own."""
    home = tmp_path / "hicache-cache"
    monkeypatch.setenv("HICACHE_CACHE_DIR", str(home))
    return home


@pytest.fixture
def no_pip(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """subprocess.run fails the test if called: nothing may reach pip (or the network)."""
    calls: list[list[str]] = []

    def refuse(cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        pytest.fail(f"subprocess.run was called: {cmd}")

    monkeypatch.setattr(subprocess, "run", refuse)
    return calls


class FakeGit:
    """Stands in for subprocess.run running `git describe` (locate reads a checkout's version
    from it when there is no generated version file): answers `describe`, or fails as git does
    outside a repository when it is None. Any other command fails the test."""

    def __init__(self) -> None:
        self.describe: str | None = None
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if cmd[0] != "git":
            pytest.fail(f"subprocess.run was called: {cmd}")
        self.calls.append(cmd)
        if self.describe is None:
            return subprocess.CompletedProcess(cmd, 128, stdout="", stderr="fatal: not a git repository\n")
        return subprocess.CompletedProcess(cmd, 0, stdout=self.describe + "\n", stderr="")


@pytest.fixture
def fake_git(monkeypatch: pytest.MonkeyPatch) -> FakeGit:
    fake = FakeGit()
    monkeypatch.setattr(subprocess, "run", fake)
    return fake


class FakePip:
    """Stands in for subprocess.run running `pip download`: records the command and either
    writes a wheel into --dest and succeeds, or fails with pip's last stderr line."""

    def __init__(self, returncode: int = 0, stderr: str = "", stdout: str = "", write_wheel: bool = True) -> None:
        self.returncode = returncode
        self.stderr = stderr
        self.stdout = stdout
        self.write_wheel = write_wheel
        self.calls: list[list[str]] = []

    def __call__(self, cmd: list[str], *args: Any, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        self.calls.append(cmd)
        if self.write_wheel and self.returncode == 0 and "--dest" in cmd:
            version = cmd[-1].split("==", 1)[1]
            make_wheel(Path(cmd[cmd.index("--dest") + 1]) / f"sglang-{version}-py3-none-any.whl")
        return subprocess.CompletedProcess(cmd, self.returncode, stdout=self.stdout, stderr=self.stderr)


@pytest.fixture(autouse=True)
def collectives_left_alone() -> Iterator[None]:
    """Every test here leaves torch.distributed's isend/recv/all_reduce as it found them."""
    before = dist.isend, dist.recv, dist.all_reduce
    yield
    assert (dist.isend, dist.recv, dist.all_reduce) == before, "a test left CountingCollectives installed"


@pytest.fixture
def restore_collectives() -> Iterator[None]:
    """CountingCollectives replaces dist.isend/recv/all_reduce for the whole process: put them back."""
    saved = dist.isend, dist.recv, dist.all_reduce
    try:
        yield
    finally:
        dist.isend, dist.recv, dist.all_reduce = saved
