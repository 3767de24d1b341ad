"""What each command's --help shows below its options: the registries it chooses from (drain
policies, lint rules), and examples. main.py registers each command with its own."""

from __future__ import annotations

from hicache_cli.lint.rules import RULES
from hicache_model.policies import POLICIES, describe

POLICY_LINES = "\n\n".join(f"{name}: {describe(name)}" for name in POLICIES)

STRESS_EXAMPLES = f"""Policies:

{POLICY_LINES}

Examples:

  hicache stress --pp 2 --policy reap       # the leak: rank 0's list grows

  hicache stress --pp 2 --policy drain      # the fix: depth <= 2

  hicache stress --pp 4 --workload idle     # the incident: an idle server

  hicache stress --target sglang==0.5.14    # SGLang 0.5.14 itself

  hicache stress --target sglang:~/sglang   # your checkout or patch
"""


TRACE_EXAMPLES = """Examples:

  hicache trace -- torchrun --nproc-per-node 2 train.py

  hicache trace --duration 2m -- python -m sglang.launch_server --pp-size 2 --enable-hierarchical-cache ...

  hicache trace -- python spawn_workers.py          # torch.multiprocessing.spawn: every rank

  hicache trace --no-live -- python -m pytest tests/dist

Every Python process below COMMAND that starts a torch.distributed process group is
observed, without a change to the program. See docs/trace.md.
"""


ATTACH_EXAMPLES = """Examples:

  hicache attach 12345                      # a rank (or the server's launcher: every rank below it)

  hicache attach --duration 5m $(pgrep -f torchrun)

  hicache attach --json --no-live 12345 > attach.json

Needs gdb and permission to ptrace the process (same user, or CAP_SYS_PTRACE; containers:
--cap-add SYS_PTRACE). The process is never stopped for more than the injection, never
signalled, and runs on as it was after the detach. See docs/attach.md.
"""


RULE_LINES = "\n\n".join(
    f"{rule_id}: {cls.summary() if cls.default else cls.summary().rstrip('.') + ' (off by default).'}"
    for rule_id, cls in RULES.items()
)

LINT_EXAMPLES = f"""Rules:

{RULE_LINES}

Examples:

  hicache lint src/                               # every .py file below src/, as one program

  hicache lint sglang==0.5.14                     # a release's sglang/srt: HC001 in its HiCache files

  hicache lint sglang:~/src/sglang --format sarif -o lint.sarif   # a checkout, for code scanning

  hicache lint . --select all                     # every rule, HC002 included

  hicache lint . --diff origin/main               # only findings on lines changed since origin/main

Silence one finding with a trailing `# hicache: ignore[HC001]` on its line.
Exit codes: 0 no findings (or only notes), 1 findings, 2 bad input (a target that cannot be read: the others are
still linted) or the findings could not be written (stdout closed or full).
"""
