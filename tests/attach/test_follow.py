"""attach --follow inside the target (attach/follow.py): when a holder counts as growing, when
the tracer's window opens and closes, how its line reaches the holder; and the census
counting a holder's Works by the site that made them; and, on hicache's side, when a process
that had no process group yet is injected again. Fake hooks and clock; real objects."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.attach import protocol
from hicache_cli.attach.census import take_census
from hicache_cli.attach.follow import (
    CPU_SHARE,
    FLAT_BLOCKS,
    GROWING,
    MIN_GROWTH,
    NUDGE_BLOCKS,
    NUDGE_SHARE,
    NUDGE_WINDOW_S,
    RETRY_CENSUSES,
    Follower,
    Hooks,
    Trend,
)
from hicache_cli.attach.procs import ProcessInfo
from hicache_cli.attach.protocol import Census, CensusCost, Holder
from hicache_cli.attach.session import RETRY_YOUNGER_S, Target, retry_due
from hicache_cli.attach.walk import Walker
from tests.conftest import assert_refused


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeHooks:
    """What the agent's hooks do, recorded: on, off, forget; `sites` says where a Work was made."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.sites: dict[int, tuple[str, int, str]] = {}

    def hooks(self) -> Hooks:
        return Hooks(
            on=lambda: self.calls.append("on"),
            off=lambda: self.calls.append("off"),
            site_of=lambda work: self.sites.get(id(work)),
            forget=lambda: self.calls.append("forget"),
        )


def census(works: int, sites: list[list[Any]] | None = None, path: str = "Relay.inflight") -> Census:
    holders = [Holder(path, "dict", works, 0, sites=sites)] if works else []
    return Census(1, 0, 0.0, works, holders, CensusCost())


def follow(counts: list[int], every: float = 15.0) -> tuple[Follower, FakeHooks, Clock]:
    clock, fake = Clock(), FakeHooks()
    follower = Follower(every, 10.0, fake.hooks(), clock)
    for n in counts:
        follower.took(census(n))
        clock.now += every
    return follower, fake, clock


def test_a_holder_that_keeps_setting_new_highs_grows() -> None:
    trend = Trend()
    for t, n in enumerate([0, 40, 80, 120]):
        trend.add(t * 15.0, n)
    assert trend.highs == GROWING and trend.growing
    assert trend.per_hour == 120 * 3600 / 45


def test_a_bounded_population_never_grows_however_it_moves() -> None:
    rng = random.Random(3)
    trend = Trend()
    grew = []
    for t in range(500):  # a drained list: 0 to 64 Works at any census, for two hours of censuses
        trend.add(t * 15.0, rng.randint(0, 64))
        grew.append(trend.growing)
    assert not any(grew[50:])  # once its range is seen, no run of new highs


def test_small_new_highs_are_not_growth() -> None:
    trend = Trend()
    for t, n in enumerate([2, 3, 4, 5, 6]):  # new highs, but by fewer than MIN_GROWTH Works
        trend.add(float(t), n)
    assert trend.highs >= GROWING and not trend.growing
    assert MIN_GROWTH > 4


def test_a_census_cut_short_leaves_the_trends_alone_and_the_next_comes_soon() -> None:
    """A census cut short (its budget ran out; the frozen objects moved under heap.py's walk
    every try) counted part of the heap: its zero would end a leak's run of new highs, and
    delay its alarm."""
    follower, fake, clock = follow([10, 100, 200], every=15.0)
    cut = census(0)
    cut.cost.truncated = True
    follower.took(cut)
    assert follower.trends["Relay.inflight"].highs == GROWING - 1 and follower.next_at == clock.now + 15.0
    assert follower.latest is not None and follower.latest.works == 200  # not the partial one
    follower.took(census(300))
    assert fake.calls == ["on"]  # the run of highs went on


