"""Tests that read one shared real run stay on one pytest-xdist worker.

A module- or session-scoped fixture (a real stress run, a traced program, a live server
attached to several times) is built once per worker that asks for it. Under `-n 2
--dist loadgroup` (pyproject's addopts) every test that uses such a fixture of ours, and
every test that shares any of those fixtures with it, gets one `xdist_group`, so the
run is made once per session as without xdist. Without xdist the mark changes nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
SHARED_SCOPES = {"module", "session", "package"}


def shared_fixtures(item: pytest.Item) -> set[str]:
    """The fixtures of tests/ that `item` uses and that outlive one test, as `file::name`
    (two modules may each have a `leaky` of their own)."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's record of a test's fixtures
    found = set()
    for name, defs in (info.name2fixturedefs if info else {}).items():
        code = getattr(defs[-1].func, "__code__", None)
        if defs[-1].scope in SHARED_SCOPES and code is not None and TESTS in Path(code.co_filename).parents:
            found.add(f"{Path(code.co_filename).relative_to(TESTS)}::{name}")
    return found


def group_by_shared_fixture(items: list[pytest.Item]) -> None:
    """Mark each test that uses a shared fixture with one xdist_group per connected set of
    such fixtures (a test using two joins their groups)."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            name = parent[name]
        return name

    uses = {item: sorted(shared_fixtures(item)) for item in items}
    for names in uses.values():
        for other in names:
            parent[root(other)] = root(names[0])
    members: dict[str, set[str]] = {}
    for name in parent:
        members.setdefault(root(name), set()).add(name)
    for item, names in uses.items():
        if names:
            item.add_marker(pytest.mark.xdist_group("+".join(sorted(members[root(names[0])]))))


def longest_first(items: list[pytest.Item]) -> None:
    """Real-process tests first, those of a shared run first among them: a worker that
    takes a long group last would leave the other idle at the end. The sort is stable, so
    a module's tests keep their order and its fixtures are built once."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow") is None:
            return 2
        return 0 if item.get_closest_marker("xdist_group") is not None else 1

    items.sort(key=rank)
