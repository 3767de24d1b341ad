"""`hicache doctor`'s two-rank check, when it fails: the rank's own exception, not torchrun's summary."""

from __future__ import annotations

from hicache_cli.launch.doctor import _nccl_completion, rank_error

# what torchrun printed when doctor's NCCL check put two ranks on the one GPU of an H200
NCCL_ON_ONE_GPU = """\
[rank1]:[W1204 17:06:38.017857581 ProcessGroupNCCL.cpp:4094] Warning: An unbatched P2P op (send/recv) was called
Traceback (most recent call last):
  File "/tmp/completion_probe.py", line 30, in main
[rank1]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, invalid usage, NCCL version 2.28.9
ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 60
E1204 17:06:39 failed (exitcode: 1) local_rank: 1 (pid: 974) of binary: /usr/bin/python3
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
"""


def test_the_first_exception_a_rank_printed_is_the_reason() -> None:
    assert rank_error(NCCL_ON_ONE_GPU) == (
        "torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:93, invalid usage, NCCL version 2.28.9"
    )
    assert rank_error("RuntimeError: Distributed package doesn't have MPI built in.\n") == (
        "RuntimeError: Distributed package doesn't have MPI built in."
    )


def test_torchrun_summary_alone_is_no_reason() -> None:
    assert rank_error("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n  time : 1\n") is None
    assert rank_error("Errors were found\nWarning: something\n") is None


def test_nccl_on_one_gpu_is_not_measured_and_says_why() -> None:
    """On the one-GPU H200 the two-rank NCCL check failed; now it is not run there."""
    finding = _nccl_completion(1)
    assert finding.value is None
    assert finding.meaning == "not measured: its two ranks need a GPU each, and 1 is visible"
