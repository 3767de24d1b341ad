"""The GPU path with real ranks: device KV pools on CUDA, copies on a side stream, NCCL PP sync.

Marked `cuda` and skipped where torch sees no GPU (this project's CPU machines)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from tests.integration.helpers import hicache, stress_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


@pytest.mark.parametrize("policy", ["reap", "drain"])
def test_cuda_device_pools_with_gloo_pp_sync(tmp_path, policy: str) -> None:
    run = stress_run(tmp_path, "--policy", policy, "--device", "cuda", "--duration", "6s")
    assert run.proc.returncode == 0, run.proc.stderr
    ranks = run.report["ranks"]
    assert all(r["device"] != "cpu" and r["gpu_memory"]["peak_bytes"] > 0 for r in ranks)
    assert ranks[0]["counters"]["write_throughs"] > 0 and ranks[0]["counters"]["writes_acked"] > 0
    if policy == "drain":
        assert ranks[0]["work_list"]["max"] <= 2
    else:
        assert ranks[0]["work_list"]["final"] > 1000


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs a GPU for each of the two ranks")
def test_nccl_pp_sync(tmp_path) -> None:
    run = stress_run(tmp_path, "--policy", "drain", "--device", "cuda", "--pp-backend", "nccl", "--duration", "6s")
    assert run.proc.returncode == 0, run.proc.stderr
    assert run.report["environment"]["pp_backend"] == "nccl"
    assert run.report["ranks"][1]["messages"]["received"] > 0


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="a machine with one GPU")
def test_nccl_on_one_gpu_is_refused_in_one_line(tmp_path) -> None:
    proc = hicache("stress", "--pp", "2", "--device", "cuda", "--pp-backend", "nccl", "--duration", "6s", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("run fewer ranks on this machine") and proc.stderr.count("\n") <= 1
    assert not (tmp_path / "hicache-runs").exists()


@pytest.mark.parametrize("drain", [False, True])
def test_trace_counts_nccl_works(tmp_path, drain: bool) -> None:
    """NCCL's own Works under `hicache trace`: kept ones are the leak, named at their line;
    waited ones stay at most one live."""
    program = Path(__file__).resolve().parent / "programs" / "nccl_all_reduce.py"
    report = tmp_path / "report.json"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1"]
    command = [*torchrun, str(program), "6", *(["--drain"] if drain else [])]
    proc = hicache("trace", "--duration", "60s", "--no-live", "--report", str(report), "--", *command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rank = json.loads(report.read_text())["ranks"][0]
    assert rank["device"].startswith("cuda")
    site = rank["works"]["sites"][0]
    assert (site["op"], site["source"]) == ("all_reduce", "work = dist.all_reduce(tensor, async_op=True)")
    if drain:
        assert rank["works"]["live_max"] <= 1 and rank["works"]["waited"] > 1000
    else:
        assert rank["verdict"] == "LEAK" and rank["works"]["live_max"] > 1000 and rank["works"]["waited"] == 0
