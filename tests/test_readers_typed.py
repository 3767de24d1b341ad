"""What the fuzz of the readers found (tests/test_fuzz_readers.py, issue 30), one case each:
values of the right shape and the wrong type or size, read back from a report, a run's
config.json or a rank file's line. Each says what it did before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.analysis.messages import PeerRow, peer_rows
from hicache_cli.analysis.report import load_report
from hicache_cli.analysis.warmup import settled_at
from hicache_cli.cli.main import main
from hicache_cli.errors import UsageError
from hicache_cli.execution import rebuild_report
from hicache_cli.sample import LineDecoder, Sample, decode_lines
from tests.mutations import STRESS_RUN, TRACE_RUN

LINE = (TRACE_RUN / "rank-0.jsonl").read_text().splitlines()


def one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    (line,) = captured.err.splitlines()
    return line


def copy_run(source: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(source, tmp_path / "run"))


def edit_json(path: Path, edit) -> None:  # noqa: ANN001
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def with_line(run_dir: Path, at: int, edit) -> None:  # noqa: ANN001
    """Rank 0's line `at` changed by `edit` (a function of its fields)."""
    path = run_dir / "rank-0.jsonl"
    lines = path.read_text().splitlines()
    data = json.loads(lines[at])
    edit(data)
    lines[at] = json.dumps(data)
    path.write_text("".join(f"{line}\n" for line in lines))


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("tp", 0, "--tp must be at least 1, got 0"),  # was: ZeroDivisionError in report build
        ("pp", 100_000, "ranks; at most"),  # was: a slot per rank (MemoryError at pp 10**30)
    ],
)
def test_a_config_no_run_could_have_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: int, says: str
) -> None:
    run_dir = copy_run(STRESS_RUN, tmp_path)
    edit_json(run_dir / "config.json", lambda data: data["target"].__setitem__(field, value))
    for argv in (["report", "build", str(run_dir), "-o", str(tmp_path / "r.json")], ["watch", str(run_dir)]):
        line = one_line(argv, capsys)
        assert line.startswith(f"hicache: error: {run_dir / 'config.json'}: not a hicache run's config (")
        assert says in line


def test_a_traced_warm_up_bounded_by_a_huge_number_ends(no_hang: None) -> None:
    """Was: a trace's config.json with warmup_s 1e30 (and no duration) looped to 1e30 in
    half-window steps: `report build` and `watch` hung."""
    points = [(t * 0.1, 1e8 + (t % 7) * 4096.0) for t in range(200)]
    assert settled_at(points, 1.0, 1e30, 1.0) == settled_at(points, 1.0, 1e4, 1.0)


@pytest.mark.parametrize("where", ["target", "config.target"])
def test_a_target_kind_that_is_no_string_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
) -> None:
    """Was: TypeError (unhashable type: 'list') from the target's registry."""
    path = tmp_path / "report.json"
    shutil.copy(STRESS_RUN / "report.json", path)

    def edit(data: dict) -> None:
        section = data["target"] if where == "target" else data["config"]["target"]
        section["kind"] = [[0]]

    edit_json(path, edit)
    line = one_line(["report", "show", str(path)], capsys)
    assert "not a valid hicache report" in line or "not a hicache report" in line
    assert f"{where}.kind" in line


