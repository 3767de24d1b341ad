"""--device and --pp-backend: checked before launch; the rank's device choice on this machine."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from hicache_cli.cli.configure import ranks_config
from hicache_cli.config import RunConfig
from hicache_cli.errors import UsageError
from hicache_cli.rank.entry import pick_device
from tests.cli.groups import ranks_options

BASE = {"pp": 2, "tp": 1, "policy": "drain", "duration": "5s", "workload": "mixed", "seed": 0, "probe_hz": 10.0}


def options(**extra: Any) -> dict[str, Any]:
    return {"wait_timeout": "5s", **BASE, **extra}


def built(opts: dict[str, Any], progress: Any = None) -> RunConfig:
    """The config configure.ranks_config builds from these options, as a command passes them."""
    return ranks_config(**ranks_options(**opts), progress=progress)


def test_auto_and_cpu_are_accepted_and_kept() -> None:
    assert built(options()).target.device == "auto"
    config = built(options(device="cpu"))
    assert (config.target.device, config.target.pp_backend) == ("cpu", "gloo")


@pytest.mark.parametrize(
    ("extra", "start"),
    [
        ({"device": "tpu"}, "--device: 'tpu'"),
        ({"pp_backend": "mpi"}, "--pp-backend: 'mpi'"),
        ({"device": "cpu", "pp_backend": "nccl"}, "--pp-backend nccl sends CUDA tensors"),
    ],
)
def test_bad_device_options_are_usage_errors(extra: dict[str, str], start: str) -> None:
    with pytest.raises(UsageError) as info:
        built(options(**extra))
    assert str(info.value).startswith(start)
    assert "\n" not in str(info.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_cuda_without_a_gpu_is_refused_before_launch() -> None:
    with pytest.raises(UsageError, match="no CUDA device is available here"):
        built(options(device="cuda"))


def _one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine with one CUDA GPU and NCCL, as the H200 this ran on (the check reads only these)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: True)


def test_nccl_with_ranks_sharing_a_gpu_is_refused_before_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    """NCCL stops two ranks on one device ("Duplicate GPU detected", seen on a one-GPU H200):
    refused before launch, in one line; gloo may share the GPU, and across two nodes each
    node's one rank has its own."""
    _one_gpu(monkeypatch)
    with pytest.raises(UsageError) as info:
        built(options(device="cuda", pp_backend="nccl"))
    assert str(info.value) == (
        "--pp-backend nccl: NCCL needs a GPU of its own for each rank, and the 2 ranks here would share 1; "
        "use gloo (the default), or run fewer ranks on this machine"
    )
    assert built(options(device="cuda")).target.pp_backend == "gloo"
    across = built(options(device="cuda", pp_backend="nccl", nnodes=2))
    assert across.target.pp_backend == "nccl"
    with pytest.raises(UsageError, match="the 2 ranks here would share 1"):
        built(options(device="cuda", pp_backend="nccl", nnodes=2, nproc_per_node=2))


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA")
def test_pick_device_on_a_cpu_machine() -> None:
    assert pick_device("auto", 0, 2) == torch.device("cpu")
    assert pick_device("cpu", 1, 2) == torch.device("cpu")
    with pytest.raises(RuntimeError, match="sees no CUDA device"):
        pick_device("cuda", 0, 2)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pick_device_shares_gpus_round_robin() -> None:
    count = torch.cuda.device_count()
    assert pick_device("cuda", count, count + 1) == torch.device("cuda", 0)
    assert pick_device("auto", 0, 1).type == "cuda"
