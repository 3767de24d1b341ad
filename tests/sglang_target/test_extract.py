"""sglang_target/extract.py: methods taken by name with ast, from synthetic release families."""

from __future__ import annotations

import ast
import hashlib
from pathlib import Path

import pytest

from hicache_cli.errors import HicacheError, UsageError
from hicache_cli.sglang_target.extract import (
    DRAIN_METHODS,
    ENTRY,
    PROVIDED_NAMES,
    SYNC,
    TAKEN,
    ExtractedClass,
    Method,
    NotApplicable,
    SourceError,
    extract,
    file_sha256,
    free_names,
    read_int_enum,
)
from tests.sglang_target.families import BLANK_LINES, DRAIN, DRAIN_TAGGED, MINIMAL, NO_PP_SYNC, REAP, UNIFIED, def_line


def write(tmp_path: Path, text: str, name: str = "hiradix_cache.py") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def methods_defined(source: str, class_name: str) -> set[str]:
    tree = ast.parse(source)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}


# --- release families -------------------------------------------------------------------


def test_no_pp_sync_family_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicable) as caught:
        extract(write(tmp_path, NO_PP_SYNC), "HiRadixCache")
    assert caught.value.exit_code == 4
    assert SYNC in str(caught.value)
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, HicacheError)
    assert not isinstance(caught.value, UsageError)  # a finding about the code, not bad input


@pytest.mark.parametrize(
    ("source", "class_name", "drain", "tagged"),
    [
        (REAP, "HiRadixCache", "_reap_completed_async_work", False),
        (DRAIN, "HiRadixCache", "_drain_async_work", False),
        (DRAIN_TAGGED, "HiRadixCache", "_drain_async_work", True),
        (UNIFIED, "UnifiedRadixCache", "_drain_async_work", True),
    ],
    ids=["reap", "drain", "drain-tagged", "unified"],
)
def test_families_take_only_the_named_methods(
    tmp_path: Path, source: str, class_name: str, drain: str, tagged: bool
) -> None:
    path = write(tmp_path, source)
    got = extract(path, class_name)
    assert isinstance(got, ExtractedClass)
    assert got.class_name == class_name
    assert got.path == str(path)
    assert set(got.methods) == methods_defined(source, class_name) & set(TAKEN)
    assert "__init__" not in got.methods
    assert {ENTRY, SYNC} <= set(got.methods)
    assert got.drain_method == drain
    assert got.uses_p2p_tag is tagged
    assert got.describe() == f"{class_name}.{drain}: {DRAIN_METHODS[drain]}"


def test_methods_keep_their_def_line_and_are_dedented(tmp_path: Path) -> None:
    path = write(tmp_path, REAP)
    file_lines = REAP.splitlines()
    for name, method in extract(path, "HiRadixCache").methods.items():
        assert isinstance(method, Method)
        assert method.name == name
        assert method.first_line == def_line(REAP, name)
        assert file_lines[method.first_line - 1].strip().startswith(f"def {name}(")
        assert method.source.startswith(f"def {name}(")
        assert method.decorators == ()
        compile(method.source, "<test>", "exec")  # a whole function on its own
        # the body is the file's, line for line, less one level of indent
        body = method.source.splitlines()
        assert body == [line[4:] for line in file_lines[method.first_line - 1 : method.first_line - 1 + len(body)]]


def test_the_first_and_last_methods_of_the_class_are_whole(tmp_path: Path) -> None:
    got = extract(write(tmp_path, REAP), "HiRadixCache")
    entry = got.methods[ENTRY].source
    assert entry.rstrip().endswith("self.storage_metrics_collector.log(StorageMetrics())")
    assert "self._reap_completed_async_work()" in entry


def test_sha256_is_of_the_file_bytes(tmp_path: Path) -> None:
    path = write(tmp_path, UNIFIED)
    expected = hashlib.sha256(path.read_bytes()).hexdigest()
    assert extract(path, "UnifiedRadixCache").sha256 == expected
    assert file_sha256(path) == expected


def test_sha256_follows_a_one_byte_change(tmp_path: Path) -> None:
    first = extract(write(tmp_path, REAP, "a.py"), "HiRadixCache").sha256
    second = extract(write(tmp_path, REAP + "\n", "b.py"), "HiRadixCache").sha256
    assert first != second


def test_decorators_are_recorded_and_left_out_of_the_source(tmp_path: Path) -> None:
    got = extract(write(tmp_path, UNIFIED, "unified_radix_cache.py"), "UnifiedRadixCache")
    synced = got.methods["_sync_hicache_ready_counts"]
    assert synced.decorators == ("rank_consensus(same_params=True)",)
    assert synced.source.startswith("def _sync_hicache_ready_counts(self)")
    assert "rank_consensus" not in synced.source
    assert synced.first_line == def_line(UNIFIED, "_sync_hicache_ready_counts")
    assert "rank_consensus" not in got.unresolved


