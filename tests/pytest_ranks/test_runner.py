"""The rank side without a process group: importing the test as pytest did, its arguments,
how a failure is reported; the files both sides agree on; the ranks' environment."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import pytest

from hicache_cli.pytest_ranks import runner
from hicache_cli.pytest_ranks.launch import rank_environment
from hicache_cli.pytest_ranks.protocol import ARGS, Outcome, RankRequest
from hicache_cli.tracer.protocol import BOOT_DIR


def request(file: Path, module: str, qualname: tuple[str, ...], argnames: tuple[str, ...] = ()) -> RankRequest:
    return RankRequest("n::t", module, str(file), qualname, argnames, 2, "gloo", 60.0, 10.0, tuple(sys.path), "1:2",
                       True)  # fmt: skip


def test_the_request_and_an_outcome_survive_the_trip(tmp_path: Path) -> None:
    sent = request(tmp_path / "test_a.py", "test_a", ("TestA", "test_b"), ("rank", "n"))
    sent.write(tmp_path)
    assert RankRequest.read(tmp_path) == sent
    assert Outcome.read(tmp_path, 0) is None
    Outcome(0, 42, "failed", "ValueError: x", "Traceback ...", 1.0, 2.0).write(tmp_path)
    assert Outcome.read(tmp_path, 0) == Outcome(0, 42, "failed", "ValueError: x", "Traceback ...", 1.0, 2.0)
    assert not list(tmp_path.glob("*.partial"))


def test_the_test_module_is_imported_under_pytests_name_with_its_asserts_rewritten(tmp_path: Path) -> None:
    package = tmp_path / "hicache_runner_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text("LIMIT = 3\n")
    (package / "test_mod.py").write_text(
        "from .helpers import LIMIT\n\n"
        "class TestOuter:\n"
        "    class TestInner:\n"
        "        def test_it(self, rank, world_size, n):\n"
        "            assert [rank] * n == [rank] * LIMIT\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        req = request(package / "test_mod.py", "hicache_runner_pkg.test_mod", ("TestOuter", "TestInner", "test_it"),
                      ("rank", "world_size", "n"))  # fmt: skip
        function = runner.load_test(req)
        assert sys.modules["hicache_runner_pkg.test_mod"].__file__ == str(package / "test_mod.py")
        (tmp_path / ARGS).write_bytes(pickle.dumps({"n": 2}))
        kwargs = runner._arguments(tmp_path, req, rank=1)
        assert kwargs == {"rank": 1, "world_size": 2, "n": 2}
        with pytest.raises(AssertionError) as raised:
            function(**kwargs)
        assert "assert [1, 1] == [1, 1, 1]" in str(raised.value)  # rewritten: it says what it compared
        assert runner._last_line(raised.value) == "AssertionError: assert [1, 1] == [1, 1, 1]"
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("hicache_runner_pkg")]:
            del sys.modules[name]


def test_a_failure_is_reported_from_the_tests_own_frames(tmp_path: Path) -> None:
    """Here the module fails at import, before any process group: the same reporting path."""
    module = tmp_path / "test_fails.py"
    module.write_text("LIMITS = {}\nLIMIT = LIMITS['rank']\n")
    outcome = runner.run(request(module, "hicache_runner_fails", ("test_x",), ("rank",)), tmp_path, 1)
    sys.modules.pop("hicache_runner_fails", None)
    assert (outcome.rank, outcome.pid, outcome.status) == (1, os.getpid(), "failed")
    assert outcome.error == "KeyError: 'rank'"
    assert outcome.body_started is None  # the body was never called
    assert outcome.traceback is not None
    frames = [line for line in outcome.traceback.splitlines() if line.startswith("  File ")]
    assert frames == [f'  File "{module}", line 2, in <module>']  # none of the runner's own
    assert runner._last_line(RuntimeError()) == "RuntimeError"


def test_the_ranks_environment() -> None:
    base = {"PATH": "/bin", "PYTHONPATH": os.pathsep.join([str(BOOT_DIR), "/theirs"]), "HICACHE_TRACE_DIR": "/run",
            "OMP_NUM_THREADS": "4"}  # fmt: skip
    env = rank_environment(base, 1, 2)
    assert env["PYTHONPATH"] == "/theirs"  # an outer `hicache trace` does not reach the ranks
    assert "HICACHE_TRACE_DIR" not in env
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("1", "1", "2", "2")
    assert env["OMP_NUM_THREADS"] == "4"  # the user's choice stands; torchrun's 1 otherwise
    assert rank_environment({"PYTHONPATH": str(BOOT_DIR)}, 0, 2).get("PYTHONPATH") is None
    assert rank_environment({}, 0, 2)["OMP_NUM_THREADS"] == "1"
    if sys.platform.startswith("linux"):
        assert rank_environment({}, 0, 2)["GLOO_SOCKET_IFNAME"] == "lo"
