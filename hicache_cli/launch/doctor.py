"""What the environment does, before trusting a verdict: torch, backends, CUDA, pinned
memory, the loopback rendezvous, a measured check of gloo's send-Work completion, what a
gloo Work costs kept, dropped unwaited or waited (rank/work_cost_probe.py), and whether an
attach's census sees a heap frozen by gc.freeze() on this Python (attach/heap.py)."""

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


DEFAULT_WORKS = 10_000  # per case of the Work-cost probe: ~20 s here; RSS moves in 4 KiB pages


def measure_completion(backend: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Run the two-rank completion probe with torchrun on loopback; its JSON, or an error."""
    return _two_ranks("hicache_cli.rank.completion_probe", [backend], f"the two-rank {backend} check", timeout_s)


def measure_work_costs(works: int = DEFAULT_WORKS, timeout_s: float = 300.0) -> dict[str, Any]:
    """Run the two-rank Work-cost probe on gloo with `works` Works a case; its JSON, or an error."""
    return _two_ranks("hicache_cli.rank.work_cost_probe", [str(works)], "the two-rank Work-cost probe", timeout_s)


def _two_ranks(module: str, args: list[str], what: str, timeout_s: float) -> dict[str, Any]:
    """Run `module` as two ranks with torchrun on loopback; the last JSON line rank 0 printed."""
    port = pick_port(LOOPBACK, None)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        f"--master-addr={LOOPBACK}",
        f"--master-port={port}",
        "-m",
        module,
        *args,
    ]
    try:
        proc = subprocess.run(
            cmd, capture_output=True, text=True, timeout=timeout_s, env=rank_environment(LOOPBACK), check=False
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{what} did not finish in {timeout_s:.0f} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    why = rank_error(proc.stderr) or proc.stderr.strip()[-300:]
    return {"error": f"{what} failed (exit {proc.returncode}): {why}"}


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


def examine(works: int = DEFAULT_WORKS) -> list[Finding]:
    """Every finding; `works` Works a case for the Work-cost probe (0: not run)."""
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
    if works > 0:
        findings += work_cost_findings(measure_work_costs(works))
    findings.append(frozen_heap_finding())
    return findings


def frozen_heap_finding() -> Finding:
    """Whether `hicache attach` sees a heap frozen by gc.freeze() on this Python (heap.py)."""
    from hicache_cli.attach import heap

    seen = heap.sees_frozen()
    meaning = (
        "an attach's census finds Works a frozen heap holds (gc.freeze(): SGLang's /freeze_gc, vLLM)"
        if seen
        else f"Python {sys.version.split()[0]}: an attach's census cannot walk what gc.freeze() froze, and says so"
    )
    return Finding("census_sees_frozen_heap", seen, meaning)


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


def work_cost_findings(result: dict[str, Any]) -> list[Finding]:
    """The Work-cost probe's JSON as findings: bytes per Work kept, dropped and waited, and
    what each does to delivery (rank/work_cost_probe.py)."""
    if "error" in result:
        return [Finding("gloo_work_costs", None, result["error"])]
    cases = result["cases"]

    def b(case: str, key: str = "bytes_per_work") -> float:
        return float(cases[case][key])

    def got(case: str) -> str:
        return f"{cases[case]['delivered']} of {cases[case]['of']} delivered"

    behind, lock = cases["send_dropped_peer_behind"], cases["lockstep_dropped"]
    return [
        Finding(
            "gloo_send_kept_bytes",
            b("send_kept_then_waited"),
            f"bytes a send Work holds while kept unwaited ({got('send_kept_then_waited')}); freed when it is waited "
            f"({b('send_kept_then_waited', 'freed_per_work_by_wait'):.0f} B) or let go after delivery "
            f"({b('send_kept_then_dropped', 'freed_per_work_by_drop'):.0f} B)",
        ),
        Finding(
            "gloo_send_dropped_bytes",
            b("send_dropped_peer_behind"),
            f"bytes a send Work dropped unwaited before the peer posted its receive leaves behind until the group "
            f"is destroyed; {behind['delivered']} of {behind['of']} delivered: nothing later to that peer in that "
            f"group arrives either (dropped after the peer's receive was posted: "
            f"{b('send_dropped_peer_waiting'):.0f} B, {got('send_dropped_peer_waiting')})",
        ),
        Finding(
            "gloo_dropped_send_then_reply_hangs",
            bool(lock["hung"]),
            f"an exchange that drops its isend Work, then waits for the peer's reply, stopped after {lock['rounds']} "
            f"of {lock['of']} rounds; waiting the isend ran {cases['lockstep_waited']['rounds']}",
        ),
        Finding(
            "gloo_recv_kept_bytes",
            b("recv_kept_then_waited"),
            f"bytes an irecv Work holds while kept unwaited ({got('recv_kept_then_waited')}); freed when it is waited "
            f"({b('recv_kept_then_waited', 'freed_per_work_by_wait'):.0f} B) or let go after delivery "
            f"({b('recv_kept_then_dropped', 'freed_per_work_by_drop'):.0f} B)",
        ),
        Finding(
            "gloo_recv_dropped_bytes",
            b("recv_dropped"),
            f"bytes an irecv Work dropped unwaited leaves behind until the group is destroyed; {got('recv_dropped')}: "
            f"nothing later from that peer in that group arrives either",
        ),
        Finding(
            "gloo_all_reduce_kept_bytes",
            b("all_reduce_kept"),
            f"bytes an all_reduce(async_op=True) Work holds while kept unwaited ({got('all_reduce_kept')}); "
            f"wait() frees {b('all_reduce_kept', 'freed_per_work_by_wait'):.0f} B of it",
        ),
        Finding(
            "gloo_all_reduce_dropped_bytes",
            b("all_reduce_dropped"),
            f"bytes an all_reduce(async_op=True) Work dropped unwaited leaves once it has run "
            f"({got('all_reduce_dropped')})",
        ),
        Finding(
            "gloo_waited_bytes",
            max(b("send_waited"), b("recv_waited"), b("all_reduce_waited")),
            f"bytes: the most a waited Work leaves (send {b('send_waited'):.0f}, irecv {b('recv_waited'):.0f}, "
            f"all_reduce {b('all_reduce_waited'):.0f} B; measured over {result['works']} Works a case, RSS after "
            f"malloc_trim, second half of each block)",
        ),
    ]
