"""`hicache compare-policies` through main(), on synthetic runs (conftest's FakeExecute: no ranks start)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hicache_cli.cli.configure import parse_policies
from hicache_cli.cli.main import main
from hicache_cli.errors import UsageError
from hicache_model.policies import POLICIES
from tests.conftest import FakeExecute, assert_refused


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)  # default run directories land here


def compare(tmp_path: Path, *options: str) -> int:
    return main(["compare-policies", "--run-dir", str(tmp_path / "c"), "--no-live", *options])


def test_compare_two_policies(fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bundle_path, markdown = tmp_path / "bundle.json", tmp_path / "table.md"
    code = compare(
        tmp_path,
        "--policies",
        "drain,reap",
        "--duration",
        "5s",
        "--output",
        str(bundle_path),
        "--markdown",
        str(markdown),
    )
    assert code == 0
    out = capsys.readouterr().out

    parent = tmp_path / "c"
    assert [(c["config"].target.policy, c["run_dir"]) for c in fake_execute.calls] == [
        ("drain", parent / "drain"),
        ("reap", parent / "reap"),
    ]
    first, second = (c["config"] for c in fake_execute.calls)
    assert first.target.to_dict() | {"policy": "reap"} == second.target.to_dict()  # the same workload and seed
    assert first.duration_s == second.duration_s
    assert first.duration_s == 5.0

    data = json.loads(bundle_path.read_text())
    assert data["kind"] == "compare-policies"
    assert [(p["policy"], p["verdict"], p["status"]) for p in data["policies"]] == [
        ("drain", "BOUNDED", "completed"),
        ("reap", "LEAK", "completed"),
    ]
    assert "policy" not in data["config"]
    assert data["config"]["duration_s"] == 5.0
    assert set(data["best"].values()) == {"drain"}
    assert data["policies"][1]["report"] == json.loads((parent / "reap" / "report.json").read_text())
    assert json.loads((parent / "compare.json").read_text()) == data

    text = markdown.read_text()
    assert text.startswith("### hicache compare-policies: pp=2 tp=1, 5s, workload mixed\n")
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| policy | verdict |")
    assert rows[1].startswith("| drain | BOUNDED |")
    assert rows[2].startswith("| reap | LEAK |")
    assert "**" in rows[1] and "**" not in rows[2]

    assert "[1/2] drain: BOUNDED (completed)" in out
    assert "[2/2] reap: LEAK (completed)" in out
    assert f"bundle: {parent / 'compare.json'}" in out


def test_every_registered_policy_by_default(
    fake_execute: FakeExecute, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On gloo `adaptive` is listed as not applicable, with the reason, and not run."""
    markdown = tmp_path / "t.md"
    assert compare(tmp_path, "--duration", "5s", "--markdown", str(markdown)) == 0
    assert [c["config"].target.policy for c in fake_execute.calls] == [p for p in POLICIES if p != "adaptive"]
    data = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert [p["policy"] for p in data["policies"]] == list(POLICIES)
    adaptive = next(p for p in data["policies"] if p["policy"] == "adaptive")
    assert (adaptive["status"], adaptive["verdict"], adaptive["report"]) == (
        "not applicable",
        "not applicable on gloo",
        None,
    )
    out = capsys.readouterr().out
    assert "adaptive: not applicable on gloo: its 1 ms timed wait() times out" in out
    assert "INCONCLUSIVE" not in out and "failed" not in out
    assert "| adaptive | not applicable on gloo | - |" in markdown.read_text()
    assert "adaptive: not applicable on gloo: its 1 ms" in markdown.read_text()  # the footnote


def test_an_interrupted_run_ends_the_comparison(fake_execute: FakeExecute, tmp_path: Path) -> None:
    fake_execute.interrupted = True
    assert compare(tmp_path, "--policies", "drain,reap", "--duration", "5s") == 130
    assert [c["config"].target.policy for c in fake_execute.calls] == ["drain"]
    data = json.loads((tmp_path / "c" / "compare.json").read_text())
    assert [(p["policy"], p["status"]) for p in data["policies"]] == [("drain", "interrupted")]


@pytest.mark.parametrize(
    ("options", "start"),
    [
        (["--policies", "nope"], "--policies: unknown 'nope'"),
        (["--policies", "drain,nope"], "--policies: unknown 'nope'"),
        (["--policies", "drain,drain"], "--policies: a policy is named twice"),
        (["--policies", ","], "--policies: unknown empty list"),
        (["--duration", "0s"], "--duration"),
        (["--output", "missing/dir/b.json"], "--output"),
        (["--markdown", "missing/dir/t.md"], "--markdown"),
    ],
)
def test_bad_options_give_one_error_line_and_exit_2(
    fake_execute: FakeExecute,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    options: list[str],
    start: str,
) -> None:
    assert_refused(["compare-policies", *options], start, capsys, fake_execute, tmp_path)


# parse_policies


@pytest.mark.parametrize("text", [None, ""])
def test_no_policies_means_every_registered_one(text: str | None) -> None:
    assert parse_policies(text) == list(POLICIES)


def test_policies_keep_their_order_and_lose_blanks() -> None:
    assert parse_policies(" reap , drain,") == ["reap", "drain"]


def test_an_unknown_policy_names_the_choices() -> None:
    with pytest.raises(UsageError) as info:
        parse_policies("drain,nope,zap")
    message = str(info.value)
    assert "'nope', 'zap'" in message
    assert all(name in message for name in POLICIES)
    assert "\n" not in message
