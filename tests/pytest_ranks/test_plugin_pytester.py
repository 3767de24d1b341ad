"""The plugin where no rank starts: unmarked tests untouched, the marker registered, and
marked tests refused in one line before anything is started. A pytest subprocess loading
hicache through its entry point, as a user's would."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]


def test_unmarked_tests_are_untouched_and_pytest_never_imports_torch(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import json, pathlib, sys
        import pytest

        @pytest.fixture
        def rank():
            return 7

        def pytest_sessionfinish(session):
            watched = ["torch", "hicache_cli.pytest_plugin", "hicache_cli.pytest_ranks.parent", "psutil"]
            pathlib.Path("loaded.json").write_text(json.dumps([m for m in watched if m in sys.modules]))
        """
    )
    pytester.makepyfile(
        test_plain="""
        import pytest

        def test_plain():
            assert True

        def test_its_own_rank_fixture(rank):
            assert rank == 7

        def test_a_missing_fixture(world_size):
            pass

        @pytest.mark.parametrize("n", [1, 2])
        def test_parametrized(n):
            assert n
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-W", "error")
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*fixture 'world_size' not found*"])
    assert json.loads((pytester.path / "loaded.json").read_text()) == ["hicache_cli.pytest_plugin"]


def test_the_marker_is_registered(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.hicache_ranks(world_size, max_live_works=16, backend='gloo', *"])


def test_marked_tests_hicache_cannot_run_are_refused_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_refused="""
        import threading
        import pytest

        @pytest.fixture
        def lock():
            return threading.Lock()

        @pytest.mark.hicache_ranks(0)
        def test_no_ranks(rank):
            pass

        @pytest.mark.hicache_ranks(2, timeout="soon")
        def test_bad_timeout(rank):
            pass

        @pytest.mark.hicache_ranks(2)
        def test_a_lock_cannot_travel(rank, lock):
            pass

        @pytest.mark.hicache_ranks(2)
        def test_monkeypatch_acts_on_pytest_only(rank, monkeypatch):
            pass

        @pytest.mark.hicache_ranks(2)
        def test_results_are_read_in_teardown(rank, hicache_ranks_result):
            pass

        @pytest.mark.hicache_ranks(2)
        async def test_async(rank):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(failed=6)
    result.stdout.fnmatch_lines_random([
        "hicache_ranks: world_size must be a whole number from 1 to 64, got 0",
        "hicache_ranks: timeout='soon' is not a duration from 0 to 1 hour (use e.g. '60s', '2m', or seconds)",
        "hicache_ranks: cannot hand 'lock' to the ranks: it does not pickle (TypeError: *)",
        "hicache_ranks: the fixture 'monkeypatch' acts on the pytest process, not in the ranks",
        "hicache_ranks: the fixture 'hicache_ranks_result' acts on the pytest process, not in the ranks "
        "(read it in a fixture's teardown)",
        "hicache_ranks: test_async is async; a rank calls the test body as a plain function",
    ])  # fmt: skip
    assert "Traceback" not in result.stdout.str()
    # unchained (was: the line, "During handling of the above exception", the line again)
    assert "During handling" not in result.stdout.str()
    assert not list(pytester.path.glob("runpytest-*/hicache-*"))  # refused before any run directory was made
