"""Tests that read one shared real run stay on one pytest-xdist worker.

A module- or session-scoped fixture (a real stress run, a traced program, a live server
attached to several times) is built once per worker that asks for it. Under `-n 3
--dist loadgroup` (pyproject's addopts) every test that uses such a fixture of ours, and
every test that shares any of those fixtures with it, gets one `xdist_group`, so the
run is made once per session as without xdist. Without xdist the mark changes nothing.

xdist's own loadgroup renames each grouped test (`nodeid@group`) for its controller to
read; pytest 9.2 derives a test's id from a structured id that rename no longer reaches,
so every group would be split across workers. Here each worker writes its tests' groups
to a folder the controller made (GROUPS_ENV), and the controller's scheduler
(SharedRunScheduling) reads them: the same grouping, by no private rename.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

GROUPS_ENV = "HICACHE_TEST_XDIST_GROUPS"  # a folder: groups-<worker>.json, {test id: group}

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

    uses = [(item, sorted(shared_fixtures(item))) for item in items]
    for _, names in uses:
        for other in names:
            parent[root(other)] = root(names[0])
    members: dict[str, set[str]] = {}
    for name in parent:
        members.setdefault(root(name), set()).add(name)
    for item, names in uses:
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


def record_groups(items: list[pytest.Item]) -> None:
    """In an xdist worker: write each grouped test's group for the controller's scheduler."""
    folder, worker = os.environ.get(GROUPS_ENV), os.environ.get("PYTEST_XDIST_WORKER")
    if not folder or not worker:
        return
    groups = {}
    for item in items:
        mark = item.get_closest_marker("xdist_group")
        if mark is not None:
            groups[item.nodeid] = str(mark.args[0])
    Path(folder).mkdir(parents=True, exist_ok=True)
    (Path(folder) / f"groups-{worker}.json").write_text(json.dumps(groups), encoding="utf-8")


def shared_run_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's loadgroup scheduling, its groups read from what the workers wrote."""
    from xdist.scheduler import LoadScopeScheduling

    class SharedRunScheduling(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # first asked once every worker has collected
                self.groups = {}
                for path in Path(os.environ[GROUPS_ENV]).glob("groups-*.json"):
                    self.groups.update(json.loads(path.read_text(encoding="utf-8")))
            return self.groups.get(nodeid, nodeid)

    return SharedRunScheduling(config, log)
