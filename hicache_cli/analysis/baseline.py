"""`check --baseline`: is this run worse than a stored report of the same workload?

Pure: reports in, the gate's assertions out. Only the policy and the
code under test (`--target`, a traced program, an injected `--fault`) may differ from the
baseline, since they are what is compared; a run of another workload is refused before it
starts. Each figure allows for the noise between two runs of one configuration:
- RSS slope: worse only when this run's whole 95% interval lies above the baseline's,
  by more than the slope tolerance (two intervals of one configuration overlap);
- peak work-list depth: worse above the baseline's peak times the depth factor;
- loop p99: worse above the baseline's p99 times the p99 factor, plus P99_FLOOR_MS (below a
  millisecond a p99 is the scheduler's, not the code's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from hicache_cli.analysis.gate import Assertion
from hicache_cli.analysis.results import Report, Rss
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.units import parse_rate_mb_per_h

# What makes two runs of hicache's ranks the same workload (RankedTarget's names). The
# policy, the target code and injected faults may differ: they stand for the code under test.
WORKLOAD_KEYS = (
    "pp",
    "tp",
    "workload",
    "request_rate",
    "prefix_sharing",
    "idle_fraction",
    "seed",
    "round_time_s",  # a round's least time sets the rates
    "device",
    "pp_backend",  # gloo's and NCCL's Works complete differently: another transport, another run
)
P99_FLOOR_MS = 1.0


@dataclass(frozen=True)
class Tolerance:
    slope_mb_per_h: float = 50.0  # beyond the baseline interval's upper end
    depth_factor: float = 1.5  # times the baseline's peak depth
    p99_factor: float = 3.0  # times the baseline's loop p99 (plus P99_FLOOR_MS)


def parse_tolerance(specs: list[str]) -> Tolerance:
    """`--tolerance slope=50MB/h`, `depth=1.5x`, `p99=3x` (repeatable; each name once)."""
    values: dict[str, float] = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        name = name.strip()
        if not sep or name not in ("slope", "depth", "p99"):
            raise UsageError(f"--tolerance {spec!r}: use slope=RATE, depth=FACTOR or p99=FACTOR (e.g. p99=3x)")
        if name in values:
            raise UsageError(f"--tolerance: {name} is given twice")
        if name == "slope":
            values[name] = parse_rate_mb_per_h(value, "tolerance slope")
            continue
        text = value.strip().lower().removesuffix("x")
        try:
            factor = float(text)
        except ValueError:
            raise UsageError(f"--tolerance {spec!r}: cannot read {value!r} as a factor (e.g. 2x)") from None
        if not (math.isfinite(factor) and factor >= 1):
            raise UsageError(f"--tolerance {spec!r}: a factor must be at least 1 (1x: no worse than the baseline)")
        values[name] = factor
    default = Tolerance()
    return Tolerance(
        slope_mb_per_h=values.get("slope", default.slope_mb_per_h),
        depth_factor=values.get("depth", default.depth_factor),
        p99_factor=values.get("p99", default.p99_factor),
    )


def workload_difference(baseline: RunConfig, config: RunConfig) -> str | None:
    """What makes the run's configuration another workload than the baseline's, in words;
    None when they are the same workload."""
    base, here = baseline.ranked, config.ranked
    if (base is None) != (here is None):
        there, now = ("a traced program", "hicache's workload") if base is None else ("hicache's workload", "a trace")
        return f"the baseline is {there}, this run {now}"
    if base is None or here is None:
        return None  # a traced program is its own workload: what runs is what is compared
    differences = [
        f"{key} {_word(getattr(base, key))} there, {_word(getattr(here, key))} here"
        for key in WORKLOAD_KEYS
        if getattr(base, key) != getattr(here, key)
    ]
    return "; ".join(differences) or None


def _word(value: Any) -> str:
    return "the preset's" if value is None else str(value)


def compare(report: Report, baseline: Report, name: str, tolerance: Tolerance) -> list[Assertion]:
    """Per rank: RSS slope, peak depth and loop p99 against the baseline named `name`."""
    results = []
    devices, base_devices = report.environment.devices, baseline.environment.devices
    if devices and base_devices and devices != base_devices:
        message = f"the ranks ran on {', '.join(devices)}, baseline {name}'s on {', '.join(base_devices)}"
        results.append(Assertion(None, "baseline", None, message))
    theirs = {r.file_number: r for r in baseline.ranks}
    for ours in report.ranks:
        rank = ours.rank
        base = theirs.get(ours.file_number)
        if not ours.measured:
            continue  # the gate's own assertions already say it wrote nothing
        if base is None or not base.measured:
            results.append(Assertion(rank, "baseline", None, f"rank {rank}: baseline {name} has no samples of it"))
            continue
        assert ours.rss and base.rss and ours.work_list and base.work_list  # measured ranks have them (from_dict)
        assert ours.loop_latency and base.loop_latency
        results.append(_slope(rank, ours.rss, base.rss, name, tolerance))
        results.append(_depth(rank, ours.work_list.max, base.work_list.max, name, tolerance))
        results.append(_p99(rank, ours.loop_latency.p99, base.loop_latency.p99, name, tolerance))
    return results


def _slope(rank: int, ours: Rss, base: Rss, name: str, tolerance: Tolerance) -> Assertion:
    if ours.slope_ci95_mb_per_h is None or base.slope_ci95_mb_per_h is None:
        which = "this run" if ours.slope_ci95_mb_per_h is None else f"baseline {name}"
        return Assertion(rank, "baseline-slope", None, f"rank {rank}: {which} has too little data for an RSS trend")
    limit = base.slope_ci95_mb_per_h[1] + tolerance.slope_mb_per_h
    text = f"rank {rank} RSS slope {ours.interval_text()}"
    against = f"baseline {name}'s {base.interval_text()} (+{tolerance.slope_mb_per_h:g} MB/h allowed)"
    lo = ours.slope_ci95_mb_per_h[0]
    if lo > limit:
        return Assertion(rank, "baseline-slope", False, f"{text} is above {against} by {lo - limit:.0f} MB/h")
    return Assertion(rank, "baseline-slope", True, f"{text} is within {against}")


def _depth(rank: int, peak: int, base_peak: int, name: str, tolerance: Tolerance) -> Assertion:
    allowed = math.ceil(base_peak * tolerance.depth_factor)
    text = f"rank {rank} work list peaked at {peak}; baseline {name}'s at {base_peak} (at most {allowed} allowed)"
    return Assertion(rank, "baseline-depth", peak <= allowed, text)


def _p99(rank: int, p99: float | None, base_p99: float | None, name: str, tolerance: Tolerance) -> Assertion:
    if p99 is None or base_p99 is None:
        which = "this run" if p99 is None else f"baseline {name}"
        return Assertion(rank, "baseline-p99", None, f"rank {rank}: {which} finished no round after warm-up")
    allowed = base_p99 * tolerance.p99_factor + P99_FLOOR_MS
    ratio = f"x{p99 / base_p99:.2f}" if base_p99 > 0 else "from 0"
    text = (
        f"rank {rank} loop p99 {p99:.2f} ms, {ratio} baseline {name}'s {base_p99:.2f} ms "
        f"(at most {allowed:.2f} ms allowed: x{tolerance.p99_factor:g} + {P99_FLOOR_MS:g} ms)"
    )
    return Assertion(rank, "baseline-p99", p99 <= allowed, text)
