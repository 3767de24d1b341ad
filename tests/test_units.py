"""units: durations and sizes the way users type and read them."""

from __future__ import annotations

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.units import MAX_RUN_S, MAX_TIMEOUT_S, format_bytes, format_duration, format_limit, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("15s", 15.0),
        ("2m", 120.0),
        ("500ms", 0.5),
        ("1h", 3600.0),
        ("10", 10.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        (" 3 s ", 3.0),
    ],
)
def test_parse_duration_accepts(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["-5s", "0", "0s", "abc", "5x", "", "1e3", "inf", "nan", "5 s s", "5\nx"])
def test_parse_duration_rejects_with_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(text, "warmup")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("--warmup")
    assert info.value.exit_code == 2


def test_parse_duration_rejects_an_overflowing_number() -> None:
    with pytest.raises(UsageError, match="--duration"):
        parse_duration("9" * 400)


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (None, "n/a"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1536, "1.5 KiB"),
        (5 * 1024**2, "5.0 MiB"),
        (3 * 1024**3, "3.0 GiB"),
        (5 * 1024**4, "5120.0 GiB"),
        (-2048, "-2.0 KiB"),
    ],
)
def test_format_bytes(n: float | None, text: str) -> None:
    assert format_bytes(n) == text


@pytest.mark.parametrize(("seconds", "text"), [(0.0, "0.0s"), (15.0, "15.0s"), (119.9, "119.9s"), (150.0, "2.5m")])
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_a_week_is_the_longest_run() -> None:
    assert parse_duration("168h") == MAX_RUN_S == 7 * 86400


@pytest.mark.parametrize("text", ["169h", "99999999999999999999999999h", "604801", "9" * 400])
def test_parse_duration_refuses_past_the_maximum(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(text, "duration")
    message = str(info.value)
    assert message.startswith("--duration")
    assert "\n" not in message
    if len(text) < 100:
        assert message == f"--duration: {text!r} is longer than the most allowed, 7 days"


def test_parse_duration_takes_a_maximum_of_its_own() -> None:
    assert parse_duration("1h", "stall-timeout", MAX_TIMEOUT_S) == 3600.0
    with pytest.raises(UsageError, match=r"^--stall-timeout: '61m' is longer than the most allowed, 1 hour$"):
        parse_duration("61m", "stall-timeout", MAX_TIMEOUT_S)


@pytest.mark.parametrize(("seconds", "text"), [(7 * 86400.0, "7 days"), (3600.0, "1 hour"), (90.0, "90 s")])
def test_format_limit(seconds: float, text: str) -> None:
    assert format_limit(seconds) == text
