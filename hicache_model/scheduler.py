"""A scheduler-like event loop step: forward requests down the pipeline, admit, run, retire
requests, then process cache events.

Like SGLang's scheduler, every round ends in `check_hicache_events`, busy or idle: an
idle server's loop spins through rounds with nothing to do and still syncs each round. And
like SGLang's PP loop, every round begins with the requests passed down the pipeline
(pp_sync.RequestForwarding), which paces each stage to the next, idle or not.
"""

from __future__ import annotations

from collections import deque

from hicache_model.hiradix_cache import HiRadixCache
from hicache_model.pp_sync import RequestForwarding
from hicache_model.radix_tree import TreeNode
from hicache_model.workload import Workload


class Scheduler:
    def __init__(self, cache: HiRadixCache, workload: Workload, forwarding: RequestForwarding | None = None) -> None:
        self.cache = cache
        self.workload = workload
        self.forwarding = forwarding
        self.round = 0
        self._tokens: tuple[int, ...] | None = None  # this round's request, once forward_requests drew it
        self._forwarded = False
        self._running: deque[tuple[int, TreeNode]] = deque()  # (finish round, locked node)

    def forward_requests(self) -> None:
        """The round's first step: this round's request (if one arrives) is drawn and passed
        down the pipeline. The rank's loop calls it before the round's faults strike (a stage
        that hangs has taken its requests); `run_round` calls it when the loop did not."""
        self._tokens = self.workload.request_for(self.round)
        self._forwarded = True
        if self.forwarding is not None:
            self.forwarding.forward(0 if self._tokens is None else 1)

    def run_round(self) -> None:
        if not self._forwarded:
            self.forward_requests()
        self._forwarded = False
        self._admit_and_retire(self._tokens)
        self.cache.check_hicache_events()
        self.round += 1

    def warm_up(self, rounds: int) -> None:
        """Run `rounds` rounds of the workload with every copy settled locally, no PP sync.

        Fills the pools and brings the allocator to its steady state before measurement,
        so that a cache filling up is not mistaken for a leak. Every rank ends it in the
        same state: all copies finished and acknowledged.
        """
        for _ in range(rounds):
            self._admit_and_retire(self.workload.request_for(self.round))
            self.cache.settle_events()
            self.round += 1

    def _admit_and_retire(self, tokens: tuple[int, ...] | None) -> None:
        r = self.round
        if tokens is not None:
            node = self.cache.serve(tokens, fill_value=float(r % 251))
            if node is not None:
                self._running.append((r + self.workload.spec.decode_rounds, node))
        while self._running and self._running[0][0] <= r:
            self.cache.release(self._running.popleft()[1])
