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
from collections import Counter, deque
from dataclasses import dataclass, field

from hicache_cli.lint.names import DIST

Node = tuple[str, str]
ORIGIN, LOCAL, ATTR, GLOBAL, RETURN = "origin", "local", "attr", "global", "return"
PERSISTENT = (ATTR, GLOBAL)  # outlive a call: what can grow round after round
MODULE = "<module>"

P2P_APIS = {f"{DIST}.isend": "isend", f"{DIST}.irecv": "irecv", f"{DIST}.batch_isend_irecv": "batch_isend_irecv"}
P2P_METHODS = frozenset(P2P_APIS.values())  # `group.isend(...)`-style wrappers
# torch.distributed's collectives that take async_op (and then return a Work).
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "all_gather",
        "all_gather_into_tensor",
        "all_gather_coalesced",
        "_all_gather_base",
        "broadcast",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "_reduce_scatter_base",
        "all_to_all",
        "all_to_all_single",
        "gather",
        "scatter",
        "barrier",
    }
)
# Methods that put their arguments into the container they are called on.
STORE_METHODS = frozenset(
    {"append", "extend", "insert", "add", "appendleft", "extendleft", "put", "put_nowait", "setdefault", "update"}
)
# Methods whose result is (part of) what the receiver holds, and that keep nothing they are given.
READ_METHODS = frozenset(
    {"pop", "popleft", "popitem", "get", "values", "items", "keys", "copy", "get_future", "then", "result", "value"}
)
# Calls that neither keep nor wait what they are given: logging, formatting, measuring.
INERT_CALLS = frozenset(
    {
        *("debug", "info", "warning", "warn", "error", "exception", "critical", "log", "format", "index", "count"),
        *("len", "bool", "print", "repr", "str", "int", "float", "isinstance", "issubclass", "id", "type", "hash"),
        *("any", "all", "sum", "min", "max", "callable", "hasattr", "range", "super", "abs", "round", "remove"),
        *("clear", "discard", "is_completed", "is_success", "exception", "done"),
    }
)
# Calls whose result holds what they are given.
PASS_THROUGH = frozenset(
    {"list", "tuple", "set", "frozenset", "sorted", "reversed", "iter", "next", "enumerate", "zip", "filter", "dict"}
)
PASS_THROUGH_QUALIFIED = frozenset(
    {
        "copy.copy",
        "copy.deepcopy",
        "itertools.chain",
        "itertools.islice",
        "collections.deque",
        "torch.futures.collect_all",
    }
)
WAIT_FUNCTIONS = frozenset({"wait_all", "wait"})  # torch.futures.wait_all, concurrent.futures.wait, helpers so named


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


def own_nodes(body: list[ast.stmt]) -> list[ast.AST]:
    """Every node of a body, not descending into nested functions, classes or lambdas (their
    def or lambda node itself is included)."""
    out: list[ast.AST] = []
    todo: list[ast.AST] = list(reversed(body))
    while todo:
        node = todo.pop()
        out.append(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        todo.extend(reversed(list(ast.iter_child_nodes(node))))
    return out


@dataclass
class Scope:
    qualname: str
    kind: str  # module | class | function
    parent: Scope | None
    locals: set[str] = field(default_factory=set)
    declared_global: set[str] = field(default_factory=set)
    self_name: str | None = None
    aliases: dict[str, str] = field(default_factory=dict)  # local name -> the Work API it may hold
    loads: Counter[str] = field(default_factory=Counter)


@dataclass
class Loop:
    line: int
    is_while: bool
    fresh: set[str]  # names bound inside it to something new (not derived from themselves)


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _names_in(expr: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(expr) if isinstance(n, ast.Name)}


def fresh_bindings(loop: ast.While | ast.For | ast.AsyncFor) -> set[str]:
    fresh: set[str] = set()
    for node in own_nodes(loop.body):
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            used = _names_in(node.value)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            fresh |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name) and n.id not in used}
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            fresh |= {n.id for n in ast.walk(node.target) if isinstance(n, ast.Name)}
    return fresh
