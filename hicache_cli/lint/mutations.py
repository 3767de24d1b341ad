"""In-place changes, for the module walker (HC003): which tensors a function changes after a
dropped isend of them, found per function with binary searches."""

from __future__ import annotations

import ast
import bisect
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hicache_cli.lint.build import ModuleWalker


class Mutations:
    """Mixed into ModuleWalker: HC003's bookkeeping, per function."""

    def _changed(self: ModuleWalker, target: ast.expr, line: int) -> None:
        if not self.sent:
            return  # no dropped isend before it in this function: nothing to order
        text = _tensor_text(target.value if isinstance(target, ast.Subscript) else target)
        if text is not None:
            self.changed.setdefault(text, []).append(line)

    def _rebound(self: ModuleWalker, target: ast.expr, value: ast.expr) -> None:
        if not self.sent:
            return
        text = _tensor_text(target)
        if text is not None:
            self.rebound.setdefault(text, []).append(value.lineno)

    def _mutations_done(self: ModuleWalker) -> None:
        """At the end of a function: each dropped isend's first later in-place change of its
        tensor with no rebinding of the name in between (binary searches: a function of many
        dropped isends stays linear-logarithmic)."""
        for text in {text for _, text, _ in self.sent}:
            self.changed.get(text, []).sort()
            self.rebound.get(text, []).sort()
        for index, text, end in self.sent:
            changes, rebinds = self.changed.get(text, []), self.rebound.get(text, [])
            at = bisect.bisect_right(changes, end)
            if at == len(changes):
                continue
            first = changes[at]
            rebind = bisect.bisect_right(rebinds, end)
            if rebind == len(rebinds) or rebinds[rebind] >= first:
                self.g.origins[index].mutated = first


def _tensor_text(expr: ast.expr) -> str | None:
    return ast.unparse(expr) if isinstance(expr, ast.Name | ast.Attribute) else None
