"""The plugin as a user meets it: a pytest subprocess that loads hicache through its pytest11
entry point, test bodies on real gloo ranks, real processes checked by pid afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from hicache_cli.sglang_target.locate import cache_dir, release
from tests.integration.helpers import sigint_as_at_a_terminal

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

EXAMPLES = Path(__file__).resolve().parent / "examples"
HICACHE_CACHE = cache_dir()  # before pytester gives each inner run a HOME of its own
INNER_TIMEOUT_S = 240


def run_inner(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--strict-markers", "-rA", *args,
                                         timeout=INNER_TIMEOUT_S)  # fmt: skip


def line_of(source: str, text: str) -> int:
    """The line of `text` in `source` as pytester writes it (leading blank lines dropped)."""
    return 1 + next(i for i, line in enumerate(source.lstrip("\n").splitlines()) if text in line)


def gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def left_of(pytester: pytest.Pytester, within_s: float = 5.0) -> list[str]:
    return left_in(pytester.path, within_s)


def left_in(home: Path, within_s: float = 5.0) -> list[str]:
    """Processes of an inner run still running (each run has its own HOME, which its fork
    server and ranks inherit), waiting a moment for any on its way out."""
    deadline = time.monotonic() + within_s
    while True:
        left = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            try:
                if proc.environ().get("HOME") == str(home) and proc.status() != psutil.STATUS_ZOMBIE:
                    left.append(f"{proc.pid}: {' '.join(proc.info['cmdline'] or [])}")
            except psutil.Error:
                continue
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def recorded_pids(folder: Path, ranks: int = 2, within_s: float = 0.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while len(list(folder.iterdir())) < ranks and time.monotonic() < deadline:
        time.sleep(0.1)
    return sorted(int(p.read_text()) for p in folder.iterdir())


@dataclass
class Inner:
    """One pytest session of many marked tests, as a user runs a test file or a suite: its
    output, each test's junit case, what it left running (its processes have its HOME)."""

    path: Path
    out: str
    cases: dict[str, ET.Element]
    left: list[str]

    def outcome(self, name: str) -> str:
        case = self.cases[name]
        if case.find("failure") is not None or case.find("error") is not None:
            return "failed"
        skipped = case.find("skipped")
        if skipped is not None:
            return "xfailed" if skipped.get("type") == "pytest.xfail" else "skipped"
        return "passed"

    def section(self, name: str) -> pytest.LineMatcher:
        """The lines pytest printed under the test's own header (`____ name ____`)."""
        lines = self.out.splitlines()
        start = next(i for i, line in enumerate(lines) if re.fullmatch(rf"_+ {re.escape(name)} _+", line))
        end = next((i for i in range(start + 1, len(lines)) if re.fullmatch(r"(_{3,} .+ _{3,}|=+ .+ =+)", lines[i])),
                   len(lines))  # fmt: skip
        return pytest.LineMatcher(lines[start:end])


def run_shared(where: Path, files: dict[str, str], extra_env: dict[str, str]) -> Inner:
    """The test files in one inner session, in a HOME of its own (as pytester makes one)."""
    for name, source in files.items():
        (where / f"{name}.py").write_text(textwrap.dedent(source).strip("\n") + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "TOX_ENV_DIR")}
    env.update(HOME=str(where), USERPROFILE=str(where), PY_COLORS="0", PYTHONPATH=str(where), **extra_env)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--strict-markers", "-rA", "-s",
                           f"--basetemp={where / 'basetemp'}", "--junitxml=junit.xml"],
                          cwd=where, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=INNER_TIMEOUT_S)  # fmt: skip
    cases = {c.get("name", ""): c for c in ET.parse(where / "junit.xml").getroot().iter("testcase")}
    return Inner(where, done.stdout, cases, left_in(where))


