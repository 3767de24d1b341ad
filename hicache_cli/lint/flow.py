"""Where each asynchronous Work goes in one module: a flow graph over the module's names.

Nodes are the places a value can be kept: a local variable (per function), an attribute (by
name, across the module: `self.work_list` in one method is `self.work_list` in every other),
a module-level name, a function's return value, and each Work's creation (an origin). An edge
says that what one node holds may end up in another (`self.work_list.append(send_work)`:
send_work -> work_list; `for work in self.work_list`: work_list -> work). The graph is built in
one pass, ignoring the order of statements, and then each origin's reach says where its Works
can be kept, and whether anything there is ever waited, polled, or handed to unknown code.

The analysis leans towards "waited": a value that reaches anything waited, or anything it
cannot follow (an unknown call, a public function's return), is not reported.
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass, field

Node = tuple[str, str]
ORIGIN, LOCAL, ATTR, GLOBAL, RETURN = "origin", "local", "attr", "global", "return"
PERSISTENT = (ATTR, GLOBAL)  # outlive a call: what can grow round after round
MODULE = "<module>"


@dataclass(frozen=True)
class Fact:
    """Something that happened to a node: stored into, waited, polled, handed away."""

    line: int
    text: str  # what it was done to, as written (`self.work_list`), or why it escaped
    function: str
    timeout: bool = False  # for waits: wait(timeout) rather than wait()


@dataclass
class Origin:
    """A call that creates a Work (or, for batch_isend_irecv, a list of them)."""

    index: int
    api: str  # isend, irecv, batch_isend_irecv, all_reduce(async_op=True), ...
    line: int
    end_line: int
    function: str
    tensor: ast.expr | None  # the tensor it sends or receives into
    dropped: bool = False  # its Work is thrown away: a statement of its own, or a name never read
    element: str | None = None  # the name one element of an unpacked batch went to

    @property
    def node(self) -> Node:
        return (ORIGIN, str(self.index))

    @property
    def what(self) -> str:
        return f"the {self.element} Work from {self.api}" if self.element else f"the Work from {self.api}"


@dataclass(frozen=True)
class Drain:
    """`for work in CONTAINER: work.wait(...)`: every Work in a container waited in turn."""

    line: int  # the wait() call
    nodes: frozenset[Node]  # what the loop iterates
    text: str
    function: str
    timeout: bool
    guarded: bool  # inside a try that has a finally clause


@dataclass
class ModuleFlow:
    origins: list[Origin] = field(default_factory=list)
    edges: dict[Node, set[Node]] = field(default_factory=dict)
    stores: dict[Node, list[Fact]] = field(default_factory=dict)  # into attributes and module names
    grows: dict[Node, Fact] = field(default_factory=dict)  # local containers that grow inside a while loop
    waits: dict[Node, list[Fact]] = field(default_factory=dict)
    polls: dict[Node, list[Fact]] = field(default_factory=dict)
    escapes: dict[Node, list[Fact]] = field(default_factory=dict)
    drains: list[Drain] = field(default_factory=list)
    functions: dict[str, ast.AST] = field(default_factory=dict)  # qualified name -> its def (or the module)

    def reach(self, start: Node) -> set[Node]:
        seen, todo = {start}, deque([start])
        while todo:
            for nxt in self.edges.get(todo.popleft(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen
