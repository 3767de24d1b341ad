"""What each test costs in CPU: its own process's and its children's (torchrun, ranks, traced
programs, gdb), setup and teardown included (a shared run is counted to the first test that
asks for it). On when HICACHE_TEST_COST names a folder: each pytest process (each xdist
worker) appends one JSON line per test to a file of its own there. scripts/suite_cost.py
turns the folder into the suite's table (docs/testing.md)."""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

COST_ENV = "HICACHE_TEST_COST"
WHY_LINES = 12  # of a failure's report, kept beside its test's line


def _cpu() -> tuple[float, float]:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


class CostRecorder:
    def __init__(self, folder: Path) -> None:
        self.out = (folder / f"cost-{os.getpid()}.jsonl").open("a", encoding="utf-8")
        self.outcome: dict[str, str] = {}  # test id -> passed, failed, error (in setup or teardown), skipped
        self.why: dict[str, str] = {}  # test id -> the failure's last lines (what a suite_cost run shows)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed:
            self.outcome[report.nodeid] = "failed" if report.when == "call" else "error"
            self.why[report.nodeid] = "\n".join(str(report.longrepr).splitlines()[-WHY_LINES:])
        elif report.skipped:
            self.outcome.setdefault(report.nodeid, "skipped")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        wall, (own, children) = time.monotonic(), _cpu()
        yield
        after_own, after_children = _cpu()
        slow = item.get_closest_marker("slow") is not None
        line = {"test": item.nodeid, "slow": slow, "wall_s": round(time.monotonic() - wall, 3),
                "own_s": round(after_own - own, 3), "children_s": round(after_children - children, 3),
                "outcome": self.outcome.pop(item.nodeid, "passed")}  # fmt: skip
        if item.nodeid in self.why:
            line["why"] = self.why.pop(item.nodeid)
        self.out.write(json.dumps(line) + "\n")
        self.out.flush()


def register(config: pytest.Config) -> None:
    folder = os.environ.get(COST_ENV)
    if folder:
        config.pluginmanager.register(CostRecorder(Path(folder)), "hicache-test-cost")
