"""sglang_target/bind.py: synthetic release families compiled onto a holder and driven on CPU.

No process group is made: with pp_size 1 the methods' `_pp_sync` returns early, and where a
test needs the PP-sync path, CountingCollectives' wrapped originals are replaced by fakes
(FakeWork from tests/fakes.py stands in for gloo's send Work).
"""

from __future__ import annotations

import traceback
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from hicache_cli.errors import HicacheError
from hicache_cli.sglang_target.bind import (
    AckController,
    CountingCollectives,
    SGLangHolder,
    SGLangRound,
    TargetMismatch,
    Traffic,
    bind,
    build,
    compile_methods,
)
from hicache_cli.sglang_target.extract import ENTRY, ExtractedClass, extract
from tests.fakes import FakeWork
from tests.sglang_target.families import (
    BLANK_LINES,
    DRAIN,
    DRAIN_TAGGED,
    REAP,
    TAGS,
    UNIFIED,
    def_line,
)

FAMILIES = {
    "reap": (REAP, "HiRadixCache"),
    "drain": (DRAIN, "HiRadixCache"),
    "drain-tagged": (DRAIN_TAGGED, "HiRadixCache"),
    "unified": (UNIFIED, "UnifiedRadixCache"),
}
SENTINEL_GROUP = object()  # a PP group no collective is ever really called on


def family(tmp_path: Path, name: str) -> tuple[ExtractedClass, Path]:
    """The family's module extracted from tmp_path, and a tags file beside it."""
    source, class_name = FAMILIES[name]
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    tags = tmp_path / "communication_tags.py"
    tags.write_text(TAGS, encoding="utf-8")
    return extract(path, class_name), tags


def holder(pp_rank: int = 0, pp_size: int = 1, pp_group: Any = None) -> SGLangHolder:
    return SGLangHolder(pp_rank=pp_rank, pp_size=pp_size, pp_group=pp_group, tp_group=None, tp_size=1)


