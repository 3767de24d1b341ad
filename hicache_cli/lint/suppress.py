"""`# hicache: ignore[HC001]` (or `[HC001,HC003]`, or a bare `# hicache: ignore` for every rule)
on any line of the call or statement a finding points at silences it there."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

MARK = "hicache: ignore"
_COMMENT = re.compile(r"#\s*hicache:\s*ignore(?:\[(?P<rules>[^\]]*)\])?")
ALL = frozenset({"*"})


@dataclass(frozen=True)
class Suppressions:
    """Line -> the rule ids silenced on it (ALL for a bare ignore)."""

    lines: dict[int, frozenset[str]] = field(default_factory=dict)

    def silences(self, rule: str, first: int, last: int) -> bool:
        if not self.lines:
            return False
        for line in range(first, last + 1):
            ids = self.lines.get(line)
            if ids is not None and ("*" in ids or rule in ids):
                return True
        return False


def suppressions(source: bytes) -> Suppressions:
    """Read with tokenize, so a `#` inside a string is not a comment; a file that does not
    tokenize has none past the point where it stops."""
    if MARK.encode() not in source:
        return Suppressions()
    found: dict[int, frozenset[str]] = {}
    try:
        for token in tokenize.tokenize(io.BytesIO(source).readline):
            if token.type != tokenize.COMMENT:
                continue
            match = _COMMENT.search(token.string)
            if match is None:
                continue
            rules = match.group("rules")
            ids = ALL if rules is None else frozenset(r.strip().upper() for r in rules.split(",") if r.strip())
            found[token.start[0]] = found.get(token.start[0], frozenset()) | ids
    except (tokenize.TokenError, SyntaxError):
        pass
    return Suppressions(found)