def test_unresolved_lists_undefined_globals_only(tmp_path: Path) -> None:
    got = extract(write(tmp_path, REAP), "HiRadixCache")
    # HostBudget and LoadResult appear only in annotations; ack_id, finish_event, ready, counts
    # are locals; ack and event comprehension variables; err an except-handler name;
    # len, int, range, RuntimeError builtins; torch and logger provided.
    assert got.unresolved == ("StorageMetrics",)


def test_unified_family_has_nothing_unresolved(tmp_path: Path) -> None:
    assert extract(write(tmp_path, UNIFIED), "UnifiedRadixCache").unresolved == ()


def test_provided_names_are_never_unresolved(tmp_path: Path) -> None:
    got = extract(write(tmp_path, DRAIN_TAGGED), "HiRadixCache")
    assert "P2PTag" in got.methods[SYNC].source
    assert not set(got.unresolved) & PROVIDED_NAMES


def test_only_the_named_class_is_read(tmp_path: Path) -> None:
    decoy = "class Other:\n    def check_hicache_events(self):\n        pass\n    def _pp_sync(self):\n        pass\n"
    path = write(tmp_path, decoy + "\n\n" + NO_PP_SYNC)
    with pytest.raises(NotApplicable):
        extract(path, "HiRadixCache")
    assert set(extract(path, "Other").methods) == {ENTRY, SYNC}


def test_a_drain_method_is_not_needed(tmp_path: Path) -> None:
    source = MINIMAL
    got = extract(write(tmp_path, source), "HiRadixCache")
    assert got.drain_method is None
    assert got.describe() == "HiRadixCache.?: frees Works some other way"


def test_entry_is_needed_too(tmp_path: Path) -> None:
    source = "class HiRadixCache:\n    def _pp_sync(self):\n        pass\n"
    with pytest.raises(NotApplicable, match=ENTRY):
        extract(write(tmp_path, source), "HiRadixCache")


# --- failures ---------------------------------------------------------------------------


def test_missing_class_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicable) as caught:
        extract(write(tmp_path, REAP), "UnifiedRadixCache")
    assert "UnifiedRadixCache" in str(caught.value)
    assert caught.value.exit_code == 4


def test_syntax_error_is_one_line(tmp_path: Path) -> None:
    path = write(tmp_path, REAP + "\n    def broken(self:\n")
    with pytest.raises(HicacheError) as caught:
        extract(path, "HiRadixCache")
    message = str(caught.value)
    assert not isinstance(caught.value, NotApplicable)
    assert "\n" not in message
    assert str(path) in message
    assert "line" in message


def test_missing_file_is_a_hicache_error(tmp_path: Path) -> None:
    path = tmp_path / "absent.py"
    with pytest.raises(HicacheError) as caught:
        extract(path, "HiRadixCache")
    assert not isinstance(caught.value, NotApplicable)
    assert str(path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_unreadable_file_is_a_hicache_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, REAP)

    def denied(self: Path) -> bytes:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_bytes", denied)
    with pytest.raises(HicacheError) as caught:
        extract(path, "HiRadixCache")
    assert str(caught.value) == f"cannot read {path}: Permission denied"


def test_a_directory_is_a_hicache_error(tmp_path: Path) -> None:
    with pytest.raises(HicacheError, match="cannot read"):
        extract(tmp_path, "HiRadixCache")


def test_bytes_that_are_not_utf8_do_not_stop_extraction(tmp_path: Path) -> None:
    path = tmp_path / "hiradix_cache.py"
    path.write_bytes(b"# caf\xe9\n" + REAP.encode())
    got = extract(path, "HiRadixCache")
    assert got.methods[SYNC].first_line == def_line(REAP, SYNC) + 1
    assert got.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def test_blank_lines_inside_a_method_are_kept(tmp_path: Path) -> None:
    got = extract(write(tmp_path, BLANK_LINES), "HiRadixCache")
    method = got.methods[ENTRY]
    node = next(n for n in ast.walk(ast.parse(BLANK_LINES)) if isinstance(n, ast.FunctionDef) and n.name == ENTRY)
    assert len(method.source.splitlines()) == node.end_lineno - node.lineno + 1
    assert '"""Raise from below two blank lines.\n\n    (The docstring' in method.source


