"""Each kind of target is told, not asked: its record says how it runs through the API, what a
rebuilt report cannot know of it, its section how it is titled and whether its processes read
as traced; one registry a layer picks its strategy and its views from."""

from __future__ import annotations

import re

import pytest

import hicache_cli as hc
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.execution import STRATEGIES
from hicache_cli.present.trace_views import TITLES
from hicache_cli.targets import _SECTIONS, KINDS, AttachedProcess, ModelTarget, TracedCommand


def test_every_kind_has_a_strategy_and_every_traced_section_its_views() -> None:
    assert set(STRATEGIES) == set(KINDS)
    assert {kind for kind, section in _SECTIONS.items() if section.traced} == set(TITLES)


@pytest.mark.parametrize(
    ("target", "call"),
    [(TracedCommand(command=("python", "x.py")), "trace(command)"), (AttachedProcess(pids=(1,)), "attach_to(pids)")],
)
def test_the_api_s_run_names_the_call_a_kind_runs_with(target: object, call: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f"runs with hicache_cli.{call}") + "$"):
        hc.run(RunConfig(target=target, duration_s=1.0))  # type: ignore[arg-type]


def test_titles_come_from_the_section() -> None:
    ran = ModelTarget(pp=4, tp=2)
    assert _SECTIONS["model"]().title(ran) == f"{ran.label}, pp=4 tp=2"
    assert _SECTIONS["trace"](argv=["torchrun", "x.py"]).title(ran) == "trace of torchrun x.py"
    assert _SECTIONS["attach"]().title(AttachedProcess(pids=(7,))) == "attach: pid 7"
