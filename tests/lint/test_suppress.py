"""`# hicache: ignore[HC001]` silences a finding on any line of the call it points at."""

from __future__ import annotations

from hicache_cli.lint.engine import lint_source
from hicache_cli.lint.rules import RULES
from hicache_cli.lint.suppress import ALL, suppressions
from tests.lint.test_kept_never_waited import SGLANG_0_5_14

CALL_FIRST_LINE = "send_work = torch.distributed.isend("


def lint_all(source: str) -> tuple[list[str], int]:
    findings, suppressed = lint_source(source, "x.py", list(RULES.values()))
    return [f.rule for f in findings], suppressed


def test_an_ignore_on_the_call_s_first_line() -> None:
    source = SGLANG_0_5_14.replace(CALL_FIRST_LINE, CALL_FIRST_LINE + "  # hicache: ignore[HC001]")
    assert lint_all(source) == ([], 1)


def test_an_ignore_on_the_call_s_last_line() -> None:
    source = SGLANG_0_5_14.replace(
        "tag=2\n        )", "tag=2\n        )  # hicache: ignore[HC001] the reaper is fine here"
    )
    assert lint_all(source) == ([], 1)


def test_an_ignore_of_another_rule_does_not_silence() -> None:
    source = SGLANG_0_5_14.replace(CALL_FIRST_LINE, CALL_FIRST_LINE + "  # hicache: ignore[HC003]")
    assert lint_all(source) == (["HC001"], 0)


def test_a_bare_ignore_silences_every_rule() -> None:
    source = SGLANG_0_5_14.replace(CALL_FIRST_LINE, CALL_FIRST_LINE + "  # hicache: ignore")
    assert lint_all(source) == ([], 1)


def test_an_ignore_on_another_line_does_not_silence() -> None:
    source = SGLANG_0_5_14.replace(
        "self.work_list.append(send_work)", "self.work_list.append(send_work)  # hicache: ignore"
    )
    assert lint_all(source) == (["HC001"], 0)


def test_the_table_reads_comments_only() -> None:
    source = b's = "# hicache: ignore[HC001]"\nx = 1  #hicache:ignore[hc001, HC003]\ny = 2  # hicache: ignore\n'
    assert suppressions(source).lines == {2: frozenset({"HC001", "HC003"}), 3: ALL}


def test_a_file_that_does_not_tokenize_keeps_what_was_read() -> None:
    assert suppressions(b'x = 1  # hicache: ignore\ny = """never closed\n').lines == {1: ALL}
