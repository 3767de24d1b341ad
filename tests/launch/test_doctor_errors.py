"""`hicache doctor`'s two-rank checks: when one fails, the rank's own exception, not torchrun's
summary; the Work-cost probe's JSON read into findings."""

from __future__ import annotations

import json
from pathlib import Path

from hicache_cli.launch.doctor import _nccl_completion, rank_error, work_cost_findings

DATA = Path(__file__).resolve().parents[1] / "data" / "work_costs"

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


def test_work_cost_findings_read_a_recorded_probe() -> None:
    """The probe's JSON from a 50k-Work run on this machine (tests/data/work_costs): each
    finding carries the measured bytes and says what happened to delivery."""
    recorded = json.loads((DATA / "gloo-50k.json").read_text())
    found = {f.name: f for f in work_cost_findings(recorded)}
    cases = recorded["cases"]
    assert found["gloo_send_dropped_bytes"].value == cases["send_dropped_peer_behind"]["bytes_per_work"]
    assert "0 of 50500 delivered" in found["gloo_send_dropped_bytes"].meaning
    assert found["gloo_send_kept_bytes"].value == cases["send_kept_then_waited"]["bytes_per_work"]
    assert found["gloo_recv_dropped_bytes"].value == cases["recv_dropped"]["bytes_per_work"]
    assert found["gloo_all_reduce_dropped_bytes"].value == cases["all_reduce_dropped"]["bytes_per_work"]
    assert found["gloo_dropped_send_then_reply_hangs"].value is True
    assert (
        "stopped after 0 of 5000 rounds; waiting the isend ran 5000"
        in found["gloo_dropped_send_then_reply_hangs"].meaning
    )
    waited = max(cases[c]["bytes_per_work"] for c in ("send_waited", "recv_waited", "all_reduce_waited"))
    assert found["gloo_waited_bytes"].value == waited


def test_a_probe_that_failed_is_one_finding_with_its_reason() -> None:
    (finding,) = work_cost_findings({"error": "the two-rank Work-cost probe did not finish in 300 s"})
    assert (finding.name, finding.value) == ("gloo_work_costs", None)
    assert finding.meaning == "the two-rank Work-cost probe did not finish in 300 s"