def test_an_integer_past_64_bits_is_no_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Was: OverflowError from every figure that met it (format_bytes, trend_text, the page)."""
    path = tmp_path / "report.json"
    shutil.copy(STRESS_RUN / "report.json", path)
    edit_json(path, lambda data: data["ranks"][0]["rss"].__setitem__("end_bytes", 10**400))
    line = one_line(["report", "show", str(path)], capsys)
    assert line.endswith("ranks[0].rss.end_bytes: an integer past 64 bits, expected an integer or null")
    edit_json(path, lambda data: data["ranks"][0]["rss"].__setitem__("end_bytes", 2**64 - 1))
    assert load_report(path).ranks[0].rss.end_bytes == 2**64 - 1  # the largest that is one


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rss_bytes", "280 MB"),  # was: TypeError in the trend (float of a str)
        ("depth", None),
        ("t", 1e308),  # was: ValueError (NaN to integer) in the RSS trend
        ("t", float("nan")),
        ("works", {"live": "x"}),
        ("sites", [[1]]),
        ("counters", {"world_size": [2]}),
        ("lat_hist", {"x": 1}),  # was: ValueError (int("x")) in the latency histogram
        ("digests", {"1e3": 5}),  # was: ValueError in the PP-consistency check
        ("kind", 7),
    ],
)
def test_a_line_with_a_value_of_another_type_is_skipped(field: str, value: object) -> None:
    """Skipped as a torn line is: the samples are those of the file without it."""
    data = json.loads(LINE[5])
    data[field] = value
    mutated = [*LINE[:5], json.dumps(data), *LINE[6:]]
    assert LineDecoder().fields(json.dumps(data)) is None
    assert decode_lines(mutated) == decode_lines([*LINE[:5], *LINE[6:]])


def test_a_field_the_first_complete_line_left_out_has_its_default() -> None:
    """Was: KeyError ('lat_hist', 'works', 'gpu_bytes') in report build and watch, which read
    the fields by name, on a first line without them (a foreign or an older writer's)."""
    data = json.loads(LINE[0])
    for field in ("lat_hist", "works", "gpu_bytes"):
        del data[field]
    fields = LineDecoder().fields(json.dumps(data))
    assert fields is not None
    assert fields["lat_hist"] == {} and fields["works"] is None and fields["gpu_bytes"] is None
    assert Sample(**fields).lat_hist == {}


@pytest.mark.parametrize(
    "line",
    [
        lambda data: data.__setitem__("lat_hist", {"x": 1}),
        lambda data: data["sites"][0].__setitem__("live_max", None),  # was: TypeError in the totals
        lambda data: data.__setitem__("rss_bytes", "x"),
    ],
)
def test_report_build_and_watch_on_a_mangled_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], line) -> None:  # noqa: ANN001
    run_dir = copy_run(TRACE_RUN, tmp_path)
    with_line(run_dir, -1, line)
    assert rebuild_report(run_dir).ranks[0].verdict is not None
    assert main(["watch", str(run_dir), "--no-live"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_a_peer_row_a_foreign_tracer_mangled_is_left_out() -> None:
    """Was: ValueError/TypeError from int() on a row of garbage, in report build and watch."""
    good = [1, "g", 2, None, 3, 4]
    rows = [good, ["x"], [1, "g", "x", None, 3, 4], [True, "g", 2, None, 3, 4], [1, "g", 2, None, 3, 4, 5]]
    sample = Sample(**{**LineDecoder().fields(LINE[0]), "peers": rows})  # type: ignore[arg-type]
    assert peer_rows(sample) == [PeerRow(1, "g", 2, None, 3, 4)]


@pytest.mark.parametrize(
    ("hint", "takes", "refuses"),
    [
        (int, [0, -(2**63), 2**64 - 1], [True, 1.5, 2**64, -(2**64), "1", None]),
        (float, [0, 1.5, -1e19], [float("nan"), float("inf"), 1e308, True, "1.5"]),
        (int | None, [None, 3], ["3", []]),
        (dict[str, int], [{}, {"a": 1}], [{"a": "1"}, [], {"a": None}]),
        (list[list[Any]], [[], [[1, "x"]]], [[1], {}]),
        (str, ["", "x"], [1, None]),
    ],
)
def test_matcher(hint: object, takes: list[object], refuses: list[object]) -> None:
    from hicache_cli.records import matcher  # (here: the rest of this file runs on a hicache without it)

    test = matcher(hint)
    assert all(test(v) for v in takes)
    assert not any(test(v) for v in refuses)


def test_the_api_refuses_the_same_reports(tmp_path: Path) -> None:
    path = tmp_path / "report.json"
    shutil.copy(STRESS_RUN / "report.json", path)
    edit_json(path, lambda data: data["ranks"][0]["work_list"].__setitem__("max", -(2**70)))
    with pytest.raises(UsageError, match=r"ranks\[0\]\.work_list\.max: an integer past 64 bits"):
        load_report(path)
