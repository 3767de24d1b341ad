"""TARGETs -> files: files, directories (walked, skipping hidden, caches and virtualenvs),
SGLang specs through the release cache, and one problem line for what cannot be read."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.lint.targets import expand
from tests.sglang_target.families import make_wheel


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "proj"
    for rel in ("a.py", "sub/b.py", ".hidden/c.py", "__pycache__/d.py", "venv/e.py", "node_modules/f.py"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("x = 1\n", encoding="utf-8")
    (root / "venv" / "pyvenv.cfg").write_text("home = /usr\n", encoding="utf-8")
    (root / "notes.txt").write_text("not python\n", encoding="utf-8")
    (root / "tool").write_text("#!/usr/bin/env python3\nprint(1)\n", encoding="utf-8")
    monkeypatch.chdir(root)
    return root


def test_a_directory_is_walked_for_its_python_files(tree: Path) -> None:
    out = expand(["."])
    assert [f.shown for f in out.files] == ["a.py", "sub/b.py"]
    assert not any(f.named for f in out.files)
    assert out.problems == []


def test_named_files_are_kept_and_named(tree: Path) -> None:
    out = expand(["sub/b.py", "tool", str(tree / "a.py"), "a.py"])
    assert [(f.shown, f.named) for f in out.files] == [("sub/b.py", True), ("tool", True), ("a.py", True)]


def test_what_cannot_be_read_is_one_problem_each_and_the_rest_go_on(tree: Path) -> None:
    out = expand(["notes.txt", "missing.py", "a.py", "sglang==latest"])
    assert [f.shown for f in out.files] == ["a.py"]
    assert [str(p) for p in out.problems] == [
        "notes.txt: not a Python file (lint reads .py files)",
        "missing.py: no such file or directory",
        "sglang==latest: 'latest' is not a release version (e.g. sglang==0.5.14)",
    ]


def test_a_release_is_read_from_the_cache_and_named_from_its_package(
    tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "cache"
    monkeypatch.setenv("HICACHE_CACHE_DIR", str(home))
    make_wheel(home / "wheels" / "sglang-9.9.9-py3-none-any.whl", extra={"sglang/lang/api.py": "x = 1\n"})

    def refuse(cmd: list[str], *args: Any, **kwargs: Any) -> None:
        pytest.fail(f"subprocess.run was called: {cmd}")

    monkeypatch.setattr(subprocess, "run", refuse)
    said: list[str] = []
    out = expand(["sglang==9.9.9"], said.append)
    shown = [f.shown for f in out.files]
    assert "sglang/srt/mem_cache/hiradix_cache.py" in shown
    assert all(s.startswith("sglang/srt/") for s in shown)  # the runtime only: not sglang/lang
    assert out.notes == [f"sglang==9.9.9: SGLang 9.9.9, {home / 'sglang-sources' / '9.9.9' / 'sglang' / 'srt'}"]


def test_a_checkout_spec_is_named_as_its_files_are(tree: Path) -> None:
    (tree / "python" / "sglang" / "srt" / "mem_cache").mkdir(parents=True)
    (tree / "python" / "sglang" / "srt" / "mem_cache" / "m.py").write_text("x = 1\n", encoding="utf-8")
    out = expand(["sglang:."])
    assert [f.shown for f in out.files] == ["python/sglang/srt/mem_cache/m.py"]


def test_a_path_named_sglang_is_a_path(tree: Path) -> None:
    (tree / "sglang").mkdir()
    (tree / "sglang" / "m.py").write_text("x = 1\n", encoding="utf-8")
    assert [f.shown for f in expand(["sglang"]).files] == ["sglang/m.py"]
