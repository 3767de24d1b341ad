"""sglang_target/resolve.py: which class a run drives, and what the run records about it."""

from __future__ import annotations

from pathlib import Path

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.sglang_target.extract import NotApplicable, file_sha256
from hicache_cli.sglang_target.locate import SGLangSource, TargetError, TargetSpec
from hicache_cli.sglang_target.resolve import CLASS_CHOICES, Resolved, pick_class, resolve
from hicache_cli.targets import ModelTarget
from tests.sglang_target.families import (
    DRAIN_TAGGED,
    HIRADIX_REL,
    MINIMAL,
    NO_PP_SYNC,
    REAP,
    TAGS_REL,
    UNIFIED,
    UNIFIED_REL,
    make_checkout,
)


def source_of(tmp_path: Path, hiradix: str | None, unified: str | None) -> SGLangSource:
    root = make_checkout(tmp_path, hiradix=hiradix, unified=unified) / "python"
    files = {}
    if hiradix is not None:
        files["HiRadixCache"] = root / HIRADIX_REL
    if unified is not None:
        files["UnifiedRadixCache"] = root / UNIFIED_REL
    return SGLangSource("9.9.9", "path", str(root), files, root / TAGS_REL)


def test_class_choices_come_from_the_class_files() -> None:
    assert CLASS_CHOICES == ("auto", "HiRadixCache", "UnifiedRadixCache")


def test_auto_picks_hiradix_when_it_has_pp_sync(tmp_path: Path) -> None:
    got = pick_class(source_of(tmp_path, REAP, UNIFIED), "auto")
    assert got.class_name == "HiRadixCache"
    assert got.drain_method == "_reap_completed_async_work"


def test_auto_falls_back_to_unified_when_hiradix_has_no_pp_sync(tmp_path: Path) -> None:
    got = pick_class(source_of(tmp_path, NO_PP_SYNC, UNIFIED), "auto")
    assert got.class_name == "UnifiedRadixCache"


def test_auto_falls_back_to_unified_when_hiradix_is_gone(tmp_path: Path) -> None:
    got = pick_class(source_of(tmp_path, None, UNIFIED), "auto")
    assert got.class_name == "UnifiedRadixCache"
    assert got.path.endswith("unified_radix_cache.py")


def test_auto_falls_back_when_the_hiradix_file_lacks_the_class(tmp_path: Path) -> None:
    got = pick_class(source_of(tmp_path, "class SomethingElse:\n    pass\n", UNIFIED), "auto")
    assert got.class_name == "UnifiedRadixCache"


def test_auto_without_pp_sync_anywhere_raises_the_first_reason(tmp_path: Path) -> None:
    unified_without_sync = "class UnifiedRadixCache:\n    def check_hicache_events(self):\n        pass\n"
    with pytest.raises(NotApplicable) as caught:
        pick_class(source_of(tmp_path, NO_PP_SYNC, unified_without_sync), "auto")
    assert "HiRadixCache" in str(caught.value)  # HiRadixCache's reason, the first tried
    assert "_pp_sync" in str(caught.value)
    assert caught.value.exit_code == 4


def test_auto_with_neither_module(tmp_path: Path) -> None:
    with pytest.raises(TargetError, match="neither cache module found"):
        pick_class(source_of(tmp_path, None, None), "auto")


def test_an_explicit_class_is_taken_even_when_auto_would_pick_another(tmp_path: Path) -> None:
    got = pick_class(source_of(tmp_path, REAP, UNIFIED), "UnifiedRadixCache")
    assert got.class_name == "UnifiedRadixCache"


def test_an_explicit_class_without_pp_sync_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicable, match="_pp_sync"):
        pick_class(source_of(tmp_path, NO_PP_SYNC, UNIFIED), "HiRadixCache")


def test_an_explicit_class_whose_file_is_absent_is_not_applicable(tmp_path: Path) -> None:
    with pytest.raises(NotApplicable) as caught:
        pick_class(source_of(tmp_path, None, UNIFIED), "HiRadixCache")
    message = str(caught.value)
    assert "hiradix_cache.py" in message
    assert "9.9.9" in message
    assert "\n" not in message


def test_resolve_refuses_an_unknown_class_before_locating(tmp_path: Path) -> None:
    with pytest.raises(TargetError) as caught:
        resolve(TargetSpec("path", str(tmp_path / "nowhere")), "RadixCache")
    message = str(caught.value)
    assert message.startswith("--sglang-class: 'RadixCache'")
    assert "HiRadixCache" in message and "UnifiedRadixCache" in message
    assert isinstance(caught.value, UsageError)


def test_resolve_a_checkout(checkout: Path) -> None:
    resolved = resolve(TargetSpec("path", str(checkout)))
    assert isinstance(resolved, Resolved)
    assert resolved.target(ModelTarget()).label == "sglang-9.9.9"
    assert resolved.extracted.class_name == "HiRadixCache"


def test_the_target_keeps_the_ranks_and_names_the_code(tmp_path: Path) -> None:
    root = make_checkout(tmp_path, hiradix=DRAIN_TAGGED)
    resolved = resolve(TargetSpec("path", str(root)), "auto")
    hiradix = root / "python" / HIRADIX_REL
    target = resolved.target(ModelTarget(pp=4, tp=2, faults=("lag:1:5",)))
    assert (target.pp, target.tp, target.faults, target.workload) == (4, 2, ("lag:1:5",), "idle")
    code = {k: v for k, v in target.to_dict().items() if k not in ModelTarget().to_dict()}
    assert code == {
        "version": "9.9.9",
        "origin": "path",
        "location": str(root),
        "class": "HiRadixCache",
        "file": str(hiradix),
        "sha256": file_sha256(hiradix),
        "tags_file": str(root / "python" / TAGS_REL),
        "drain_method": "_drain_async_work",
        "unresolved": "StorageMetrics",  # the synthetic family reads it on its storage path
    }
    assert all(isinstance(v, str) for v in code.values())  # JSON as is


def test_config_entry_without_tags_or_drain_method(tmp_path: Path) -> None:
    bare = MINIMAL
    root = make_checkout(tmp_path, hiradix=bare, tags=False)
    target = resolve(TargetSpec("path", str(root))).target(ModelTarget())
    assert target.tags_file == ""
    assert target.drain_method == ""