@pytest.fixture(scope="module")
def inner(tmp_path_factory: pytest.TempPathFactory) -> Inner:
    """Nine test files a user might have, in one session (one inner pytest, one fork server,
    as a suite runs them): the plugin's verdicts on each, and what one test's failure (a rank
    raising, exiting, hanging) leaves for the next - nothing. Each test below reads its own
    outcome and its own part of the output."""
    where = tmp_path_factory.mktemp("inner")
    (where / "pids").mkdir()
    files = {
        "test_raises": RAISES, "test_exits": EXITS, "test_hangs": HANGS, "test_grows": GROWS, "test_marks": MARKS,
        "test_foreign": FOREIGN, "test_pp_sync": PP_SYNC,
        "test_sglang_pp_sync": (EXAMPLES / "sglang_pp_sync.py").read_text(),
        "test_shutdown_hazard": (EXAMPLES / "shutdown_hazard.py").read_text(),
    }  # fmt: skip
    return run_shared(where, files, {"PIDS_DIR": str(where / "pids"), "HICACHE_CACHE_DIR": str(HICACHE_CACHE)})


def test_a_reap_loop_fails_naming_its_isend_line_and_its_drain_twin_passes(inner: Inner) -> None:
    """In the shared session: its ranks forked from the fork server."""
    assert (inner.outcome("test_pp_sync_reap"), inner.outcome("test_pp_sync_drain")) == ("failed", "passed")
    assert reap_loop_said(inner.section("test_pp_sync_reap"), inner.cases) == [2, 2]


