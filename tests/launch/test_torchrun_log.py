"""torchrun_log: worker exit codes and signals read off torchrun's failure summary."""

from __future__ import annotations

import pytest

from hicache_cli.launch.torchrun_log import WorkerExit, signal_name, worker_exits

# torchrun's output when rank 0 raised and torchrun then SIGTERMed rank 1 (ChildFailedError).
TWO_FAILURES = """\
W1202 11:16:24.101000 1790 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each \
process to be 1 in default, to avoid your system being overloaded.
E1202 11:16:27.456000 1790 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) local_rank: 0 \
(pid: 1796) of binary: /work/main/.venv/bin/python
Traceback (most recent call last):
  File "/work/main/.venv/bin/torchrun", line 8, in <module>
    sys.exit(main())
  File "/work/main/.venv/lib/python3.11/site-packages/torch/distributed/run.py", line 919, in main
    run(args)
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
hicache_cli.rank.entry FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-12-02_11:16:27
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 1797)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 1797
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_11:16:27
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 1796)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
"""

# pp=4, the kill:2 fault: one failure, so torchrun lists no others.
ONE_KILLED = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
hicache_cli.rank.entry FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-02_11:20:05
  host      : localhost
  rank      : 2 (local_rank: 2)
  exitcode  : -9 (pid: 2210)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 2210
============================================================
"""

CLEAN_RUN = """\
W1202 11:16:24.101000 1790 torch/distributed/run.py:793] Setting OMP_NUM_THREADS environment variable for each \
process to be 1 in default, to avoid your system being overloaded.
"""


def test_exit_codes_and_signals_by_rank() -> None:
    assert worker_exits(TWO_FAILURES) == {
        0: WorkerExit(rank=0, exit_code=1, signal=None),
        1: WorkerExit(rank=1, exit_code=-15, signal="SIGTERM"),
    }


def test_a_sigkilled_rank_is_named_with_its_signal() -> None:
    assert worker_exits(ONE_KILLED) == {2: WorkerExit(rank=2, exit_code=-9, signal="SIGKILL")}


def test_windows_line_endings_are_read_too() -> None:
    assert worker_exits(ONE_KILLED.replace("\n", "\r\n")) == {2: WorkerExit(2, -9, "SIGKILL")}


@pytest.mark.parametrize("log", [CLEAN_RUN, "", "rank      : 1 (local_rank: 1)\n"])
def test_a_log_without_a_failure_summary_gives_no_exits(log: str) -> None:
    assert worker_exits(log) == {}


@pytest.mark.parametrize(
    ("code", "name"),
    [(-9, "SIGKILL"), (-15, "SIGTERM"), (-6, "SIGABRT"), (-11, "SIGSEGV"), (0, None), (1, None), (70, None)],
)
def test_signal_name_decodes_negative_exit_codes_only(code: int, name: str | None) -> None:
    assert signal_name(code) == name


def test_an_unknown_signal_number_still_gets_a_name() -> None:
    assert signal_name(-200) == "signal 200"
