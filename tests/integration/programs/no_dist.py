"""A program that never touches torch.distributed (nor imports torch).

Prints a known line to stdout and another to stderr, then exits with the code
given by ``--exit-code`` (default 3). Useful to check that a wrapper passes a
child's output and exit status through untouched.

Run it with::

    python no_dist.py --exit-code 3
"""

import argparse
import sys

STDOUT_LINE = "no_dist: hello on stdout"
STDERR_LINE = "no_dist: hello on stderr"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exit-code", type=int, default=3)
    args = parser.parse_args()

    print(STDOUT_LINE, flush=True)
    print(STDERR_LINE, file=sys.stderr, flush=True)
    return args.exit_code


if __name__ == "__main__":
    sys.exit(main())
