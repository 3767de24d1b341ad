"""The rank entry point that torchrun starts: build the cache, run the loop, start the probe.

Invoked as `python -m hicache_cli.rank.entry RUN_DIR` with torchrun's RANK / WORLD_SIZE /
MASTER_ADDR / MASTER_PORT in the environment. Everything it prints goes to
`rank-<N>.log` in the run directory; its samples go to `rank-<N>.jsonl`.
"""

from __future__ import annotations

import faulthandler
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from hicache_cli import stacks
from hicache_cli.files import open_run_file, run_file
from hicache_cli.lifecycle import Lifeline
from hicache_cli.protocol import (
    EARLY_STOP,
    LIFELINE_EVERY_S,
    NODE_ENV,
    ORPHANED_EXIT,
    STOP_SIGNALS,
    ErrorKind,
    connection_lost,
    log_file,
    stacks_file,
)
from hicache_cli.rank.probe import RING_MASK, wait_for_signal

if TYPE_CHECKING:
    from hicache_cli.rank.probe import LoopStats, Probe

END_SKEW_S = 0.5
STOP_TAKEN_S = 2.0  # after a lost connection, how long an early stop already sent may take to be seen


def _asked_to_stop(stats: LoopStats, probe: Probe) -> bool:
    """Whether the rank had been asked to stop when its last round failed (its deadline, or an
    early stop). A neighbour that stopped first closes their pair at once, while this rank's
    probe may not yet have taken the same request: beside a CPU hog its thread waited a second
    for a core. An early stop still pending, or taken within STOP_TAKEN_S, counts."""
    until = time.monotonic() + STOP_TAKEN_S
    while True:
        if stats.stop_requested or time.monotonic() >= probe.deadline - END_SKEW_S:
            return True
        if EARLY_STOP in signal.sigpending():
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.05)


def _redirect_output(log_path: Path) -> None:
    fd = open_run_file(log_path, "append")  # never through a symlink; 0600
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def _guard_start_up(lifeline: Lifeline, probing: threading.Event) -> None:
    """Until the probe runs: leave at once when stopped or orphaned (there are no samples
    to lose yet, and a rank stuck in the rendezvous would otherwise wait out its timeout)."""
    while not probing.is_set():
        signo = wait_for_signal(STOP_SIGNALS, LIFELINE_EVERY_S)  # a bogus wake-up under ptrace is ignored
        if signo is not None and probing.is_set():
            os.kill(os.getpid(), signo)  # the probe has started: it is the probe's to take
            return
        if signo is not None and signo != EARLY_STOP:
            os._exit(128 + signo)
        if (lost := lifeline.lost()) is not None:
            print(f"hicache rank: {lost} before the workload started; leaving", flush=True)
            os._exit(ORPHANED_EXIT)


