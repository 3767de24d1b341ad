"""warmup: a traced program's warm-up lasts until its RSS growth has stayed settled, on
synthetic series with known answers."""

from __future__ import annotations

import pytest

from hicache_cli.analysis import stats
from hicache_cli.analysis.assess import assess_rank
from hicache_cli.analysis.warmup import settled_at
from tests.conftest import build_sample

TOLERANCE = 50 * stats.MB / 3600  # half of a 100 MB/h threshold, in bytes per second
HZ = 10


def stairs_then_flat(until_s: float, seconds: float = 30.0, step_bytes: float = 2e6, every_s: float = 1.5):
    """RSS that jumps by `step_bytes` every `every_s` (an allocator growing its arenas)
    until `until_s`, then stays flat."""
    points = []
    for i in range(int(seconds * HZ)):
        t = i / HZ
        steps = int(min(t, until_s) / every_s)
        points.append((t, 3e8 + steps * step_bytes))
    return points


def test_the_warm_up_ends_after_the_last_step() -> None:
    points = stairs_then_flat(until_s=12.0)
    end = settled_at(points, 1.0, 15.0, TOLERANCE)
    assert 12.0 <= end <= 15.0
    # a flat stretch between two steps ends a one-second-window search early
    assert stats.plateau_start(points, 1.0, 15.0, TOLERANCE) < 12.0


def test_a_steady_leak_and_a_flat_line_have_no_warm_up() -> None:
    leak = [(i / HZ, 3e8 + 50_000 * i / HZ) for i in range(300)]
    flat = [(i / HZ, 3e8) for i in range(300)]
    assert settled_at(leak, 1.0, 15.0, TOLERANCE) == 1.0
    assert settled_at(flat, 1.0, 15.0, TOLERANCE) == 1.0


@pytest.mark.parametrize("max_s", [5.0, 10.0])
def test_the_warm_up_never_passes_its_bound(max_s: float) -> None:
    assert settled_at(stairs_then_flat(until_s=12.0), 1.0, max_s, TOLERANCE) == max_s


def test_steps_that_go_on_through_the_second_half_are_growth_not_warm_up() -> None:
    """Near the long run (the second half's slope) everywhere: a steady rise, left in the trend."""
    assert settled_at(stairs_then_flat(until_s=25.0), 1.0, 15.0, TOLERANCE) == 1.0


def test_too_few_points_keep_the_minimum() -> None:
    assert settled_at([(0.0, 1.0), (1.0, 2.0)], 1.0, 15.0, TOLERANCE) == 1.0


def traced(points: list[tuple[float, float]]) -> list:  # noqa: ANN001
    return [build_sample(0, t, rss_bytes=int(v), works={"live": 0}) for t, v in points]


def test_a_traced_program_s_warm_up_is_decided_from_its_rss_and_warmup_bounds_it() -> None:
    series = traced(stairs_then_flat(until_s=12.0))
    auto = assess_rank(series, None, 100.0)
    assert 12.0 <= auto.warmup_s <= 15.0
    assert auto.verdict.verdict == "BOUNDED", auto.verdict.reason  # the steps are warm-up, not growth
    assert assess_rank(series, 6.0, 100.0).warmup_s == 6.0  # --warmup: at most this long
    # hicache's own ranks: --warmup is fixed, as before
    own = [build_sample(0, t, rss_bytes=int(v)) for t, v in stairs_then_flat(until_s=12.0)]
    assert assess_rank(own, 13.0, 100.0).warmup_s == 13.0
