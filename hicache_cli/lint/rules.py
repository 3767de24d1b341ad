"""The rules, as small classes in one registry (RULES). Each reads one module's ModuleFlow and
returns its findings; the first line of its docstring is its one-line explanation (`--help`,
SARIF, docs/lint.md). A rule is on by default unless it says `default = False`."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from hicache_cli.lint.flow import PERSISTENT, Fact, ModuleFlow, Node, Origin
from hicache_cli.lint.scopes import own_nodes


@dataclass(frozen=True)
class RawFinding:
    """A finding before it knows its file: the rule adds what, the engine adds where."""

    line: int
    end_line: int
    function: str
    message: str


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

    def check(self, flow: ModuleFlow) -> Iterator[RawFinding]:
        raise NotImplementedError


RULES: dict[str, type[Rule]] = {}


def register(cls: type[Rule]) -> type[Rule]:
    RULES[cls.id] = cls
    return cls


def default_rules() -> list[str]:
    return [rule_id for rule_id, cls in RULES.items() if cls.default]


def _where(fact: Fact, origin_function: str | None = None) -> str:
    return f"line {fact.line}" if fact.function == origin_function else f"line {fact.line}, {fact.function}"


def _kept_in(flow: ModuleFlow, reached: set[Node], origin: Origin) -> list[Fact]:
    """Where an origin's Works can be kept beyond one call: attributes, module names, and local
    lists that grow in a while loop. Of each place's stores, the one in the origin's function
    (`self.work_list.append(send_work)` next to the isend), else the first."""
    kept = []
    for node in reached:
        if node[0] in PERSISTENT and node in flow.stores:
            facts = flow.stores[node]
            kept.append(next((f for f in facts if f.function == origin.function), facts[0]))
        elif node in flow.grows:
            kept.append(flow.grows[node])
    return sorted(kept, key=lambda f: (f.function != origin.function, f.line, f.text))


@register
class KeptNeverWaited(Rule):
    """An async Work is kept in a list or attribute that nothing in the module ever waits.

    On gloo a Work is freed only once it is waited: polling `is_completed()` returns False
    until `wait()` is called, so a list of Works that is only polled grows by every Work put
    in it (SGLang 0.5.13 to 0.5.14, HiCache's PP sync: ~12 GB/h of host memory). The finding
    points at the call that creates the Work and names where it is kept and where it is only
    polled. Fix: `wait()` the kept Works (all of them, at the start of the next round), then
    clear the list.
    """

    id = "HC001"
    name = "work-kept-never-waited"

    def check(self, flow: ModuleFlow) -> Iterator[RawFinding]:
        for origin in flow.origins:
            if origin.dropped:
                continue
            reached = flow.reach(origin.node)
            if any(n in flow.waits or n in flow.escapes for n in reached):
                continue
            kept = _kept_in(flow, reached, origin)
            if not kept:
                continue
            places = " and ".join(f"{f.text} ({_where(f, origin.function)})" for f in kept[:2])
            polls = sorted({f for n in reached for f in flow.polls.get(n, [])}, key=lambda f: f.line)
            if polls:
                how = ", ".join(_where(f, origin.function) for f in polls[:3])
                tail = f"only polled with is_completed() ({how}), which stays False on gloo until wait() is called"
            else:
                tail = "nothing in this module waits it"
            yield RawFinding(
                origin.line,
                origin.end_line,
                origin.function,
                f"{origin.what} is kept in {places} and never waited: {tail}",
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

    def check(self, flow: ModuleFlow) -> Iterator[RawFinding]:
        carriers: set[Node] = set()
        for origin in flow.origins:
            carriers |= {n for n in flow.reach(origin.node) if n[0] in PERSISTENT}
        for drain in flow.drains:
            if drain.timeout or drain.guarded or not drain.nodes & carriers:
                continue
            yield RawFinding(
                drain.line,
                drain.line,
                drain.function,
                f"drain of {drain.text} calls wait() with no timeout, outside try/finally: a peer that never "
                f"receives parks this rank until the process group's timeout, and if wait() raises, "
                f"{drain.text} is never cleared",
            )


def _is_expr(node: ast.AST, text: str) -> bool:
    return isinstance(node, ast.Name | ast.Attribute | ast.Subscript) and ast.unparse(node) == text


def _mutations(body: ast.AST, text: str) -> Iterator[int]:
    """Lines that change the tensor written `text` in place: `t[...] = x`, `t += x`,
    `t.copy_(x)` (a method ending in `_`), `out=t`."""
    for node in own_nodes(body.body if hasattr(body, "body") else [body]):  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and _is_expr(target.value, text):
                    yield node.lineno
                elif isinstance(node, ast.AugAssign) and _is_expr(target, text):
                    yield node.lineno
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr.endswith("_")
                and not func.attr.startswith("_")
                and _is_expr(func.value, text)
            ):
                yield node.lineno
            elif any(k.arg == "out" and _is_expr(k.value, text) for k in node.keywords):
                yield node.lineno


def _rebinds(body: ast.AST, text: str) -> list[int]:
    lines = []
    for node in own_nodes(body.body if hasattr(body, "body") else [body]):  # type: ignore[attr-defined]
        if isinstance(node, ast.Assign) and any(_is_expr(t, text) for t in node.targets):
            lines.append(node.lineno)
    return lines


def _tensor_text(origin: Origin) -> str | None:
    tensor = origin.tensor
    return ast.unparse(tensor) if isinstance(tensor, ast.Name | ast.Attribute) else None


@register
class SentTensorMutated(Rule):
    """An isend's Work is dropped, and the tensor it sends is then changed in place.

    Nothing waits the send, so nothing orders it before the change: the peer may receive the
    new contents, or a mix (gloo and NCCL both read the tensor after isend returns). Fix: send
    a clone, or keep the Work and wait() it before changing the tensor.
    """

    id = "HC003"
    name = "sent-tensor-mutated"

    def check(self, flow: ModuleFlow) -> Iterator[RawFinding]:
        for origin in flow.origins:
            text = _tensor_text(origin)
            if origin.api != "isend" or not origin.dropped or text is None:
                continue
            body = flow.functions.get(origin.function)
            if body is None:
                continue
            rebound = [line for line in _rebinds(body, text) if line > origin.end_line]
            later = [line for line in _mutations(body, text) if line > origin.end_line]
            later = [line for line in later if not any(origin.end_line < r < line for r in rebound)]
            if later:
                yield RawFinding(
                    origin.line,
                    origin.end_line,
                    origin.function,
                    f"the Work from isend is dropped and `{text}` is changed in place at line {min(later)} "
                    "while the send may still be reading it",
                )


@register
class ReceiveDropped(Rule):
    """A receiving Work (irecv, or a collective with async_op=True) is dropped unwaited.

    The received data lands at some unknown time after the call returns; with the Work gone
    nothing can wait for it, so every later read of the tensor races with the receive. Fix:
    keep the Work and wait() it before reading the tensor (or use the blocking call).
    """

    id = "HC004"
    name = "receive-dropped"

    def check(self, flow: ModuleFlow) -> Iterator[RawFinding]:
        for origin in flow.origins:
            receives = origin.api == "irecv" or (
                origin.api.endswith("(async_op=True)") and not origin.api.startswith("barrier")
            )
            if not receives or not origin.dropped or origin.element is not None:
                continue
            into = f" into `{ast.unparse(origin.tensor)}`" if origin.tensor is not None else ""
            yield RawFinding(
                origin.line,
                origin.end_line,
                origin.function,
                f"the Work from {origin.api}{into} is dropped: nothing can wait for the data, so reads of it race "
                "with the receive",
            )