def test_the_window_opens_when_a_holder_grows_and_closes_on_time() -> None:
    follower, fake, clock = follow([10, 100, 200])
    assert fake.calls == []  # two new highs: not yet
    follower.took(census(300))
    assert fake.calls == ["on"] and follower.site_of() is not None
    clock.now += 5.0
    follower.tick()
    assert fake.calls == ["on"]  # the window runs 10 s
    clock.now += 5.0
    follower.tick()
    assert fake.calls == ["on", "off"]
    assert follower.due()  # the census that looks for the window's Works comes at once


def test_the_windows_line_reaches_the_holder_and_the_table_is_forgotten() -> None:
    follower, fake, clock = follow([10, 100, 200, 300])
    clock.now += 10.0
    follower.tick()
    site = ["relay.py", 29, "forward", 57]
    follower.took(census(400, sites=[site]))
    assert fake.calls == ["on", "off", "forget"]
    assert follower.site_of() is None  # no table kept between windows
    (line,) = follower.holder_lines() or []
    assert line["growing"] and line["sites"] == [site] and line["works"] == 400
    follower.took(census(500))  # later censuses keep the line, and open no window
    (line,) = follower.holder_lines() or []
    assert line["sites"] == [site] and fake.calls == ["on", "off", "forget"]
    assert follower.explained(census(600)).holders[0].sites == [site]


def test_a_window_that_saw_nothing_is_tried_again_later_not_at_once() -> None:
    follower, fake, clock = follow([10, 100, 200, 300])
    clock.now += 10.0
    follower.tick()
    follower.took(census(400))  # the window saw no Work made in the holder (made in C++, say)
    for n in range(RETRY_CENSUSES - 1):
        follower.took(census(500 + 100 * n))
        assert fake.calls.count("on") == 1
    follower.took(census(2000))  # RETRY_CENSUSES censuses after the one that found nothing
    assert fake.calls.count("on") == 2


def test_a_bounded_holder_opens_no_window() -> None:
    _, fake, _ = follow([0, 64, 3, 60, 12, 64, 0, 50] * 4)
    assert fake.calls == []


def test_the_holder_lines_are_one_object_until_the_next_census() -> None:
    follower, _, _ = follow([5, 6])
    first = follower.holder_lines()
    assert follower.holder_lines() is first  # the line encoder writes it once
    follower.took(census(7))
    assert follower.holder_lines() is not first


def test_closing_takes_the_hooks_off_mid_window() -> None:
    follower, fake, _ = follow([10, 100, 200, 300])
    follower.close()
    assert fake.calls == ["on", "off", "forget"]


class Work:
    """A stand-in for torch's Work (the census takes the type it counts)."""

    def is_completed(self) -> bool:
        return False


class Relay:
    def __init__(self) -> None:
        self.inflight: dict[int, Work] = {}


def test_the_census_counts_a_holders_works_by_the_line_that_made_them() -> None:
    relay = Relay()
    made = {}
    for n in range(30):
        relay.inflight[n] = Work()
        if n >= 10:  # the last 20 were made while the window's hooks were on
            made[id(relay.inflight[n])] = ("relay.py", 29 if n % 2 else 31, "forward")
    taken = take_census(Work, None, 1, 0, "live", Walker(), site_of=lambda work: made.get(id(work)))
    (holder,) = [h for h in taken.holders if h.path.endswith("inflight[<int>]")]
    assert holder.works == 30
    assert sorted(holder.sites or []) == [["relay.py", 29, "forward", 10], ["relay.py", 31, "forward", 10]]
    plain = take_census(Work, None, 1, 0, "start", Walker())
    assert all(h.sites is None for h in plain.holders)
    del relay


def test_censuses_are_spaced_out_where_one_costs_more_than_its_share_of_a_core() -> None:
    clock, fake = Clock(), FakeHooks()
    follower = Follower(15.0, 10.0, fake.hooks(), clock)
    cheap = census(10)
    follower.took(cheap)
    assert follower.next_at == 15.0  # 0 s of CPU: every 15 s
    costly = Census(1, 0, 0.0, 10, cheap.holders, CensusCost(cpu_s=2.4))  # a 3-million-object heap
    follower.took(costly)
    assert follower.interval == 2.4 / CPU_SHARE and follower.next_at == 2.4 / CPU_SHARE  # (the clock at 0)


