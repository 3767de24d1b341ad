"""What a traced process leaves unfinished: the blocking call it is stuck in (the sends it never
waited are read from its sites: analysis/shutdown.py). Stdlib only.

A send Work never waited is a hazard when the process (or a marked test's body) ends: on
gloo a send whose Work is dropped unwaited may never be delivered, and its receiver then
waits forever in `recv` (here it hangs about one run in two). Whether the message happened to
arrive does not matter: the race is there either way.

A blocking `send`/`recv` is waited by torch itself, so the Work table never counts it; the
table notes the call (its op, peer and the program's line) when torch hands the Work back,
and while torch waits it, `blocked_on` names it: "recv from rank 0 at test_x.py:17".
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple


class BlockingCall(NamedTuple):
    """A send or recv torch waits itself: the Work's id, what the program called, where. (A
    tuple: one is made per blocking call; never the tensors, which it must not keep alive.)"""

    work_id: int
    op: str  # "send" or "recv" (the torch.distributed function the program called)
    group: Any
    group_peer: int
    to_global: Any
    code: Any  # the program's code object and instruction offset at the call
    lasti: int

    def text(self, peer: int | None) -> str:
        """`recv from rank 0 at test_x.py:17`."""
        where = f"{os.path.basename(self.code.co_filename)}:{line_of(self.code, self.lasti)}"
        direction = "from" if self.op == "recv" else "to"
        return f"{self.op} {direction} rank {'?' if peer is None else peer} at {where}"


def line_of(code: Any, lasti: int) -> int:
    """The source line of an instruction offset (read only when the probe asks)."""
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return line
    return code.co_firstlineno
