"""Where each asynchronous Work goes in one program: a flow graph over its places and objects.

Nodes are the places a value can be: a local variable (per function), an attribute (per class
hierarchy, or by name when the owner is unknown), a module-level name, a function's return
value, the result of one call to a function of the program, each Work's creation (an origin),
and the constant True (for `async_op=flag`). Objects are nodes too, one per allocation site: a
container (`[]`, `{}`, a comprehension, `list(x)`, a tuple) with the nodes of its contents (one
per tuple element, one per constant dict key), a function used as a value, an instance. An
edge says that what one node holds may end up in another. Edges come in kinds, so the solver
can tell a call's context apart and a container from what it holds:
  plain    a value bound or passed on (`w = x`), or put into a container's contents;
  takes    a container's contents read out (`for w in works`, `works.pop()`, `a, b = pair`);
  params   argument -> parameter;  returns  return value -> the call's result;
  loose    the collapsed view: a container holds what it contains (contents -> container),
           what is put into a place stays there and what is read from it is all it holds -
           every rule's reachability uses it, so a Work in a list is kept wherever the list is.
Which containers a value may hold (its objects) is worked out over plain, takes, params and
returns only (containers.py): that is what makes `pending.append(w)` in a helper reach the
caller's `self.pending`, and `a, b = pair` take one element each. Nodes are ints; keys are
tuples, interned once.

Facts say what was done to a node: stored into (where), waited, polled with is_completed(),
handed to code the program cannot see (an escape), or kept beyond a call (a local that grows in
a while loop, or one a closure that outlives its function captures). Each node keeps a bounded
number of facts, so a file with 285,000 `append`s into one list costs one fact, not 285,000.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

Key = tuple
Nodes = frozenset[int]
NOTHING: Nodes = frozenset()

# Key kinds
LOCAL, ATTR, ANY_ATTR, GLOBAL, RETURN, ORIGIN, CALL, TRUE = "L", "A", "A?", "G", "R", "O", "C", "T"
UNKNOWN = "?"  # what code outside the program returns: kept by the program, never written into
FIELD, INSTANCE = "F", "I"  # `x.a` on a value of a class not known where it is written; what a constructor makes
CONTAINER, CONTENT, FUNCTION = "K", "E", "Fn"  # an allocation site; what it holds (per tag); a function as a value
ANY_READ = "A?r"  # what reading `x.a` may see when x's class is not known: every class's `a`
# (ANY_ATTR is the other direction: what is stored through such an `x.a` may go to any class's `a`.)
PERSISTENT = (ATTR, GLOBAL)  # outlive a call: what can grow round after round


@dataclass(frozen=True, slots=True)
class Span:
    line: int
    col: int  # 0-based, as ast counts
    end_line: int
    end_col: int

    @classmethod
    def of(cls, node: object) -> Span:
        line = getattr(node, "lineno", 0)
        return cls(
            line,
            getattr(node, "col_offset", 0),
            getattr(node, "end_lineno", None) or line,
            getattr(node, "end_col_offset", None) or 0,
        )


@dataclass(frozen=True, slots=True)
class Fact:
    """Something done to a node: stored into, waited, polled, kept."""

    mid: int  # the module it happened in
    line: int
    col: int
    text: str  # what it was done to, as written (`self.work_list`), or why
    function: str
    put: bool = False  # a store into a container (`x.append(w)`), not a binding (`x = []`)


@dataclass(slots=True)
class Origin:
    """A call that creates a Work (or, for batch_isend_irecv, a list of them), or a call of a
    program function that returns Works it made (a call-site origin: `inner` is one made inside)."""

    node: int
    api: str  # isend, irecv, batch_isend_irecv, all_reduce(async_op=True), or `helper()`
    mid: int
    span: Span
    function: str
    tensor: str | None = None  # the tensor it sends or receives into, as written
    dropped: bool = False  # its Work is thrown away: a statement of its own, or a name never read
    element: str | None = None  # the name one element of an unpacked batch went to
    condition: tuple[int, ...] | None = None  # async_op's nodes: active only if True reaches one
    group: str | None = None  # `group=` as written (HC004: ordered by a later wait on it)
    mutated: int = 0  # HC003: the first later line that changes the sent tensor in place
    inner: Origin | None = None  # for a call-site origin: a Work-creating call behind it

    @property
    def what(self) -> str:
        if self.inner is not None:
            return f"the Works returned by {self.api}"
        return f"the {self.element} Work from {self.api}" if self.element else f"the Work from {self.api}"


@dataclass(frozen=True, slots=True)
class Site:
    """Where a call is written: its module, span and function, the callee as written, whether its
    value is thrown away, and `group=` as written (HC004: a later Work on the same group)."""

    mid: int
    span: Span
    function: str
    text: str
    dropped: bool = False
    group: str | None = None


@dataclass(frozen=True, slots=True)
class Args:
    """What a call is given: positional arguments, keywords, and the receiver of a method."""

    positional: tuple[Nodes, ...] = ()
    keywords: tuple[tuple[str | None, Nodes], ...] = ()
    receiver: Nodes = NOTHING

    @property
    def given(self) -> Nodes:
        return frozenset().union(*self.positional, *(values for _, values in self.keywords))

    def touches(self, hot: bytearray) -> bool:
        nodes = [*self.receiver, *(n for v in self.positional for n in v), *(n for _, v in self.keywords for n in v)]
        return any(n < len(hot) and hot[n] for n in nodes)


@dataclass(frozen=True, slots=True)
class CallSite:
    """A call of a function of the program: its result node gets the callee's return value."""

    node: int
    callee_return: int  # the callee's RETURN node
    site: Site


@dataclass(slots=True)
class FieldAccess:
    """`x.a` where x is a value: the place `a` of each class whose instances x may hold, once
    the solver knows them (by name when it cannot tell)."""

    node: int
    receiver: tuple[int, ...]
    attr: str
    classes: set[object] = field(default_factory=set)  # the classes it was joined to so far
    done: bool = False


@dataclass(slots=True)
class MethodCall:
    """`x.m(...)` where x is a value: dispatched to `m` of each class whose instances x may hold;
    when none is known, a call of code the program cannot see."""

    site: Site  # text: the receiver as written
    name: str
    args: Args
    result: int
    special: bool = False  # a name whose meaning was applied where it was written (wait, append, ...)
    fact: Fact | None = None  # the wait or poll it was taken to be, where it was written
    classes: set[object] = field(default_factory=set)
    done: bool = False


KeyTag = tuple[str, str] | None  # a dict key: ("=", "q_work") exactly, ("~", "_work") ending so; None: any


@dataclass(slots=True)
class Container:
    """An allocation site: what kind of container it makes, and the nodes of its contents."""

    kind: str  # list | dict | set | tuple
    arity: int = 0  # a tuple's length
    tags: dict[object, int] = field(default_factory=dict)  # dict key tag (or tuple index) -> contents node
    readers: list[Take] = field(default_factory=list)  # takes from a dict, linked to tags added later


@dataclass(slots=True)
class Put:
    """`x.append(v)`, `x[k] = v`, `x.extend(ys)`: v goes into the contents of each container x holds."""

    receiver: tuple[int, ...]
    values: Nodes
    key: KeyTag
    fact: Fact
    done: set[int] = field(default_factory=set)  # containers linked so far
    unknown: bool = False  # x held more containers than are followed


@dataclass(slots=True)
class Take:
    """`for w in x`, `x[i]`, `x.pop()`, `a, b = x`: the contents of each container x holds go to
    `target` (for a tuple, the element `index` when it is known)."""

    receiver: tuple[int, ...]
    target: int
    key: KeyTag = None
    index: int | None = None
    from_call: bool = False  # x is a call's result: its contents come back from the call (returns)
    opened: bool = False  # the loose edge x -> target is there
    done: set[int] = field(default_factory=set)
    unknown: bool = False


@dataclass(slots=True)
class ValueCall:
    """`p2p_func(...)` where p2p_func is a variable: a call of each function it may hold."""

    callee: tuple[int, ...]
    args: Args
    result: int
    site: Site
    async_op: Nodes | None
    tensor: str | None
    done: set[int] = field(default_factory=set)
    made: bool = False  # a Work origin was made here (the variable holds a torch.distributed API)


@dataclass(frozen=True, slots=True)
class Drain:
    """`for work in CONTAINER: work.wait(...)` and its kin: every Work in a container waited."""

    mid: int
    span: Span  # the wait() call
    nodes: tuple[int, ...]  # what the loop goes through
    text: str
    function: str
    timeout: bool
    guarded: bool  # inside a try that has a finally clause


