"""Early stopping: is the run's verdict settled, so that it can end before its duration?

A leak is obvious within seconds (the work list grows thousands of Works a second); proving
boundedness needs a longer quiet stretch. The verdict is judged as the report judges it
(hicache_cli.analysis.assess), once a second, and must hold for several checks in a row.
"""

from __future__ import annotations

from hicache_cli.analysis.causes import judge
from hicache_cli.analysis.kinds import Verdict
from hicache_cli.config import RunConfig
from hicache_cli.sample import Sample

MIN_LEAK_S = 3.0  # post-warm-up data before a LEAK seen in the work list may settle
MIN_BOUNDED_S = 20.0  # ... before BOUNDED, or a LEAK seen in RSS alone, may
CONFIRMATIONS = 3  # consecutive checks, one a second, that must agree


class Settler:
    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self._last_check_t = float("-inf")
        self._streak = (None, 0)  # (verdict, how many checks in a row)

    def __call__(self, samples: dict[int, list[Sample]]) -> str | None:
        series = [s for s in samples.values() if s]
        if not series or len(series) < (self.config.expected_ranks or 1):  # a traced program's: not known
            return None
        t = max(s[-1].t for s in series)
        if t - self._last_check_t < 1.0:
            return None
        self._last_check_t = t
        verdict, span = self.current(series)
        previous, count = self._streak
        self._streak = (verdict, count + 1 if verdict == previous else 1) if verdict else (None, 0)
        if verdict and self._streak[1] >= CONFIRMATIONS:
            return f"{verdict} settled after {t:.1f} s of workload ({span:.1f} s after warm-up)"
        return None

    def current(self, series: list[list[Sample]]) -> tuple[Verdict | None, float]:
        """The verdict that could settle now, and the data span it rests on."""
        threshold = self.config.leak_threshold_mb_per_h
        run = dict(enumerate(series))  # (peers are found by the rank their samples carry)
        tp = self.config.ranked.tp if self.config.ranked else 1
        assessed = [judge(run, i, self.config.warmup_s, threshold, tp=tp).assessment for i in run]
        overall = Verdict.overall(a.verdict.verdict for a in assessed)
        if overall is Verdict.LEAK:
            # a growing work list is this leak's cause, and unmistakable within seconds; RSS
            # alone could still be a start-up climb, so it needs as long as boundedness
            leaking = [a for a in assessed if a.verdict.verdict is Verdict.LEAK]
            causal = ("work-list", "backlog")  # growing Works or a growing message backlog
            need = MIN_LEAK_S if any(a.verdict.basis in causal for a in leaking) else MIN_BOUNDED_S
            span = max(a.span_s for a in leaking)
            return (overall, span) if span >= need else (None, span)
        if overall is Verdict.BOUNDED:
            span = min(a.span_s for a in assessed)
            return (overall, span) if span >= MIN_BOUNDED_S else (None, span)
        return None, min(a.span_s for a in assessed)