def main(argv: list[str]) -> int:
    # Block stop signals in every thread (torch's included); the probe takes them with
    # sigtimedwait, so a rank blocked in C code still writes its final line.
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    lifeline = Lifeline(watch_parent=True)  # hicache or torchrun killed: stop, never run on unwatched
    probing = threading.Event()
    threading.Thread(target=_guard_start_up, args=(lifeline, probing), name="hicache-start-up", daemon=True).start()
    run_dir = Path(argv[1])
    rank = int(os.environ["RANK"])
    _redirect_output(log_file(run_dir, rank))
    faulthandler.enable()  # a fatal signal leaves its stacks in the rank's log
    # The watchdog asks a stuck rank for its stacks (hicache_cli.stacks: a thread of ours
    # answers, holding the GIL, while the loop is blocked inside gloo)
    stacks.arm(stacks_file(run_dir, rank))

    import numpy
    import torch.distributed as dist

    from hicache_cli.config import RunConfig
    from hicache_cli.protocol import samples_file
    from hicache_cli.rank.probe import LoopStats, Probe, RankIdentity
    from hicache_cli.targets import RankedTarget, SGLangTarget
    from hicache_model.faults import FaultPlan
    from hicache_model.pp_sync import Topology

    config = RunConfig.load(run_dir)
    target = config.target
    duration = config.duration_s
    assert isinstance(target, RankedTarget) and duration is not None  # validated: hicache's ranks run this long
    topo = Topology(rank=rank, pp_size=target.pp, tp_size=target.tp)
    dist.init_process_group(target.backend, rank=rank, world_size=topo.world_size, timeout=timedelta(minutes=30))
    device = pick_device(
        target.device, int(os.environ.get("LOCAL_RANK", rank)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    )
    build = build_sglang if isinstance(target, SGLangTarget) else build_model
    loop, read, status = build(target, topo, device)

    dist.barrier()  # start every rank's clock together
    started = time.monotonic()
    stats = LoopStats()
    out = run_file(samples_file(run_dir, rank), "append")
    probe = Probe(
        RankIdentity(rank, topo.pp_rank, topo.tp_rank, int(os.environ.get(NODE_ENV, "0")), socket.gethostname()),
        stats,
        read,
        out,
        hz=config.probe_hz,
        started=started,
        deadline=started + duration,
        stop_grace_s=target.stop_grace_s,
        lifeline=lifeline,
        numpy=numpy,  # a view on the latency ring, never a copy
    )
    probing.set()
    probe.start()
    plan = FaultPlan.for_rank(list(target.faults), rank, topo.world_size)
    if plan.keep_every:  # the model's WorkList; the CLI refuses the keep fault for --target sglang
        status.keep_every = plan.keep_every
    injector = FaultInjector(plan, status, stats) if plan.timed or plan.lag_s else None
    exit_code = 0
    try:
        clock_offset = time.perf_counter() - time.monotonic()
        run_loop(loop, stats, started + clock_offset + duration, injector, started + clock_offset, target.round_time_s)
        probe.finish("done", probe.stop_reason)
    except Exception as exc:  # noqa: BLE001 - recorded in the final line, then the rank exits
        traceback.print_exc()
        # Ranks leave at their own deadline; a neighbour that left a moment earlier
        # (the ranks' clocks start together to within milliseconds) closes the pair.
        if _asked_to_stop(stats, probe):
            probe.finish("done", f"stopped at the deadline; last round ended with: {_one_line(exc)}")
        else:
            probe.finish("error", _one_line(exc), error=error_kind(exc))
            exit_code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # Outstanding Works (thousands under `reap`) make a clean process-group teardown
    # block or crash; the backlog is recorded in the final line, so leave at once.
    os._exit(exit_code)


def build_model(target, topo, device):  # noqa: ANN001, ANN201
    """hicache's own cache model under a policy: (the loop, the probe's reader, the status the
    fault injector drives, which is the work list)."""
    import torch

    from hicache_cli.rank.probe import Readings
    from hicache_model.hiradix_cache import CacheConfig, HiRadixCache
    from hicache_model.policies import PolicyOptions, make_policy
    from hicache_model.pp_sync import PPSync, RequestForwarding, new_groups
    from hicache_model.scheduler import Scheduler
    from hicache_model.work_list import WorkList
    from hicache_model.workload import Workload, workload_spec

    groups = new_groups(topo, target.pp_backend)
    work_list = WorkList()
    sync = PPSync(topo, groups, work_list, device if target.pp_backend == "nccl" else None)
    policy = make_policy(target.policy, PolicyOptions(wait_timeout_s=target.wait_timeout_s))
    cache = HiRadixCache(
        CacheConfig(device_pool_tokens=target.device_pool_tokens, host_pool_tokens=target.host_pool_tokens),
        device,
        sync,
        policy,
    )
    spec = workload_spec(
        target.workload,
        request_rate=target.request_rate,
        prefix_sharing=target.prefix_sharing,
        idle_fraction=target.idle_fraction,
    )
    forwarding = RequestForwarding(topo, groups.requests, work_list)
    scheduler = Scheduler(cache, Workload(spec, target.seed), forwarding)
    scheduler.warm_up(target.cache_warmup_rounds)
    device_name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"

    def read() -> Readings:
        counters = {k: float(v) for k, v in vars(cache.counters).items()}
        counters.update(policy.counters())
        counters["waits"] = work_list.waits
        counters["released"] = work_list.released
        counters["tp_all_reduces"] = sync.tp_all_reduces
        counters["requests_forwarded"] = forwarding.forwarded
        new = []
        while cache.checkpoints:  # the loop appends on the right; only we take from the left
            new.append(cache.checkpoints.popleft())
        return Readings(
            gpu_bytes=int(torch.cuda.memory_allocated(device)) if device.type == "cuda" else None,
            device_name=device_name,
            depth=len(work_list),
            held_bytes=work_list.held_bytes,
            sent=sync.sent,
            received=sync.received,
            blocked_on=work_list.blocked_on,
            blocked_peer=work_list.blocked_peer,
            counters=counters,
            digests={str(r): d for r, d in new},
        )

    return scheduler, read, work_list


def build_sglang(target, topo, device):  # noqa: ANN001, ANN201
    """SGLang's own event round, its methods read from the file the CLI checked: (the loop,
    the probe's reader, the status the fault injector drives)."""
    from pathlib import Path

    from hicache_cli.rank.probe import Readings
    from hicache_cli.sglang_target.bind import CountingCollectives, SGLangHolder, Traffic, build
    from hicache_cli.sglang_target.extract import extract
    from hicache_model.pp_sync import RequestForwarding, new_groups

    groups = new_groups(topo, "gloo")  # SGLang's PP sync runs on a gloo CPU group
    traffic = Traffic(
        in_recv=f"SGLang _pp_sync, in recv from pp rank {topo.pp_rank - 1}", in_recv_peer=topo.pp_rank - 1
    )
    CountingCollectives(traffic)
    holder = SGLangHolder(topo.pp_rank, topo.pp_size, groups.pp, groups.tp, topo.tp_size)
    tags = Path(target.tags_file) if target.tags_file else None
    # the scheduler's own request forwarding, which SGLang's PP loop does around these methods
    forwarding = RequestForwarding(topo, groups.requests, traffic)
    loop = build(extract(Path(target.file), target.class_name), tags, target.sha256, holder, forwarding)

    def read() -> Readings:
        depth = len(holder.work_list)
        mean_payload = traffic.sent_bytes / traffic.sent if traffic.sent else 0
        return Readings(
            device_name="cpu",
            depth=depth,
            held_bytes=int(depth * mean_payload),
            sent=traffic.sent,
            received=traffic.received,
            blocked_on=traffic.blocked_on,
            blocked_peer=traffic.blocked_peer,
            counters={"tp_all_reduces": traffic.all_reduces, "requests_forwarded": forwarding.forwarded},
        )

    return loop, read, traffic


def run_loop(loop, stats, deadline: float, injector=None, origin: float = 0.0, round_time: float = 0.0) -> None:  # noqa: ANN001
    """Run rounds until `deadline` (a time.perf_counter() value) or until the probe says stop;
    with `round_time`, each round is waited out to at least that long (--round-time: a
    forward pass's time, part of the round's latency).

    The hot path of the measurement: kept to what each round must do.
    """
    stats.thread = threading.get_ident()
    clock = time.perf_counter
    run_round = loop.run_round
    forward = loop.forward_requests  # the round's requests first: a fault strikes after them
    ring = stats.latency_ring
    rounds = stats.rounds
    while not stats.stop_requested:
        began = clock()
        if began >= deadline:
            return
        stats.round_started = began
        forward()
        if injector is not None:
            paused = clock()
            injector(paused - origin)
            began += clock() - paused  # the fault's own time is not the round's
            stats.round_started = began
        run_round()
        if round_time:
            rest = began + round_time - clock()
            if rest > 0:
                time.sleep(rest)
        ring[rounds & RING_MASK] = clock() - began  # LoopStats.record, inlined
        rounds += 1
        stats.rounds = rounds


def pick_device(requested: str, local_rank: int, local_world: int):  # noqa: ANN201 - torch.device
    """The rank's device: its local GPU (ranks beyond the GPU count share, each capped to its
    share of the memory), or the CPU."""
    import torch

    if requested == "auto":
        requested = "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cpu":
        return torch.device("cpu")
    count = torch.cuda.device_count()
    if count == 0:
        raise RuntimeError("--device cuda: this rank sees no CUDA device")
    index = local_rank % count
    torch.cuda.set_device(index)
    sharing = -(-local_world // count)  # ranks per GPU
    if sharing > 1:
        torch.cuda.set_per_process_memory_fraction(1.0 / sharing, index)
    return torch.device("cuda", index)


class FaultInjector:
    """Fires this rank's --fault plan from its event loop, between rounds."""

    def __init__(self, plan, status, stats) -> None:  # noqa: ANN001 - status: a WorkList or a Traffic
        self.plan = plan
        self.work_list = status
        self.stats = stats
        self.lag_s = plan.lag_s

    def __call__(self, run_t: float) -> None:
        if self.lag_s:
            time.sleep(self.lag_s)
        for fault in self.plan.due(run_t):
            if fault.kind == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif fault.kind == "raise-in-wait":
                self.work_list.fail_next_wait = True
            else:  # stall or hang: stop receiving (and everything else) for a while
                self._pause(fault, fault.for_s if fault.kind == "stall" else None)

    def _pause(self, fault, seconds: float | None) -> None:  # noqa: ANN001
        self.work_list.blocked_on = f"injected fault {fault}"
        self.stats.round_started = time.perf_counter()  # the stall shows as a growing round age
        until = None if seconds is None else time.monotonic() + seconds
        while not self.stats.stop_requested and (until is None or time.monotonic() < until):
            time.sleep(0.05)
        self.work_list.blocked_on = None


def error_kind(exc: BaseException) -> tuple[str, int | None]:
    """What kind of error ended the rank, and the peer it concerns (ErrorKind): decided here,
    where the exception's type is known, and written as fields of the final line."""
    from hicache_model.pp_sync import ClosedAfterTimeout

    if isinstance(exc, ClosedAfterTimeout):
        return ErrorKind.CLOSED_AFTER_TIMEOUT, exc.peer
    if connection_lost(exc):
        return ErrorKind.CONNECTION, None
    return ErrorKind.RAISED, None


def _one_line(exc: BaseException) -> str:
    """First line of an error, without the C++ source location gloo prefixes it with."""
    lines = str(exc).strip().splitlines()
    text = re.sub(r"^\[[^\]]*\]\s*", "", lines[0]) if lines else ""
    text = text.split(". This is typically caused by")[0]  # gloo's boilerplate advice
    return f"{type(exc).__name__}: {text}"[:300]


if __name__ == "__main__":
    sys.exit(main(sys.argv))
