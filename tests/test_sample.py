"""sample: the one data contract, and reading rank files while they grow."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from hicache_cli.protocol import samples_file as rank_file
from hicache_cli.sample import Sample
from hicache_cli.series import RunFollower, read_run

MakeSample = Callable[..., Sample]


def append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write(text)


def test_json_round_trip(make_sample: MakeSample) -> None:
    sample = make_sample(
        rank=3,
        t=2.5,
        rss_bytes=None,
        lat_p50_ms=0.25,
        blocked_on="recv from rank 1",
        counters={"waits": 3.0},
        lat_hist={"-60": 7},
        kind="final",
        message="reached the deadline",
    )
    line = sample.to_json()
    assert "\n" not in line
    assert Sample.from_dict(json.loads(line)) == sample


def test_from_dict_ignores_unknown_keys(make_sample: MakeSample) -> None:
    sample = make_sample()
    data = {**json.loads(sample.to_json()), "added_in_a_later_version": 1}
    assert Sample.from_dict(data) == sample


def test_rank_file(tmp_path: Path) -> None:
    assert rank_file(tmp_path, 7) == tmp_path / "rank-7.jsonl"


def test_follower_reads_only_what_is_new(tmp_path: Path, make_sample: MakeSample) -> None:
    path = rank_file(tmp_path, 0)
    append(path, make_sample(t=0.1).to_json() + "\n" + make_sample(t=0.2).to_json() + "\n")
    follower = RunFollower(tmp_path)
    assert [s.t for s in follower.poll()[0]] == [0.1, 0.2]
    assert [s.t for s in follower.poll()[0]] == [0.1, 0.2]  # nothing new, nothing added

    append(path, make_sample(t=0.3).to_json() + "\n")
    assert [s.t for s in follower.poll()[0]] == [0.1, 0.2, 0.3]


def test_follower_waits_for_a_torn_line_to_end(tmp_path: Path, make_sample: MakeSample) -> None:
    path = rank_file(tmp_path, 0)
    whole, torn = make_sample(t=0.1).to_json(), make_sample(t=0.2).to_json()
    append(path, whole + "\n" + torn[:25])
    follower = RunFollower(tmp_path)
    assert [s.t for s in follower.poll()[0]] == [0.1]

    append(path, torn[25:])  # complete, but no newline yet
    assert [s.t for s in follower.poll()[0]] == [0.1]

    append(path, "\n")
    assert [s.t for s in follower.poll()[0]] == [0.1, 0.2]


def test_follower_skips_lines_that_are_not_samples(tmp_path: Path, make_sample: MakeSample) -> None:
    path = rank_file(tmp_path, 0)
    garbage = ["not json at all", "", '{"t": 1.0}', '{"t": 1', "\xff\xfe"]
    append(path, make_sample(t=0.1).to_json() + "\n" + "\n".join(garbage) + "\n" + make_sample(t=0.2).to_json() + "\n")
    assert [s.t for s in RunFollower(tmp_path).poll()[0]] == [0.1, 0.2]


def test_follower_skips_invalid_utf8(tmp_path: Path, make_sample: MakeSample) -> None:
    path = rank_file(tmp_path, 0)
    path.write_bytes(make_sample(t=0.1).to_json().encode() + b"\n\xff\xfe{\n" + make_sample(t=0.2).to_json().encode())
    append(path, "\n")
    assert [s.t for s in RunFollower(tmp_path).poll()[0]] == [0.1, 0.2]


@pytest.mark.parametrize("line", ["[1, 2]", "null"])
def test_follower_skips_json_that_is_not_an_object(tmp_path: Path, make_sample: MakeSample, line: str) -> None:
    path = rank_file(tmp_path, 0)
    append(path, make_sample(t=0.1).to_json() + "\n" + line + "\n" + make_sample(t=0.2).to_json() + "\n")
    assert [s.t for s in RunFollower(tmp_path).poll()[0]] == [0.1, 0.2]


def test_follower_handles_several_ranks(tmp_path: Path, make_sample: MakeSample) -> None:
    for rank in (0, 1, 10):
        append(rank_file(tmp_path, rank), make_sample(rank=rank, t=0.1).to_json() + "\n")
    (tmp_path / "rank-0.log").write_text("not a sample file\n")
    (tmp_path / "config.json").write_text("{}\n")
    follower = RunFollower(tmp_path)
    samples = follower.poll()
    assert sorted(samples) == [0, 1, 10]
    assert all(s[0].rank == r for r, s in samples.items())

    append(rank_file(tmp_path, 1), make_sample(rank=1, t=0.2).to_json() + "\n")
    append(rank_file(tmp_path, 2), "")  # a rank that opened its file but wrote nothing yet
    samples = follower.poll()
    assert [len(samples[r]) for r in (0, 1, 2, 10)] == [1, 2, 0, 1]


def test_read_run(tmp_path: Path, make_sample: MakeSample) -> None:
    append(rank_file(tmp_path, 0), make_sample(t=0.1).to_json() + "\n")
    append(rank_file(tmp_path, 1), make_sample(rank=1, t=0.1).to_json() + "\n")
    assert {r: len(s) for r, s in read_run(tmp_path).items()} == {0: 1, 1: 1}
    assert read_run(tmp_path / "missing") == {}
