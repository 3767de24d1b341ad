"""The rules, as small classes in one registry (RULES). Each reads a solved program and yields
its findings; the first line of its docstring is its one-line explanation (`--help`, SARIF,
docs/lint.md). A rule is on by default unless it says `default = False`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from hicache_cli.lint.apis import receives
from hicache_cli.lint.findings import Finding, Related
from hicache_cli.lint.graph import Fact, Origin, Span
from hicache_cli.lint.solve import Solution, persistent, put_fact, store_fact


@dataclass
class Context:
    """What a rule reads: the solved program, and how its modules are named to the user."""

    solution: Solution
    shown: list[str]  # module id -> file as shown

    def where(self, fact: Fact, mid: int, function: str | None = None) -> str:
        """`line 12` in the same function, `line 12, C.reap` in the same file, else `comm.py:12, C.reap`."""
        if fact.mid != mid:
            return f"{self.shown[fact.mid]}:{fact.line}, {fact.function}"
        return f"line {fact.line}" if fact.function == function else f"line {fact.line}, {fact.function}"

    def related(self, fact: Fact, message: str) -> Related:
        return Related(self.shown[fact.mid], fact.line, fact.col + 1, message)

    def finding(
        self,
        rule: str,
        mid: int,
        span: Span,
        function: str,
        message: str,
        related: tuple[Related, ...] = (),
        level: str = "",
    ) -> Finding:
        return Finding(
            self.shown[mid],
            span.line,
            rule,
            function,
            message,
            span.end_line,
            span.col + 1,
            span.end_col,
            related,
            level,
        )


class Rule:
    """Base class: subclass, set `id`, `name`, `level`, write `check`, decorate with @register."""

    id: ClassVar[str]
    name: ClassVar[str]  # kebab-case, for SARIF and the docs
    level: ClassVar[str] = "error"  # SARIF level: error | warning | note
    default: ClassVar[bool] = True  # on unless --select names other rules

    @classmethod
    def summary(cls) -> str:
        return (cls.__doc__ or cls.id).strip().splitlines()[0]

    @classmethod
    def explanation(cls) -> str:
        return " ".join(line.strip() for line in (cls.__doc__ or "").strip().splitlines()[1:] if line.strip())

    def check(self, ctx: Context) -> Iterator[Finding]:
        raise NotImplementedError


RULES: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    RULES[cls.id] = cls
    return cls


def default_rules() -> list[str]:
    return [rule_id for rule_id, cls in RULES.items() if cls.default]


def level_of(finding: Finding) -> str:
    """The finding's SARIF level: its own when it was downgraded (a note), else its rule's."""
    rule = RULES.get(finding.rule)
    return finding.level or (rule.level if rule is not None else "error")


def fails(findings: list[Finding]) -> bool:
    """Whether findings make the exit 1: any but notes (explained, downgraded findings)."""
    return any(level_of(f) != "note" for f in findings)


def _is_field(store: Fact) -> bool:
    """Whether a Work was stored as a field of a record (by its constructor, or into another
    object's attribute), so where the record is kept is worth naming; not when an object's own
    method keeps it in `self.x` (a cache's work list: that object is no record)."""
    return not store.text.startswith("self.") or store.function.endswith(".__init__")


def _completes_when_polled(origin: Origin) -> bool:
    """A collective's Work turns complete on gloo without wait() (measured with torch 2.13:
    all_reduce, all_to_all_single, a ProcessGroup's allreduce); a send's or a receive's does
    not (isend, irecv, a ProcessGroup's send and recv: pytorch issue #30723)."""
    inner = origin.inner or origin
    api = inner.api.removeprefix("ProcessGroup.").split("(", 1)[0]
    return api not in ("isend", "irecv", "batch_isend_irecv", "send", "recv", "recv_anysource")


def _polls(ctx: Context, node: int) -> list[Fact]:
    found = ctx.solution.polls.get(ctx.solution.of(node), [])
    return sorted((f for f in found if isinstance(f, Fact)), key=lambda f: (f.mid, f.line))


@register
class KeptNeverWaited(Rule):
    """An async Work is kept in a list or attribute that nothing in the program ever waits.

    On gloo polling `is_completed()` returns False until `wait()` is called, so a reaper that
    drops only completed Works drops nothing, and a list of Works that is only polled grows by
    every Work put in it, ~1 KB each (SGLang 0.5.13 to 0.5.14, HiCache's PP sync: ~12 GB/h of
    host memory). A `deque(maxlen=N)` does not grow, but every Work it lets go of is dropped
    unwaited: on gloo a send or receive dropped before its message moved is never delivered,
    nor is anything after it on that connection, and ~170 B of it stays for as long as the
    process group lives (`hicache doctor` measures both). The finding
    points at the call that creates the Work (or at the call of a function that returns Works
    it made) and names where it is kept and where it is only polled, in any module. Fix:
    `wait()` the kept Works (all of them, at the start of the next round), then clear the list.
    """

    id = "HC001"
    name = "work-kept-never-waited"

    def check(self, ctx: Context) -> Iterator[Finding]:
        sol = ctx.solution
        for origin in sol.active:
            if origin.dropped and origin.inner is None:
                continue
            n = sol.of(origin.node)
            if sol.waited[n] or sol.escaped[n]:
                continue
            pairs = []
            for place in sol.keeps.get(n, []):
                fact = store_fact(sol, place, origin)  # type: ignore[arg-type]
                if fact is not None:
                    cls = sol.place_class.get(place)  # type: ignore[call-overload]
                    record = sol.instance_kept(cls) if cls is not None and _is_field(fact) else None
                    pairs.append((fact, record))
            if pairs:
                put = put_fact(sol, origin.node, origin)
                if put is not None and any(put.text == f.text.split(",", 1)[0] for f, _ in pairs):
                    put = None  # `self.work_list.append(w)`: the place is named already
                yield self._finding(ctx, origin, pairs, _polls(ctx, origin.node), put)

    def _finding(
        self,
        ctx: Context,
        origin: Origin,
        pairs: list[tuple[Fact, Fact | None]],
        polls: list[Fact],
        put: Fact | None,
    ) -> Finding:
        def place(fact: Fact, record: Fact | None) -> str:
            where = f"{fact.text} ({ctx.where(fact, origin.mid, origin.function)})"
            if record is None:
                return where
            return f"{where}, a record kept in {record.text} ({ctx.where(record, origin.mid, origin.function)})"

        places = " and ".join(place(f, r) for f, r in pairs)
        if put is not None:  # the same container, reached through another name
            places += f", put there through {put.text} ({ctx.where(put, origin.mid, origin.function)})"
        kept = [f for f, _ in pairs]
        if polls and _completes_when_polled(origin):
            how = ", ".join(ctx.where(f, origin.mid, origin.function) for f in polls)
            tail = f"only polled with is_completed() ({how}): no error it raises is ever seen"
        elif polls:
            how = ", ".join(ctx.where(f, origin.mid, origin.function) for f in polls)
            tail = f"only polled with is_completed() ({how}), which stays False on gloo until wait() is called"
        else:
            tail = "nothing in the program waits it"
        what = origin.what
        if origin.inner is not None:
            inner = origin.inner
            made = Fact(inner.mid, inner.span.line, inner.span.col, "", inner.function)
            what = f"{what} ({inner.api} at {ctx.where(made, origin.mid, origin.function)})"
        related = tuple(ctx.related(f, f"kept in {f.text.split(',', 1)[0]}") for f in kept)
        if put is not None:
            related += (ctx.related(put, f"put into {put.text}"),)
        related += tuple(ctx.related(r, f"the record is kept in {r.text}") for _, r in pairs if r is not None)
        related += tuple(ctx.related(f, f"only polled: {f.text}.is_completed()") for f in polls)
        if origin.inner is not None:
            inner = origin.inner
            made = Fact(inner.mid, inner.span.line, inner.span.col, "", inner.function)
            related += (ctx.related(made, f"the Work is made here ({inner.api})"),)
        verb = "are" if origin.inner is not None else "is"
        return ctx.finding(
            self.id,
            origin.mid,
            origin.span,
            origin.function,
            f"{what} {verb} kept in {places} and never waited: {tail}",
            related,
        )


@register
class UnboundedDrain(Rule):
    """A drain waits every kept Work with no timeout and outside try/finally.

    The fix's open risks (SGLang 0.5.15 on): a downstream rank that never posts its receive
    parks this rank in `wait()` until the process group's timeout (hours on gloo), and if
    `wait()` raises, the list is never cleared. Off by default (it flags the fix itself);
    select it with `--select HC002`. Fix: `wait(timeout)` naming the stuck peer, and clear
    the list in a `finally`.
    """

    id = "HC002"
    name = "drain-without-timeout"
    level = "warning"
    default = False

    def check(self, ctx: Context) -> Iterator[Finding]:
        sol = ctx.solution
        kept = persistent(sol.condensed)
        for drain in sol.graph.drains:
            if drain.timeout or drain.guarded:
                continue
            # an attribute or module-level name holding Works (not a local list drained where it is filled)
            if not any(sol.carriers[sol.of(n)] and kept[sol.of(n)] and sol.of(n) not in sol.kept for n in drain.nodes):
                continue
            yield ctx.finding(
                self.id,
                drain.mid,
                drain.span,
                drain.function,
                f"drain of {drain.text} calls wait() with no timeout, outside try/finally: a peer that never "
                f"receives parks this rank until the process group's timeout, and if wait() raises, "
                f"{drain.text} is never cleared",
            )


@register
class SentTensorMutated(Rule):
    """An isend's Work is dropped, and the tensor it sends is then changed in place.

    Nothing waits the send, so nothing orders it before the change: the peer may receive the
    new contents, or a mix (NCCL reads the tensor after isend returns). On gloo the dropped
    send is worse off: unless the peer had already posted its receive, it is never delivered
    at all, nor is anything after it to that peer in that group (`hicache doctor`). Fix: send a
    clone and keep its Work, or keep the Work and wait() it before changing the tensor.
    """

    id = "HC003"
    name = "sent-tensor-mutated"

    def check(self, ctx: Context) -> Iterator[Finding]:
        for origin in ctx.solution.active:
            if origin.api == "isend" and origin.dropped and origin.mutated:
                yield ctx.finding(
                    self.id,
                    origin.mid,
                    origin.span,
                    origin.function,
                    f"the Work from isend is dropped and `{origin.tensor}` is changed in place at line "
                    f"{origin.mutated} while the send may still be reading it (on gloo, unless the peer had "
                    "already posted its receive, a send whose Work is dropped is never delivered at all)",
                )


@register
class ReceiveDropped(Rule):
    """A receiving Work (irecv, or a collective with async_op=True) is dropped unwaited.

    The received data lands at some unknown time after the call returns; with the Work gone
    nothing can wait for it, so every later read of the tensor races with the receive. On gloo
    a dropped irecv is worse off: its data never arrives, nor does anything after it from that
    peer in that group, and ~170 B of it stays while the group lives (`hicache doctor`); a
    collective is held by the group's worker threads until it has run, and arrives. Dropped is a
    statement of its own, a name never read, or a Work the program never waits, keeps or hands on
    (a local list of them that no loop waits any more). Fix: keep the Work and wait() it before
    reading the tensor (or use the blocking call). When a later Work on the same group is waited
    in the same function, the finding says so and is a note: that wait orders this receive on
    NCCL's stream, but not on gloo.
    """

    id = "HC004"
    name = "receive-dropped"

    def check(self, ctx: Context) -> Iterator[Finding]:
        sol = ctx.solution
        later: dict[tuple[int, str, str], list[Origin]] = {}
        for origin in sol.active:
            if origin.group is not None:
                later.setdefault((origin.mid, origin.function, origin.group), []).append(origin)
        for origin in sol.active:
            if not receives(origin.api) or origin.element is not None or origin.inner is not None:
                continue
            into = f" into `{origin.tensor}`" if origin.tensor is not None else ""
            # measured (hicache doctor): on gloo a dropped irecv's data never lands; a collective's does
            lost = (
                "; on gloo it never arrives at all, nor does anything after it from that peer in that group"
                if origin.api == "irecv"
                else ""
            )
            if origin.dropped:
                message = (
                    f"the Work from {origin.api}{into} is dropped: nothing can wait for the data, so reads of it "
                    f"race with the receive{lost}"
                )
            elif self._never_waited(ctx, origin):
                message = (
                    f"the Work from {origin.api} is never waited, kept or handed on: once {origin.function} "
                    f"returns nothing can wait for the data, so reads of it race with the receive{lost}"
                )
            else:
                continue
            ordered = self._ordered_by(ctx, origin, later.get((origin.mid, origin.function, origin.group or ""), []))
            if ordered is not None:
                message = (
                    f"the Work from {origin.api}{into} is dropped; the {ordered.api} Work on the same group "
                    f"(line {ordered.span.line}) is waited, which orders this receive before it on NCCL's stream "
                    f"but not on gloo, and no error it raises is ever seen{lost}"
                )
                yield ctx.finding(self.id, origin.mid, origin.span, origin.function, message, level="note")
                continue
            yield ctx.finding(self.id, origin.mid, origin.span, origin.function, message)

    @staticmethod
    def _never_waited(ctx: Context, origin: Origin) -> bool:
        """Bound and used, but waited nowhere, kept nowhere (HC001's), handed to nothing and
        returned by no public function (whose callers outside the program may wait it)."""
        sol = ctx.solution
        n = sol.of(origin.node)
        return not (sol.waited[n] or sol.escaped[n] or sol.public[n] or sol.keeps.get(n))

    @staticmethod
    def _ordered_by(ctx: Context, origin: Origin, same_group: list[Origin]) -> Origin | None:
        sol = ctx.solution
        for other in same_group:
            if other.span.line > origin.span.end_line and not other.dropped and sol.waited[sol.of(other.node)]:
                return other
        return None


@register
class PollOnlyReaper(Rule):
    """A container's elements are only ever polled with is_completed(), never waited.

    The shape of the incident's `_reap_completed_async_work`, found even when the analysis
    cannot see where the Works come from (another library's call, a callback): on gloo a send
    Work never completes until it is waited, so a reaper that drops only completed Works frees
    nothing and the container grows. The finding points at the poll and names where things are
    kept. Fix: wait() what is kept (a drain at the start of each round), then clear it.
    """

    id = "HC005"
    name = "reaped-only-by-polling"

    def check(self, ctx: Context) -> Iterator[Finding]:
        sol = ctx.solution
        kept = persistent(sol.condensed)
        reaped = {sol.of(n) for n in sol.graph.reaped}
        seen: set[tuple[int, int]] = set()
        for n in sorted(set(sol.stored)):
            if not kept[n] or n in sol.kept or n not in reaped:
                continue  # an attribute or module-level name that something is dropped from
            if sol.carriers[n] or sol.waited[n] or sol.escaped[n] or sol.not_works[n]:
                continue
            polls = _polls(ctx, n)
            store = store_fact(sol, n)
            if not polls or store is None:
                continue
            poll = polls[0]
            if (poll.mid, poll.line) in seen:
                continue
            seen.add((poll.mid, poll.line))
            place = store.text.split(",", 1)[0]
            message = (
                f"{place} ({ctx.where(store, poll.mid, poll.function)}) is reaped only by is_completed() "
                f"on {poll.text}: on gloo a send Work never completes until it is waited, so this container grows"
            )
            span = Span(poll.line, poll.col, poll.line, 0)
            related = (ctx.related(store, f"kept in {place}"),)
            yield ctx.finding(self.id, poll.mid, span, poll.function, message, related)
