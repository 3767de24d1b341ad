"""A whole program analysed as one: which modules are walked, in rounds, and the solved graph.

Parsing is the cost (SGLang's srt/: ~8 ms a file), so a module is parsed only when it can
matter. Round one walks the modules whose text holds a trigger word (`isend`, `irecv`,
`async_op`, `is_completed`) and those named on the command line. Each round then links what
it can and asks which other modules the Works (or the True of an `async_op`, or a polled
container) lead into: the module of a function they are passed to, modules that name a
function returning Works, an attribute or module-level name they are kept in, or a class of
the hierarchy that keeps them. Those are walked next; other modules are only read (and
parsed for their top level when an import needs resolving through them). Every round is
linear in what it walks; a program takes a few rounds.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from hicache_cli.lint.build import ModuleWalker
from hicache_cli.lint.calls import PendingCall
from hicache_cli.lint.config import LintConfig
from hicache_cli.lint.dispatch import Dispatcher
from hicache_cli.lint.graph import ATTR, GLOBAL, INSTANCE, RETURN, Args, Graph
from hicache_cli.lint.link import Linker
from hicache_cli.lint.modules import ModuleInfo
from hicache_cli.lint.program import ClassRef, Program
from hicache_cli.lint.solve import Condensed, Solution, active_origins, factory_reach, persistent, solve

# A file without one of these creates no Work and polls none, so it is walked only when
# a round finds it leads somewhere a Work goes.
TRIGGERS = (b"isend", b"irecv", b"async_op", b"is_completed")
# ... and a ProcessGroup's own methods, as they are called (`pg.allreduce([t], opts)`, `pg.send([t], dst, tag)`)
TRIGGERS += (b".allreduce", b".allgather", b".alltoall", b".send([", b".recv([", b".broadcast([")
MAX_ROUNDS = 8
MAX_LINKS = 6
MAX_MODULES_PER_NAME = 40


def has_trigger(data: bytes) -> bool:
    """A plain substring search per word: several times faster than one regular expression; the
    ProcessGroup calls only where a cheaper common part of them is there."""
    if any(word in data for word in TRIGGERS[:4]):
        return True
    if b".all" in data and any(word in data for word in TRIGGERS[4:7]):
        return True
    return b"([" in data and any(word in data for word in TRIGGERS[7:])


@dataclass
class Failure:
    mid: int
    reason: str


@dataclass
class Analysis:
    program: Program
    graph: Graph
    solution: Solution | None = None
    walked: set[int] = field(default_factory=set)
    failures: list[Failure] = field(default_factory=list)  # modules to walk that did not parse


def analyse(
    paths: list[Path],
    roots: list[Path | None],
    shown: list[str],
    datas: list[bytes],
    named: list[bool],
    config: LintConfig,
) -> Analysis:
    failed: dict[int, str] = {}

    def parse(mid: int) -> ast.Module | None:
        if mid in failed:
            return None
        try:
            return ast.parse(datas[mid], shown[mid])
        except SyntaxError as exc:
            where = f" (line {exc.lineno})" if exc.lineno else ""
            failed[mid] = f"does not parse: {exc.msg}{where}"
        except ValueError as exc:  # a null byte, a bad encoding declaration
            failed[mid] = f"does not parse: {exc}"
        except (RecursionError, MemoryError):
            failed[mid] = "too deeply nested to parse or analyse"
        return None

    program = Program(paths, roots, config, parse)
    graph = Graph()
    pending: list[PendingCall] = []
    analysis = Analysis(program, graph)
    linker = Linker(program, graph, pending, analysis.walked)
    dispatcher = Dispatcher(program, graph, analysis.walked, linker.symbol)
    todo = {mid for mid, data in enumerate(datas) if named[mid] or has_trigger(data)}
    first = set(todo)
    searched = Names()
    for _ in range(MAX_ROUNDS):
        for mid in sorted(todo):
            _walk(analysis, mid, parse, pending)
            if mid in failed and mid in first:
                analysis.failures.append(Failure(mid, failed[mid]))
        needed: set[int] = set()
        for _ in range(MAX_LINKS):  # linking a call can make another call matter
            linker.unify()
            linker.elements(final=False)
            relevant, feeds, names = _relevant(graph, program)
            needed |= dispatcher.run(final=False, relevant=relevant, returning=names.returning)
            linker.unify()
            linked_before = linker.linked
            lent = dispatcher.containers.holds
            needed |= linker.resolve_calls(relevant, names.returning, final=False, feeds=feeds, lent=lent)
            if linker.linked == linked_before:
                break
        new_names = names - searched
        searched.update(new_names)
        needed |= _mentioning(datas, new_names, analysis.walked | set(failed)) | names.modules
        todo = needed - analysis.walked - set(failed)
        if not todo:
            break
    linker.unify()
    relevant, feeds, names = _relevant(graph, program)
    linker.resolve_calls(relevant, names.returning, final=True, feeds=feeds, lent=dispatcher.containers.holds)
    linker.unify()
    dispatcher.run(final=True, relevant=relevant, returning=names.returning)
    linker.unify()
    linker.elements(final=True)
    linker.by_name_edges()
    pollable = frozenset(
        n
        for n, key in enumerate(graph.keys)
        if key[0] == INSTANCE
        and isinstance(key[1], ClassRef)
        and any(program.method(key[1], name) is not None for name in ("is_completed", "wait"))
    )
    analysis.solution = solve(graph, pollable)
    return analysis


def _walk(analysis: Analysis, mid: int, parse, pending: list[PendingCall]) -> None:  # noqa: ANN001
    program = analysis.program
    tree = parse(mid)
    analysis.walked.add(mid)
    if tree is None:
        return
    info = ModuleInfo.of(tree, program.names[mid], program.paths[mid].name == "__init__.py")
    program.set_info(mid, info)
    try:
        ModuleWalker(program, analysis.graph, mid, info, pending).module(tree)
    except RecursionError:
        analysis.failures.append(Failure(mid, "too deeply nested to parse or analyse"))


@dataclass
class Names:
    """What other modules would write to reach what the Works reach so far."""

    factories: set[str] = field(default_factory=set)  # functions returning Works they made: `name(`
    attributes: set[str] = field(default_factory=set)  # attributes Works are kept in: `.name`
    globals: set[str] = field(default_factory=set)  # module-level names Works are kept in: `name`
    classes: set[str] = field(default_factory=set)  # classes whose attributes keep Works: subclasses, `Name.x`
    modules: set[int] = field(default_factory=set)  # modules of those classes' bases
    returning: set[str] = field(default_factory=set)  # functions and methods returning Works: calls to link

    def searches(self) -> list[tuple[bytes, dict[str, object]]]:
        """(word, how it must occur) for each name: `name(`, `.name`, `name`, `class X(Name)`/`Name.x`."""
        out: list[tuple[bytes, dict[str, object]]] = []
        out += [(n.encode(), {"follow": _CALL}) for n in sorted(self.factories)]
        out += [(n.encode(), {"after_dot": True}) for n in sorted(self.attributes)]
        out += [(n.encode(), {}) for n in sorted(self.globals)]
        out += [(n.encode(), {"follow": _DOT, "or_class_line": True}) for n in sorted(self.classes)]
        return out

    def all(self) -> set[str]:
        return self.factories | self.attributes | self.globals | self.classes

    def __sub__(self, other: Names) -> Names:
        return Names(
            self.factories - other.factories,
            self.attributes - other.attributes,
            self.globals - other.globals,
            self.classes - other.classes,
        )

    def update(self, other: Names) -> None:
        self.factories |= other.factories
        self.attributes |= other.attributes
        self.globals |= other.globals
        self.classes |= other.classes


def _relevant(graph: Graph, program: Program) -> tuple[bytearray, bytearray, Names]:
    """What can matter so far (by raw node): everything a Work or a polled container reaches
    (hot); what flows into a hot place or into the receiver of a method given something hot
    (feeds: a constructor there makes the instances that decide where the call goes); and the
    names other modules would use to reach what is hot. (Calls given `async_op=` always matter.)"""
    c = Condensed(graph)
    origins = active_origins(c)
    reached, _ = factory_reach(c, origins)
    seeds = [o.node for o in graph.origins]
    back = c.reverse(c.all)
    polled = c.backward(list(graph.polls), back)
    places = persistent(c)
    seeds += [n for n in range(len(graph.keys)) if places[c.canon[n]] and polled[c.canon[n]]]
    hot = c.forward(seeds, c.all)
    # An instance of a class one of whose attributes holds a Work carries it too (a record).
    holders = {key[1] for n, key in enumerate(graph.keys) if key[0] == ATTR and hot[c.canon[n]]}
    tokens = [n for n, key in enumerate(graph.keys) if key[0] == INSTANCE and key[1] in holders]
    if tokens:
        hot = c.forward(seeds + tokens, c.all)
    raw = bytearray(len(graph.keys))
    names = Names()
    names_returning = {  # methods that return Works they made
        key[2].rsplit(".", 1)[-1] for n, key in enumerate(graph.keys) if key[0] == RETURN and reached[c.canon[n]]
    }
    # the receivers of method calls given something hot, or given `async_op=` (the method may
    # pass it on to a collective: `self.manager.reduce(t, async_op=overlap)`)
    receivers = [
        n
        for call in graph.method_calls
        if _any(hot, c, call.args)
        or any(k == "async_op" for k, _ in call.args.keywords)
        or hot[c.canon[call.result]]  # a getter whose result things are put into
        or call.name in names_returning  # a method that returns Works: its receiver decides which
        for n in call.args.receiver
    ]
    feeding = c.backward([n for n in range(len(graph.keys)) if hot[c.canon[n]]] + receivers, back)
    feeds = bytearray(feeding[c.canon[n]] for n in range(len(graph.keys)))
    _lenders(graph, c, hot, names)
    for n, key in enumerate(graph.keys):
        if not hot[c.canon[n]]:
            continue
        raw[n] = 1
        kind = key[0]
        if kind == RETURN and reached[c.canon[n]] and not program.is_api(f"{program.names[key[1]]}.{key[2]}"):
            # (torch.distributed's own API, when the program is torch: its calls are never linked)
            head, _, rest = key[2].partition(".")
            info = program.infos.get(key[1])
            names.returning.add(key[2].rsplit(".", 1)[-1])
            if rest and info is not None and head in info.classes:
                names.classes.add(head)  # a method returning Works: reached through its class
            else:
                names.factories.add(key[2].rsplit(".", 1)[-1])
        elif kind == ATTR and isinstance(key[1], ClassRef):
            names.attributes.add(key[2])
            names.classes.add(key[1].name.rsplit(".", 1)[-1])
            names.modules.update(a.mid for a in program.ancestors(key[1]))  # where its bases assign it
        elif kind == GLOBAL and key[1] != -1:
            names.globals.add(key[2])
    return raw, feeds, names


def _lenders(graph: Graph, c: Condensed, hot: bytearray, names: Names) -> None:
    """Functions whose parameters a Work is put into (`pending.append(w)` in a helper given the
    caller's list), or that pass their parameter on to one: their callers lend the container, so
    the modules that call them are read (a method's class too: `Fn.apply(...)`, `Cls.method(`)."""
    receivers = [r for put in graph.puts if any(hot[c.canon[v]] for v in put.values) for r in put.receiver]
    if not receivers:
        return
    lent = c.backward(receivers, c.reverse((c.plain, c.params)))
    for node in graph.parameters:
        if lent[c.canon[node]]:
            qualname = graph.keys[node][2]
            head, _, method = qualname.rpartition(".")
            names.factories.add(method)
            if head and "<" not in head:
                names.classes.add(head.rsplit(".", 1)[-1])


def _any(hot: bytearray, c: Condensed, args: Args) -> bool:
    return any(hot[c.canon[n]] for n in args.given)


def _mentioning(datas: list[bytes], names: Names, skip: set[int]) -> set[int]:
    """Modules whose text may reach one of `names`: calls a factory (`name(`), touches an
    attribute (`.name`), names a module-level name, subclasses a class or reads one of its
    attributes (`Name.x`). Plain substring searches, then a look at each occurrence's edges:
    several times faster than a regular expression over every file. A name found in more than
    MAX_MODULES_PER_NAME modules is too common to say anything (`.handle`, `forward(`): it is
    left to the other ways in (calls the Works flow through, classes and their subclasses)."""
    found: set[int] = set()
    for word, how in names.searches():
        if len(word) < 3:
            continue
        hits = set()
        for mid, data in enumerate(datas):
            if mid not in skip and word in data and _occurs(data, word, **how):  # type: ignore[arg-type]
                hits.add(mid)
                if len(hits) > MAX_MODULES_PER_NAME:
                    break
        if len(hits) <= MAX_MODULES_PER_NAME:
            found |= hits
    return found


_CALL = re.compile(rb"\s*\(")
_DOT = re.compile(rb"\.\w")


def _ident(byte: bytes) -> bool:
    return bool(byte) and (byte.isalnum() or byte == b"_")


def _occurs(
    data: bytes,
    word: bytes,
    after_dot: bool = False,
    follow: re.Pattern[bytes] | None = None,
    or_class_line: bool = False,
) -> bool:
    if len(word) < 3:
        return False
    start = 0
    while (i := data.find(word, start)) >= 0:
        start = i + 1
        before, end = data[i - 1 : i], i + len(word)
        if (before != b"." if after_dot else _ident(before)) or _ident(data[end : end + 1]):
            continue
        if follow is None or follow.match(data, end):
            return True
        if or_class_line:
            line = data[data.rfind(b"\n", 0, i) + 1 : i].lstrip()
            if line.startswith(b"class ") and b"(" in line:
                return True
    return False
