"""In pytest: one marked test end to end. The marker read, the test's arguments handed to the
ranks, the ranks run, their results judged, their output replayed into pytest's capture."""

from __future__ import annotations

import inspect
import os
import pickle
import re
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from hicache_cli.files import run_file
from hicache_cli.lifecycle import owner_token
from hicache_cli.pytest_ranks.forkserver import FORK_AVAILABLE, ForkServer, ForkServerError
from hicache_cli.pytest_ranks.launch import common_environment, run_ranks
from hicache_cli.pytest_ranks.protocol import ARGS, RankRequest, log_file
from hicache_cli.pytest_ranks.results import RankEnd, RanksResult, assess, over_live_limit
from hicache_cli.pytest_ranks.spec import GIVEN, MARKER, MarkerError, RanksSpec, spec_from_marker
from hicache_cli.rundir import read_run_text

RESULT_FIXTURE = "hicache_ranks_result"
# Fixtures that act on the pytest process: their values mean nothing in a rank.
IN_PYTEST_ONLY = frozenset(
    {
        "request",
        "pytestconfig",
        "monkeypatch",
        "capsys",
        "capsysbinary",
        "capfd",
        "capfdbinary",
        "caplog",
        "recwarn",
        "record_property",
        "record_xml_attribute",
        "record_testsuite_property",
        "pytester",
        "testdir",
        "cache",
        RESULT_FIXTURE,
    }
)


class Refused(Exception):
    """A marked test hicache cannot run; the message says why in one line."""


def run_marked(item: pytest.Function) -> RanksResult:
    """Run the marked test's body on its ranks and judge them; the caller fails or skips."""
    try:
        spec = read_spec(item)
        argnames = body_argnames(item)
        values = handed_values(item, argnames)
    except (MarkerError, Refused) as exc:
        problem = str(exc)
    else:
        problem = None
    if problem is not None:  # failed outside the handler: pytest would print the line twice, chained
        pytest.fail(problem, pytrace=False)
    factory = item.funcargs["tmp_path_factory"]
    run_dir = factory.mktemp(_dir_name(item.name), numbered=True)
    request = rank_request(item, spec, argnames)
    if values:
        with run_file(run_dir / ARGS, "new", binary=True) as fh:
            fh.write(pickle.dumps(values))
    request.write(run_dir)
    server = fork_server(item.config, factory.getbasetemp())
    launched = run_ranks(
        request,
        run_dir,
        partial(over_live_limit, max_live_works=spec.max_live_works),
        server,
        unwaited_sends_fail=not spec.allow_unwaited_sends,
    )
    replay_output(run_dir, launched.ends)
    return assess(spec, item.nodeid, str(item.path), launched.ends, launched.followed, run_dir, launched.wall_s,
                  launched.spawned_wall, launched.forked)  # fmt: skip


def read_spec(item: pytest.Function) -> RanksSpec:
    marker = item.get_closest_marker(MARKER)
    assert marker is not None
    return spec_from_marker(marker.args, dict(marker.kwargs))


def body_argnames(item: pytest.Function) -> tuple[str, ...]:
    """The parameters pytest would fill: those without a default."""
    function = item.obj
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise Refused(f"{MARKER}: {item.name} is async; a rank calls the test body as a plain function")
    parameters = inspect.signature(function).parameters.values()
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return tuple(p.name for p in parameters if p.kind in kinds and p.default is inspect.Parameter.empty)


def handed_values(item: pytest.Function, argnames: tuple[str, ...]) -> dict[str, Any]:
    """The test's other arguments (fixtures, parametrize values), resolved by pytest here
    and handed to every rank by pickle."""
    values = {}
    for name in argnames:
        if name in GIVEN:
            continue
        if name in IN_PYTEST_ONLY:
            hint = " (read it in a fixture's teardown)" if name == RESULT_FIXTURE else ""
            raise Refused(f"{MARKER}: the fixture {name!r} acts on the pytest process, not in the ranks{hint}")
        values[name] = item.funcargs[name]
    for name, value in values.items():
        try:
            pickle.dumps(value)
        except Exception as exc:  # noqa: BLE001 - pickling can raise anything; the message names the value
            raise Refused(
                f"{MARKER}: cannot hand {name!r} to the ranks: it does not pickle ({type(exc).__name__}: {exc})"
            ) from None
    return values


def rank_request(item: pytest.Function, spec: RanksSpec, argnames: tuple[str, ...]) -> RankRequest:
    classes = tuple(item.cls.__qualname__.split(".")) if item.cls is not None else ()
    return RankRequest(
        nodeid=item.nodeid,
        module=item.module.__name__,
        file=str(item.path),
        qualname=(*classes, item.originalname),
        argnames=argnames,
        world_size=spec.world_size,
        backend=spec.backend,
        timeout_s=spec.timeout_s,
        probe_hz=spec.probe_hz,
        sys_path=tuple(sys.path),
        owner=owner_token(),
        rewrite_asserts=item.config.getoption("assertmode", "plain") == "rewrite",
    )


def replay_output(run_dir: Path, ends: Sequence[RankEnd]) -> None:
    """Each rank's output, in rank order, into pytest's capture (shown with a failure, or
    at once with -s)."""
    for end in ends:
        try:
            text = read_run_text(log_file(run_dir, end.rank))
        except OSError:
            continue
        if text.strip():
            sys.stdout.write(f"----- rank {end.rank} (pid {end.pid}) -----\n{text.rstrip()}\n")
    sys.stdout.flush()


class ServerHolder:
    """The session's fork server, started by the first marked test; spawning from then on
    if it cannot start."""

    def __init__(self) -> None:
        self.server: ForkServer | None = None
        self.broken = False

    def get(self, basetemp: Path) -> ForkServer | None:
        if self.broken:
            return None
        if self.server is not None and self.server.alive():
            return self.server
        self.close()
        try:
            self.server = ForkServer(common_environment(dict(os.environ)), basetemp / "hicache-forkserver.log")
        except (ForkServerError, OSError):
            self.broken = True
        return self.server

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


_SERVER = pytest.StashKey[ServerHolder]()
START_OPTION = "hicache_ranks_start"


def fork_server(config: pytest.Config, basetemp: Path) -> ForkServer | None:
    """The fork server when ranks are forked (the default on Linux), else None (spawn)."""
    if not FORK_AVAILABLE or config.getoption(START_OPTION, "fork") != "fork":
        return None
    return config.stash.setdefault(_SERVER, ServerHolder()).get(basetemp)


def close_fork_server(config: pytest.Config) -> None:
    holder = config.stash.get(_SERVER, None)
    if holder is not None:
        holder.close()


def _dir_name(name: str) -> str:
    """`hicache-test_reap`: apart from the test's own tmp_path, which pytest names after the test too."""
    return "hicache-" + re.sub(r"[\W]", "_", name)[:30]
