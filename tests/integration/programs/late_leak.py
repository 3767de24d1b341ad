"""A two-stage request relay whose leak starts mid-run, the way a deploy turns on a feature.

Stage 0 sends each batch's header to stage 1 with ``dist.isend`` and remembers the Work in
``Relay.inflight`` (by batch id), to check on it later. At first every Work is waited before
the next batch. Once ``--leak-after`` seconds have passed (the "fast path" a config flag
turned on), the relay only forgets Works whose ``is_completed()`` says True - on gloo that
is never, so ``inflight`` grows from then on. Stage 1 receives every header.

    torchrun --standalone --nproc-per-node 2 late_leak.py --stop-file /tmp/stop --leak-after 60

With ``--peer-late S`` rank 1 comes S seconds late to the group (a peer on another node still
starting): rank 0 waits in ``init_process_group`` meanwhile, in C code. With
``--freeze-gc-after S`` each rank calls ``gc.freeze()`` S seconds into relaying, as a server
does once warm (SGLang's ``/freeze_gc``, vLLM at start-up): ``Relay.inflight`` then lives in
the collector's permanent generation, where ``gc.get_objects()`` does not list it.

Runs until the stop file appears (or SIGTERM).
"""

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist


class Relay:
    def __init__(self, fast_path_after: float):
        self.inflight = {}
        self.fast_path_at = time.monotonic() + fast_path_after
        self.sent = 0

    def forward(self, batch_id: int, header: torch.Tensor) -> None:
        self.inflight[batch_id] = dist.isend(header, dst=1)
        self.sent += 1
        if self.fast_path_at and time.monotonic() >= self.fast_path_at:
            print("rank 0: fast path on", flush=True)
            self.fast_path_at = 0.0
        if self.fast_path_at:
            for work in self.inflight.values():
                work.wait()
            self.inflight.clear()
        else:  # fast path: do not block on the network, drop what is done
            for key in [k for k, w in self.inflight.items() if w.is_completed()]:
                del self.inflight[key]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--leak-after", type=float, default=60.0, help="seconds before the fast path is on")
    parser.add_argument("--interval", type=float, default=0.005, help="pause between batches (s)")
    parser.add_argument("--peer-late", type=float, default=0.0, help="seconds rank 1 comes late to the group")
    parser.add_argument("--freeze-gc-after", type=float, default=None, help="seconds before gc.freeze()")
    args = parser.parse_args()
    if os.environ.get("RANK") == "1":
        time.sleep(args.peer_late)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    relay = Relay(args.leak_after)
    print(f"rank {rank}: relaying", flush=True)
    freeze_at = None if args.freeze_gc_after is None else time.monotonic() + args.freeze_gc_after
    batch = 0
    while True:
        if freeze_at is not None and time.monotonic() >= freeze_at:
            gc.freeze()
            freeze_at = None
            print(f"rank {rank}: heap frozen", flush=True)
        stop = os.path.exists(args.stop_file)
        header = torch.tensor([batch, int(stop)], dtype=torch.int64)
        if rank == 0:
            relay.forward(batch, header)
        else:
            dist.recv(header, src=0)
            stop = bool(header[1])
        batch += 1
        if stop:
            break
        if rank == 0:
            time.sleep(args.interval)
    print(f"rank {rank}: done after {batch} batches", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
