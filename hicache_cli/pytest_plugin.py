"""hicache's pytest plugin (entry point `pytest11: hicache`): `@pytest.mark.hicache_ranks`.

    @pytest.mark.hicache_ranks(2, max_live_works=4)
    def test_pp_sync_drains(rank, world_size):
        ...

runs the body once in each of 2 processes with a gloo process group and the Work tracer on,
and fails when a rank holds more than 4 Works it never waited, naming the line that made
them (docs/pytest.md). pytest loads this module in every session: it imports only pytest
and the standard library; the machinery (hicache_cli.pytest_ranks) is imported by the first
marked test, and torch only in the rank processes. Unmarked tests are left alone.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import pytest

from hicache_cli.pytest_ranks.spec import DOC, GIVEN, MARKER

if TYPE_CHECKING:
    from hicache_cli.pytest_ranks.results import RanksResult

RUN_DIR_FIXTURE = "tmp_path_factory"  # a marked test's run directory is made with it


class ResultSlot:
    """What the `hicache_ranks_result` fixture gives: the marked test's per-rank results,
    once its ranks have run (in the teardown of a fixture that asked for it)."""

    def __init__(self) -> None:
        self._result: RanksResult | None = None

    @property
    def result(self) -> RanksResult:
        if self._result is None:
            raise RuntimeError(
                f"no results yet: they exist once a @pytest.mark.{MARKER} test's ranks have run "
                "(read them in a fixture's teardown, after its yield)"
            )
        return self._result


_RESULT = pytest.StashKey["RanksResult"]()
_SLOT = pytest.StashKey[ResultSlot]()


def ranks_result(item: pytest.Item) -> RanksResult | None:
    """The per-rank results of a marked test that has run (for hooks such as
    pytest_runtest_makereport or pytest_runtest_teardown); None for any other test."""
    return item.stash.get(_RESULT, None)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("hicache").addoption(
        "--hicache-ranks-start",
        dest="hicache_ranks_start",
        choices=("fork", "spawn"),
        default="fork",
        help="how hicache_ranks tests start their ranks: forked from a process that imported torch once per "
        "session (default, Linux), or each a fresh interpreter (spawn)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", DOC)


def pytest_unconfigure(config: pytest.Config) -> None:
    parent = sys.modules.get("hicache_cli.pytest_ranks.parent")  # loaded only if a marked test ran
    if parent is not None:
        parent.close_fork_server(config)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A marked test's rank and world_size come from its ranks, not from fixtures; its run
    directory comes from pytest's temporary directories."""
    for item in items:
        if isinstance(item, pytest.Function) and item.get_closest_marker(MARKER) is not None:
            names = [name for name in item.fixturenames if name not in GIVEN]
            if RUN_DIR_FIXTURE not in names:
                names.append(RUN_DIR_FIXTURE)
            item.fixturenames = names  # this item's own list: parametrized siblings share the original


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if pyfuncitem.get_closest_marker(MARKER) is None:
        return None
    from hicache_cli.pytest_ranks.parent import run_marked

    result = run_marked(pyfuncitem)
    pyfuncitem.stash[_RESULT] = result
    pyfuncitem.stash.setdefault(_SLOT, ResultSlot())._result = result
    pyfuncitem.user_properties.append((MARKER, json.dumps(result.summary())))
    if result.failures:
        pytest.fail(result.message, pytrace=False)
    if result.skipped is not None:
        _skip_at_the_test(result.skipped)
    return True


def _skip_at_the_test(reason: str) -> None:
    """pytest.skip() in the ranks, reported at the test's location as a skip mark is, not at
    this plugin's line (`_use_item_location` is how pytest's own skip marks do it)."""
    try:
        skipped = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:  # a pytest without it
        pytest.skip(reason)
    raise skipped


@pytest.fixture
def hicache_ranks_result(request: pytest.FixtureRequest) -> ResultSlot:
    """The marked test's typed per-rank results, for a fixture's teardown: `.result` (a
    RanksResult: per rank live_max, live_final, created, waited, top_site, RSS slope, verdict,
    outcome) once the ranks have run."""
    return request.node.stash.setdefault(_SLOT, ResultSlot())
