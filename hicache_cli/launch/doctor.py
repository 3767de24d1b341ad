"""What the environment does, before trusting a verdict: torch, backends, CUDA, pinned
memory, the loopback rendezvous, and a measured check of gloo's send-Work completion."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from hicache_cli.launch.launcher import LOOPBACK, pick_port, rank_environment


@dataclass(frozen=True)
class Finding:
    name: str
    value: Any
    meaning: str  # what it means for hicache's verdicts, in one line


def measure_completion(backend: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run the two-rank completion probe with torchrun on loopback; its JSON, or an error."""
    port = pick_port(LOOPBACK, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        f"--master-addr={LOOPBACK}",
        f"--master-port={port}",
        "-m",
        "hicache_cli.rank.completion_probe",
        backend,
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=rank_environment(LOOPBACK), check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"the two-rank {backend} check did not finish in {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    why = rank_error(proc.stderr) or proc.stderr.strip()[-300:]
    return {"error": f"the two-rank {backend} check failed (exit {proc.returncode}): {why}"}


# `RuntimeError: ...`, `[rank0]: torch.distributed.DistBackendError: ...`: a rank's exception
_RAISED = re.compile(r"^(?:\[rank\d+\]:\s*)?((?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception)\b.*)$")


def rank_error(stderr: str) -> str | None:
    """The first exception a rank printed (its traceback's last line), rather than the
    summary torchrun prints after it (ChildFailedError, its box of fields)."""
    for line in stderr.splitlines():
        found = _RAISED.match(line.strip())
        if found and "ChildFailedError" not in found.group(1):
            return found.group(1)[:300]
    return None


def examine() -> list[Finding]:
    import torch
    import torch.distributed as dist

    findings = [
        Finding("torch_version", torch.__version__, "the torch the ranks run"),
        Finding("torch_cuda_build", torch.version.cuda, "CUDA version torch was built for (None: a CPU build)"),
        Finding("gloo_available", dist.is_gloo_available(), "PP sync runs on gloo, as SGLang's does"),
        Finding("nccl_available", dist.is_nccl_available(), "NCCL for device-tensor groups (GPU machines only)"),
    ]
    cuda = torch.cuda.is_available()
    findings.append(
        Finding("cuda_available", cuda, "device KV pools on the GPU" if cuda else "device KV pools on the CPU")
    )
    if cuda:
        names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        findings.append(Finding("cuda_devices", names, "each rank uses its local GPU"))
        try:
            torch.empty(1, pin_memory=True)
            pinned = True
        except RuntimeError:
            pinned = False
        findings.append(
            Finding(
                "pinned_memory", pinned, "host KV pool pinned, copies asynchronous" if pinned else "host pool pageable"
            )
        )
    else:
        findings.append(Finding("pinned_memory", None, "not applicable without CUDA"))
    gloo = measure_completion("gloo")
    if "error" in gloo:
        findings.append(Finding("loopback_rendezvous", False, gloo["error"]))
        findings.append(Finding("gloo_is_completed_advances_without_wait", None, "could not be measured"))
    else:
        advances = gloo["is_completed_advances_without_wait"]
        findings.append(Finding("loopback_rendezvous", True, "torchrun's rendezvous and gloo pairs work on 127.0.0.1"))
        meaning = (
            "a reaper that polls is_completed() frees Works here: `reap` may not leak"
            if advances
            else "a send Work stays incomplete until wait(), even once received: `reap` frees nothing and leaks"
        )
        findings.append(Finding("gloo_is_completed_advances_without_wait", advances, meaning))
    if cuda and dist.is_nccl_available():
        findings.append(_nccl_completion(torch.cuda.device_count()))
    return findings


def _nccl_completion(gpus: int) -> Finding:
    name = "nccl_is_completed_advances_without_wait"
    if gpus < 2:  # NCCL stops two ranks on one device ("Duplicate GPU detected")
        return Finding(name, None, f"not measured: its two ranks need a GPU each, and {gpus} is visible")
    nccl = measure_completion("nccl")
    value = nccl.get("is_completed_advances_without_wait")
    meaning = nccl.get("error") or ("NCCL's Works complete by themselves" if value else "NCCL's Works also need wait()")
    return Finding(name, value, meaning)


def as_json(findings: list[Finding]) -> dict[str, Any]:
    return {f.name: f.value for f in findings} | {"meanings": {f.name: f.meaning for f in findings}}
