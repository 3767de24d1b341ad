"""A launcher whose ranks come late: it loads torch as launchers of torch programs do, waits,
then runs the two-stage relay (late_leak.py) under torchrun and waits for it.

    python late_ranks.py --ranks-after 5 -- --stop-file /tmp/stop --leak-after 20
"""

import argparse
import os
import subprocess
import sys
import time

import torch  # noqa: F401 - a launcher of torch programs has it loaded


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks-after", type=float, default=5.0)
    parser.add_argument("relay_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    print("launcher: up", flush=True)
    time.sleep(args.ranks_after)
    relay = os.path.join(os.path.dirname(os.path.abspath(__file__)), "late_leak.py")
    rest = [a for a in args.relay_args if a != "--"]
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", relay, *rest]
    sys.exit(subprocess.call(command))


if __name__ == "__main__":
    main()