def test_a_reap_loop_on_spawned_ranks_says_the_same(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_pp_sync=PP_SYNC)
    result = run_inner(pytester, "--hicache-ranks-start=spawn", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=1)
    cases = {c.get("name", ""): c for c in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase")}
    assert reap_loop_said(result.stdout, cases) == [0, 0]
    result.stdout.fnmatch_lines(["PASSED test_pp_sync.py::test_pp_sync_drain"])


PP_SYNC = (EXAMPLES / "pp_sync.py").read_text()


def reap_loop_said(said: pytest.LineMatcher, cases: dict[str, ET.Element]) -> list[int]:
    """Checks what pp_sync.py's reap loop failed with; how many ranks each of its tests forked."""
    source = PP_SYNC
    isend, recv = line_of(source, "dist.isend("), line_of(source, "dist.recv(")
    said.fnmatch_lines([
        "*_ test_pp_sync_reap _*",
        # the root cause, then the shutdown hazard the same sends make (none was ever waited)
        f"rank 0 returned with 200 sends to rank 1 never waited (test_pp_sync.py:{isend})",
        f"rank 0 held 200 Works it had not waited (max_live_works=4), 200 of them from test_pp_sync.py:{isend} "
        "in sync (isend to rank 1); at the end: 200 created, 0 waited, 200 dropped without a wait, 0 still held",
    ])  # fmt: skip
    # rank 1 is stopped: blocked in recv from rank 0 when its last sample says so (a dropped
    # unwaited send was lost), else where its stack was
    said.re_match_lines([
        rf"rank 1 (is blocked in recv from rank 0 at test_pp_sync.py:{recv}|"
        rf"\(pid \d+\) was stopped once the test had failed, at test_pp_sync.py:{recv} in sync)$",
        r"run directory: .*/hicache-test_pp_sync_reap0",
    ])  # fmt: skip
    properties = [p for name in ("test_pp_sync_reap", "test_pp_sync_drain") for p in cases[name].iter("property")]
    return [json.loads(p.get("value", ""))["forked"] for p in properties if p.get("name") == "hicache_ranks"]


RAISES = """
import pytest
import torch
import torch.distributed as dist


@pytest.mark.hicache_ranks(2)
def test_one_rank_raises(rank, world_size):
    received = torch.zeros(1)
    if rank == 1:
        assert received.sum().item() == 1.0, "rank 1 never got its count"
    dist.recv(received, src=1)  # rank 0 waits for a message rank 1 never sends
"""


def test_a_raising_rank_fails_the_test_with_its_traceback_at_once(inner: Inner) -> None:
    assert inner.outcome("test_one_rank_raises") == "failed"
    inner.section("test_one_rank_raises").fnmatch_lines([
        "rank 1 raised AssertionError: rank 1 never got its count",
        "    Traceback (most recent call last):",
        f'      File "*test_raises.py", line {line_of(RAISES, "assert received")}, in test_one_rank_raises',
        "    AssertionError: rank 1 never got its count",
        "    assert 0.0 == 1.0",  # pytest's assertion rewriting, in the rank
        "rank 0 (pid *) was stopped once the test had failed, at test_raises.py:"
        f"{line_of(RAISES, 'dist.recv(')} in test_one_rank_raises",
    ])  # fmt: skip
    # the 60 s default timeout was not waited for: rank 0 was stopped
    assert float(inner.cases["test_one_rank_raises"].get("time", "")) < 60


EXITS = """
import os

import pytest
import torch
import torch.distributed as dist


@pytest.mark.hicache_ranks(2)
def test_rank_0_exits(rank, world_size):
    if rank == 0:
        os._exit(3)  # a library calling exit() under the test, say
    dist.recv(torch.zeros(1), src=0)  # rank 1 then loses its connection to rank 0
"""


def test_a_rank_that_exits_is_the_root_cause_before_the_connection_its_peer_lost(inner: Inner) -> None:
    assert inner.outcome("test_rank_0_exits") == "failed"
    text = str(inner.section("test_rank_0_exits"))
    crash = text.index("rank 0 (pid ")
    assert "exited with code 3 before its test body returned" in text[crash : crash + 200]
    lost = text.find("rank 1 raised")
    assert lost == -1 or crash < lost  # rank 1's broken connection, if it raised, comes after
    summary = next(line for line in inner.out.splitlines() if line.startswith("FAILED test_exits.py"))
    assert "Failed: rank 0 (pid" in summary, summary  # pytest cuts the line at its width


HANGS = """
import os
import pathlib

import pytest
import torch
import torch.distributed as dist


@pytest.mark.hicache_ranks(2, timeout="2s")
def test_rank_1_hangs(rank, world_size):
    pathlib.Path(os.environ["PIDS_DIR"], str(rank)).write_text(str(os.getpid()))
    if rank == 1:
        dist.recv(torch.zeros(1), src=0)  # rank 0 never sends
"""


def test_a_hung_rank_fails_at_the_timeout_with_its_stack_and_leaves_no_process(inner: Inner) -> None:
    assert inner.outcome("test_rank_1_hangs") == "failed"
    pids = recorded_pids(inner.path / "pids")
    said = inner.section("test_rank_1_hangs")
    said.fnmatch_lines([
        f"rank 1 (pid {pids[1]}) did not finish within the 2 s timeout; its stack (most recent call first):",
        '    File "*distributed_c10d.py", line * in recv',
        "*",
        f'    File "*test_hangs.py", line {line_of(HANGS, "dist.recv(")} in test_rank_1_hangs',
    ])  # fmt: skip
    assert "tracer" not in str(said)  # hicache's own wrapper frames are left out
    assert gone(pids)  # the inner pytest has returned: none of its ranks runs
    assert inner.left == []  # nor its fork server


@pytest.mark.parametrize("signo", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_pytest_stopped_during_a_marked_test_leaves_no_process(pytester: pytest.Pytester, signo: int) -> None:
    """Ctrl-C (what a terminal sends pytest; the ranks have sessions of their own) stops the
    ranks in order; SIGKILL to pytest reaches them through the parent-death signals."""
    pids_dir = pytester.mkdir("pids")
    pytester.makepyfile(
        test_forever="""
        import os, pathlib, time
        import pytest

        pytestmark = pytest.mark.hicache_ranks(2, timeout="5m")

        def test_forever(rank, world_size):
            pathlib.Path(os.environ["PIDS_DIR"], str(rank)).write_text(str(os.getpid()))
            while True:
                time.sleep(0.1)
        """
    )
    env = dict(os.environ, PIDS_DIR=str(pids_dir), PYTHONPATH=str(pytester.path))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "test_forever.py"],
                            cwd=pytester.path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=sigint_as_at_a_terminal)  # fmt: skip
    try:
        pids = recorded_pids(pids_dir, within_s=120)
        assert len(pids) == 2
        below = [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
        assert len(below) >= 3  # the fork server and the two ranks it forked
        proc.send_signal(signo)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    if signo == signal.SIGINT:
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
        assert "KeyboardInterrupt" in out
    else:
        assert proc.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while not (gone(pids) and gone(below)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert gone(pids) and gone(below)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_daemon_a_rank_double_forks_at_once_is_stopped_with_the_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, start: str
) -> None:
    """Rank 0 leaves a daemon in a session of its own, its parent gone at once: it is
    reparented to pytest (spawned ranks) or to the fork server (forked ones), both child
    subreapers, found there by the run's token and stopped when the test ends."""
    pid_file = pytester.path / "daemon.pid"
    monkeypatch.setenv("DAEMON_PID_FILE", str(pid_file))
    pytester.makepyfile(
        test_daemon="""
        import os, sys, time
        import pytest

        @pytest.mark.hicache_ranks(2, timeout="60s")
        def test_leaves_a_daemon(rank, world_size):
            if rank == 0:
                sys.path.insert(0, os.environ["PROGRAMS"])
                import double_fork
                double_fork.main(os.environ["DAEMON_PID_FILE"])
        """
    )
    monkeypatch.setenv("PROGRAMS", str(Path(__file__).resolve().parents[1] / "integration" / "programs"))
    result = run_inner(pytester, f"--hicache-ranks-start={start}")
    result.assert_outcomes(passed=1)
    daemon = int(pid_file.read_text())
    try:
        deadline = time.monotonic() + 5
        while not gone([daemon]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone([daemon])
        assert left_of(pytester) == []
    finally:
        if not gone([daemon]):
            os.kill(daemon, signal.SIGKILL)


FOREIGN = """
import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe


@pytest.fixture
def works_were_counted(request, hicache_ranks_result):
    yield
    result = hicache_ranks_result.result
    for rank in result.ranks:
        assert rank.created >= 8, rank
        assert rank.live_final == 0 and rank.live_max <= 8
        assert rank.top_site.file == str(request.path)  # the test's own line, not torch's
    print(f"{request.node.name}: " + ", ".join(f"rank {r.rank} created {r.created} at {r.top_site.where()}"
                                               for r in result.ranks))


@pytest.mark.usefixtures("works_were_counted")
@pytest.mark.hicache_ranks(2, max_live_works=8)
def test_gpipe_training_steps(rank, world_size):
    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Sequential(nn.Linear(16, 16), nn.Tanh()) for _ in range(4)))
    stage = PipelineStage(model[2 * rank : 2 * rank + 2], rank, world_size, torch.device("cpu"))
    schedule = ScheduleGPipe(stage, n_microbatches=4, loss_fn=nn.MSELoss())
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    for _ in range(3):
        if rank == 0:
            schedule.step(x)
        else:
            schedule.step(target=y, losses=[])


@pytest.mark.usefixtures("works_were_counted")
@pytest.mark.hicache_ranks(2, max_live_works=2)
def test_halo_exchange_with_batch_isend_irecv(rank, world_size):
    peer = 1 - rank
    for step in range(10):
        out, inbox = torch.full((4,), float(rank + step)), torch.zeros(4)
        ops = [dist.P2POp(dist.isend, out, peer), dist.P2POp(dist.irecv, inbox, peer)]
        for work in dist.batch_isend_irecv(ops):
            work.wait()
        assert inbox[0].item() == peer + step
"""


def test_foreign_shaped_bodies_pass_with_their_works_counted_at_their_own_lines(inner: Inner) -> None:
    assert {inner.outcome(n) for n in ("test_gpipe_training_steps", "test_halo_exchange_with_batch_isend_irecv")} == {
        "passed"
    }
    pytest.LineMatcher(inner.out.splitlines()).fnmatch_lines([
        "*test_gpipe_training_steps: rank 0 created * at test_foreign.py:* in test_gpipe_training_steps (isend to "
        "rank 1), rank 1 created * (isend to rank 0)",
        "*test_halo_exchange_with_batch_isend_irecv: rank 0 created 20 at test_foreign.py:* in "
        "test_halo_exchange_with_batch_isend_irecv (batch_isend_irecv(isend) to rank 1), *",
    ])  # fmt: skip


def test_importlib_mode_a_test_package_conftest_fixtures_parametrize_and_classes(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\naddopts = "--import-mode=importlib"\n')
    pytester.mkpydir("tests")
    pytester.makepyfile(**{
        "tests/helpers": "ROUNDS = 4\n",
        "tests/conftest": "import pytest\n\n@pytest.fixture\ndef scale():\n    return {'factor': 3}\n",
        "tests/test_layout": """
            import pytest
            import torch
            import torch.distributed as dist

            from tests.helpers import ROUNDS
            from .helpers import ROUNDS as SAME


            class Payload:  # defined in the test module: pickled in pytest, unpickled in the ranks
                def __init__(self, n):
                    self.n = n


            class TestLayout:
                @pytest.mark.parametrize("payload", [Payload(2)])
                @pytest.mark.hicache_ranks(2)
                def test_all_reduce(self, rank, world_size, payload, scale, tmp_path):
                    assert ROUNDS == SAME
                    total = torch.zeros(1)
                    for _ in range(ROUNDS):
                        part = torch.full((1,), float(payload.n * scale["factor"] * (rank + 1)))
                        dist.all_reduce(part, async_op=True).wait()
                        total += part
                    assert total.item() == ROUNDS * 2 * 3 * 3
                    (tmp_path / f"written-by-rank-{rank}").write_text(__name__)
        """,
    })  # fmt: skip
    result = run_inner(pytester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["PASSED tests/test_layout.py::TestLayout::test_all_reduce[[]payload0]"])
    written = sorted(pytester.path.glob("runpytest-0/test_all_reduce_payload0_0/written-by-rank-*"))
    assert [p.read_text() for p in written] == ["tests.test_layout"] * 2  # pytest's module name, in each rank


GROWS = """
import time
import pytest

@pytest.mark.hicache_ranks(2, max_rss_slope="50MB/h")
def test_keeps_a_megabyte_every_20ms(rank, world_size):
    kept = []
    ends = time.monotonic() + 4.0
    while time.monotonic() < ends:
        kept.append(b"x" * (1 << 20))
        time.sleep(0.02)
"""


def test_an_rss_trend_over_max_rss_slope_fails_with_the_verdicts_reason(inner: Inner) -> None:
    assert inner.outcome("test_keeps_a_megabyte_every_20ms") == "failed"
    inner.section("test_keeps_a_megabyte_every_20ms").re_match_lines([
        r"rank 0: memory grows, not from Works or messages: RSS \+\d+ MB/h \[95% \+\d+, \+\d+\] after a warm-up "
        r"of [\d.]+ s, while live Works stay at most \d+ and no message backlog grows \(max_rss_slope=50 MB/h\)"
    ])  # fmt: skip


def test_a_fork_server_killed_between_tests_is_started_again(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from hicache_cli.pytest_ranks import parent

        def pytest_runtest_setup(item):
            if item.name == "test_second":
                server = item.config.stash[parent._SERVER].server
                server.proc.kill()
                server.proc.wait()
        """
    )
    pytester.makepyfile(
        test_twice="""
        import pytest
        import torch.distributed as dist

        @pytest.fixture
        def forked(hicache_ranks_result):
            yield
            print(f"forked {hicache_ranks_result.result.forked}")

        @pytest.mark.usefixtures("forked")
        @pytest.mark.hicache_ranks(2)
        def test_first(rank, world_size):
            dist.barrier()

        @pytest.mark.usefixtures("forked")
        @pytest.mark.hicache_ranks(2)
        def test_second(rank, world_size):
            dist.barrier()
        """
    )
    result = run_inner(pytester, "-s")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("forked 2") == 2
    assert left_of(pytester) == []


MARKS = """
import pytest
import torch
import torch.distributed as dist

@pytest.mark.xfail(reason="a known leak", strict=True)
@pytest.mark.hicache_ranks(2, max_live_works=4)
def test_known_leak(rank, world_size):
    kept = [dist.isend(torch.ones(1), dst=1) for _ in range(20)] if rank == 0 else []
    for _ in range(20 if rank == 1 else 0):
        dist.recv(torch.zeros(1), src=0)
    dist.barrier()

@pytest.mark.hicache_ranks(2)
def test_skips(rank, world_size):
    pytest.skip("needs one GPU per rank")
"""


def test_a_skip_in_the_ranks_and_xfail_read_as_pytest_reads_them(inner: Inner) -> None:
    assert (inner.outcome("test_known_leak"), inner.outcome("test_skips")) == ("xfailed", "skipped")
    at = line_of(MARKS, "def test_skips") - 1  # the test's own place (its decorator's line), as for a skip mark
    pytest.LineMatcher(inner.out.splitlines()).fnmatch_lines(
        [f"SKIPPED [[]1] test_marks.py:{at}: needs one GPU per rank"]
    )


def test_sglangs_own_pp_sync_fails_on_the_release_that_reaps_and_passes_on_the_one_that_drains(inner: Inner) -> None:
    """SGLang 0.5.14's and 0.5.15's own hiradix_cache.py (fetched once into hicache's cache,
    as tests/integration/test_sglang_real.py does)."""
    hiradix = release("0.5.14").files["HiRadixCache"].read_text()
    reaps, drains = (f"test_hiradix_cache_pp_sync_waits_its_works[{v}]" for v in ("0.5.14", "0.5.15"))
    assert (inner.outcome(reaps), inner.outcome(drains)) == ("failed", "passed")
    said = inner.section(reaps)
    said.fnmatch_lines([
        "*_ test_hiradix_cache_pp_sync_waits_its_works[[]0.5.14] _*",
        "rank 0 held 600 Works it had not waited (max_live_works=8), 600 of them from hiradix_cache.py:"
        f"{line_of(hiradix, 'torch.distributed.isend(')} in _pp_sync (isend to rank 1); at the end: 600 created, *",
    ])  # fmt: skip
    # 2 syncs a round, 300 rounds; the shutdown waits them, too late: all 600 when rank 0 gets
    # there within FAIL_GRACE_S of the failure (on a loaded machine it may be stopped on the way)
    end = re.search(r"at the end: 600 created, (\d+) waited, (\d+) still held", str(said))
    assert end is not None and int(end[1]) + int(end[2]) == 600


def test_a_body_returning_with_an_unwaited_send_fails_every_time_naming_its_line(inner: Inner) -> None:
    """Drain at the start of each round: the last isend is never waited. Each of three
    attempts fails at once (never the 60 s timeout), naming the isend's line, and the recv
    the peer is stuck in when the message was lost; the twin that says so passes."""
    source = (EXAMPLES / "shutdown_hazard.py").read_text()
    attempts = [f"test_drain_at_round_start[{n}]" for n in range(3)]
    assert [inner.outcome(name) for name in attempts] == ["failed"] * 3
    assert inner.outcome("test_a_send_kept_past_the_body_is_allowed_when_said") == "passed"
    isend, recv = line_of(source, "dist.isend("), line_of(source, "dist.recv(")
    named = f"rank 0 returned with 1 send to rank 1 never waited (test_shutdown_hazard.py:{isend})"
    stuck = f"rank 1 is blocked in recv from rank 0 at test_shutdown_hazard.py:{recv}"
    for name in attempts:
        out = str(inner.section(name))
        assert named in out and "timeout" not in out
        assert all(stuck in line for line in out.splitlines() if "rank 1 is blocked" in line)
    assert not inner.left
