"""hc.trace's command: a list as subprocess takes it, or one string split as shell words
(docs/api.md). Was: a string was taken as a sequence of one-letter arguments, so
hc.trace("true") said "cannot run 't'"."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

import hicache_cli as hc
from hicache_cli.api import command_argv


@pytest.mark.parametrize(
    ("given", "argv"),
    [
        ("true", ["true"]),
        ("torchrun --nproc-per-node 2 train.py", ["torchrun", "--nproc-per-node", "2", "train.py"]),
        ("python 'my script.py' --name \"a b\"", ["python", "my script.py", "--name", "a b"]),
        (["python", "my script.py"], ["python", "my script.py"]),
        (("python", Path("x.py")), ["python", "x.py"]),
    ],
)
def test_a_command_becomes_argv(given: object, argv: list[str]) -> None:
    assert command_argv(given) == argv  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("", "command: no program given"),
        ([], "command: no program given"),
        ("python 'unclosed", 'command "python \'unclosed": No closing quotation'),
        (42, "command: a string or a list of strings, got 42"),
        (["python", 3], "command: a string or a list of strings, got ['python', 3]"),
    ],
)
def test_a_command_that_is_none_is_one_line(given: object, says: str) -> None:
    with pytest.raises(hc.UsageError) as info:
        command_argv(given)  # type: ignore[arg-type]
    assert str(info.value) == says


def test_trace_runs_a_command_given_as_a_string(tmp_path: Path) -> None:
    """A real program (no torch.distributed in it): it ran, and its exit code is the report's."""
    report = hc.trace(
        f"{shlex.quote(sys.executable)} -c 'raise SystemExit(7)'", run_dir=tmp_path / "run", capture_output=True
    )
    assert report.program_exit_code == 7
    assert report.to_dict()["config"]["target"]["command"] == [sys.executable, "-c", "raise SystemExit(7)"]
