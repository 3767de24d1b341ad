"""tracer.hooks.world_of: where a process's default group met, the same for every member of one
world; with torch's real stores (a TCPStore wrapped in PrefixStores, a FileStore) and a store
it cannot place."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch.distributed as dist

from hicache_cli.tracer.hooks import world_of
from tests.conftest import free_port


def c10d_with(store: object) -> SimpleNamespace:
    return SimpleNamespace(_get_default_store=lambda: store)


def test_a_tcp_store_behind_prefix_stores_is_its_address() -> None:
    port = free_port()
    server = dist.TCPStore("127.0.0.1", port, 1, is_master=True, wait_for_workers=False)
    wrapped = dist.PrefixStore("default_pg", dist.PrefixStore("outer", server))
    assert world_of(c10d_with(wrapped)) == f"tcp://127.0.0.1:{port}"


def test_a_file_store_is_its_path(tmp_path) -> None:
    store = dist.FileStore(str(tmp_path / "rendezvous"), 1)
    assert world_of(c10d_with(dist.PrefixStore("default_pg", store))) == f"file://{tmp_path / 'rendezvous'}"


@pytest.mark.parametrize("store", [dist.HashStore(), object()], ids=["hash store", "something else"])
def test_a_store_it_cannot_place_is_no_world(store: object) -> None:
    assert world_of(c10d_with(store)) is None


def test_no_default_group_is_no_world() -> None:
    def missing() -> object:
        raise ValueError("Default process group has not been initialized")

    assert world_of(SimpleNamespace(_get_default_store=missing)) is None
