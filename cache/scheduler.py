"""A scheduler-like event loop step: admit, run, retire requests, then process cache events.

Like SGLang's scheduler, every round ends in `check_hicache_events`, busy or idle: an
idle server's loop spins through rounds with nothing to do and still syncs each round.
"""

from __future__ import annotations

from collections import deque

from cache.hiradix_cache import HiRadixCache
from cache.radix_tree import TreeNode
from cache.workload import Workload


class Scheduler:
    def __init__(self, cache: HiRadixCache, workload: Workload) -> None:
        self.cache = cache
        self.workload = workload
        self.round = 0
        self._running: deque[tuple[int, TreeNode]] = deque()  # (finish round, locked node)

    def run_round(self) -> None:
        self._admit_and_retire()
        self.cache.check_hicache_events()
        self.round += 1

    def warm_up(self, rounds: int) -> None:
        """Run `rounds` rounds of the workload with every copy settled locally, no PP sync.

        Fills the pools and brings the allocator to its steady state before measurement,
        so that a cache filling up is not mistaken for a leak. Every rank ends it in the
        same state: all copies finished and acknowledged.
        """
        for _ in range(rounds):
            self._admit_and_retire()
            self.cache.settle_events()
            self.round += 1

    def _admit_and_retire(self) -> None:
        r = self.round
        tokens = self.workload.request_for(r)
        if tokens is not None:
            node = self.cache.serve(tokens, fill_value=float(r % 251))
            if node is not None:
                self._running.append((r + self.workload.spec.decode_rounds, node))
        while self._running and self._running[0][0] <= r:
            self.cache.release(self._running.popleft()[1])
