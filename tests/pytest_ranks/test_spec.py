"""The marker's arguments: defaults, units, and one clear line for each bad one."""

from __future__ import annotations

from typing import Any

import pytest

from hicache_cli.pytest_ranks.spec import DEFAULT_MAX_LIVE_WORKS, MarkerError, RanksSpec, spec_from_marker


def test_defaults() -> None:
    spec = spec_from_marker((2,), {})
    assert spec == RanksSpec(world_size=2)
    assert (spec.max_live_works, spec.backend, spec.timeout_s, spec.max_rss_slope_mb_per_h) == (
        DEFAULT_MAX_LIVE_WORKS, "gloo", 60.0, None)  # fmt: skip


def test_every_argument_in_the_units_users_type() -> None:
    spec = spec_from_marker((), {"world_size": 4, "max_live_works": 0, "backend": "nccl", "timeout": "2m",
                                 "max_rss_slope": "1GB/h"})  # fmt: skip
    assert (spec.world_size, spec.max_live_works, spec.backend, spec.timeout_s) == (4, 0, "nccl", 120.0)
    assert spec.max_rss_slope_mb_per_h == 1000.0
    assert spec_from_marker((2,), {"timeout": 1.5, "max_rss_slope": 50}).timeout_s == 1.5
    assert spec_from_marker((2,), {"max_rss_slope": 50}).max_rss_slope_mb_per_h == 50.0
    assert spec_from_marker((2,), {"max_live_works": None}).max_live_works is None  # counted, not checked
    assert spec_from_marker((2,), {"allow_unwaited_sends": True}).allow_unwaited_sends
    assert not spec_from_marker((2,), {}).allow_unwaited_sends  # a body returning with unwaited sends fails


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        ((), {}, "name the number of ranks"),
        ((0,), {}, "world_size must be a whole number from 1 to 64, got 0"),
        ((True,), {}, "world_size must be a whole number"),
        (("2",), {}, "world_size must be a whole number"),
        ((2, 3), {}, "the only positional argument"),
        ((2,), {"world_size": 2}, "world_size given twice"),
        ((2,), {"max_live": 3}, "unknown argument 'max_live' (known: world_size, max_live_works,"),
        ((2,), {"max_live_works": -1}, "max_live_works must be a whole number >= 0"),
        ((2,), {"max_live_works": 2.5}, "max_live_works must be a whole number >= 0"),
        ((2,), {"backend": ""}, "backend must name a torch.distributed backend"),
        ((2,), {"timeout": "soon"}, "timeout='soon' is not a duration"),
        ((2,), {"timeout": 0}, "timeout must be more than 0 s"),
        ((2,), {"timeout": "2h"}, "timeout='2h' is not a duration from 0 to 1 hour"),
        ((2,), {"max_rss_slope": "fast"}, "max_rss_slope='fast' is not a positive rate"),
        ((2,), {"max_rss_slope": "-5MB/h"}, "is not a positive rate"),
        ((2,), {"allow_unwaited_sends": "yes"}, "allow_unwaited_sends must be True or False, got 'yes'"),
    ],
)
def test_bad_arguments_say_which_in_one_line(args: tuple[Any, ...], kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(MarkerError) as raised:
        spec_from_marker(args, kwargs)
    message = str(raised.value)
    assert says in message
    assert message.startswith("hicache_ranks: ") and "\n" not in message