class FakeCollectives:
    """Mimics torch.distributed's isend/recv/all_reduce under CountingCollectives: records each
    call; isend returns a FakeWork (is_completed() stays False until waited, as on gloo)."""

    def __init__(self) -> None:
        self.sends: list[tuple[torch.Tensor, dict[str, Any]]] = []
        self.recvs: list[dict[str, Any]] = []
        self.works: list[FakeWork] = []

    def isend(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> FakeWork:
        self.sends.append((tensor, kwargs))
        self.works.append(FakeWork())
        return self.works[-1]

    def recv(self, tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
        self.recvs.append(kwargs)
        return kwargs.get("group_src", 0)


@pytest.fixture
def counting(restore_collectives: None) -> tuple[CountingCollectives, FakeCollectives]:
    """CountingCollectives installed over fakes; torch.distributed put back afterwards."""
    counter = CountingCollectives(Traffic())
    fakes = FakeCollectives()
    counter._isend, counter._recv = fakes.isend, fakes.recv
    return counter, fakes


# --- compile_methods ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(FAMILIES))
def test_compiled_methods_point_into_the_file(tmp_path: Path, name: str) -> None:
    extracted, tags = family(tmp_path, name)
    functions = compile_methods(extracted, tags)
    assert set(functions) == set(extracted.methods)
    source = FAMILIES[name][0]
    for method_name, fn in functions.items():
        assert isinstance(fn, types.FunctionType)
        assert fn.__name__ == method_name
        assert fn.__code__.co_filename == extracted.path
        assert fn.__code__.co_firstlineno == def_line(source, method_name)


def test_p2p_tag_comes_from_the_tags_file(tmp_path: Path) -> None:
    extracted, tags = family(tmp_path, "drain-tagged")
    assert extracted.uses_p2p_tag
    tag = compile_methods(extracted, tags)["_pp_sync"].__globals__["P2PTag"]
    assert tag.HICACHE_PP_SYNC == 1234
    assert tag.__module__ == "sglang_communication_tags"


def test_p2p_tag_without_a_tags_file(tmp_path: Path) -> None:
    extracted, _ = family(tmp_path, "unified")
    with pytest.raises(HicacheError, match="P2PTag"):
        compile_methods(extracted, None)


def test_no_tags_file_needed_without_p2p_tag(tmp_path: Path) -> None:
    extracted, _ = family(tmp_path, "reap")
    assert not extracted.uses_p2p_tag
    assert "P2PTag" not in compile_methods(extracted, None)["_pp_sync"].__globals__


def test_a_decorated_method_compiles_without_its_decorator(tmp_path: Path) -> None:
    extracted, tags = family(tmp_path, "unified")
    fn = compile_methods(extracted, tags)["_sync_hicache_ready_counts"]
    assert fn.__code__.co_name == "_sync_hicache_ready_counts"
    assert not hasattr(fn, "__wrapped__")
    assert "rank_consensus" not in fn.__globals__


def test_annotations_are_never_evaluated(tmp_path: Path) -> None:
    extracted, _ = family(tmp_path, "reap")
    fn = compile_methods(extracted, None)["loading_check"]
    assert fn.__annotations__["budget"] == "HostBudget | None"  # HostBudget is defined nowhere


def test_the_methods_share_one_namespace(tmp_path: Path) -> None:
    extracted, tags = family(tmp_path, "unified")
    functions = compile_methods(extracted, tags)
    namespaces = {id(fn.__globals__) for fn in functions.values()}
    assert len(namespaces) == 1
    shared = next(iter(functions.values())).__globals__
    assert shared["torch"] is torch
    assert shared["logger"].name == "sglang.srt.mem_cache"


# --- the holder and a round ----------------------------------------------------------------------


def test_holder_defaults() -> None:
    h = SGLangHolder(pp_rank=1, pp_size=4, pp_group="pp", tp_group="tp", tp_size=2)
    assert (h.pp_rank, h.pp_size, h.pp_group, h.tp_group, h.tp_world_size) == (1, 4, "pp", "tp", 2)
    assert h.work_list == []
    assert h.cache_controller == AckController()
    assert h.cache_controller.ack_write_queue == [] and h.cache_controller.ack_load_queue == []
    assert h.linker is None and h.enable_storage is False and h.enable_storage_metrics is False
    assert h.tree_core.write_back_duplicate_reclaim_digest == 0
    assert h.flush_pending_backups() is None


@pytest.mark.parametrize("name", list(FAMILIES))
def test_a_round_on_one_stage_needs_no_process_group(tmp_path: Path, name: str) -> None:
    extracted, tags = family(tmp_path, name)
    h = holder()
    bind(h, compile_methods(extracted, tags))
    for method_name in extracted.methods:
        assert getattr(h, method_name).__self__ is h
    h.check_hicache_events()
    h.check_hicache_events()
    assert h.work_list == []


@pytest.mark.parametrize("name", list(FAMILIES))
def test_build_runs_rounds(tmp_path: Path, name: str) -> None:
    extracted, tags = family(tmp_path, name)
    h = holder()
    loop = build(extracted, tags, extracted.sha256, h)
    assert isinstance(loop, SGLangRound)
    assert loop.holder is h and loop.extracted is extracted
    for _ in range(3):
        loop.run_round()
    assert loop.round == 3


def test_build_refuses_a_changed_file(tmp_path: Path) -> None:
    extracted, tags = family(tmp_path, "reap")
    h = holder()
    with pytest.raises(TargetMismatch) as caught:
        build(extracted, tags, "0" * 64, h)
    assert extracted.path in str(caught.value)
    assert isinstance(caught.value, HicacheError)
    assert not hasattr(h, ENTRY)  # nothing was bound


def test_a_traceback_points_at_the_line_in_the_file(tmp_path: Path) -> None:
    source = "class HiRadixCache:\n    def _pp_sync(self):\n        return\n    def check_hicache_events(self):\n"
    source += "        x = 1\n        raise ValueError(x)\n"
    path = tmp_path / "hiradix_cache.py"
    path.write_text(source, encoding="utf-8")
    h = holder()
    bind(h, compile_methods(extract(path, "HiRadixCache"), None))
    with pytest.raises(ValueError) as caught:
        h.check_hicache_events()
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    assert (frame.filename, frame.lineno, frame.name) == (str(path), 6, ENTRY)
    assert frame.line == "raise ValueError(x)"  # read back from the user's file


def test_a_traceback_points_at_the_line_after_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "hiradix_cache.py"
    path.write_text(BLANK_LINES, encoding="utf-8")
    h = holder()
    bind(h, compile_methods(extract(path, "HiRadixCache"), None))
    with pytest.raises(ValueError) as caught:
        h.check_hicache_events()
    frame = traceback.extract_tb(caught.value.__traceback__)[-1]
    raise_line = BLANK_LINES.splitlines().index('        raise ValueError(f"raised on purpose after {first}")') + 1
    assert (frame.filename, frame.lineno) == (str(path), raise_line)


# --- the PP-sync path, on fakes -------------------------------------------------------------------


def first_stage(tmp_path: Path, name: str) -> SGLangHolder:
    extracted, tags = family(tmp_path, name)
    h = holder(pp_rank=0, pp_size=2, pp_group=SENTINEL_GROUP)
    bind(h, compile_methods(extracted, tags))
    return h


def test_reap_keeps_every_send_on_gloo(tmp_path: Path, counting: tuple[CountingCollectives, FakeCollectives]) -> None:
    counter, fakes = counting
    h = first_stage(tmp_path, "reap")
    for _ in range(5):
        h.check_hicache_events()
    # writing_check and loading_check each send once a round; nothing completes without wait()
    assert len(h.work_list) == 10
    assert h.work_list == fakes.works
    assert all(w.wait_calls == 0 for w in fakes.works)
    assert counter.traffic.sent == 10
    _, kwargs = fakes.sends[0]
    assert kwargs == {"group_dst": 1, "group": SENTINEL_GROUP, "tag": 2}


def test_reap_pops_completed_works_from_the_front(
    tmp_path: Path, counting: tuple[CountingCollectives, FakeCollectives]
) -> None:
    _, fakes = counting
    h = first_stage(tmp_path, "reap")
    h.check_hicache_events()
    h.check_hicache_events()
    fakes.works[0].wait()
    fakes.works[1].wait()
    fakes.works[3].wait()  # behind one still pending: stays
    h._reap_completed_async_work()
    assert h.work_list == fakes.works[2:]


@pytest.mark.parametrize("name", ["drain", "drain-tagged"])
def test_drain_waits_on_every_work_each_round(
    tmp_path: Path, name: str, counting: tuple[CountingCollectives, FakeCollectives]
) -> None:
    counter, fakes = counting
    h = first_stage(tmp_path, name)
    for _ in range(5):
        h.check_hicache_events()
    assert len(h.work_list) == 2  # this round's two sends; the earlier ones were drained
    assert [w.wait_calls for w in fakes.works] == [1] * 8 + [0, 0]
    assert counter.traffic.sent == 10
    tag = fakes.sends[0][1]["tag"]
    assert tag == (1234 if name == "drain-tagged" else 2)


def test_unified_sends_one_int64_vector_a_round(
    tmp_path: Path, counting: tuple[CountingCollectives, FakeCollectives]
) -> None:
    counter, fakes = counting
    h = first_stage(tmp_path, "unified")
    for _ in range(3):
        h.check_hicache_events()
    assert len(h.work_list) == 1
    assert [w.wait_calls for w in fakes.works] == [1, 1, 0]
    tensor, kwargs = fakes.sends[0]
    assert tensor.dtype == torch.int64
    assert tensor.tolist() == [0, 0, 0, 0]
    assert kwargs["tag"] == 1234
    assert counter.traffic.sent_bytes == 3 * 4 * 8


def test_the_last_stage_only_receives(tmp_path: Path, counting: tuple[CountingCollectives, FakeCollectives]) -> None:
    counter, fakes = counting
    extracted, tags = family(tmp_path, "drain-tagged")
    h = holder(pp_rank=1, pp_size=2, pp_group=SENTINEL_GROUP)
    bind(h, compile_methods(extracted, tags))
    h.check_hicache_events()
    assert fakes.sends == []
    assert fakes.recvs == [{"group_src": 0, "group": SENTINEL_GROUP}] * 2
    assert counter.traffic.received == 2
    assert counter.traffic.blocked_on is None


# --- CountingCollectives ------------------------------------------------------------------------


def test_counting_collectives_replace_and_wrap_torch_distributed(restore_collectives: None) -> None:
    originals = dist.isend, dist.recv, dist.all_reduce
    counter = CountingCollectives(Traffic())
    assert (counter._isend, counter._recv, counter._all_reduce) == originals
    assert dist.isend == counter.isend
    assert dist.recv == counter.recv
    assert dist.all_reduce == counter.all_reduce
    assert torch.distributed.isend == counter.isend  # what SGLang's methods call


def test_isend_counts_messages_and_bytes(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())
    seen: list[tuple[Any, ...]] = []

    def fake_isend(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> str:
        seen.append((tensor, args, kwargs))
        return "work"

    counter._isend = fake_isend
    a, b = torch.zeros(3, dtype=torch.int32), torch.zeros(4, dtype=torch.int64)
    assert dist.isend(a, 1, group="g", tag=7) == "work"
    assert dist.isend(b, group_dst=1) == "work"
    assert seen == [(a, (1,), {"group": "g", "tag": 7}), (b, (), {"group_dst": 1})]
    assert (counter.traffic.sent, counter.traffic.sent_bytes) == (2, 3 * 4 + 4 * 8)
    assert (counter.traffic.received, counter.traffic.all_reduces) == (0, 0)


def test_a_failed_isend_is_not_counted(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())

    def broken(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("connection closed")

    counter._isend = broken
    with pytest.raises(RuntimeError):
        dist.isend(torch.zeros(1), 1)
    assert (counter.traffic.sent, counter.traffic.sent_bytes) == (0, 0)


def test_recv_is_blocked_on_while_it_waits(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())
    during: list[str | None] = []

    def fake_recv(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> int:
        during.append(counter.traffic.blocked_on)
        return 0

    counter._recv = fake_recv
    assert counter.traffic.blocked_on is None
    assert dist.recv(torch.zeros(1), group_src=0) == 0
    assert during[0] is not None and "recv" in during[0]
    assert counter.traffic.blocked_on is None
    assert counter.traffic.received == 1


def test_a_failed_recv_is_not_blocked_on_any_more(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())

    def broken(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("peer went away")

    counter._recv = broken
    with pytest.raises(RuntimeError, match="peer went away"):
        dist.recv(torch.zeros(1), group_src=0)
    assert counter.traffic.blocked_on is None


def test_a_failed_recv_is_not_counted_as_received(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())

    def broken(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("peer went away")

    counter._recv = broken
    with pytest.raises(RuntimeError):
        dist.recv(torch.zeros(1), group_src=0)
    assert counter.traffic.received == 0


def test_all_reduce_is_counted_and_passed_through(restore_collectives: None) -> None:
    counter = CountingCollectives(Traffic())
    seen: list[Any] = []
    counter._all_reduce = lambda t, *a, **k: seen.append((t, a, k))
    tensor = torch.ones(2)
    dist.all_reduce(tensor, op="min", group="tp")
    dist.all_reduce(tensor)
    assert counter.traffic.all_reduces == 2
    assert seen == [(tensor, (), {"op": "min", "group": "tp"}), (tensor, (), {})]
    assert counter.traffic.sent == 0


def test_the_tags_file_is_read_never_run(tmp_path: Path) -> None:
    """Each rank exec'd the checkout's communication_tags.py: its top level (and class body) ran."""
    extracted, tags = family(tmp_path, "drain-tagged")
    marker = tmp_path / "ran"
    tags.write_text(
        f"from enum import IntEnum\n"
        f"open({str(marker)!r}, 'w').write('top level')\n"
        f"class P2PTag(IntEnum):\n"
        f"    open({str(marker)!r}, 'w').write('class body')\n"
        f"    HICACHE_PP_SYNC = 1234\n",
        encoding="utf-8",
    )
    tag = compile_methods(extracted, tags)["_pp_sync"].__globals__["P2PTag"]
    assert not marker.exists()
    assert tag.HICACHE_PP_SYNC == 1234 and isinstance(tag.HICACHE_PP_SYNC, int)
