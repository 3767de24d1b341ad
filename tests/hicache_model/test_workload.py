"""The seeded request stream: determinism, idle stretches, spec validation."""

from __future__ import annotations

import pytest

from hicache_model.workload import PRESETS, Workload, WorkloadSpec, workload_spec


def stream(workload: Workload, rounds: int) -> list[tuple[int, ...] | None]:
    return [workload.request_for(r) for r in range(rounds)]


def test_same_seed_gives_the_same_requests() -> None:
    for preset in ("mixed", "busy"):
        a = stream(Workload(PRESETS[preset], seed=42), 2000)
        b = stream(Workload(PRESETS[preset], seed=42), 2000)
        assert a == b
        assert any(r is not None for r in a)


def test_another_seed_gives_other_requests() -> None:
    assert stream(Workload(PRESETS["busy"], 1), 200) != stream(Workload(PRESETS["busy"], 2), 200)


def test_idle_preset_yields_no_requests() -> None:
    workload = Workload(PRESETS["idle"], seed=3)
    assert stream(workload, 2000) == [None] * 2000
    assert not any(workload.is_busy(r) for r in range(1000))


def test_requests_have_the_spec_lengths_and_share_prefixes() -> None:
    spec = PRESETS["busy"]
    requests = [r for r in stream(Workload(spec, seed=9), 1000) if r is not None]
    assert {len(r) for r in requests} == {spec.prefix_tokens + spec.suffix_tokens}
    prefixes = [r[: spec.prefix_tokens] for r in requests]
    assert len(set(prefixes)) < len(prefixes)  # shared prefixes recur
    assert all(0 < t < 32000 for r in requests for t in r)


def test_mixed_preset_alternates_busy_and_idle_stretches() -> None:
    workload = Workload(PRESETS["mixed"], seed=0)  # cycle of 400 rounds, half idle
    assert [workload.is_busy(r) for r in (0, 199, 200, 399, 400)] == [True, True, False, False, True]
    requests = stream(Workload(PRESETS["mixed"], seed=0), 800)
    assert all(r is None for r in requests[200:400] + requests[600:800])


def test_idle_rounds_draw_no_random_numbers() -> None:
    """A rank that skips asking for idle rounds still sees the same busy-round requests."""
    spec = PRESETS["mixed"]
    every = Workload(spec, seed=5)
    busy_only = Workload(spec, seed=5)
    all_rounds = {r: every.request_for(r) for r in range(1200)}
    for r in range(1200):
        if busy_only.is_busy(r):
            assert busy_only.request_for(r) == all_rounds[r]


@pytest.mark.parametrize("field", ["request_rate", "prefix_sharing", "idle_fraction"])
@pytest.mark.parametrize("value", [-0.1, 1.01])
def test_spec_rejects_fractions_out_of_range(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        WorkloadSpec(**{field: value})


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_spec_accepts_the_range_ends(value: float) -> None:
    WorkloadSpec(request_rate=value, prefix_sharing=value, idle_fraction=value)


def test_workload_spec_applies_overrides_and_ignores_none() -> None:
    spec = workload_spec("busy", request_rate=0.25, idle_fraction=None)
    assert spec.request_rate == 0.25
    assert spec.idle_fraction == PRESETS["busy"].idle_fraction
    assert spec.name == "busy"


def test_workload_spec_refuses_an_unknown_preset() -> None:
    with pytest.raises(ValueError, match="unknown workload 'bogus'"):
        workload_spec("bogus")


def test_workload_spec_validates_overrides() -> None:
    with pytest.raises(ValueError, match="request_rate"):
        workload_spec("mixed", request_rate=2.0)