@dataclass
class Graph:
    ids: dict[Key, int] = field(default_factory=dict)
    keys: list[Key] = field(default_factory=list)
    plain: dict[int, list[int]] = field(default_factory=dict)
    takes: dict[int, list[int]] = field(default_factory=dict)  # a container's contents -> what reads them
    params: dict[int, list[int]] = field(default_factory=dict)  # argument -> parameter
    returns: dict[int, list[int]] = field(default_factory=dict)  # return value -> call result
    loose: dict[int, list[int]] = field(default_factory=dict)  # the collapsed view (the docstring)
    stores: dict[int, dict[tuple[int, str], Fact]] = field(default_factory=dict)  # first per (module, function)
    assigned: set[int] = field(default_factory=set)  # attributes given a value (`x.a = ...`), not only grown
    reaped: set[int] = field(default_factory=set)  # containers things are dropped from (remove, pop, a filtered copy)
    waits: dict[int, Fact] = field(default_factory=dict)
    polls: dict[int, Fact] = field(default_factory=dict)
    escapes: dict[int, str] = field(default_factory=dict)
    kept: dict[int, Fact] = field(default_factory=dict)  # locals that outlive their call
    elements: dict[int, tuple[int, ...]] = field(default_factory=dict)  # a call's result -> its unpacked elements
    fields: list[FieldAccess] = field(default_factory=list)
    method_calls: list[MethodCall] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    calls: list[CallSite] = field(default_factory=list)
    drains: list[Drain] = field(default_factory=list)
    containers: dict[int, Container] = field(default_factory=dict)  # allocation site node -> its container
    functions: dict[int, object] = field(default_factory=dict)  # function token -> what it names
    puts: list[Put] = field(default_factory=list)
    take_ops: list[Take] = field(default_factory=list)
    value_calls: list[ValueCall] = field(default_factory=list)
    typed: list[tuple[int, object]] = field(default_factory=list)  # (node, class key): an annotated place
    parameters: set[int] = field(default_factory=set)  # the nodes of walked functions' parameters
    switched: set[int] = field(default_factory=set)  # returns under `if switch:` (a parameter defaulting to False)
    unsure: list[tuple[int, Fact, str]] = field(default_factory=list)  # waits/polls on a class's own method
    no_work: list[tuple[int, Span, str]] = field(default_factory=list)  # calls decided to make none (coalesced)
    parent: list[int] = field(default_factory=list)  # union-find: places that are one place
    changes: int = 0  # edges added and places joined so far: a pass over an unchanged graph learns nothing

    def node(self, key: Key) -> int:
        found = self.ids.get(key)
        if found is None:
            found = self.ids[key] = len(self.keys)
            self.keys.append(key)
            self.parent.append(found)
        return found

    def find(self, n: int) -> int:
        parent = self.parent
        root = n
        while parent[root] != root:
            root = parent[root]
        while parent[n] != root:
            parent[n], n = root, parent[n]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)
            self.changes += 1

    def unknown(self) -> frozenset[int]:
        return frozenset({self.node((UNKNOWN,))})

    def link(self, sources: Iterable[int], target: int, table: dict[int, list[int]] | None = None) -> None:
        if self.keys[target][0] == UNKNOWN:
            return  # nothing flows into what unknown code returns
        edges = self.plain if table is None else table
        for source in sources:
            if source != target:
                edges.setdefault(source, []).append(target)
                self.changes += 1

    def container(self, key: Key, kind: str, arity: int = 0) -> int:
        """The node of an allocation site (a container), made once."""
        node = self.node(key)
        if node not in self.containers:
            self.containers[node] = Container(kind, arity)
        return node

    def content(self, token: int, tag: object = None) -> tuple[int, bool]:
        """The node of what a container holds (under a dict key tag, or at a tuple index), and
        whether it is new; a container holds its contents (a loose edge)."""
        box = self.containers[token]
        found = box.tags.get(tag)
        if found is not None:
            return found, False
        found = box.tags[tag] = self.node((CONTENT, token, tag))
        self.loose.setdefault(found, []).append(token)
        return found, True

    def origin_at(
        self, site: Site, api: str, tensor: str | None = None, condition: tuple[int, ...] | None = None
    ) -> int:
        """A Work made at a call the program resolves late (a wrapper, a ProcessGroup's method, a
        variable holding an API): its origin node."""
        node = self.node((ORIGIN, len(self.origins)))
        self.origins.append(
            Origin(node, api, site.mid, site.span, site.function, tensor, site.dropped, None, condition, site.group)
        )
        return node

    def put(
        self, values: Iterable[int], receiver: Iterable[int], fact: Fact, key: KeyTag = None, refill: bool = False
    ) -> None:
        """`receiver.append(values)` and its kin: into the contents of each container the receiver
        holds (containers.py), and, in the collapsed view, into the receiver's place. `refill`:
        `x[:] = ...` puts back what x held (not where things go in, for the messages)."""
        values = frozenset(values)
        targets = tuple(t for t in receiver if self.keys[t][0] != UNKNOWN and not values <= {t})
        if not values or not targets:
            return
        fact = replace(fact, put=not refill)
        self.puts.append(Put(targets, values, key, fact))
        for target in targets:
            self.link(values, target, self.loose)
            self.note_store(target, fact)

    def take(
        self, receiver: Iterable[int], target: int, key: KeyTag = None, index: int | None = None, opened: bool = True
    ) -> None:
        """What the receiver's containers hold goes to `target` (a tuple's element `index` alone when
        it is known). In the collapsed view the target holds all the receiver holds (`opened`; an
        unpacking opens a tuple only by its elements), and what is put into the target stays in
        the receiver (a list in a dict of lists)."""
        receiver = tuple(receiver)
        if not receiver:
            return
        from_call = all(self.keys[n][0] == CALL for n in receiver)
        self.take_ops.append(Take(receiver, target, key, index, from_call, opened))
        for n in receiver:
            if opened:
                self.link([n], target, self.loose)
            self.link([target], n, self.loose)

    def note_store(self, node: int, fact: Fact) -> None:
        """The first store per (module, function), a put before any binding: where things go in
        names a place better than where it was made empty."""
        per = self.stores.setdefault(node, {})
        held = per.setdefault((fact.mid, fact.function), fact)
        if fact.put and not held.put:
            per[(fact.mid, fact.function)] = fact

    def escape(self, nodes: Iterable[int], why: str) -> None:
        for n in nodes:
            self.escapes.setdefault(n, why)
