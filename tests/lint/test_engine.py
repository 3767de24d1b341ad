"""The engine: rule selection, which files are parsed, and parse failures as problems."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.lint.engine import lint, select_rules
from tests.lint.test_kept_never_waited import SGLANG_0_5_14, SGLANG_0_5_15


def test_select_rules() -> None:
    assert [r.id for r in select_rules(None)] == ["HC001", "HC003", "HC004", "HC005"]
    assert [r.id for r in select_rules(["all"])] == ["HC001", "HC002", "HC003", "HC004", "HC005"]
    assert [r.id for r in select_rules(["hc002,HC001", "HC002"])] == ["HC002", "HC001"]


def test_an_unknown_rule_is_one_line_of_bad_input() -> None:
    with pytest.raises(UsageError) as caught:
        select_rules(["HC001,HC999"])
    assert str(caught.value) == "--select: unknown rule HC999; rules: HC001, HC002, HC003, HC004, HC005, all"
    assert caught.value.exit_code == 2


def test_a_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "leaky.py").write_text(SGLANG_0_5_14, encoding="utf-8")
    (tmp_path / "fixed.py").write_text(SGLANG_0_5_15, encoding="utf-8")
    (tmp_path / "broken_plain.py").write_text("def (:\n", encoding="utf-8")  # no isend: never parsed
    (tmp_path / "broken_dist.py").write_text("import torch.distributed as dist\ndist.isend(\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    result = lint(["."])
    assert [(f.file, f.rule) for f in result.findings] == [("leaky.py", "HC001")]
    assert (result.files, result.parsed) == (4, 2)
    assert [str(p) for p in result.problems] == ["broken_dist.py: does not parse: '(' was never closed (line 2)"]
    assert result.rules == ["HC001", "HC003", "HC004", "HC005"]


def test_a_named_file_is_always_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken.py").write_text("def (:\n", encoding="utf-8")
    (tmp_path / "nul.py").write_bytes(b"x = 1\x00\n")
    monkeypatch.chdir(tmp_path)
    result = lint(["broken.py", "nul.py"])
    assert [p.target for p in result.problems] == ["broken.py", "nul.py"]
    assert all(p.reason.startswith("does not parse: ") for p in result.problems)
    assert result.parsed == 0