@pytest.mark.parametrize(
    ("extra", "start"),
    [
        (["--census-every", "0.5s"], "--census-every: 0.5 s is too short"),
        (["--window", "0.2s"], "--window: 0.2 s is too short"),
        (["--window", "0s"], "--window: must be more than zero"),
        (["--census-every", "soon"], "--census-every: cannot read 'soon' as a duration"),
        (["--no-census"], "--follow counts the Works held by census"),
    ],
)
def test_bad_follow_options_are_one_line(
    extra: list[str], start: str, capsys: pytest.CaptureFixture[str], fake_execute: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert_refused(["attach", "--follow", *extra, str(os.getpid())], start, capsys, fake_execute, tmp_path)


def test_a_process_without_a_group_is_tried_again_each_time_its_age_doubles_while_young() -> None:
    """A rank waiting for peers on other nodes makes its group minutes after importing torch:
    it is still attached. torchrun's own agent never makes one: five tries, then left."""
    info = ProcessInfo(42, "python", 0, 1, "/usr/bin/python3", None, (3, 11), True, True, 4)
    tries, tried_at, age = [], 10.0, 10.0
    while age < 2 * RETRY_YOUNGER_S:
        if retry_due(Target(info, "1", refusal=protocol.NO_GROUP, tried_at_s=tried_at), age):
            tries.append(age)
            tried_at = age
        age += 5.0  # the sidecar's rescans
    assert tries == [20.0, 40.0, 80.0, 160.0]  # (and the first, at 10 s)
    assert not retry_due(Target(info, "1", refusal=protocol.NO_TORCH, tried_at_s=10.0), 15.0)
    assert retry_due(Target(info, "1", refusal=protocol.NO_TORCH, tried_at_s=10.0), 20.0)
    assert not retry_due(Target(info, "1", refusal="another reason", tried_at_s=10.0), 100.0)
    assert not retry_due(Target(info, "1", refusal=protocol.NO_GROUP, unreadable="a link", tried_at_s=10.0), 100.0)


SPACED = 0.3 / CPU_SHARE  # the interval after a census of 0.3 s of CPU


def spaced_out() -> tuple[Callable[[int], float], FakeHooks]:
    """A follower every 4 s whose censuses cost 0.3 s of CPU; `take(works)` gives it a census
    of one holder with that many Works (none for 0), moves the clock to the next census and
    says how long that was."""
    clock, fake = Clock(), FakeHooks()
    follower = Follower(4.0, 3.0, fake.hooks(), clock)

    def take(works: int) -> float:
        follower.took(Census(1, 0, 0.0, works, census(works).holders, CensusCost(cpu_s=0.3)))
        waited, clock.now = follower.next_at - clock.now, follower.next_at
        return waited

    return take, fake


def test_a_rising_holder_hurries_the_next_censuses_where_they_are_spaced_out() -> None:
    """A census of 0.3 s of CPU is spaced out to a minute: a leak's first new high brings the
    next census every_s later, until it is growing (its window then) - not three minutes."""
    take, fake = spaced_out()
    assert [take(n) for n in (1, 1)] == [SPACED, SPACED]  # nothing rises
    assert take(4000) == 4.0 and take(4500) == 4.0  # the first and second new highs: hurried
    assert fake.calls == []
    assert take(5000) == SPACED and fake.calls == ["on"]  # the third: growing, its window open
    assert take(3000) == SPACED  # (a fall ends the run)


def test_a_holder_that_appears_with_a_leak_is_rising_at_once_one_there_at_attach_is_not() -> None:
    """A leak that starts in a holder no census had seen (a dict the fast path fills) held
    none at the census before: its first count is a jump, and the censuses hurry from there
    (a late-onset leak was told growing 111 s after it began with a 69 s interval, not ~45 s)."""
    take, fake = spaced_out()
    assert [take(n) for n in (0, 0)] == [SPACED, SPACED]  # no holder yet
    assert take(1500) == 4.0 and take(4000) == 4.0  # it appears: rising, then a second new high
    assert take(6000) == SPACED and fake.calls == ["on"]  # growing at the third census it is in
    attached_to_a_leak = Follower(4.0, 3.0, FakeHooks().hooks(), Clock())
    attached_to_a_leak.took(Census(1, 0, 0.0, 1500, census(1500).holders, CensusCost(cpu_s=0.3)))
    assert attached_to_a_leak.next_at == SPACED  # the first census: what was there all along


def test_a_bounded_population_hurries_few_censuses() -> None:
    rng = random.Random(3)
    clock, fake = Clock(), FakeHooks()
    follower = Follower(4.0, 3.0, fake.hooks(), clock)
    hurried = 0
    for _ in range(500):  # a drained list: 1 to 64 Works at any census, its censuses spaced out
        follower.took(Census(1, 0, 0.0, 0, census(rng.randint(1, 64)).holders, CensusCost(cpu_s=0.3)))
        hurried += follower.next_at - clock.now == 4.0
        clock.now = follower.next_at
    assert hurried <= GROWING - 1 and fake.calls == []  # its first fill, at most


def test_the_census_at_detach_is_the_latest_and_opens_no_window() -> None:
    """Its count is the probe's last line's; a window opened then would outlive the follow."""
    follower, fake, clock = follow([1, 40, 80])
    calls, next_at = list(fake.calls), follower.next_at
    follower.took(census(5000), last=True)
    assert follower.latest is not None and follower.latest.works == 5000
    assert fake.calls == calls and follower.next_at == next_at
    assert follower.trends["Relay.inflight"].growing


def nudged_follower() -> tuple[Follower, Clock, Callable[[int], float]]:
    """A follower whose censuses (0.3 s of CPU) are spaced out to SPACED, at a heap of 100,000
    blocks; `take(works)` takes the census due and says how long after the last it came."""
    clock, fake = Clock(), FakeHooks()
    follower = Follower(4.0, 3.0, fake.hooks(), clock)

    def take(works: int) -> float:
        last = follower.census_at or 0.0
        clock.now = follower.next_at
        follower.took(Census(1, 0, 0.0, works, census(works).holders, CensusCost(cpu_s=0.3)))
        return clock.now - last

    take(1)  # the first census (the agent reads the heap only after it)
    follower.heap(100_000)
    return follower, clock, take


def test_a_heap_that_grows_between_spaced_out_censuses_brings_the_next_one_forward() -> None:
    """A late-onset leak on a heap whose censuses come SPACED apart: its Works' blocks bring
    the census forward, which finds the holder rising - told growing within seconds, where it
    waited up to a whole interval (the follow test's alert missed its 2 minutes so)."""
    follower, clock, take = nudged_follower()
    clock.now = 10.0
    follower.heap(100_000 + NUDGE_BLOCKS - 1)  # short of the step: nothing
    assert follower.next_at == 0.0 + SPACED
    follower.heap(100_000 + NUDGE_BLOCKS)
    assert follower.next_at == 10.0  # now
    assert take(900) == 10.0  # the holder is new: rising
    clock.now += 1.0
    follower.heap(200_000)  # the hurried census stays every_s after the last, whatever the heap
    assert follower.next_at == 14.0
    assert take(1800) == 4.0 and take(2700) == 4.0
    assert follower.trends["Relay.inflight"].growing and follower.window_until is not None


def test_a_heap_that_grows_without_works_costs_a_census_per_doubling() -> None:
    """A cache filling: each nudge finds nothing rising and doubles the step, so a heap grown
    by a million blocks brings ~10 censuses forward, not one per 1,024 blocks; once it stops
    growing the step comes back down."""
    follower, clock, take = nudged_follower()
    blocks, censuses = 100_000, 0
    for _ in range(2000):  # 2,000 s of a heap growing by 500 blocks a second, one Work held
        clock.now += 1.0
        blocks += 500
        follower.heap(blocks)
        if follower.next_at <= clock.now:
            take(1)
            censuses += 1
    assert 1 <= follower.nudges <= 10 and follower.nudge_step == NUDGE_BLOCKS << follower.nudges
    assert censuses <= 2000 / SPACED + 1 + follower.nudges
    for _ in range(20):  # the heap grows no more: each regular census halves the step
        take(1)
        follower.heap(blocks)
    assert follower.nudge_step == NUDGE_BLOCKS


def test_a_heap_that_stops_growing_brings_the_step_down_between_censuses() -> None:
    """A trainer's warm-up: its heap grows for a minute (each nudge empty: the step doubles),
    then stands still, its censuses SPACED apart. Each every_s of a still heap halves the
    step (one census may come forward, for what the heap grew since the last), so a leak that
    starts after the warm-up brings a census forward once it has made NUDGE_BLOCKS, not the
    step the warm-up left; a heap that keeps growing keeps its step."""
    follower, clock, take = nudged_follower()
    blocks = 100_000

    def run(seconds: int, per_s: int) -> int:
        """The heap read each second, growing by per_s; the censuses taken when due: how many."""
        nonlocal blocks
        taken = 0
        for _ in range(seconds):
            clock.now += 1.0
            blocks += per_s
            follower.heap(blocks)
            if follower.next_at <= clock.now:
                take(0)
                taken += 1
        return taken

    run(60, 2000)  # the warm-up: 2,000 blocks a second, no Work
    warmed = follower.nudge_step
    assert warmed >= 8 * NUDGE_BLOCKS
    run(12, FLAT_BLOCKS // 2 + 1)  # growing by more than FLAT_BLOCKS each every_s: the step stays
    assert follower.nudge_step >= warmed
    assert run(60, 3) <= 1  # then still: the step comes down, at most one census brought forward
    assert follower.nudge_step == NUDGE_BLOCKS
    assert run(10, 3) == 0
    high = follower.blocks_high
    assert high is not None and follower.next_at > clock.now
    follower.heap(high + NUDGE_BLOCKS)  # the leak's first 1,024 blocks past the high
    assert follower.next_at == clock.now


def test_on_a_big_heap_the_heap_brings_few_censuses_forward() -> None:
    """4 s of CPU a census (3 M objects): a heap growing for minutes brings a census forward
    only while the last ten minutes' censuses stay within a percent of a core."""
    clock, fake = Clock(), FakeHooks()
    follower = Follower(15.0, 10.0, fake.hooks(), clock)
    dear = CensusCost(cpu_s=4.0)
    follower.took(Census(1, 0, 0.0, 1, census(1).holders, dear))
    blocks, spent = 5_000_000, [(0.0, 4.0)]
    follower.heap(blocks)
    for _ in range(3600):  # an hour of a heap growing by 2,000 blocks a second
        clock.now += 1.0
        blocks += 2000
        follower.heap(blocks)
        if follower.next_at <= clock.now:
            follower.took(Census(1, 0, 0.0, 1, census(1).holders, dear))
            spent.append((clock.now, 4.0))
    for t, _ in spent:  # any ten minutes: at most a percent of a core
        assert sum(cpu for u, cpu in spent if t <= u < t + NUDGE_WINDOW_S) <= NUDGE_SHARE * NUDGE_WINDOW_S
    assert follower.nudges >= 1


def test_a_follow_of_days_keeps_ten_minutes_of_census_costs() -> None:
    """The agent lives in the target: what it keeps per census must not grow with the follow."""
    follower, _, _ = follow([1] * 2000)  # 2,000 censuses 15 s apart: over eight hours
    assert len(follower.spent) <= NUDGE_WINDOW_S / 15.0 + 1