# --- free_names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("def f(self):\n    return Foo()\n", {"Foo"}),
        ("def f(self, x):\n    return x + y\n", {"y"}),
        ("def f(self):\n    a = 1\n    return a\n", set()),
        ("def f(self) -> Ret:\n    return None\n", set()),
        ("def f(self, x: Ann) -> None:\n    return x\n", set()),
        ("def f(self):\n    v: Local = 1\n    return v\n", set()),
        ("def f(self, *args, **kwargs):\n    return args, kwargs\n", set()),
        ("def f(self, *, key=DEFAULT):\n    return key\n", {"DEFAULT"}),
        ("def f(self):\n    return [i for i in range(3)]\n", set()),
        ("def f(self):\n    return {k: v for k, v in items}\n", {"items"}),
        ("def f(self):\n    return (lambda q: q)(1)\n", set()),
        ("def f(self):\n    try:\n        pass\n    except KeyError as err:\n        return err\n", set()),
        ("def f(self):\n    try:\n        pass\n    except MyError:\n        pass\n", {"MyError"}),
        ("def f(self):\n    for a, (b, c) in pairs:\n        print(a, b, c)\n", {"pairs"}),
        ("def f(self):\n    with open('x') as fh:\n        return fh\n", set()),
        ("def f(self):\n    if (n := len(self.q)) > 1:\n        return n\n", set()),
        ("def f(self):\n    return self.a.b.c\n", set()),
        ("def f(self):\n    return torch.zeros(1), logger\n", {"torch", "logger"}),
        ("def f(self):\n    raise NotImplementedError\n", set()),
    ],
)
def test_free_names(source: str, expected: set[str]) -> None:
    assert free_names(source) == expected


def test_free_names_of_family_methods(tmp_path: Path) -> None:
    methods = extract(write(tmp_path, REAP), "HiRadixCache").methods
    assert free_names(methods["loading_check"].source) == {"torch", "logger"}
    assert free_names(methods["writing_check"].source) == {"torch"}
    assert free_names(methods[ENTRY].source) == {"StorageMetrics"}


def test_a_local_import_binds_its_name() -> None:
    assert free_names("def f(self):\n    import time\n    return time.time()\n") == set()


def test_a_nested_def_binds_its_name() -> None:
    assert free_names("def f(self):\n    def helper():\n        return 1\n    return helper()\n") == set()


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x7fELF\x02\x01\x01\x00binary\xff\xfe", "is not Python source: it holds NUL bytes (a binary file?)"),
        (b"# a file cut short\nclass HiRadixCache:\n    def f(self:\n", "does not parse as Python ("),
    ],
)
def test_a_file_that_is_not_python_is_bad_input(tmp_path: Path, content: bytes, reason: str) -> None:
    """Was a HicacheError (exit 1) saying 'line None' for a binary file."""
    path = tmp_path / "hiradix_cache.py"
    path.write_bytes(content)
    with pytest.raises(SourceError) as caught:
        extract(path, "HiRadixCache")
    message = str(caught.value)
    assert isinstance(caught.value, UsageError) and caught.value.exit_code == 2
    assert message.startswith(f"{path} {reason}")
    assert "None" not in message and "\n" not in message


TAGS_WITH_EVERY_FORM = '''\
"""Tags, in every form read_int_enum takes."""
from enum import IntEnum, auto
import enum

BASE = 1 << 10
OFFSET: int = BASE + 6


class P2PTag(IntEnum):
    """Point-to-point tags."""

    DEFAULT = 0
    HICACHE_PP_SYNC = OFFSET * 2 - 1
    NEXT = auto()
    AFTER = enum.auto()
    NEGATIVE = -(BASE // 4)
    SAME = HICACHE_PP_SYNC
    _ignore_ = ["x"]
    COMPUTED = len("skipped: a call is never run")

    def method(self) -> int:
        return 1
'''


def test_read_int_enum_takes_the_values_without_running_the_file(tmp_path: Path) -> None:
    path = tmp_path / "communication_tags.py"
    path.write_text(TAGS_WITH_EVERY_FORM, encoding="utf-8")
    assert read_int_enum(path, "P2PTag") == {
        "DEFAULT": 0,
        "HICACHE_PP_SYNC": 2059,
        "NEXT": 2060,
        "AFTER": 2061,
        "NEGATIVE": -256,
        "SAME": 2059,
    }


@pytest.mark.parametrize("value", ["10 ** 10 ** 10", "1 << 10 ** 9", "2 ** 64", "1 // 0", "(1 << 62) * 4"])
def test_read_int_enum_leaves_out_what_it_does_not_compute(tmp_path: Path, value: str) -> None:
    path = tmp_path / "communication_tags.py"
    path.write_text(f"class P2PTag:\n    BIG = {value}\n    OK = 1\n", encoding="utf-8")
    assert read_int_enum(path, "P2PTag") == {"OK": 1}


@pytest.mark.parametrize(
    ("text", "message"),
    [("X = 1\n", "defines no class P2PTag"), ("class P2PTag(:\n", "does not parse as Python")],
)
def test_read_int_enum_refuses_a_file_without_the_enum(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "communication_tags.py"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SourceError, match=message):
        read_int_enum(path, "P2PTag")
