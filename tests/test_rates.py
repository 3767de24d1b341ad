"""units.parse_rate_mb_per_h: RSS growth rates the way users type them, in MB (10^6 bytes) per hour."""

from __future__ import annotations

import pytest

from hicache_cli.errors import UsageError
from hicache_cli.units import parse_rate_mb_per_h


@pytest.mark.parametrize(
    ("text", "mb_per_h"),
    [
        ("200MB/h", 200.0),
        ("200", 200.0),  # a bare number is MB/h
        ("1.5GB/h", 1500.0),
        ("50KB/s", 180.0),
        ("1MB/min", 60.0),
        ("1MB/m", 60.0),
        ("2GB/s", 7_200_000.0),
        ("200mb/H", 200.0),
        ("1.5gb/h", 1500.0),
        ("50kb/S", 180.0),
        ("1Mb/MIN", 60.0),
        (" 200 MB / h ", 200.0),
        (".5GB/h", 500.0),
    ],
)
def test_parse_rate_accepts(text: str, mb_per_h: float) -> None:
    assert parse_rate_mb_per_h(text, "max-rss-slope") == pytest.approx(mb_per_h)


@pytest.mark.parametrize(
    "text",
    ["abc", "", "MB/h", "200MB/day", "200TB/h", "200MiB/h", "1e3MB/h", "200 MB/h/h", "0", "0MB/h", "0.0GB/s", "-5MB/h"],
)
def test_parse_rate_rejects_with_one_line_naming_the_option(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_rate_mb_per_h(text, "max-rss-slope")
    message = str(info.value)
    assert message.startswith("--max-rss-slope:")
    assert "\n" not in message
    assert repr(text) in message  # says what it could not use


@pytest.mark.parametrize("text", ["0", "0KB/s"])
def test_a_zero_rate_says_it_must_be_more_than_zero(text: str) -> None:
    with pytest.raises(UsageError, match="must be more than zero"):
        parse_rate_mb_per_h(text, "max-rss-slope")


def test_the_option_named_is_the_one_given() -> None:
    with pytest.raises(UsageError, match="^--leak-threshold: "):
        parse_rate_mb_per_h("fast", "leak-threshold")


@pytest.mark.parametrize(("text", "mb_per_h"), [("200B/h", 0.0002), ("1000b/s", 3.6)])
def test_plain_bytes_are_bytes(text: str, mb_per_h: float) -> None:
    assert parse_rate_mb_per_h(text, "max-rss-slope") == pytest.approx(mb_per_h)
