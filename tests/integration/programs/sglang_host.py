"""SGLang's own PP-sync methods, hosted in a plain torchrun program (no hicache probe).

The methods of a SGLang release's HiRadixCache (``_pp_sync`` and the event round around
it) are read from the release wheel and bound onto hicache's holder, as ``hicache stress
--target sglang==V`` does, but the loop here is the program's own: it runs rounds until
the stop file appears, like a server, and nothing of hicache watches it - for ``hicache
attach`` to find.

    torchrun --standalone --nproc-per-node 2 sglang_host.py --sglang 0.5.14 --stop-file /tmp/stop

With ``--freeze-gc-after S`` each rank calls ``gc.freeze()`` S seconds into serving, as an
SGLang server does on its ``/freeze_gc`` endpoint once warm.
"""

import argparse
import gc
import os
import time

import torch.distributed as dist

from hicache_cli.sglang_target.bind import CountingCollectives, SGLangHolder, Traffic, build
from hicache_cli.sglang_target.locate import parse_target
from hicache_cli.sglang_target.resolve import resolve
from hicache_model.pp_sync import Topology, new_groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sglang", default="0.5.14")
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--freeze-gc-after", type=float, default=None, help="seconds before gc.freeze()")
    args = parser.parse_args()
    extracted = resolve(parse_target(f"sglang=={args.sglang}")).extracted
    dist.init_process_group("gloo")
    topo = Topology(rank=dist.get_rank(), pp_size=dist.get_world_size(), tp_size=1)
    groups = new_groups(topo, "gloo")
    CountingCollectives(Traffic())
    holder = SGLangHolder(topo.pp_rank, topo.pp_size, groups.pp, groups.tp, topo.tp_size)
    loop = build(extracted, None, extracted.sha256, holder)
    print(f"rank {topo.pp_rank}/{topo.pp_size}: serving\n", end="", flush=True)
    freeze_at = None if args.freeze_gc_after is None else time.monotonic() + args.freeze_gc_after
    while not os.path.exists(args.stop_file):
        if freeze_at is not None and time.monotonic() >= freeze_at:
            gc.freeze()
            freeze_at = None
            print(f"rank {topo.pp_rank}/{topo.pp_size}: heap frozen\n", end="", flush=True)
        loop.run_round()
        time.sleep(0.001)
    print(f"rank {topo.pp_rank}/{topo.pp_size}: stopped\n", end="", flush=True)
    os._exit(0)  # the sends SGLang never waited stay unwaited: leave without a group teardown


if __name__ == "__main__":
    main()
