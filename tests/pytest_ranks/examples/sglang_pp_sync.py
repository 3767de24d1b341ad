"""SGLang's own PP sync on 2 gloo ranks: the release that reaps fails, the one that drains passes.

`HiRadixCache.check_hicache_events` and the methods it calls are taken from a release's own
`hiradix_cache.py` and bound onto a stand-in for the cache object, as `hicache stress
--target sglang` does (docs/sglang.md), so SGLang's dependencies are not needed. Each round
is one scheduler step of an idle server: PP0 isends its counts to PP1 and keeps the Work in
SGLang's `work_list`; 0.5.14 reaps it with `is_completed()`, 0.5.15 waits it.
"""

import pytest
import torch.distributed as dist

from hicache_cli.sglang_target.bind import SGLangHolder, bind, compile_methods
from hicache_cli.sglang_target.extract import extract
from hicache_cli.sglang_target.locate import release

ROUNDS = 300


@pytest.fixture(params=["0.5.14", "0.5.15"])
def sglang(request):
    """The release's files (fetched once, without dependencies, into hicache's cache); found
    here in pytest, handed to every rank."""
    return release(request.param)


@pytest.mark.hicache_ranks(2, max_live_works=8)
def test_hiradix_cache_pp_sync_waits_its_works(rank, world_size, sglang):
    cache = SGLangHolder(pp_rank=rank, pp_size=world_size, pp_group=dist.group.WORLD, tp_group=None, tp_size=1)
    bind(cache, compile_methods(extract(sglang.files["HiRadixCache"], "HiRadixCache"), sglang.tags_file))
    for _ in range(ROUNDS):
        cache.check_hicache_events()
    for work in cache.work_list:  # shutting down: what is still in flight is waited, as a server's exit would
        work.wait()
